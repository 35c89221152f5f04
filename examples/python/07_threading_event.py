# Completion callbacks with threading (tutorial point 11): a callback on the output sets a
# threading.Event, and other Python threads wait on that.
import sys
import threading

import eventide as ev

a = ev.rand(512, 512)
b = ev.rand(512, 512)

# Start the device work (asynchronous: the call returns at once).
output = ev.matmul(a, b)

# A plain threading.Event, to be set when the work is done.
event = threading.Event()

# The callback runs on eventide's callback thread once the op is done.
def on_complete():
    event.set()

output.add_completion_callback(on_complete)

# Another thread waits on it too.
seen = []
waiter = threading.Thread(target=lambda: seen.append(event.wait(60) and output.ready))
waiter.start()

# Block until the work is done.
if not event.wait(60):
    sys.exit("the completion callback never ran")

# Done: use the results.
print(output)

waiter.join(60)
if seen != [True]:
    sys.exit("the other thread did not see the completed output")
print("ok")
