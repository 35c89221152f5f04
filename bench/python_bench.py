#!/usr/bin/python3
"""Per-call host cost of eventide's Python API, beside torch.cuda.Event in the same run.

Each call is timed one at a time with time.perf_counter_ns around a lambda, the way
the PyTorch anchor program (docs/PERFORMANCE.md) times PyTorch, so both sides carry
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

# Absolute goals (ns, p50), and goals relative to torch.cuda's figure in the same run (a
# multiple of its p50; where torch is not measured, the absolute goal applies if there is one).
GOALS_NS = {"Event.record()": 1500, "Event.record(tensor)": 1500, "Event.query(), finished": 300}
RELATIVE_GOALS = {"Event.record()": 1.0, "Event.record(torch stream), timed": 1.0,
                  "timing idiom, one measurement": 1.0,
                  "record_event + wait_event, two streams": 1.0}


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
        # record(): a marker at the end of the current stream (on a GPU: in the native stream).
        rows["Event.record()"] = measure(lambda: e.record(), n)
        rows["Event.record(tensor)"] = measure(lambda: e.record(t), n)
        ev.synchronize(device)
        e.wait()
        rows["Event.query(), finished"] = measure(lambda: e.query(), n)
        rows["Event.synchronize(), finished"] = measure(lambda: e.synchronize(), n)
        other = ev.Stream(device)
        rows["Stream.wait_event()"] = measure(lambda: other.wait_event(e), n)
        rows["record_event + wait_event, two streams"] = measure(lambda: other.wait_event(s.record_event()), n)
        ev.synchronize(device)
        end = ev.Event()
        end.record()
        end.wait()
        e.elapsed_time(end)  # the first read learns the times
        rows["Event.elapsed_time()"] = measure(lambda: e.elapsed_time(end), n)

        def idiom():
            start, stop = ev.Event(), ev.Event()
            start.record()
            stop.record()
            stop.synchronize()
            return start.elapsed_time(stop)

        rows["timing idiom, one measurement"] = measure(idiom, max(n // 10, 200))
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
    torch, _ = _torch() if ev.Device(device).type == "cuda" else (None, None)
    if torch is not None:
        ts = torch.cuda.Stream()
        rows["Event.record(torch stream), timed"] = measure(lambda: e.record(ts), n)
        torch.cuda.synchronize()
        e.wait()
    return rows


def _torch():
    """PyTorch with a GPU, or None with the reason."""
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return None, "PyTorch sees no GPU"
    return torch, None


def torch_rows(n):
    torch, why = _torch()
    if torch is None:
        return None, why
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
        rows["record_event + wait_event, two streams"] = measure(lambda: other.wait_event(s.record_event()), n)
        torch.cuda.synchronize()
        timed = torch.cuda.Event(enable_timing=True)
        rows["Event.record(torch stream), timed"] = measure(lambda: timed.record(s), n)
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        t0.record()
        t1.record()
        torch.cuda.synchronize()
        rows["Event.elapsed_time()"] = measure(lambda: t0.elapsed_time(t1), n)

        def idiom():
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            stop.record()
            stop.synchronize()
            return start.elapsed_time(stop)

        rows["timing idiom, one measurement"] = measure(idiom, max(n // 10, 200))
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
    torch, _ = _torch()
    if torch is None:
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


def per_op_rows(device, quick):
    """Issue 12's per-op figures from Python, beside PyTorch in the same process: a chain of
    tiny adds (x = x + y, 256 floats, 100 back to back, then drained) and A @ A (bf16, n = 1024,
    20 back to back, then drained); the median per op over batches, in µs."""
    torch, _ = _torch()
    if torch is None:
        return []
    batches = 10 if quick else 40

    def per_op(step, drain, count):
        times = []
        for _ in range(batches):
            t0 = time.perf_counter()
            for _ in range(count):
                step()
            drain()
            times.append((time.perf_counter() - t0) / count * 1e6)
        times.sort()
        return times[len(times) // 2]

    y, state = ev.ones(256, device=device), {"x": ev.zeros(256, device=device)}
    state["x"].wait()

    def ev_add():
        state["x"] = state["x"] + y

    ours_add = per_op(ev_add, lambda: state["x"].wait(), 100)
    ty, tstate = torch.ones(256, device="cuda"), {"x": torch.zeros(256, device="cuda")}
    torch.cuda.synchronize()

    def torch_add():
        tstate["x"] = tstate["x"] + ty

    theirs_add = per_op(torch_add, torch.cuda.synchronize, 100)
    a = ev.randn(1024, 1024, dtype="bfloat16", device=device)
    ta = torch.randn(1024, 1024, dtype=torch.bfloat16, device="cuda")
    out = {"c": a @ a}
    out["c"].wait()

    def ev_mm():
        out["c"] = a @ a

    ours_mm = per_op(ev_mm, lambda: out["c"].wait(), 20)
    torch.cuda.synchronize()
    theirs_mm = per_op(lambda: ta @ ta, torch.cuda.synchronize, 20)
    return [("`x + y`, 256 floats, back to back", ours_add, theirs_add, 0.8),
            ("`A @ A`, bf16, n = 1024, back to back", ours_mm, theirs_mm, 1.0)]


def graph_rows(device, quick):
    """Issue 29's graphs from Python, beside torch.cuda.CUDAGraph in the same process: a chain
    of 100 tiny in-place adds (256 floats) replayed and waited for, per op; 50 bf16 matmuls
    n = 1024 replayed (10 replays, then drained), TFLOP/s; and the round trip of a graph of
    one tiny op (replay + wait / replay + synchronize); and the chain of eventide's adds issued
    on torch's capturing stream, in torch's own graph, replayed by torch. Medians over batches (best trial for
    the throughput). Rows: (name, ours, torch's, unit, goal factor, lower_is_better)."""
    torch, _ = _torch()
    if torch is None:
        return []
    batches = 10 if quick else 50
    s = ev.Stream(device)

    def median(fn, count=1):
        times = []
        for _ in range(batches):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) / count * 1e6)
        times.sort()
        return times[len(times) // 2]

    x, one = ev.zeros(256, device=device), ev.ones(256, device=device)
    with ev.capture(stream=s) as chain:
        for _ in range(100):
            ev.add(x, one, out=x)
    with ev.capture(stream=s) as single:
        ev.add(x, one, out=x)
    a = ev.randn(1024, 1024, dtype="bfloat16", device=device)
    c = ev.empty((1024, 1024), dtype="bfloat16", device=device)
    with ev.capture(stream=s) as mms:
        for _ in range(50):
            ev.matmul(a, a, out=c)
    chain.replay(stream=s).wait()
    mms.replay(stream=s).wait()

    ts = torch.cuda.Stream()
    tx, tone = torch.zeros(256, device="cuda"), torch.ones(256, device="cuda")
    ta = torch.randn(1024, 1024, dtype=torch.bfloat16, device="cuda")
    tc = torch.empty(1024, 1024, dtype=torch.bfloat16, device="cuda")
    torch.cuda.synchronize()
    tchain, tsingle, tmms = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(tchain, stream=ts):
        for _ in range(100):
            tx.add_(tone)
    with torch.cuda.graph(tsingle, stream=ts):
        tx.add_(tone)
    with torch.cuda.graph(tmms, stream=ts):
        for _ in range(50):
            torch.matmul(ta, ta, out=tc)
    # eventide's ops issued on torch's capturing stream: in torch's own graph, replayed by torch.
    fx = ev.zeros(256, device=device)
    ev.synchronize(device)
    tfollowed = torch.cuda.CUDAGraph()
    with torch.cuda.graph(tfollowed, stream=ts):
        with ev.stream(torch.cuda.current_stream()):
            for _ in range(100):
                ev.add(fx, one, out=fx)
    tchain.replay()
    tmms.replay()
    tfollowed.replay()
    torch.cuda.synchronize()

    ours_chain = median(lambda: chain.replay(stream=s).wait(), 100)
    theirs_chain = median(lambda: (tchain.replay(), torch.cuda.synchronize()), 100)
    in_torch = median(lambda: (tfollowed.replay(), torch.cuda.synchronize()), 100)
    ours_rt = median(lambda: single.replay(stream=s).wait())
    theirs_rt = median(lambda: (tsingle.replay(), torch.cuda.synchronize()))

    def throughput(replay, drain):
        best = 0.0
        for _ in range(3 if quick else 5):
            t0 = time.perf_counter()
            for _ in range(10):
                last = replay()
            drain(last)
            best = max(best, 2.0 * 1024 ** 3 * 50 * 10 / (time.perf_counter() - t0) / 1e12)
        return best

    ours_mm = throughput(lambda: mms.replay(stream=s), lambda e: e.wait())
    theirs_mm = throughput(lambda: tmms.replay(), lambda e: torch.cuda.synchronize())
    return [("replay + wait of a captured chain of 100 tiny adds, per op", ours_chain, theirs_chain, "µs", 1.0, True),
            ("the same 100 eventide adds captured into torch.cuda.graph, torch's replay + synchronize, per op",
             in_torch, theirs_chain, "µs", 1.0, True),
            ("replay of 50 bf16 matmuls n = 1024, throughput", ours_mm, theirs_mm, "TFLOP/s", 1.0, False),
            ("replay + wait of a graph of one tiny op, round trip", ours_rt, theirs_rt, "µs", 1.0, True)]


def priority_rows(device, quick):
    """A tiny op while f32 n = 4096 matmuls fill the GPU (on torch's default stream): host time
    from its launch to its completion, p50, on a stream of priority 0 and of the greatest
    priority, eventide's (ev.add of 256 floats, Event.wait) beside torch's (x + y, Event
    synchronize), in the same run."""
    torch, _ = _torch()
    if torch is None:
        return []
    big = torch.randn(4096, 4096, device="cuda")
    least, greatest = ev.stream_priority_range(device)
    samples = 15 if quick else 40

    def fill():
        for _ in range(8):
            torch.mm(big, big)

    def ours(priority):
        s = ev.Stream(device, priority=priority)
        x = ev.ones(256, device=device)
        x.wait()
        times = []
        for _ in range(samples):
            fill()
            time.sleep(0.002)  # the matmuls have reached the GPU
            t0 = time.perf_counter()
            with s:
                y = ev.add(x, x)
            e = ev.Event()
            e.record(y)
            e.wait()
            times.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
        times.sort()
        return times[len(times) // 2]

    def theirs(priority):
        s = torch.cuda.Stream(priority=priority)
        x = torch.ones(256, device="cuda")
        torch.cuda.synchronize()
        times = []
        for _ in range(samples):
            fill()
            time.sleep(0.002)
            t0 = time.perf_counter()
            with torch.cuda.stream(s):
                y = x + x
                done = torch.cuda.Event()
                done.record()
            done.synchronize()
            times.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
        times.sort()
        return times[len(times) // 2]

    torch_greatest = torch.cuda.Stream.priority_range()[1] if hasattr(torch.cuda.Stream, "priority_range") else -1
    rows = [("tiny op beside matmuls, priority 0", ours(0), theirs(0)),
            (f"tiny op beside matmuls, greatest priority (ours {greatest}, torch's {torch_greatest})",
             ours(greatest), theirs(torch_greatest))]
    del big
    return rows


def region_rows(device, quick):
    """The same region of PyTorch work, on PyTorch's default stream, read by eventide's
    markers and by torch.cuda.Event (recorded next to each other): both readings and their
    difference, over repetitions of a few sizes."""
    torch, _ = _torch()
    if torch is None:
        return []
    rows = []
    a = torch.randn(1024, 1024, device="cuda")
    ts = torch.cuda.current_stream()
    ev.Event().record(ts)  # eventide's first GPU work starts its timing (once a process)
    torch.cuda.synchronize()
    # Idle at the start: the first record of the two runs at once, and the other library's
    # record call (its host time) lies between them; busy at the start (a matmul before): both
    # records wait in the stream, and only the device's own gap between them is left.
    for start_busy in (False, True):
        for count in (1, 10, 100):
            diffs, ours_all, theirs_all = [], [], []
            for _ in range(10 if quick else 50):
                s0, s1 = ev.Event(), ev.Event()
                t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                if start_busy:
                    torch.mm(a, a)
                # The same order at both ends: neither reading holds the other's record calls.
                s0.record(ts)
                t0.record()
                for _ in range(count):
                    torch.mm(a, a)
                s1.record(ts)
                t1.record()
                torch.cuda.synchronize()
                s1.wait()
                ours, theirs = s0.elapsed_time(s1), t0.elapsed_time(t1)
                ours_all.append(ours)
                theirs_all.append(theirs)
                diffs.append(abs(ours - theirs) * 1000.0)
            ours_all.sort()
            theirs_all.sort()
            diffs.sort()
            state = "busy" if start_busy else "idle"
            rows.append((f"{count} torch.mm 1024, default stream {state} at the start",
                         ours_all[len(ours_all) // 2], theirs_all[len(theirs_all) // 2],
                         diffs[len(diffs) // 2], diffs[-1]))
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
        t = theirs.get(name) if theirs else None
        if t is not None and name in RELATIVE_GOALS:
            factor = RELATIVE_GOALS[name]
            goal_text = f"≤ {factor:g}× torch" if factor != 1.0 else "≤ torch"
            met = "yes" if r["p50"] <= factor * t["p50"] else "**no**"
        else:
            goal = GOALS_NS.get(name)
            goal_text = f"≤ {goal:,} ns" if goal else "-"
            met = "-" if goal is None else ("yes" if r["p50"] <= goal else "**no**")
        lines.append(f"| {name} | {fmt(r)} | {fmt(t)} | {goal_text} | {met} |")
    regions = [] if device.type == "cpu" else region_rows(device, args.quick)
    if regions:
        lines += ["", "| the same region, read by | eventide markers, p50 | torch.cuda.Event, p50 | "
                  "difference p50 / max | goal | met? |", "| --- | --- | --- | --- | --- | --- |"]
        for name, o, t, d50, dmax in regions:
            ok = d50 <= max(10.0, 0.05 * t * 1000.0)
            lines.append(f"| {name} | {o:.4f} ms | {t:.4f} ms | {d50:.2f} / {dmax:.2f} µs | "
                         f"within 5% or 10 µs | {'yes' if ok else '**no**'} |")
    mm = [] if device.type == "cpu" else matmul_rows(device, args.quick)
    if mm:
        lines += ["", "| matmul from Python | eventide | torch.matmul | goal | met? |",
                  "| --- | --- | --- | --- | --- |"]
        for name, o, t in mm:
            lines.append(f"| {name} | {o:.1f} TFLOP/s ({100 * o / t:.1f}%) | {t:.1f} TFLOP/s | ≥ 97% | "
                         f"{'yes' if o >= 0.97 * t else '**no**'} |")
    prio = [] if device.type == "cpu" else priority_rows(device, args.quick)
    if prio:
        lines += ["", "| launch to completion, p50 | eventide | torch | goal | met? |",
                  "| --- | --- | --- | --- | --- |"]
        for name, o, t in prio:
            goal = "≤ torch" if "greatest" in name else "-"
            met = ("yes" if o <= t else "**no**") if "greatest" in name else "-"
            lines.append(f"| {name} | {o:,.0f} µs | {t:,.0f} µs | {goal} | {met} |")
    per_op = [] if device.type == "cpu" else per_op_rows(device, args.quick)
    if per_op:
        lines += ["", "| per op from Python | eventide | torch | goal | met? |", "| --- | --- | --- | --- | --- |"]
        for name, o, t, factor in per_op:
            goal_text = f"≤ {factor:g}× torch" if factor != 1.0 else "≤ torch"
            lines.append(f"| {name} | {o:.1f} µs ({o / t:.2f}×) | {t:.1f} µs | {goal_text} | "
                         f"{'yes' if o <= factor * t else '**no**'} |")
    graphs = [] if device.type == "cpu" else graph_rows(device, args.quick)
    if graphs:
        lines += ["", "| graphs from Python | eventide | torch.cuda.CUDAGraph | goal | met? |",
                  "| --- | --- | --- | --- | --- |"]
        for name, o, t, unit, factor, lower in graphs:
            met = o <= factor * t if lower else o >= factor * t
            lines.append(f"| {name} | {o:,.2f} {unit} ({o / t:.2f}×) | {t:,.2f} {unit} | "
                         f"{'≤' if lower else '≥'} torch | {'yes' if met else '**no**'} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.md:
        with open(args.md, "w", encoding="utf-8") as f:
            f.write(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"device": str(device), "eventide": ours, "torch": theirs,
                       "torch_note": torch_note, "matmul": mm, "regions": regions, "priority": prio,
                       "per_op": per_op, "graphs": graphs}, f, indent=2)


if __name__ == "__main__":
    main()
