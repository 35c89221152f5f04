# Seed snippet "複数の MPS 演算を同期させる" (synchronizing several operations): two matmuls,
# one event each, ev.wait_all([event1, event2]) in place of torch.mps.wait_all.
import sys

import eventide as ev

a, b = ev.rand(512, 512), ev.rand(512, 512)
c, d = ev.rand(256, 1024), ev.rand(1024, 256)

# MPS 演算を実行
output1 = ev.matmul(a, b)
output2 = ev.matmul(c, d)

# イベントを作成
event1 = ev.Event()
event2 = ev.Event()

# イベントを演算に関連付け
event1.record(output1)
event2.record(output2)

# すべてのイベントが完了するまで待機 (wait until every event has completed)
ev.wait_all([event1, event2])

# イベントが完了したので、処理を進める
print(output1, output2)

if not (event1.completed and event2.completed and output1.ready and output2.ready):
    sys.exit("wait_all returned before both events completed")
if output1.shape != (512, 512) or output2.shape != (256, 256):
    sys.exit("wrong output shapes")
print("ok")
