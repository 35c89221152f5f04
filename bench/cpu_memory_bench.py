#!/usr/bin/python3
"""Large CPU ops back to back, a new output tensor each, beside NumPy in the same run.

Every output is a large block (cpu_memory.hpp): eventide issues the ops ahead of the stream's
worker and each output holds its block until its op has run, so without a cache of blocks
nearly every output is fresh memory, faulted in page by page. Per size: the steady state (the
best of 3 rounds of `iters` ops after a warm-up round), the first round in a fresh process,
and the same with EVENTIDE_CPU_CACHE_MB=0 (blocks mapped and unmapped each time); NumPy's
`np.add` (which allocates its output each call) and eventide one op at a time (issue, then
wait) beside them. Microseconds per op.

    PYTHONPATH=build/python /usr/bin/python3 bench/cpu_memory_bench.py [--quick]
"""

import os
import subprocess
import sys
import time

SIZES_MIB = (1, 16, 64)


def run_one(mib, iters, rounds):
    """In this process: eventide's first round, then the best of `rounds`; NumPy's best."""
    import numpy as np
    import eventide as ev
    n = (mib << 20) // 4
    a, b = ev.ones((n,), device="cpu"), ev.ones((n,), device="cpu")
    a.wait(), b.wait()

    def back_to_back():
        t0 = time.perf_counter()
        for _ in range(iters):
            c = ev.add(a, b)
        c.wait()
        return (time.perf_counter() - t0) / iters

    first = back_to_back()
    steady = min(back_to_back() for _ in range(rounds))

    def one_at_a_time():
        t0 = time.perf_counter()
        for _ in range(iters):
            ev.add(a, b).wait()
        return (time.perf_counter() - t0) / iters

    one = min(one_at_a_time() for _ in range(rounds))
    an, bn = np.ones(n, np.float32), np.ones(n, np.float32)

    def numpy_add():
        t0 = time.perf_counter()
        for _ in range(iters):
            np.add(an, bn)
        return (time.perf_counter() - t0) / iters

    numpy_add()
    theirs = min(numpy_add() for _ in range(rounds))
    return first, steady, one, theirs


def child(mib, iters, rounds, cache_mb=None):
    env = dict(os.environ)
    if cache_mb is not None:
        env["EVENTIDE_CPU_CACHE_MB"] = str(cache_mb)
    out = subprocess.run([sys.executable, __file__, "--one", str(mib), str(iters), str(rounds)], env=env,
                         capture_output=True, text=True, timeout=1800, check=True).stdout
    return [float(x) for x in out.split()]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(*run_one(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
        return
    quick = "--quick" in sys.argv
    rounds = 2 if quick else 3
    print("| size | eventide, steady | `np.add` | eventide / NumPy | eventide, first round | "
          "eventide, cache off (steady) | eventide, issue then wait each |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for mib in SIZES_MIB:
        iters = max(8, (64 if quick else 200) // mib)
        first, steady, one, theirs = child(mib, iters, rounds)
        off = child(mib, iters, rounds, cache_mb=0)[1]
        us = lambda s: f"{s * 1e6:.0f}"
        print(f"| {mib} MiB ({iters} ops) | {us(steady)} | {us(theirs)} | {steady / theirs:.2f}x | {us(first)} | "
              f"{us(off)} | {us(one)} |", flush=True)


if __name__ == "__main__":
    main()
