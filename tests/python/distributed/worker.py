"""What every rank of a `mpirun -np N` job checks of eventide.distributed (run by
tests/python/test_distributed.py). Every rank runs the same checks in the same order, so each
issues the same collectives; a failed check raises, the rank exits non-zero, and mpirun says
so. EVENTIDE_DEVICE picks the tensors' device ("cpu": MPI; "cuda": NCCL, each rank its GPU).
Each rank prints "rank R of N: ok" at the end."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import numpy as np

import eventide as ev

LIMIT_S = 30.0

comm = ev.distributed.init()
rank, size = comm.rank, comm.size
assert size >= 1
on = "cpu" if os.environ.get("EVENTIDE_DEVICE", "cpu") == "cpu" else comm.device
assert ev.distributed.init() == comm
assert ev.distributed.is_initialized()
assert comm.transport("cpu") == "mpi"
label = ev.process_label()  # init names the process by its rank, for its traces
assert (label["rank"], label["size"]) == (rank, size), label
assert label["clock_offset_ns"] == comm.clock_offset_ns


def host(t: ev.Tensor) -> np.ndarray:
    assert t.wait(timeout=LIMIT_S), "a collective did not finish in time"
    return t.numpy()


# all_reduce over every op, and the NumPy round trip.
x = ev.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) + rank, device=on)
total = comm.all_reduce(x)
assert total.shape == (2, 3) and total.dtype == ev.float32
expected = sum(np.arange(6, dtype=np.float32).reshape(2, 3) + r for r in range(size))
np.testing.assert_array_equal(host(total), expected)
np.testing.assert_array_equal(host(comm.all_reduce(x, op="max")), np.arange(6).reshape(2, 3) + size - 1)
np.testing.assert_array_equal(host(comm.all_reduce(x, op="min")), np.arange(6).reshape(2, 3))
np.testing.assert_allclose(host(comm.all_reduce(x, op="avg")), expected / size)
for bad in ("mean", "SUM", ""):
    try:
        comm.all_reduce(x, op=bad)
    except ev.InvalidArgumentError as e:
        assert "op must be one of" in str(e), e
    else:
        raise AssertionError(f"op={bad!r} was accepted")

# all_gather, reduce_scatter, broadcast.
gathered = host(comm.all_gather(ev.full((2,), float(rank), device=on)))
np.testing.assert_array_equal(gathered, np.repeat(np.arange(size, dtype=np.float32), 2))
part = host(comm.reduce_scatter(ev.ones((size * 3,), device=on)))
np.testing.assert_array_equal(part, np.full(3, size, dtype=np.float32))
root = size - 1
b = host(comm.broadcast(ev.full((4,), 7.0 if rank == root else 0.0, device=on), root=root))
np.testing.assert_array_equal(b, np.full(4, 7.0, dtype=np.float32))

# Into a tensor of the caller's (out=): returned, written in place for all_reduce, and the
# NumPy view of a CPU output sees the result; a wrong out is refused by name on every rank.
acc = ev.ones((5,), device=on)
for _ in range(3):
    assert comm.all_reduce(acc, out=acc) is not None
np.testing.assert_array_equal(host(acc), np.full(5, size ** 3, dtype=np.float32))
dst = ev.zeros((2 * size,), device=on)
got = comm.all_gather(ev.full((2,), float(rank), device=on), out=dst)
np.testing.assert_array_equal(host(dst), np.repeat(np.arange(size, dtype=np.float32), 2))
np.testing.assert_array_equal(host(got), host(dst))
for call, why in ((lambda: comm.all_reduce(acc, out=ev.zeros((4,), device=on)), "out has shape [4], the result [5]"),
                  (lambda: comm.broadcast(acc, out=ev.zeros((5,), dtype=ev.float64, device=on)), "out has dtype float64, the result float32"),
                  (lambda: comm.all_gather(dst, out=dst), "cannot run in place" if size == 1 else "out has shape")):
    try:
        call()
    except ev.InvalidArgumentError as e:
        assert why in str(e), e
    else:
        raise AssertionError(f"accepted: {why}")

# send / recv between ranks 0 and 1.
if size >= 2 and rank == 0:
    assert comm.send(ev.full((3,), 5.0, ev.int64, device=on), dst=1).wait(timeout=LIMIT_S)
elif size >= 2 and rank == 1:
    got = comm.recv((3,), src=0, dtype=ev.int64, device=on)
    np.testing.assert_array_equal(host(got), np.full(3, 5, dtype=np.int64))

# A collective is an op: events, time_elapsed, callbacks on the tensor (from threading),
# asyncio, and streams that wait for it.
gate = ev.UserEvent()
s = ev.Stream(on)
s.wait(gate)
with s:
    out = comm.all_reduce(ev.ones((1 << 16,), device=on))
e = ev.Event()
e.record(out)
called = threading.Event()
out.add_completion_callback(called.set)
time.sleep(0.05)
assert not e.poll(), "the collective finished before its gate was set"
gate.set()


async def awaited() -> None:
    await asyncio.wait_for(e, LIMIT_S)


asyncio.run(awaited())
assert e.time_elapsed() >= 0.0
assert called.wait(LIMIT_S), "the completion callback did not run"
np.testing.assert_array_equal(host(ev.add(out, out))[:4], np.full(4, 2.0 * size, dtype=np.float32))

# The profiler draws collectives.
with ev.profile() as prof:
    host(comm.all_gather(ev.ones((8,), device=on)))
assert any(op["name"] == "all_gather" for op in prof.ops), [op["name"] for op in prof.ops]

# A failed input on rank 0 fails rank 0's collective; the other ranks are not left waiting.
bad = ev.UserEvent(on)
s2 = ev.Stream(on)
s2.wait(bad)
with s2:
    y = ev.ones((4,), device=on)  # on rank 0, made on a stream that breaks below
    z = comm.all_reduce(y)
if rank == 0:
    bad.fail(RuntimeError("broken input"))
else:
    bad.set()
deadline = time.monotonic() + LIMIT_S
while not z.ready and time.monotonic() < deadline:
    time.sleep(0.001)
assert z.ready, "a rank did not issue its collective"
if rank == 0:
    try:
        z.wait()
    except ev.OpError as err:
        assert "broken input" in str(err), err
    else:
        raise AssertionError("the collective of a failed input did not fail")
else:
    assert z.wait(timeout=LIMIT_S)  # finished without error; rank 0's part of it is undefined
# The communicator goes on.
np.testing.assert_array_equal(host(comm.all_reduce(ev.ones((2,), device=on))), np.full(2, size, dtype=np.float32))

# The barrier: no rank passes before the last has reached it.
if rank == 0:
    time.sleep(0.2)
t0 = time.monotonic()
assert comm.barrier().wait(timeout=LIMIT_S)
if rank != 0:
    assert time.monotonic() - t0 >= 0.1, "the barrier let a rank pass alone"

print(f"rank {rank} of {size}: ok", flush=True)
# A last collective that nobody waits for: the exit still issues it on every rank (the
# communicator ends before the runtime stops), and mpirun sees every rank end well.
if rank == 0:
    time.sleep(0.1)
comm.all_reduce(ev.ones((1 << 16,), device=on))
