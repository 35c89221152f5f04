# Polling (tutorial point 4): poll() answers at once, so the host keeps working until the op
# is done.
import sys

import eventide as ev

a = ev.rand(1024, 1024)
b = ev.rand(1024, 1024)

# Start the device work (asynchronous: the call returns at once).
output = ev.matmul(a, b)

# A new event.
event = ev.Event()

# Tie the event to the work.
event.record(output)

# Ask without blocking; do other host work until the answer is yes.
other_work = 0
while not event.poll():
    # (the host's own work goes here)
    other_work += 1

# Done: use the results.
print(output)
print(f"did {other_work} rounds of other work while the matmul ran")

if not (event.completed and output.ready):
    sys.exit("poll() returned True before the work completed")
print("ok")
