# Device-wide synchronization (tutorial point 10): ev.synchronize() waits for all the work
# queued on a device, on every stream, whichever backend runs it.
import sys

import eventide as ev

a = ev.rand(512, 512)
b = ev.rand(512, 512)

# Start the device work (asynchronous: the call returns at once).
output = ev.matmul(a, b)
side = ev.Stream()
with side:  # work on another stream is covered too
    side_output = ev.matmul(b, a)

# Block until all the device's work is done, on every stream.
ev.synchronize()

# Done: use the results.
print(output)
print(side_output)

if not (output.ready and side_output.ready and side.query()):
    sys.exit("synchronize() returned with work still pending")
print("ok")
