# Waiting for one op (tutorial point 3, docs/TUTORIAL.md): start a matrix product, tie an
# event to it, block until it is done, then use the result.
import sys

import numpy as np

import eventide as ev

a = ev.rand(512, 512)
b = ev.rand(512, 512)

# Start the product on the device. The call returns at once; the work runs asynchronously.
output = ev.matmul(a, b)

# A new event, not completed yet.
event = ev.Event()
if event.completed:
    sys.exit("a new event must not be completed")

# Tie the event to the op that produces `output`.
event.record(output)

# Block until the event has completed.
event.wait()

# The work is done: its result can be used.
print(output)
print(output.numpy()[:2, :4])

if not (event.completed and output.ready):
    sys.exit("after wait() the event and the output must be complete")
expected = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
if not np.allclose(output.numpy(), expected, rtol=1e-4, atol=1e-3):
    sys.exit("wrong matmul result")
print("ok")
