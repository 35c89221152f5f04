# Seed snippet "MPS 演算の完了を待つ" (waiting for an operation to finish), with
# torch.mps.* replaced by eventide: run a matmul, tie an event to it, wait, use the result.
import sys

import numpy as np

import eventide as ev

a = ev.rand(512, 512)
b = ev.rand(512, 512)

# MPS 演算を実行 (run the device operation: returns at once, the work is asynchronous)
output = ev.matmul(a, b)

# イベントを作成 (create an event: not completed yet)
event = ev.Event()
if event.completed:
    sys.exit("a new event must not be completed")

# イベントを演算に関連付け (tie the event to the operation)
event.record(output)

# イベントが完了するまで待機 (wait until the event completes)
event.wait()

# イベントが完了したので、処理を進める (the event completed: go on)
print(output)
print(output.numpy()[:2, :4])

if not (event.completed and output.ready):
    sys.exit("after wait() the event and the output must be complete")
expected = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
if not np.allclose(output.numpy(), expected, rtol=1e-4, atol=1e-3):
    sys.exit("wrong matmul result")
print("ok")
