#!/usr/bin/python3
"""Turns one benchmark run into eventide's results table: ours beside its anchor.

Reads the Google Benchmark JSON of eventide_bench_calls and the JSONs of
eventide_bench_latency and eventide_bench_matmul (all from the same run of
scripts/bench.sh), and writes

  results.json  everything raw, plus the rows of the table
  results.md    a Markdown table: figure | eventide | anchor | goal | met?

and prints the table. Every number in it was measured in that run; the goals are the
project's. Standard library only (run with /usr/bin/python3).

The benchmark names used here are defined in bench/calls_bench.cpp and
bench/latency_bench.cpp; rename them in both places.
"""

import argparse
import json
import re
import statistics
import sys

TIME_UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


class MissingFigure(KeyError):
    pass


def load_calls(path):
    """{'BM_AddTiny/ops:1000': {'ns': ..., 'per_op_ns': ..., 'gflops': ...}} from the JSON.

    With repetitions, the median aggregate is taken; without, the single run.
    """
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    runs, medians = {}, {}
    for b in data["benchmarks"]:
        key = re.sub(r"/(repeats:\d+|real_time)", "", b.get("run_name", b["name"]))
        figure = {"ns": b["real_time"] * TIME_UNIT_NS[b.get("time_unit", "ns")]}
        if "per_op" in b:
            figure["per_op_ns"] = b["per_op"] * 1e9
        if "GFLOPS" in b:
            figure["gflops"] = b["GFLOPS"]
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[key] = figure
        else:
            runs.setdefault(key, []).append(figure)
    out = {}
    for key, figures in runs.items():
        # Aggregates-only output has no runs: the median entry is all there is.
        out[key] = medians.get(key) or {
            k: statistics.median(f[k] for f in figures) for k in figures[0]
        }
    for key, figure in medians.items():
        out.setdefault(key, figure)
    return data, out


def fmt_goal(ns):
    """A round goal: 20 ns, 5 µs."""
    return f"{ns / 1e3:g} µs" if ns >= 1e3 else f"{ns:g} ns"


def fmt_ns(ns):
    if ns < 100:
        return f"{ns:.1f} ns"
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns / 1e6:.2f} ms"


class Table:
    def __init__(self, calls, latency):
        self.calls = calls
        self.latency = latency
        self.rows = []

    # --- lookups ---
    def call(self, key, field="ns"):
        try:
            return self.calls[key][field]
        except KeyError as e:
            raise MissingFigure(f"{key}.{field}") from e

    def lat(self, key, field="p50"):
        try:
            return self.latency[key][field]
        except KeyError as e:
            raise MissingFigure(f"{key}.{field}") from e

    # --- rows ---
    def add(self, section, figure, fn):
        """fn() -> (eventide text, anchor text, goal text, met: True/False/None, values)."""
        try:
            ours, anchor, goal, met, values = fn()
        except MissingFigure as e:
            ours, anchor, goal, met, values = f"not measured ({e.args[0]})", "-", "-", None, {}
        self.rows.append({
            "section": section, "figure": figure, "eventide": ours, "anchor": anchor,
            "goal": goal, "met": met, "values": values,
        })

    def at_most(self, section, figure, ours_ns, goal_ns, anchor="-", values=None):
        def fn():
            v = ours_ns()
            a = anchor() if callable(anchor) else anchor
            return fmt_ns(v), a, f"≤ {fmt_goal(goal_ns)}", v <= goal_ns, dict(values or {}, ours_ns=v)
        self.add(section, figure, fn)

    def info(self, section, figure, ours, anchor="-"):
        def fn():
            a = anchor() if callable(anchor) else anchor
            return ours(), a, "-", None, {}
        self.add(section, figure, fn)


