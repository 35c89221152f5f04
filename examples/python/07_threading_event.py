# Seed section "Python の threading モジュール": a threading.Event set by a completion
# callback, so that another thread can wait for the operation.
import sys
import threading

import eventide as ev

a = ev.rand(512, 512)
b = ev.rand(512, 512)

# MPS 演算を実行
output = ev.matmul(a, b)

# イベントを作成 (a plain threading.Event)
event = threading.Event()

# イベントを演算に関連付け (the callback runs on eventide's callback thread when the op is done)
def on_complete():
    event.set()

output.add_completion_callback(on_complete)

# Another thread waits on it too.
seen = []
waiter = threading.Thread(target=lambda: seen.append(event.wait(60) and output.ready))
waiter.start()

# イベントが完了するまで待機
if not event.wait(60):
    sys.exit("the completion callback never ran")

# 処理を進める
print(output)

waiter.join(60)
if seen != [True]:
    sys.exit("the other thread did not see the completed output")
print("ok")
