# Timing an op (tutorial point 7): event.time_elapsed() reads the device time of the work the
# event was recorded on, in microseconds, and from it the product's speed.
import sys
import time

import eventide as ev

a = ev.rand(1024, 1024)
b = ev.rand(1024, 1024)
a.wait()
b.wait()

start = time.perf_counter()
# Start the device work (asynchronous: the call returns at once).
output = ev.matmul(a, b)

# A new event.
event = ev.Event()

# Tie the event to the work.
event.record(output)

# Block until the work is done.
event.wait()
wall_us = (time.perf_counter() - start) * 1e6

# The device time of the recorded work, in microseconds.
time_elapsed = event.time_elapsed()

# Report it.
print(f"Time elapsed: {time_elapsed}")
print(f"  = {time_elapsed / 1000:.3f} ms for 2*1024^3 flops: "
      f"{2 * 1024 ** 3 / (time_elapsed * 1e-6) / 1e9:.1f} GFLOP/s (host saw {wall_us:.0f} us)")

if not isinstance(time_elapsed, float) or time_elapsed <= 0.0:
    sys.exit("time_elapsed must be a positive float")
if time_elapsed > wall_us * 1.05 + 1000:
    sys.exit("the device time cannot exceed the host's wall time around the op")
print("ok")
