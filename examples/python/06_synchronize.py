# Seed section "torch.mps.Event 以外の方法": torch.cuda.synchronize() waits for all the work of
# the device. eventide's ev.synchronize() does that on every backend (every stream).
import sys

import eventide as ev

a = ev.rand(512, 512)
b = ev.rand(512, 512)

# MPS 演算を実行
output = ev.matmul(a, b)
side = ev.Stream()
with side:  # work on another stream is covered too
    side_output = ev.matmul(b, a)

# すべての CUDA カーネルが完了するまで待機 (wait until all device work is done)
ev.synchronize()

# 処理を進める
print(output)
print(side_output)

if not (output.ready and side_output.ready and side.query()):
    sys.exit("synchronize() returned with work still pending")
print("ok")