def build(calls, latency, matmul, blas_core=None):
    """The rows. `blas_core`: (core name, matmul JSON) of the matmul run with OpenBLAS's
    kernels forced to suit this CPU, or None."""
    t = Table(calls, latency)
    goals = "goals"
    also = "also measured"

    def p50_p99(key):
        return lambda: f"{fmt_ns(t.lat(key, 'p50'))} / {fmt_ns(t.lat(key, 'p99'))}"

    # --- the goals -------------------------------------------------------------------------
    t.at_most(goals, "`Event::poll()` of a finished event",
              lambda: t.call("BM_EventPollFinished"), 20)
    t.at_most(goals, "`Event()` + `record(tensor)` + `poll()` (producer finished)",
              lambda: t.call("BM_EventCreateRecordPoll"), 300)
    t.at_most(goals, "`UserEvent::set()` → waiting thread wakes, p50 (ping-pong/2)",
              lambda: t.lat("eventide.user_event.ping_pong", "p50"), 5000,
              anchor=lambda: "condition_variable {} · atomic wait/notify {}".format(
                  fmt_ns(t.lat("anchor.condvar.ping_pong", "p50")),
                  fmt_ns(t.lat("anchor.atomic_wait.ping_pong", "p50"))))
    t.info(goals, "`UserEvent::set()` → waiting thread wakes, p99 (ping-pong/2)",
           lambda: fmt_ns(t.lat("eventide.user_event.ping_pong", "p99")),
           anchor=lambda: "condition_variable {} · atomic wait/notify {}".format(
               fmt_ns(t.lat("anchor.condvar.ping_pong", "p99")),
               fmt_ns(t.lat("anchor.atomic_wait.ping_pong", "p99"))))
    t.info(goals, "`UserEvent::set()` → waiting thread wakes, p50 / p99 (ping-pong/2), "
           "the other core kept busy", p50_p99("eventide.user_event.ping_pong.busy"),
           anchor=lambda: "condition_variable {} · atomic wait/notify {}".format(
               p50_p99("anchor.condvar.ping_pong.busy")(),
               p50_p99("anchor.atomic_wait.ping_pong.busy")()))
    t.at_most(goals, "`UserEvent::set()` → callback runs, p50, callbacks back to back",
              lambda: t.lat("eventide.callback.hot", "p50"), 10000)
    t.at_most(goals, "`UserEvent::set()` → callback runs, p50, callback thread asleep",
              lambda: t.lat("eventide.callback.idle", "p50"), 10000,
              anchor=lambda: "wake-up floor (atomic wait/notify, waiter asleep) {}".format(
                  fmt_ns(t.lat("anchor.atomic_wait.sleeping", "p50"))))
    def async_anchor():
        return "std::async launch+get {}".format(fmt_ns(t.call("BM_AnchorStdAsyncLaunchGet")))

    t.at_most(goals, "tiny op: `Stream::enqueue` of an empty lambda, per op (1000, wait the last)",
              lambda: t.call("BM_StreamEnqueueEmpty/ops:1000", "per_op_ns"), 2000,
              anchor=async_anchor)
    t.at_most(goals, "tiny op: `ev::add` of two 1-element tensors, per op (1000, wait the last)",
              lambda: t.call("BM_AddTiny/ops:1000", "per_op_ns"), 2000, anchor=async_anchor)
    passes = [("", matmul)]
    if blas_core:
        passes.append((f", OpenBLAS core forced to {blas_core[0]}", blas_core[1]))
    for label, source in passes:
        for n in (1024, 2048):
            def pair(n=n, source=source):
                try:
                    r = source["results"][str(n)]
                except KeyError as e:
                    raise MissingFigure(f"matmul n={n}") from e
                return (f"{r['ours_gflops']:.1f} GFLOP/s ({r['ratio']:.1%} of cblas)",
                        f"cblas_sgemm {r['blas_gflops']:.1f} GFLOP/s", "≥ 95% of cblas",
                        r["ratio"] >= 0.95,
                        {"ours_gflops": r["ours_gflops"], "anchor_gflops": r["blas_gflops"],
                         "ratio": r["ratio"], "ratio_mean": r.get("ratio_mean"),
                         "pairs": r["pairs"]})
            t.add(goals, f"`matmul` f32 n={n} + `record` + `wait`{label}", pair)

    # --- also measured ---------------------------------------------------------------------
    # The process's first calls of a size fault in fresh output pages until glibc stops
    # handing the freed block back to the kernel; eventide_bench_matmul times them apart.
    for label, source in passes:
        for n in (1024, 2048):
            def cold(n=n, source=source):
                r = source["results"].get(str(n))
                if not r or "cold_pairs" not in r:
                    raise MissingFigure(f"matmul n={n} cold pairs")
                if not r["cold_pairs"]:
                    return ("no fresh-page pairs", "-", "-", None, {"cold_pairs": 0})
                return (f"{r['cold_ratio']:.1%} of cblas ({r['cold_pairs']} pairs)",
                        "cblas_sgemm in the same pairs", "-", None,
                        {"cold_ratio": r["cold_ratio"], "cold_pairs": r["cold_pairs"]})
            t.add(also, f"`matmul` f32 n={n}, the process's first calls, while the new output "
                  f"still faults in fresh pages{label}", cold)
    t.info(also, "`Event::wait()` of a finished event", lambda: fmt_ns(t.call("BM_EventWaitFinished")))
    t.info(also, "`Event()` + `record(tensor)` + `poll()` (producer pending)",
           lambda: fmt_ns(t.call("BM_EventCreateRecordPollPending")))
    t.info(also, "`Event::record(stream)` (stream's last op finished)",
           lambda: fmt_ns(t.call("BM_EventRecordStream")))
    t.info(also, "`Stream::wait(event)` enqueue (event finished)",
           lambda: fmt_ns(t.call("BM_StreamWaitEnqueue")))
    t.info(also, "one `Stream::enqueue` of an empty lambda + `wait`, round trip",
           lambda: fmt_ns(t.call("BM_StreamEnqueueEmpty/ops:1")), anchor=async_anchor)
    t.info(also, "one `ev::add` (1 element) + `record` + `wait`, round trip",
           lambda: fmt_ns(t.call("BM_AddTiny/ops:1")), anchor=async_anchor)
    t.info(also, "`UserEvent::set()` → waiting thread wakes, waiter asleep, p50 / p99",
           p50_p99("eventide.user_event.sleeping"),
           anchor=lambda: "atomic wait/notify {} · condition_variable {}".format(
               p50_p99("anchor.atomic_wait.sleeping")(), p50_p99("anchor.condvar.sleeping")()))
    t.info(also, "`UserEvent::set()` → callback runs, p99, back to back / thread asleep",
           lambda: "{} / {}".format(fmt_ns(t.lat("eventide.callback.hot", "p99")),
                                    fmt_ns(t.lat("eventide.callback.idle", "p99"))))
    t.info(also, "op ends on a stream worker → `Event::wait` returns, host spinning, p50 / p99",
           p50_p99("eventide.stream_wait.hot"),
           anchor=lambda: "atomic wait/notify ping-pong/2 {}".format(
               p50_p99("anchor.atomic_wait.ping_pong")()))
    t.info(also, "op ends on a stream worker → `Event::wait` returns, host asleep, p50 / p99",
           p50_p99("eventide.stream_wait.sleeping"),
           anchor=lambda: "atomic wait/notify, waiter asleep {}".format(
               p50_p99("anchor.atomic_wait.sleeping")()))
    t.info(also, "`Stream::enqueue` → body starts, stream idle > 2 ms (worker back in pool), "
           "p50 / p99", p50_p99("eventide.stream.idle_pickup"),
           anchor=lambda: "atomic wait/notify, waiter asleep 3 ms {} · {}".format(
               p50_p99("anchor.atomic_wait.sleeping_3ms")(), async_anchor()))
    t.info(also, "the floor: two threads spinning on an atomic, ping-pong/2, p50 / p99",
           lambda: "-", anchor=p50_p99("anchor.spin.ping_pong"))
    return t.rows


