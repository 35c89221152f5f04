# Seed snippet "イベントをリセット" (resetting the event): after reset() the event is back to
# not completed, and can be recorded again.
import sys

import eventide as ev

a = ev.rand(512, 512)
b = ev.rand(512, 512)

# MPS 演算を実行
output = ev.matmul(a, b)

# イベントを作成
event = ev.Event()

# イベントを演算に関連付け
event.record(output)

# イベントが完了するまで待機
event.wait()

# イベントをリセット (reset the event)
event.reset()

# イベントが未完了状態になったことを確認 (check that it is not completed)
print(event.completed)

if event.completed is not False:
    sys.exit("after reset() the event must not be completed")

# The seed's closing notes: an event may be tied to several operations. Reuse it for two.
output2 = ev.matmul(b, a)
output3 = output + output2
event.record(output2)
event.record(output3)
event.wait()
print(event, f"{event.time_elapsed():.0f} us for both ops")
if not (event.completed and output2.ready and output3.ready):
    sys.exit("a reused event must complete once all its work has")
print("ok")
