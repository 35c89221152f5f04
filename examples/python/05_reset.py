# Reusing an event (tutorial points 5 and 2): reset() makes a finished event not completed
# again, ready to be recorded on new work, here on two ops at once.
import sys

import eventide as ev

a = ev.rand(512, 512)
b = ev.rand(512, 512)

# Start the device work (asynchronous: the call returns at once).
output = ev.matmul(a, b)

# A new event.
event = ev.Event()

# Tie the event to the work.
event.record(output)

# Block until the work is done.
event.wait()

# Back to not completed.
event.reset()

# It reads as not completed again.
print(event.completed)

if event.completed is not False:
    sys.exit("after reset() the event must not be completed")

# One event may stand for several ops: record it on two.
output2 = ev.matmul(b, a)
output3 = output + output2
event.record(output2)
event.record(output3)
event.wait()
print(event, f"{event.time_elapsed():.0f} us for both ops")
if not (event.completed and output2.ready and output3.ready):
    sys.exit("a reused event must complete once all its work has")
print("ok")
