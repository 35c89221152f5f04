# Seed snippet "イベントの完了をチェック" (checking whether the event has completed):
# poll() never blocks, so the host can do other work until the op is done.
import sys

import eventide as ev

a = ev.rand(1024, 1024)
b = ev.rand(1024, 1024)

# MPS 演算を実行
output = ev.matmul(a, b)

# イベントを作成
event = ev.Event()

# イベントを演算に関連付け
event.record(output)

# イベントが完了したかどうかをチェック (poll until complete)
other_work = 0
while not event.poll():
    # 他の処理を行う (do other work)
    other_work += 1

# イベントが完了したので、処理を進める
print(output)
print(f"did {other_work} rounds of other work while the matmul ran")

if not (event.completed and output.ready):
    sys.exit("poll() returned True before the work completed")
print("ok")
