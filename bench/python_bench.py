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
    table = "\n".join(lines) + "\n"
    print(table)
    if args.md:
        with open(args.md, "w", encoding="utf-8") as f:
            f.write(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"device": str(device), "eventide": ours, "torch": theirs,
                       "torch_note": torch_note}, f, indent=2)


if __name__ == "__main__":
    main()
