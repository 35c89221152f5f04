# Timing a region with markers, as with torch.cuda.Event: record() puts a point at the end of
# the current stream, finished when the device reaches it and stamped with that time. The
# reading is the device time between the two points, not the host's idle time before them.
import sys
import time

import eventide as ev

s = ev.Stream()
with s:
    a = ev.randn(512, 512)
    (a @ a).wait()                   # a warm-up, as for any timing: the first matmul sets up
                                     # the math library on the host (cuBLASLt: ~0.2 s), which
                                     # a region's device time would count
s.synchronize()
time.sleep(0.2)                      # the host idles; the stream has drained

start, end = ev.Event(), ev.Event()
with s:
    start.record()                   # a marker on the current stream
    c = a @ a
    d = c @ a
    end.record()
end.synchronize()

ms = start.elapsed_time(end)         # milliseconds, as in PyTorch
ops = ev.Event()
ops.record(c)                        # record(tensor): the op that produced it
ops.record(d)
ops.wait()
print(f"two matmuls between the markers: {ms:.3f} ms (the ops' own time "
      f"{ops.time_elapsed() / 1000:.3f} ms); a marker alone: time_elapsed {start.time_elapsed()} us")
if not (0 < ms < 150) or ms * 1000 < 0.99 * ops.time_elapsed():
    sys.exit("the reading must be the region's device time, not the host's idle time")
