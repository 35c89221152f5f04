# Running several ops at once, and measuring it (tutorial point 13): two streams work
# concurrently, each op timed by its own event (time_elapsed, microseconds); a third stream
# joins them through events; and the spans show how much the streams overlapped.
import sys

import numpy as np

import eventide as ev

N, STEPS = 384, 4
ev.manual_seed(0)
a = ev.rand(N, N)
b = ev.rand(N, N)
scale = ev.full((N, N), 1.0 / N)
ev.synchronize()  # inputs ready: only the two streams' own work is timed below

streams = [ev.Stream(), ev.Stream()]
outputs, op_events = [], []
# Spans: an event recorded on several ops measures from the earliest start to the latest end.
span = [ev.Event(), ev.Event()]
both = ev.Event()
for k, s in enumerate(streams):
    x = a if k == 0 else b
    events = []
    with s:  # ops below go to stream s; both streams run at the same time
        for _ in range(STEPS):
            y = ev.matmul(x, a if k == 0 else b)
            x = ev.mul(y, scale)  # keep values bounded
            for t in (y, x):
                e = ev.Event()  # one event per op: its own device time
                e.record(t)
                events.append(e)
                span[k].record(t)
                both.record(t)
    outputs.append(x)
    op_events.append(events)

# Join: a third stream starts only after both streams' last events.
join = ev.Stream()
join.wait_event(op_events[0][-1])
join.wait_event(op_events[1][-1])
with join:
    total = ev.add(outputs[0], outputs[1])
done = join.record_event()

done.wait()
ev.wait_all([span[0], span[1], both])

for k in range(2):
    times = [f"{name} {e.time_elapsed():.0f}"
             for name, e in zip(["matmul", "mul"] * STEPS, op_events[k])]
    print(f"stream {k}, time_elapsed of each op (us):", ", ".join(times))
s0, s1, union = span[0].time_elapsed(), span[1].time_elapsed(), both.time_elapsed()
overlap = s0 + s1 - union
print(f"stream 0 span {s0:.0f} us, stream 1 span {s1:.0f} us, together {union:.0f} us")
print(f"overlap: {max(overlap, 0.0):.0f} us ({100 * max(overlap, 0.0) / min(s0, s1):.0f}% of the "
      f"shorter stream; 0% would mean they ran one after the other)")
print(f"join finished {op_events[0][-1].elapsed_time(done):.3f} ms after stream 0's last op")

# Checks: results right, the join really ran after both, spans consistent.
an, bn = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
ref = []
for k in range(2):
    x, m = (an, an) if k == 0 else (bn, bn)
    for _ in range(STEPS):
        x = (x @ m) / N
    ref.append(x)
checks = {
    "the sum is right": np.allclose(total.numpy(), ref[0] + ref[1], rtol=1e-3, atol=1e-5),
    "the union spans both streams": union >= max(s0, s1) * 0.999,
    "the join came after stream 0's last op": op_events[0][-1].elapsed_time(done) >= 0,
    "the join came after stream 1's last op": op_events[1][-1].elapsed_time(done) >= 0,
    "every op's event completed": all(e.completed for evs in op_events for e in evs),
}
failed = [name for name, passed in checks.items() if not passed]
if failed:
    print(f"stream 1's last op to the join: {op_events[1][-1].elapsed_time(done):.3f} ms")
    sys.exit("something is wrong: not " + "; not ".join(failed))
print("ok")
