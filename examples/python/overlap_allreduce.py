"""Data-parallel overlap: each step's gradients are all-reduced on one stream while the next
step computes on another, joined by events; the example prints how much of the
communication the compute hid, and writes one trace per rank.

    mpirun -np 2 python3 examples/python/overlap_allreduce.py    # a rank per GPU, or CPU ranks
    python3 examples/python/overlap_allreduce.py                  # one rank (MPI's singleton)

Merge the ranks' traces onto one clock with `eventide trace merge -o job.json TRACE...` (the
paths it prints; docs/SCALE_OUT.md).
"""

import os
import tempfile

import eventide as ev

comm = ev.distributed.init()
dev = comm.device
on_gpu = str(dev) != "cpu"
n = 2048 if on_gpu else 256       # the "layer": an n x n matmul per step
steps = 8
grad_elems = (32 << 20) // 4 if on_gpu else (4 << 20) // 4

compute = ev.Stream(dev)
communicate = ev.Stream(dev)
x = ev.randn(n, n, device=dev)
w = ev.randn(n, n, device=dev)
x.wait()

with ev.profile() as prof:
    reduced = []
    for step in range(steps):
        with compute:
            # The step's forward and backward work, then its gradients.
            h = ev.matmul(x, w)
            h = ev.matmul(h, w)
            grads = ev.full((grad_elems,), float(step + comm.rank), device=dev)
        ready = ev.Event()
        ready.record(grads)                 # the gradients are ready...
        communicate.wait(ready)             # ...the all-reduce starts then, on its own stream
        with communicate:
            reduced.append(comm.all_reduce(grads, op="avg"))
    done = ev.Event()
    done.record(reduced[-1])
    done.record(h)
    ev.wait_all([done], timeout=120)

# How much of the all-reduce time ran while the compute stream was busy.
ops = [op for op in prof.ops if op["start_us"] is not None and op["end_us"] is not None]
compute_name = f"{dev} stream {compute.id}"  # how profiles name streams
busy = [(op["start_us"], op["end_us"]) for op in ops if op["stream"] == compute_name]
comm_ops = [(op["start_us"], op["end_us"]) for op in ops if op["name"] == "all_reduce"]
comm_total = sum(e - s for s, e in comm_ops)
hidden = sum(max(0.0, min(e, be) - max(s, bs)) for s, e in comm_ops for bs, be in busy)
value = reduced[0].numpy().ravel()[0]
expected = sum(range(comm.size)) / comm.size
assert abs(value - expected) < 1e-6, (value, expected)

path = os.path.join(tempfile.gettempdir(), f"eventide_overlap_rank{comm.rank}.json")
prof.export_chrome_trace(path)
print(f"rank {comm.rank} of {comm.size} on {dev}: {steps} all-reduces took {comm_total / 1e3:.2f} ms, "
      f"{100.0 * hidden / comm_total if comm_total else 0.0:.0f}% of it hidden behind compute; "
      f"trace: {path}")
