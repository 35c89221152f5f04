"""eventide.distributed's all_reduce from Python beside torch.distributed.all_reduce (NCCL), in
the same run, under mpirun (each rank its own GPU):

    mpirun -np 2 python3 bench/distributed_bench.py [--quick]

Bus bandwidth (nccl-tests' definition) from 1 MiB to 1 GiB, then the per-op time of a small
(8-byte) all_reduce, back to back. Each figure: `iters` back-to-back collectives from a
barrier to the end of the last, the slowest rank's time, best of 3 rounds. Rank 0 prints a
Markdown table. Skips, saying so, without PyTorch, CUDA or NCCL."""

from __future__ import annotations

import os
import sys
import time

import eventide as ev

quick = "--quick" in sys.argv
comm = ev.distributed.init()
rank, size = comm.rank, comm.size


def say(text: str) -> None:
    if rank == 0:
        print(text, flush=True)


try:
    import torch
    import torch.distributed as td
except ImportError:
    say("distributed_bench.py: no PyTorch here: skipped")
    sys.exit(0)
if str(comm.device) == "cpu":
    say("distributed_bench.py: no GPU per rank (eventide has no NCCL here): skipped")
    sys.exit(0)

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
gpu = int(str(comm.device).split(":")[1])
torch.cuda.set_device(gpu)
td.init_process_group("nccl", rank=rank, world_size=size, device_id=torch.device("cuda", gpu))
barrier = ev.distributed.init().barrier


def best(iters: int, issue, finish) -> float:
    times = []
    for _ in range(3):
        barrier().wait()
        t0 = time.perf_counter()
        for _ in range(iters):
            issue()
        finish()
        times.append(time.perf_counter() - t0)
    slowest = torch.tensor([min(times)], device="cuda")
    td.all_reduce(slowest, op=td.ReduceOp.MAX)
    return slowest.item() / iters


def busbw(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 * (2 * (size - 1) / size if size > 1 else 1.0)


say(f"\n## all_reduce from Python, {size} ranks: bus bandwidth (GB/s)\n")
say("| size | eventide | torch.distributed (in place) | eventide / torch | eventide in place (out=) | in place / torch |\n"
    "|---|---|---|---|---|---|")
top = (256 if quick else 1024) << 20
nbytes = 1 << 20
while nbytes <= top:
    n = nbytes // 4
    iters = max(5, min(200 if quick else 1000, (1 << 33) // nbytes))
    x = ev.ones((n,), device=comm.device)
    y = torch.ones(n, device="cuda")
    last = [None]
    comm.all_reduce(x).wait()
    td.all_reduce(y)
    torch.cuda.synchronize()

    def ours():
        last[0] = comm.all_reduce(x)

    a = best(iters, ours, lambda: last[0].wait())
    last[0] = None
    c = best(iters, lambda: comm.all_reduce(x, out=x), lambda: x.wait())
    b = best(iters, lambda: td.all_reduce(y), torch.cuda.synchronize)
    say(f"| {nbytes >> 20} MiB | {busbw(nbytes, a):.1f} | {busbw(nbytes, b):.1f} | {100 * b / a:.1f}% "
        f"| {busbw(nbytes, c):.1f} | {100 * b / c:.1f}% |")
    nbytes *= 4

x = ev.ones((2,), device=comm.device)
y = torch.ones(2, device="cuda")
last = [None]


def small():
    last[0] = comm.all_reduce(x)


iters = 300 if quick else 3000
a = best(iters, small, lambda: last[0].wait())
b = best(iters, lambda: td.all_reduce(y), torch.cuda.synchronize)
say("\n| small all_reduce (8 B), back to back | eventide (us) | torch.distributed (us) | ratio |\n|---|---|---|---|")
say(f"| per op | {a * 1e6:.2f} | {b * 1e6:.2f} | {a / b:.2f}x |")
td.destroy_process_group()
