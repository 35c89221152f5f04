#!/usr/bin/python3
"""Per-call host cost of eventide's Python API, beside torch.cuda.Event in the same run.

Each call is timed one at a time with time.perf_counter_ns around a lambda, the way
/work/shared/anchors/torch_event_anchors.py times PyTorch (ANCHORS.md), so both sides carry
the same harness overhead. On a machine with PyTorch and a GPU, the torch column is
measured in this run; elsewhere it is left empty.

    PYTHONPATH=build/python python3 bench/python_bench.py [--device cuda:0] [--quick]
        [--json out.json] [--md out.md]
"""

import argparse
import json
import sys
import time

import eventide as ev

GOALS_NS = {"Event.record()": 1500, "Event.query(), finished": 300}


def measure(fn, n):
    samples = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    samples.sort()
    return {"p50": samples[len(samples) // 2], "p99": samples[len(samples) * 99 // 100]}


def eventide_rows(device, n):
    s = ev.Stream(device)
    rows = {}
    with s:
        t = ev.ones(4, device=device)
        t.wait()
        e = ev.Event()
        e.record()
        e.wait()
        rows["Event()"] = measure(lambda: ev.Event(), n)
        rows["Event.record()"] = measure(lambda: e.record(), n)
        rows["Event.record(tensor)"] = measure(lambda: e.record(t), n)
        ev.synchronize(device)
        e.wait()
        rows["Event.query(), finished"] = measure(lambda: e.query(), n)
        rows["Event.synchronize(), finished"] = measure(lambda: e.synchronize(), n)
        other = ev.Stream(device)
        rows["Stream.wait_event()"] = measure(lambda: other.wait_event(e), n)
        end = ev.Event()
        end.record(ev.ones(4, device=device))
        end.wait()
        rows["Event.elapsed_time()"] = measure(lambda: e.elapsed_time(end), n)
        a = ev.randn(256, 256, device=device)
        b = ev.randn(256, 256, device=device)
        ev.synchronize(device)
        rows["matmul 256 f32, launch"] = measure(lambda: ev.matmul(a, b), max(n // 10, 200))
        ev.synchronize(device)

        def round_trip():
            ev.matmul(a, b)
            e.record()
            e.synchronize()

        rows["matmul 256 + record + synchronize"] = measure(round_trip, max(n // 20, 100))
    return rows


def torch_rows(n):
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return None, "PyTorch sees no GPU"
    s = torch.cuda.Stream()
    rows = {}
    with torch.cuda.stream(s):
        e = torch.cuda.Event()
        rows["Event()"] = measure(lambda: torch.cuda.Event(), n)
        rows["Event.record()"] = measure(lambda: e.record(), n)
        torch.cuda.synchronize()
        rows["Event.query(), finished"] = measure(lambda: e.query(), n)
        rows["Event.synchronize(), finished"] = measure(lambda: e.synchronize(), n)
        other = torch.cuda.Stream()
        rows["Stream.wait_event()"] = measure(lambda: other.wait_event(e), n)
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        t0.record()
        t1.record()
        torch.cuda.synchronize()
        rows["Event.elapsed_time()"] = measure(lambda: t0.elapsed_time(t1), n)
        a = torch.randn(256, 256, device="cuda")
        b = torch.randn(256, 256, device="cuda")
        torch.cuda.synchronize()
        rows["matmul 256 f32, launch"] = measure(lambda: torch.matmul(a, b), max(n // 10, 200))
        torch.cuda.synchronize()

        def round_trip():
            torch.matmul(a, b)
            e.record()
            e.synchronize()

        rows["matmul 256 + record + synchronize"] = measure(round_trip, max(n // 20, 100))
    return rows, f"torch {torch.__version__}"


def matmul_rows(device, quick):
    """TFLOP/s of ev.matmul and torch.matmul from Python, in the same process, alternating."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    rows = []
    cases = [("f32", "float32", False), ("tf32", "float32", True), ("bf16", "bfloat16", False),
             ("f16", "float16", False)]
    for label, dtype, tf32 in cases:
        for n in (1024, 4096) if quick else (1024, 4096, 8192):
            ev.set_allow_tf32(tf32)
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a, b = ev.randn(n, n, dtype=dtype, device=device), ev.randn(n, n, dtype=dtype, device=device)
            ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
            reps = 200 if n <= 1024 else (30 if n <= 4096 else 8)
            flops = 2.0 * n ** 3 * reps
            ours, theirs = [], []
            for _ in range(5):
                e = ev.Event()
                e.record(ev.matmul(a, b))
                e.wait()
                t0 = time.perf_counter()
                for _ in range(reps):
                    out = ev.matmul(a, b)
                e.record(out)
                e.wait()
                ours.append(flops / (time.perf_counter() - t0) / 1e12)
                torch.matmul(ta, tb)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(reps):
                    torch.matmul(ta, tb)
                torch.cuda.synchronize()
                theirs.append(flops / (time.perf_counter() - t0) / 1e12)
            o, t = max(ours), max(theirs)  # best of alternating trials: clocks move with power
            rows.append((f"matmul {label} n = {n}", o, t))
    ev.set_allow_tf32(False)
    torch.backends.cuda.matmul.allow_tf32 = False
    return rows


def fmt(r):
    return "-" if r is None else f"{r['p50']:,} / {r['p99']:,} ns"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="eventide device (default: the default)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--md")
    args = parser.parse_args()
    device = ev.Device(args.device) if args.device else ev.default_device()
    n = 2000 if args.quick else 20000
    ours = eventide_rows(device, n)
    theirs, torch_note = (None, "not measured on a cpu run") if device.type == "cpu" else torch_rows(n)

    lines = [
        f"Python per-call cost, p50 / p99, on {device} ({sys.version.split()[0]}; "
        f"torch: {torch_note})",
        "",
        "| call | eventide | torch.cuda | goal | met? |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, r in ours.items():
        goal = GOALS_NS.get(name)
        met = "-" if goal is None else ("yes" if r["p50"] <= goal else "**no**")
        t = theirs.get(name) if theirs else None
        lines.append(f"| {name} | {fmt(r)} | {fmt(t)} | {f'≤ {goal:,} ns' if goal else '-'} | {met} |")
    mm = [] if device.type == "cpu" else matmul_rows(device, args.quick)
    if mm:
        lines += ["", "| matmul from Python | eventide | torch.matmul | goal | met? |",
                  "| --- | --- | --- | --- | --- |"]
        for name, o, t in mm:
            lines.append(f"| {name} | {o:.1f} TFLOP/s ({100 * o / t:.1f}%) | {t:.1f} TFLOP/s | ≥ 97% | "
                         f"{'yes' if o >= 0.97 * t else '**no**'} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.md:
        with open(args.md, "w", encoding="utf-8") as f:
            f.write(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"device": str(device), "eventide": ours, "torch": theirs,
                       "torch_note": torch_note, "matmul": mm}, f, indent=2)


if __name__ == "__main__":
    main()
