# Waiting for a group of ops (tutorial point 8): two products, an event on each, and one
# ev.wait_all call that returns once both are done.
import sys

import eventide as ev

a, b = ev.rand(512, 512), ev.rand(512, 512)
c, d = ev.rand(256, 1024), ev.rand(1024, 256)

# Start the device work (asynchronous: the call returns at once).
output1 = ev.matmul(a, b)
output2 = ev.matmul(c, d)

# A new event.
event1 = ev.Event()
event2 = ev.Event()

# Tie the event to the work.
event1.record(output1)
event2.record(output2)

# Block until every listed event has completed.
ev.wait_all([event1, event2])

# Done: use the results.
print(output1, output2)

if not (event1.completed and event2.completed and output1.ready and output2.ready):
    sys.exit("wait_all returned before both events completed")
if output1.shape != (512, 512) or output2.shape != (256, 256):
    sys.exit("wrong output shapes")
print("ok")