def first_load(loadavg):
    """The 1-minute figure of "0.47 0.83 0.64"; 0 if unknown."""
    try:
        return float(loadavg.split()[0])
    except (IndexError, ValueError):
        return 0.0


def markdown(rows, meta):
    def met(m):
        return "-" if m is None else ("yes" if m else "**no**")

    lines = [
        "# eventide benchmarks",
        "",
        f"Run {meta['date']}{' (quick)' if meta['quick'] else ''} on {meta['host']}; "
        f"load average before {meta['load_before']}, after {meta['load_after']}. "
        "Ours and every anchor were measured in this run; the goals are the project's.",
        "",
    ]
    others = meta.get("others")
    if others is not None:
        lines += [f"Other processes used {others:.0%} of this machine's CPU time during the run.",
                  ""]
    noisy = (others >= 0.05 if others is not None else
             max(first_load(meta["load_before"]), first_load(meta["load_after"])) >= 1.0)
    if noisy:
        lines += ["**Noisy run:** other work shared the machine; wake-ups and per-op costs "
                  "move by several times when the two cores are shared. Rerun on a quiet "
                  "machine before quoting these numbers.", ""]
    if meta.get("openblas"):
        lines += [f"OpenBLAS: {meta['openblas']}.", ""]
    if meta.get("openblas_forced"):
        lines += [f"Second matmul run, `OPENBLAS_CORETYPE` set: {meta['openblas_forced']}.", ""]
    section = None
    for r in rows:
        if r["section"] != section:
            section = r["section"]
            lines += ["", f"## {section.capitalize()}", "",
                      "| figure | eventide | anchor | goal | met? |",
                      "| --- | --- | --- | --- | --- |"]
        lines.append(f"| {r['figure']} | {r['eventide']} | {r['anchor']} | {r['goal']} | "
                     f"{met(r['met'])} |")
    missed = [r["figure"] for r in rows if r["met"] is False]
    lines += ["", f"Goals met: {sum(r['met'] is True for r in rows)} of "
                  f"{sum(r['met'] is not None for r in rows)}."
              + (" Missed: " + "; ".join(missed) + "." if missed else ""), ""]
    lines += ["Wake-ups are p50 unless said; ping-pong/2 is half a round trip between two "
              "threads, as the anchor measures it. Per-call costs are Google Benchmark real time "
              "(median of the repetitions when there are several). matmul: eventide and "
              "cblas_sgemm alternate in one loop; GFLOP/s are medians, the percentage is the "
              "median of the per-pair ratios. Raw data: results.json.", ""]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", required=True, help="Google Benchmark JSON")
    ap.add_argument("--latency", required=True, help="eventide_bench_latency JSON")
    ap.add_argument("--json", required=True, help="results.json to write")
    ap.add_argument("--md", required=True, help="results.md to write")
    ap.add_argument("--matmul", required=True, help="eventide_bench_matmul JSON")
    ap.add_argument("--matmul-blas-core",
                    help="eventide_bench_matmul JSON of a run with OPENBLAS_CORETYPE set")
    ap.add_argument("--load-before", default="?")
    ap.add_argument("--load-after", default="?")
    ap.add_argument("--others", type=float, default=None,
                    help="share of the machine's CPU time other processes used during the run")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()

    calls_raw, calls = load_calls(args.calls)
    with open(args.latency, encoding="utf-8") as f:
        latency_raw = json.load(f)
    context = calls_raw.get("context", {})
    meta = {
        "date": context.get("date", "?"),
        "host": "{} ({} CPUs, {} MHz)".format(context.get("host_name", "?"),
                                              context.get("num_cpus", "?"),
                                              context.get("mhz_per_cpu", "?")),
        "load_before": args.load_before,
        "load_after": args.load_after,
        "quick": args.quick,
        "others": args.others,
    }
    with open(args.matmul, encoding="utf-8") as f:
        matmul = json.load(f)
    meta["openblas"] = matmul.get("openblas", "")
    blas_core, core_raw = None, None
    if args.matmul_blas_core:
        with open(args.matmul_blas_core, encoding="utf-8") as f:
            core_raw = json.load(f)
        meta["openblas_forced"] = core_raw.get("openblas", "")
        core = re.search(r"core (\w+)", meta["openblas_forced"])
        default = re.search(r"core (\w+)", meta["openblas"])
        # Only worth rows when forcing changed the kernels.
        if core and (not default or core.group(1) != default.group(1)):
            blas_core = (core.group(1), core_raw)
    rows = build(calls, latency_raw["results"], matmul, blas_core)
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "rows": rows, "calls": calls,
                   "google_benchmark": calls_raw, "latency": latency_raw, "matmul": matmul,
                   "matmul_blas_core": core_raw}, f, indent=1, ensure_ascii=False)
    md = markdown(rows, meta)
    with open(args.md, "w", encoding="utf-8") as f:
        f.write(md)
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
