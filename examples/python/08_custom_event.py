# An event class of your own (tutorial point 12): set() and wait(), driven by a completion
# callback. Its wait() sleeps on a threading.Condition instead of spinning, and ev.wait_all
# takes it beside eventide's own events.
import sys
import threading

import eventide as ev


class MyEvent:
    def __init__(self):
        self._completed = False
        self._cond = threading.Condition()

    def set(self):
        with self._cond:
            self._completed = True
            self._cond.notify_all()

    def wait(self, timeout=None):
        with self._cond:
            # Sleeps until set() (no spinning); other threads run meanwhile.
            return self._cond.wait_for(lambda: self._completed, timeout)


a = ev.rand(512, 512)
b = ev.rand(512, 512)

# Start the device work (asynchronous: the call returns at once).
output = ev.matmul(a, b)

# A new event.
event = MyEvent()

# Tie the event to the work.
def on_complete():
    event.set()

output.add_completion_callback(on_complete)

# Block until the work is done.
event.wait()

# Done: use the results.
print(output)
if not output.ready:
    sys.exit("MyEvent was set before the output was ready")

# Custom events mix with eventide events in ev.wait_all.
output2 = ev.matmul(b, a)
mine = MyEvent()
output2.add_completion_callback(mine.set)
real = ev.Event()
real.record(output2 + output)
if not ev.wait_all([real, mine], timeout=60):
    sys.exit("wait_all timed out")
print(output2)
if not (real.completed and output2.ready):
    sys.exit("wait_all returned early")
print("ok")
