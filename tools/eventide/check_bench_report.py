"""`eventide bench --from`: the table and the chart drawn from one bench.json agree, and the
chart draws what its heading says, a p50 and a p99 for eventide and for each anchor.

  check_bench_report.py EVENTIDE_PROGRAM WORK_DIR [--doc JSON SVG MARKDOWN_FILE]...

For a bench.json made up here (values chosen so that a mix-up shows) and for each --doc
triple, runs `eventide bench --from JSON --out DIR`, then parses DIR/bench.svg (XML) and
DIR/bench.md and checks:

  - every figure's bars are in the SVG, one per series (eventide, then each anchor), each
    drawn to its p50 (bars of one panel share a scale: the drawn length must follow the value),
    and where the JSON has a p99, a whisker from the bar's end to a cap at the p99, further
    right; the legend and the heading name the p99;
  - the text written beside each bar is the table's cell for that series, and the table's
    numbers are the JSON's;
  - no goal line runs through a value label: each label of a figure with a goal starts right
    of its dashed line;
  - with --doc: the SVG committed in the docs is the one drawn from that JSON, byte for byte,
    and the Markdown file (docs/PERFORMANCE.md) holds the generated table's rows verbatim.

Exit status 0 passed, 1 failed. Standard library only.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

SVG = "{http://www.w3.org/2000/svg}"
TIMEOUT_S = 60


class CheckFailed(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def made_up_run() -> dict:
    """Times on a log scale with p99s far from their p50s, a figure without anchors, a
    throughput figure (no p99): the cases a chart gets wrong."""
    def bar(label, value, p99=None):
        b = {"label": label, "value": value}
        if p99 is not None:
            b["p99"] = p99
        return b
    return {
        "eventide": "0.0.0", "device": "cpu", "device_name": "cpu", "device_description": "",
        "host": "a test", "date": "2026-01-01T00:00:00Z", "command": "made up", "quick": True,
        "filter": None, "load_before": "0", "load_after": "0", "seconds": 1.0,
        "figures": [
            {"name": "t.one", "title": "`one()` per call", "unit": "ns", "eventide": bar("eventide", 4.6, 9.1),
             "anchors": [], "goal": "≤ 20 ns", "goal_value": 20, "met": True, "note": "", "values": {}},
            {"name": "t.wake", "title": "a wake-up, p50 / p99", "unit": "ns",
             "eventide": bar("eventide", 1190, 4890),
             "anchors": [bar("condition_variable", 5720, 10400), bar("atomic wait", 212, 47000)],
             "goal": "≤ 5 µs", "goal_value": 5000, "met": True, "note": "", "values": {}},
            {"name": "m.mm", "title": "matmul", "unit": "GFLOP/s", "eventide": bar("eventide", 238.0),
             "anchors": [bar("cblas_sgemm", 236.8)], "ratio": 1.005, "goal": "≥ 95%",
             "goal_value": 225.0, "met": True, "note": "", "values": {}},
        ],
        "failures": [],
    }


def run(program: str, json_path: Path, out: Path) -> None:
    cmd = [program, "bench", "--from", str(json_path), "--out", str(out)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{' '.join(cmd)} did not finish within {TIMEOUT_S} s")
    check(done.returncode == 0, f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stdout}{done.stderr}")
    check("Wrote " in done.stdout and "bench.svg" in done.stdout, f"no 'Wrote ...bench.svg': {done.stdout}")


def table_rows(md: str) -> list:
    """The rows of the figure table: [figure, eventide, anchors, goal, met]."""
    rows = []
    for line in md.splitlines():
        if line.startswith("| ") and not line.startswith("| figure |") and not line.startswith("| ---"):
            rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def fmt(unit: str, v: float) -> str:
    """bench::format_value, for checking the table against the JSON."""
    if unit == "ns":
        if v < 100:
            return f"{v:.1f} ns"
        if v < 1e3:
            return f"{v:.0f} ns"
        if v < 1e6:
            return f"{v / 1e3:.2f} µs"
        return f"{v / 1e6:.2f} ms"
    return f"{v:.1f} {unit}"


def cell(unit: str, bar: dict) -> str:
    s = fmt(unit, bar["value"])
    if bar.get("p99") is not None:
        s += " / " + fmt(unit, bar["p99"])
    return s


def check_pair(run_json: dict, svg_text: str, md_text: str, what: str) -> int:
    """Returns how many p99 whiskers were checked."""
    root = ET.fromstring(svg_text)
    check(root.tag == SVG + "svg", f"{what}: not an SVG document")
    texts = ["".join(t.itertext()) for t in root.iter(SVG + "text")]
    headings = [t for t in texts if t.startswith("Time per call")]
    figures = run_json["figures"]
    if any(f["unit"] == "ns" for f in figures):
        check(len(headings) == 1 and "p50" in headings[0] and "p99" in headings[0],
              f"{what}: the times' heading does not name p50 and p99: {headings}")
        check(any("p99" in t and "whisker" in t for t in texts), f"{what}: no legend for the p99 whisker")

    def drawn(tag: str, cls: str) -> dict:
        out = {}
        for el in root.iter(SVG + tag):
            if el.get("class") == cls and el.get("data-figure") is not None:
                key = (el.get("data-figure"), el.get("data-series"))
                check(key not in out, f"{what}: two {tag}.{cls} for {key}")
                out[key] = el
        return out

    rects, whiskers, values = drawn("rect", "bar"), drawn("path", "p99"), drawn("text", "value")
    goals = {el.get("data-figure"): float(el.get("x1")) for el in root.iter(SVG + "line")
             if el.get("class") == "goal" and el.get("data-figure") is not None}
    for f in figures:
        if f.get("goal_value"):
            check(f["name"] in goals, f"{what}: {f['name']}: its goal ({f['goal_value']}) is not drawn")
    rows = {r[0]: r for r in table_rows(md_text)}
    check(len(rows) == len(figures), f"{what}: {len(rows)} table rows for {len(figures)} figures")
    n_whiskers = 0
    for f in figures:
        unit = f["unit"]
        row = next((r for title, r in rows.items()
                    if title == f["title"] or title.startswith(f["title"] + " (")), None)
        check(row is not None, f"{what}: no table row for {f['title']!r}")
        series = [("eventide", f["eventide"])] + [(a["label"], a) for a in f["anchors"]]
        anchor_cells = [] if row[2] == "-" else row[2].split(" · ")
        check(len(anchor_cells) == len(f["anchors"]), f"{what}: {f['name']}: anchors {row[2]!r}")
        for n, (label, bar) in enumerate(series):
            key = (f["name"], label)
            check(key in rects, f"{what}: no bar for {key}")
            rect = rects[key]
            check(math.isclose(float(rect.get("data-value")), bar["value"], rel_tol=1e-5),
                  f"{what}: {key}: bar of {rect.get('data-value')}, the JSON says {bar['value']}")
            x_end = float(rect.get("x")) + float(rect.get("width"))
            # The table's cell for this series, and the text beside the bar: the same.
            expected = cell(unit, bar)
            table_cell = row[1] if n == 0 else anchor_cells[n - 1]
            check(table_cell.startswith(expected) if n == 0 else table_cell == f"{label} {expected}",
                  f"{what}: {key}: table cell {table_cell!r}, the JSON gives {expected!r}")
            text = "".join(values[key].itertext()) if key in values else None
            check(text is not None and text.startswith(expected),
                  f"{what}: {key}: the chart writes {text!r}, the table {expected!r}")
            if n == 0:
                check(text == row[1], f"{what}: {key}: the chart writes {text!r}, the table {row[1]!r}")
            if f["name"] in goals:
                # A label starting left of the line would run across it: the line is under the
                # label's text wherever the text is longer than the gap.
                check(float(values[key].get("x")) > goals[f["name"]],
                      f"{what}: {key}: the label {text!r} at x={values[key].get('x')} starts left of "
                      f"the goal line at x={goals[f['name']]}, which then crosses it")
            if bar.get("p99") is None:
                check(key not in whiskers, f"{what}: {key}: a whisker without a p99")
                continue
            check(key in whiskers, f"{what}: {key}: the p99 ({bar['p99']}) is not drawn")
            w = whiskers[key]
            check(math.isclose(float(w.get("data-value")), bar["p99"], rel_tol=1e-5),
                  f"{what}: {key}: whisker of {w.get('data-value')}, the JSON's p99 is {bar['p99']}")
            m = re.fullmatch(r"M([\d.]+),([\d.]+) H([\d.]+) M([\d.]+),([\d.]+) V([\d.]+)", w.get("d"))
            check(m is not None, f"{what}: {key}: whisker path {w.get('d')!r}")
            x0, _, x1, cap, _, _ = map(float, m.groups())
            check(abs(x0 - x_end) <= 0.11, f"{what}: {key}: the whisker starts at {x0}, the bar ends at {x_end}")
            check(x1 == cap and x1 >= x0 and (x1 > x0 or bar["p99"] <= bar["value"] * 1.5),
                  f"{what}: {key}: the p99 cap at {cap} is not right of the p50 at {x0}")
            n_whiskers += 1
    # One scale per panel: among the time bars, a longer value is a longer bar.
    time_bars = sorted((float(r.get("data-value")), float(r.get("width")))
                       for (fig, _), r in rects.items()
                       if next(f for f in figures if f["name"] == fig)["unit"] == "ns")
    for (v1, w1), (v2, w2) in zip(time_bars, time_bars[1:]):
        check(w2 >= w1 - 0.11, f"{what}: a bar of {v2} is drawn shorter ({w2}) than one of {v1} ({w1})")
    return n_whiskers


def main(argv: list) -> int:
    program, work = argv[1], Path(argv[2])
    docs = []
    rest = argv[3:]
    while rest:
        check(rest[0] == "--doc" and len(rest) >= 4, f"usage: {__doc__.splitlines()[2]}")
        docs.append((Path(rest[1]), Path(rest[2]), Path(rest[3])))
        rest = rest[4:]
    work.mkdir(parents=True, exist_ok=True)

    made_up = work / "made-up.json"
    made_up.write_text(json.dumps(made_up_run(), ensure_ascii=False), encoding="utf-8")
    out = work / "made-up"
    run(program, made_up, out)
    n = check_pair(made_up_run(), (out / "bench.svg").read_text(encoding="utf-8"),
                   (out / "bench.md").read_text(encoding="utf-8"), "made-up run")
    check(n == 4, f"made-up run: {n} whiskers drawn for the 4 p99s")
    print(f"made-up run: the table and the chart agree; {n} p99 whiskers")

    for json_path, svg_path, doc_path in docs:
        out = work / json_path.stem
        run(program, json_path, out)
        run_json = json.loads(json_path.read_text(encoding="utf-8"))
        svg, md = (out / "bench.svg").read_text(encoding="utf-8"), (out / "bench.md").read_text(encoding="utf-8")
        n = check_pair(run_json, svg, md, str(json_path))
        check(svg_path.read_text(encoding="utf-8") == svg,
              f"{svg_path} is not the chart of {json_path}: redraw it with "
              f"`eventide bench --from {json_path} --out DIR` and copy DIR/bench.svg")
        doc = doc_path.read_text(encoding="utf-8")
        missing = [line for line in md.splitlines() if line.startswith("| ") and line not in doc.splitlines()]
        check(not missing, f"{doc_path} lacks these rows of the table of {json_path}:\n" + "\n".join(missing))
        print(f"{json_path.name}: {svg_path.name} and the table in {doc_path.name} are drawn from it; "
              f"{n} p99 whiskers")
    print("PASS")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except CheckFailed as failure:
        print(f"FAIL: {failure}", file=sys.stderr)
        sys.exit(1)
