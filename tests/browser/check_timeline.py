"""The profiler's timeline page in a real browser: headless chromium runs its script and draws it.

Over 600 lines on purpose: one program drives the browser for every page and check, so that
chromium starts once per page rather than once per check.

Runs two real workloads with the eventide package and writes the timeline page of each:

  - a small one: two streams of matmuls joined by an event wait, a host wait, a callback;
  - 10,000 ops: tiny adds on two streams, each stream now and then waiting for the other;

and, given ``--cli`` (the eventide command; ctest passes it), the page of the demo's
scenario 16 (``eventide demo --only 16 --timeline PAGE``), the README's picture.

Each page is checked twice:

  1. ``--dump-dom`` of the page with an error catcher put first in its <head> and a measuring
     script appended to its <body>: no JavaScript error; the page's hook
     (``window.eventideTimeline``) is there; every bar of the page's data is in the first view
     and the canvas has pixels of each of the data's colours; the header counts the ops as the
     profile does; every bar 40 px wide or more has a label (in the whole view and zoomed to
     one op); the arrows that held their target back are drawn, the others not until "every
     dependency" is ticked, and then under the bars (an edge of every coloured bar 12 px wide
     or more keeps UNCOVERED_AT_LEAST of its colour); the bar with the most arrows, chosen,
     has all of them drawn; a synthetic wheel event zooms in around the pointer, a synthetic
     drag pans, the hook zooms to one op (drawn alone, nothing merged; the pointer over it
     chooses it and shows its tooltip) and resets, the + button halves the span; the axis is
     labelled again each time, always in the page's one unit, as are the range read-out, a
     bar's tooltip and the page's text; for 10,000 ops, bars narrower than a pixel are drawn
     merged in the whole view;
  2. ``--screenshot``: the PNG, decoded here (zlib only), shows the bars' colours (checked
     against the palette of src/profile/timeline_html.cpp) inside the canvas.

The demo's page also has the scenario's title (as the CLI printed it) and a note, its header
says as many ops as the CLI's "profile: N ops" line, its four randn bars are labelled, and most
of their arrows (to matmuls that ran long after them) are among those not drawn at first.

The page of 10,000 ops must stay under PAGE_BYTES_PER_OP bytes per op plus PAGE_FIXED_BYTES
(see there why).

Exit status: 0 passed, 1 failed, 77 skipped (no chromium: ctest's SKIP_RETURN_CODE).

Which browser: ``EVENTIDE_CHROMIUM`` (a path or a name on PATH), if set and not empty, is the
only one tried: if it is not an executable the check is skipped, saying so (set it to a
missing path to see the skip). Otherwise the first of chromium, chromium-browser,
google-chrome found on PATH. Chromium's complaints on stderr (no D-Bus here) are ignored.

Options: ``--save-png PATH`` keeps the screenshots, ``--save-html PATH`` keeps the pages (as the
profiler wrote them, without the measuring script), ``--cli PATH`` checks the demo's page too,
and ``--demo-png PATH`` keeps that page's screenshot (docs/images/timeline.png is made so).

Run: ``PYTHONPATH=build/python EVENTIDE_DEVICE=cpu /usr/bin/python3 tests/browser/check_timeline.py
--cli build/tools/eventide``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, Optional

SKIP = 77
BROWSER_TIMEOUT_S = 60
WINDOW_WIDTH = 1440  # the page's timeline is at most 1360 wide, the body's margins 2 x 20
BIG_OPS = 10_000
# The page of BIG_OPS ops holds a bar of 11 integers per op (about 45 bytes as JSON, times in
# ns) and an arrow of 4 per dependency; the script, styles and legend are fixed. 80 bytes per
# op leaves room for longer times and details, and still keeps 10,000 ops under 1 MB (the old
# page, one SVG element per op, took about 370 bytes per op: 1.4 MB at 3,750 ops).
PAGE_BYTES_PER_OP = 80
PAGE_FIXED_BYTES = 64 * 1024
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
PALETTE_SOURCE = Path(__file__).resolve().parents[2] / "src" / "profile" / "timeline_html.cpp"


class CheckFailed(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


# --- the browser -----------------------------------------------------------------------------

def find_chromium() -> tuple[Optional[str], str]:
    """(path, "") or (None, why not)."""
    override = os.environ.get("EVENTIDE_CHROMIUM", "")
    if override:
        path = shutil.which(override)
        if path is None:
            return None, (f"EVENTIDE_CHROMIUM={override} is not an executable (when set, it is "
                          "the only browser tried)")
        return path, ""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path, ""
    return None, "none of " + ", ".join(CHROMIUM_NAMES) + " is on PATH"


def run_chromium(chromium: str, profile_dir: Path, args: list) -> str:
    """Runs headless chromium with `args`; returns its stdout. Chromium starts helper
    processes: on a timeout the whole process group it leads is killed."""
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", "--no-default-browser-check", "--disable-extensions",
           "--force-device-scale-factor=1", "--force-color-profile=srgb",
           f"--user-data-dir={profile_dir}", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=BROWSER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise CheckFailed(f"chromium did not finish within {BROWSER_TIMEOUT_S} s: {' '.join(cmd)}")
    if proc.returncode != 0:
        tail = err.decode(errors="replace")[-3000:]
        raise CheckFailed(f"chromium exited with {proc.returncode}: {' '.join(cmd)}\n{tail}")
    return out.decode("utf-8", errors="replace")


# --- the workload ----------------------------------------------------------------------------

def profile_workload() -> Any:
    """Two streams of matmuls, the second waiting (on the device) for the first's result, the
    host waiting for the end, a callback: the page gets four rows and arrows between them."""
    import eventide as ev

    a = ev.randn(384, 384)
    b = ev.randn(384, 384)
    c = ev.randn(192, 192)
    for t in (a, b, c):
        t.wait()
    s1, s2 = ev.Stream("cpu"), ev.Stream("cpu")
    hold = ev.UserEvent()  # holds s1 until everything is enqueued: so s2's wait is a real one
    s1.wait(hold)
    callback_ran = threading.Event()
    with ev.profile() as prof:
        with ev.stream(s1):
            x = ev.matmul(a, b)
            x = ev.matmul(x, b)
            x = ev.add(x, a)
        x_ready = ev.Event()
        x_ready.record(x)
        with ev.stream(s2):  # less work than s1 before the wait: the wait is seen waiting
            y = ev.matmul(c, c)
            ev.mul(y, c)
            s2.wait(x_ready)
            z = ev.matmul(x, b)
        with ev.stream(s1):
            w = ev.matmul(a, a)
        done = ev.Event()
        done.record(z)
        done.add_callback(lambda: None)
        done.add_callback(callback_ran.set)  # the first one is in the profile once this runs
        hold.set()
        check(done.wait(timeout=30) is True, "the workload did not finish within 30 s")
        w.wait()
        check(callback_ran.wait(30), "the callback did not run within 30 s")
    return prof


def big_workload(n_ops: int) -> Any:
    """`n_ops` tiny adds on two streams, each waiting for the other every 500 adds (a wait on
    work already finished is not enqueued: so n_ops ops and at most n_ops / 500 waits): a page
    too dense to read without zooming, with arrows."""
    import eventide as ev

    a = ev.randn(1)
    a.wait()
    s1, s2 = ev.Stream("cpu"), ev.Stream("cpu")
    with ev.profile() as prof:
        last = {}
        for i in range(n_ops):
            s = s1 if i % 2 == 0 else s2
            other = s2 if s is s1 else s1
            if i % 500 == 499 and other in last:
                e = ev.Event()
                e.record(last[other])
                s.wait(e)
            with ev.stream(s):
                last[s] = ev.add(a, a)
        for t in last.values():
            check(t.wait(timeout=60) is True, "the 10,000 ops did not finish within 60 s")
    return prof


# --- the page --------------------------------------------------------------------------------

# Inserted first in <head>: every error the page's script throws, or logs as an error, is kept.
ERROR_CATCHER = """<script>
window.__eventideErrors = [];
window.addEventListener('error', function (e) { window.__eventideErrors.push(String(e.message)); });
(function () {
  var log = console.error;
  console.error = function () {
    window.__eventideErrors.push(Array.prototype.join.call(arguments, ' '));
    return log.apply(console, arguments);
  };
})();
</script>
"""

# Appended to <body>, after the page's own script ran: drives the view with the page's hook and
# with synthetic wheel and mouse events, reads the canvas' pixels, and writes what it found into
# a JSON element of the DOM (which --dump-dom prints).
MEASURE_SCRIPT = """
<script>
(function () {
  var out = {errors: window.__eventideErrors.slice(), steps: {}};
  try {
    var api = window.eventideTimeline;
    out.hook = !!api;
    var data = JSON.parse(document.getElementById('eventide-timeline-data').textContent);
    var canvas = document.getElementById('timeline-canvas');
    var r = canvas.getBoundingClientRect();
    out.canvas = {x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width, h: r.height,
                  pw: canvas.width, ph: canvas.height};
    out.body_drawn = document.body.dataset.drawn || null;
    out.title = document.title;
    out.h1 = document.querySelector('h1').textContent;
    var note = document.querySelector('p.note');
    out.note = note ? note.textContent : null;
    out.summary = document.querySelector('p.summary').textContent;
    var plot = api.stats().plot;
    var rgb = data.colours.map(function (c) {
      return [parseInt(c.substr(1, 2), 16), parseInt(c.substr(3, 2), 16), parseInt(c.substr(5, 2), 16)];
    });
    function near(img, i, c) {
      return Math.abs(img[i] - c[0]) <= 2 && Math.abs(img[i + 1] - c[1]) <= 2 && Math.abs(img[i + 2] - c[2]) <= 2;
    }
    function pixels() {
      var g = canvas.getContext('2d'), img = g.getImageData(0, 0, canvas.width, canvas.height).data;
      var counts = {};
      data.colours.forEach(function (c) { counts[c] = 0; });
      for (var i = 0; i < img.length; i += 4) {
        for (var k = 0; k < rgb.length; k++) {
          if (near(img, i, rgb[k])) { counts[data.colours[k]]++; break; }
        }
      }
      return counts;
    }
    // How much of each coloured bar 12 px wide or more the canvas shows in the bar's colour, in
    // a row of pixels 3 px inside its top and one 3 px inside its bottom (clear of its label):
    // what arrows drawn over the bars take away.
    function uncovered() {
      var g = canvas.getContext('2d'), dpr = canvas.width / r.width, rows = 0, sum = 0, worst = 1, worstBar = -1;
      api.marks().forEach(function (m) {
        var b = data.bars[m.bar];
        if (b[2] < 0) return;  // hatched: no one colour
        var x0 = Math.ceil(Math.max(m.x0, plot.x)) + 1, x1 = Math.floor(Math.min(m.x1, plot.x + plot.w)) - 1;
        if (x1 - x0 < 12) return;
        [m.y + 3, m.y + m.h - 4].forEach(function (yy) {
          var img = g.getImageData(Math.round(x0 * dpr), Math.round(yy * dpr), Math.round((x1 - x0) * dpr), 1).data;
          var same = 0, all = img.length / 4;
          for (var i = 0; i < img.length; i += 4) if (near(img, i, rgb[b[2]])) same++;
          rows++; sum += same / all;
          if (same / all < worst) { worst = same / all; worstBar = m.bar; }
        });
      });
      return {rows: rows, mean: rows ? sum / rows : 1, worst: worst, worst_bar: worstBar};
    }
    function step(name) {
      out.steps[name] = {stats: api.stats(), view: api.view(),
                         readout: document.getElementById('timeline-range').textContent};
    }
    step('first');
    out.pixels_first = pixels();
    out.marks_first = api.marks();
    out.uncovered_first = uncovered();
    // "every dependency": the arrows that held nothing back, drawn faint under the bars (the
    // checkbox's own handler); then off again.
    var box = document.getElementById('every-dependency');
    box.checked = true;
    box.dispatchEvent(new Event('change'));
    step('every');
    out.uncovered_every = uncovered();
    box.checked = false;
    box.dispatchEvent(new Event('change'));
    // The bar with the most arrows, chosen as the pointer does: all of its arrows drawn.
    var most = -1, count = {};
    data.arrows.forEach(function (a) { count[a[0]] = (count[a[0]] || 0) + 1; count[a[1]] = (count[a[1]] || 0) + 1; });
    Object.keys(count).forEach(function (k) { if (most < 0 || count[k] > count[most]) most = +k; });
    out.most_arrows = {bar: most, arrows: most < 0 ? 0 : count[most]};
    if (most >= 0) {
      api.select(most);
      step('selected');
      api.select(-1);
    }
    // The wheel, over the middle of the plot: zooms in around the pointer.
    var mid = {x: r.left + plot.x + plot.w / 2, y: r.top + 50};
    canvas.dispatchEvent(new WheelEvent('wheel', {deltaY: -400, deltaMode: 0, clientX: mid.x, clientY: mid.y,
                                                   bubbles: true, cancelable: true}));
    step('wheel');
    // A drag to the left: the view moves later in time.
    canvas.dispatchEvent(new MouseEvent('mousedown', {clientX: mid.x, clientY: mid.y, bubbles: true}));
    window.dispatchEvent(new MouseEvent('mousemove', {clientX: mid.x - 200, clientY: mid.y, bubbles: true}));
    window.dispatchEvent(new MouseEvent('mouseup', {clientX: mid.x - 200, clientY: mid.y, bubbles: true}));
    step('drag');
    // The hook: the first op alone (and a little around it), then its tooltip.
    var first = null, firstIndex = -1;
    data.bars.forEach(function (b, i) {
      if (data.kinds[b[1]] === 'op' && (first === null || b[4] < first[4])) { first = b; firstIndex = i; }
    });
    out.first_op_colour = data.colours[first[2]];
    var per = data.ns_per_unit, a = first[4] / per, d = Math.max(first[5] / per, 0.001);
    out.one_op_span = 3 * d;
    api.set_view(a - d, a + 2 * d);
    step('one_op');
    out.pixels_one_op = pixels();
    // The pointer over the op's own mark, where the page drew it.
    var mark = api.marks().filter(function (m) { return m.bar === firstIndex; })[0];
    out.one_op_mark = mark || null;
    if (mark) {
      var mx = (Math.max(mark.x0, plot.x) + Math.min(mark.x1, plot.x + plot.w)) / 2;
      canvas.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + mx, clientY: r.top + mark.y + mark.h / 2,
                                                        bubbles: true}));
    }
    var tip = document.getElementById('timeline-tip');
    out.tip = {hidden: tip.hidden, text: tip.textContent, lane: data.lanes[first[0]].key, bar: first, view: api.view(),
               hot: api.stats().hot, first_index: firstIndex};
    canvas.dispatchEvent(new MouseEvent('mouseleave', {bubbles: true}));
    api.reset();
    step('reset');
    document.getElementById('zoom-in').click();
    step('button_in');
  } catch (e) {
    out.errors.push('measuring: ' + e.message + ' ' + (e.stack || ''));
  }
  out.errors = out.errors.concat(window.__eventideErrors.slice(out.errors.length));
  var json = document.createElement('script');
  json.type = 'application/json';
  json.id = 'eventide-measured';
  json.textContent = JSON.stringify(out).replace(/</g, '\\\\u003c');
  document.body.appendChild(json);
})();
</script>
"""


def measured(dom: str) -> dict:
    m = re.search(r'<script type="application/json" id="eventide-measured">(.*?)</script>', dom, re.S)
    check(m is not None, "the measuring script left no result in the DOM (did it run?)")
    return json.loads(m.group(1))


def page_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="eventide-timeline-data">(.*?)</script>', html, re.S)
    check(m is not None, "the page has no data element")
    return json.loads(m.group(1))


def check_page(dom: str, html: str, prof: Any, what: str) -> dict:
    """What the measuring script found after chromium ran the page; returns it. `prof` (the
    Python profile the page was made from; None for the demo's page, made by the CLI) is what
    the page's bars and lanes are checked against."""
    data = page_data(html)
    m = measured(dom)
    check(not m["errors"], f"{what}: JavaScript errors: {m['errors']}")
    check(m["hook"], f"{what}: the page set no window.eventideTimeline")
    unit = data["unit"]
    check(unit in ("µs", "ms"), f"{what}: unit {unit!r}")
    if prof is not None:
        timed = [op for op in prof.ops if op["start_us"] is not None]
        kinds = [data["kinds"][b[1]] for b in data["bars"]]
        check(sum(k in ("op", "wait") for k in kinds) == len(timed),
              f"{what}: {len(kinds)} bars in the data for {len(timed)} ops with times")
        check(len(data["bars"]) == len(timed) + len(prof.host_waits) + len(prof.callbacks),
              f"{what}: bars for {len(timed)} ops, {len(prof.host_waits)} host waits, {len(prof.callbacks)} callbacks")
        streams = {op["stream"] for op in prof.ops}
        check({l["key"] for l in data["lanes"] if l["kind"] == "stream"} == streams, f"{what}: a stream has no lane")
        # The header counts the ops as the profile does (waits and markers among them).
        check(m["summary"].startswith(f"{len(prof.ops)} ops"), f"{what}: the header says {m['summary']!r} "
              f"for a profile of {len(prof.ops)} ops")

    steps = m["steps"]
    first, wheel, drag, one, reset, button = (steps[k] for k in ("first", "wheel", "drag", "one_op", "reset", "button_in"))
    check(int(m["body_drawn"] or 0) > 0 and first["stats"]["marks"] > 0, f"{what}: nothing drawn: {first['stats']}")
    check(first["stats"]["shown"] == len(data["bars"]), f"{what}: the whole view shows {first['stats']['shown']} "
          f"of {len(data['bars'])} bars")
    painted = sum(m["pixels_first"].values())
    check(painted > 0, f"{what}: no pixel of the bars' colours on the canvas: {m['pixels_first']}")
    check_labels_and_arrows(m, data, what)
    # A colour with a bar 3 px wide or more in the whole view is on the canvas (narrower bars
    # may be merged into a neighbour of another colour).
    plot_w = first["stats"]["plot"]["w"]
    span_ns = max(data["t1"] - data["t0"], 20)
    wide = {data["colours"][b[2]] for b in data["bars"] if b[2] >= 0 and b[5] / span_ns * plot_w >= 3}
    for colour in wide:
        check(m["pixels_first"][colour] > 0, f"{what}: colour {colour} has a bar 3 px wide or more, "
              "but no pixel on the canvas")
    one_colour = m["first_op_colour"]
    check(m["pixels_one_op"][one_colour] > 1000, f"{what}: zoomed to the first op, its colour {one_colour} "
          f"has {m['pixels_one_op'][one_colour]} pixels on the canvas")
    # Zoom: the wheel narrowed the view around the pointer, the drag moved it, the hook and
    # the button too; the axis was labelled again each time, always in the page's unit.
    span = lambda s: s["view"]["end"] - s["view"]["start"]
    check(span(wheel) < 0.7 * span(first), f"{what}: the wheel did not zoom in: {first['view']} -> {wheel['view']}")
    check(wheel["view"]["start"] > first["view"]["start"] and wheel["view"]["end"] < first["view"]["end"],
          f"{what}: the wheel's view {wheel['view']} is not inside {first['view']}")
    check(drag["view"]["start"] > wheel["view"]["start"] and abs(span(drag) - span(wheel)) < 1e-6 * span(first) + 1e-9,
          f"{what}: the drag did not pan later: {wheel['view']} -> {drag['view']}")
    want = min(m["one_op_span"], span(first))
    check(abs(span(one) - want) <= 1e-6 * span(first) + 1e-9,
          f"{what}: set_view to the first op and its neighbourhood ({want} {unit}) gave {one['view']}")
    check(reset["view"] == first["view"], f"{what}: reset gave {reset['view']}, not {first['view']}")
    check(abs(span(button) - span(first) / 2) < 1e-6 * span(first), f"{what}: + gave {button['view']}")
    for name, s in steps.items():
        ticks = s["stats"]["ticks"]
        check(len(ticks) >= 2, f"{what}: {name}: ticks {ticks}")
        check(all(re.fullmatch(r"-?\d+(\.\d+)? " + unit, t) for t in ticks), f"{what}: {name}: ticks {ticks} not all in {unit}")
        values = [float(t.split()[0]) for t in ticks]
        check(values == sorted(values) and len(set(values)) == len(values), f"{what}: {name}: ticks {ticks}")
        check(s["stats"]["unit"] == unit, f"{what}: {name}: unit {s['stats']['unit']}")
        written = re.findall(r"\d (µs|ms|ns|s)\b", s["readout"])
        check(written and set(written) == {unit}, f"{what}: {name}: the range reads {s['readout']!r}")
    check(ticks_differ(first, wheel) and ticks_differ(wheel, one), f"{what}: the axis was not labelled again on zoom")
    # Zoomed in to one op: it is drawn as a bar of its own, no bar merged.
    check(one["stats"]["merged"] == 0, f"{what}: zoomed to one op, {one['stats']['merged']} bars still merged")
    tip = m["tip"]
    check(not tip["hidden"] and tip["lane"] in tip["text"], f"{what}: no tooltip over the first op: {tip}")
    written = re.findall(r"\d (µs|ms|ns|s)\b", tip["text"])
    check(written and set(written) == {unit}, f"{what}: the tooltip's times are not all in {unit}: {tip['text']!r}")
    # Everything the page writes as text outside its data and script is in the same unit.
    text = re.sub(r"<script.*?</script>", "", html, flags=re.S)
    written = re.findall(r"\d (µs|ms|ns|s)\b", re.sub(r"<[^>]+>", " ", text))
    check(written and set(written) == {unit}, f"{what}: the page's text has times in {sorted(set(written))}")
    return m


# Of a coloured bar 12 px wide or more, at least this much of a row of pixels near its top or
# bottom edge is the bar's own colour: arrows over the bars are thin and few (an arrow crossing
# a 12 px bar takes 2 of its 10 px), the others are under them.
UNCOVERED_AT_LEAST = 0.75


def check_labels_and_arrows(m: dict, data: dict, what: str) -> None:
    """Every bar wide enough has a label; the arrows that held nothing back are not drawn
    until asked for, and then under the bars; those that held something back, and all of a
    chosen bar's, are."""
    steps = m["steps"]
    first, every, one = steps["first"]["stats"], steps["every"]["stats"], steps["one_op"]["stats"]
    for name, st in (("the whole view", first), ("one op", one)):
        check(not st["unlabelled"], f"{what}: {name}: bars {st['unlabelled']} are {st['labelled_w']} px wide or "
              f"more and have no label")
    check(one["labelled"] > 0, f"{what}: zoomed to one op, no bar has a label")
    held = sum(a[4] for a in data["arrows"])
    quiet = len(data["arrows"]) - held
    if first["arrows_hidden"] == 0:
        check(first["arrows_held"] == held and first["arrows_faint"] == 0 and first["arrows_quiet"] == quiet,
              f"{what}: {held} arrows held something back and {quiet} did not, the whole view drew {first}")
        check(every["arrows_faint"] == quiet and every["arrows_held"] == held and every["every_dependency"],
              f"{what}: with every dependency ticked, {every['arrows_faint']} faint arrows of {quiet}")
    for name in ("uncovered_first", "uncovered_every"):
        u = m[name]
        check(u["worst"] >= UNCOVERED_AT_LEAST, f"{what}: {name}: bar {u['worst_bar']} shows only "
              f"{u['worst']:.0%} of its colour along an edge (arrows over it?): {u}")
    most = m["most_arrows"]
    if most["bar"] >= 0:
        sel = steps["selected"]["stats"]
        check(sel["hot"] == most["bar"] and sel["arrows_hot"] == most["arrows"],
              f"{what}: bar {most['bar']} chosen, {sel['arrows_hot']} of its {most['arrows']} arrows drawn: {sel}")
    tip = m["tip"]
    check(tip["hot"] == tip["first_index"], f"{what}: the pointer over the first op did not choose it: {tip}")


def ticks_differ(a: dict, b: dict) -> bool:
    return a["stats"]["ticks"] != b["stats"]["ticks"]


def css_rgb(hex_colour: str) -> str:
    r, g, b = rgb(hex_colour)
    return f"rgb({r}, {g}, {b})"


def rgb(hex_colour: str) -> tuple:
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))


# --- the picture -----------------------------------------------------------------------------

def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, pixels row after row) of an 8-bit RGB or RGBA,
    non-interlaced PNG: what chromium's screenshots are."""
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        check(zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0],
              f"PNG chunk {kind!r}: bad CRC")
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    check(header is not None, "PNG without IHDR")
    width, height, depth, colour, _, _, interlace = header
    check(depth == 8 and colour in (2, 6) and interlace == 0,
          f"PNG of bit depth {depth}, colour type {colour}, interlace {interlace}: only 8-bit RGB(A), "
          "non-interlaced, is decoded here")
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    check(len(raw) == height * (stride + 1), "PNG data of the wrong size")
    out = bytearray(height * stride)
    prior = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:  # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:  # Up
            line = bytearray((u + p) & 0xFF for u, p in zip(line, prior))
        elif kind == 3:  # Average
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prior[i]) >> 1)) & 0xFF
        elif kind == 4:  # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prior[i]
                c = prior[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        else:
            check(kind == 0, f"PNG row {y}: unknown filter {kind}")
        out[y * stride:(y + 1) * stride] = line
        prior = line
    return width, height, bpp, bytes(out)


class Picture:
    def __init__(self, png: bytes) -> None:
        self.width, self.height, self.bpp, self.pixels = decode_png(png)
        px = self.pixels
        self.histogram = Counter(zip(px[0::self.bpp], px[1::self.bpp], px[2::self.bpp]))

    def at(self, x: int, y: int) -> tuple:
        i = (y * self.width + x) * self.bpp
        return tuple(self.pixels[i:i + 3])

    def count_all(self, colour: tuple, tolerance: int = 2) -> int:
        return sum(n for p, n in self.histogram.items()
                   if all(abs(p[k] - colour[k]) <= tolerance for k in range(3)))

    def count(self, colour: tuple, x0: int, y0: int, x1: Optional[int] = None,
              y1: Optional[int] = None, tolerance: int = 2) -> int:
        x1 = self.width if x1 is None else min(x1, self.width)
        y1 = self.height if y1 is None else min(y1, self.height)
        n = 0
        for y in range(max(y0, 0), y1):
            for x in range(max(x0, 0), x1):
                p = self.at(x, y)
                if all(abs(p[k] - colour[k]) <= tolerance for k in range(3)):
                    n += 1
        return n


def palette_from_source() -> Optional[set]:
    """The bar colours timeline_html.cpp draws with (None if the source is not here)."""
    if not PALETTE_SOURCE.exists():
        return None
    text = PALETTE_SOURCE.read_text(encoding="utf-8")
    m = re.search(r"kPalette\s*=\s*\{(.*?)\};", text, re.S)
    check(m is not None, f"no kPalette in {PALETTE_SOURCE}")
    colours = set(re.findall(r'"(#[0-9a-fA-F]{6})"', m.group(1)))
    # The markers', host waits', callbacks' and ranges' bars.
    colours |= set(re.findall(r'k(?:Marker|HostWait|Callback|Range)Colour = "(#[0-9a-fA-F]{6})"', text))
    return {c.lower() for c in colours}


def check_picture(png: bytes, layout: dict, colours: list) -> dict:
    """The bars' colours are in the screenshot, inside the canvas; returns the pixel counts."""
    pic = Picture(png)
    c = layout["canvas"]
    check(pic.at(2, 2) == (255, 255, 255), f"the page's corner is {pic.at(2, 2)}, not white")
    palette = palette_from_source()
    if palette is not None:
        unknown = {x.lower() for x in colours} - palette
        check(not unknown, f"bar colours {sorted(unknown)} are not timeline_html.cpp's {sorted(palette)}")
    x0, y0 = int(c["x"]), int(c["y"])
    x1, y1 = int(c["x"] + c["w"]), int(c["y"] + c["h"])
    check(pic.height >= y1, f"the screenshot ({pic.width}x{pic.height}) does not reach the canvas' bottom {y1}")
    counts = {}
    for colour in colours:
        if layout["pixels_first"][colour] == 0:
            continue  # only in bars narrower than a pixel, merged into another colour
        inside = pic.count(rgb(colour), x0, y0, x1, y1)
        check(inside >= 0.3 * layout["pixels_first"][colour] and inside > 0,
              f"{colour}: {inside} pixels in the screenshot's canvas, the canvas itself has "
              f"{layout['pixels_first'][colour]}")
        counts[colour] = inside
    return counts


# --- main ------------------------------------------------------------------------------------

def check_one(chromium: str, tmp_dir: Path, name: str, prof: Any, args: argparse.Namespace,
              size_bound: Optional[int], page: Optional[Path] = None) -> dict:
    """Writes `prof`'s page (or takes `page`, written already: then `prof` is None), has
    chromium run it and screenshot it, checks both; returns what the page's script measured
    and the screenshot."""
    if page is None:
        page = tmp_dir / f"{name}.html"
        prof.export_timeline(page)
    html = page.read_text(encoding="utf-8")
    size = len(html.encode("utf-8"))
    n_ops = len(prof.ops) if prof is not None else len(page_data(html)["bars"])
    print(f"{name}: {n_ops} {'ops' if prof is not None else 'bars'}, a page of {size:,} bytes")
    if size_bound is not None:
        check(size <= size_bound, f"{name}: the page of {n_ops} ops is {size:,} bytes, over {size_bound:,}")
    check("<head>" in html and "</body>" in html, "the page has no <head> or </body>")
    probe = tmp_dir / f"{name}-measure.html"
    probe.write_text(html.replace("<head>", "<head>\n" + ERROR_CATCHER, 1)
                     .replace("</body>", MEASURE_SCRIPT + "</body>", 1), encoding="utf-8")
    if args.save_html:
        shutil.copyfile(page, args.save_html.with_name(f"{args.save_html.stem}-{name}{args.save_html.suffix}"))

    dom = run_chromium(chromium, tmp_dir / f"profile-dom-{name}",
                       [f"--window-size={WINDOW_WIDTH},900", "--dump-dom", probe.as_uri()])
    m = check_page(dom, html, prof, name)
    st = m["steps"]
    f = st["first"]["stats"]
    print(f"{name}: first view {f['shown']} bars as {f['marks']} marks ({f['merged']} merged, {f['labelled']} "
          f"labelled), unit {f['unit']}; arrows {f['arrows_held']} held back, {f['arrows_quiet']} others not drawn "
          f"({st['every']['stats']['arrows_faint']} faint under the bars with every dependency); bars' edges "
          f"{m['uncovered_first']['mean']:.0%} their colour (worst {m['uncovered_first']['worst']:.0%}); wheel "
          f"{st['first']['view']} -> {st['wheel']['view']}; one op: {st['one_op']['stats']['ticks']}")
    if name == "big":
        check(f["merged"] > 0 and f["marks"] < f["shown"],
              f"{name}: the whole view of {n_ops} ops merged no bar narrower than a pixel: {f}")

    data = page_data(html)
    height = int(m["canvas"]["y"] + m["canvas"]["h"]) + 16
    shot = tmp_dir / f"{name}.png"
    run_chromium(chromium, tmp_dir / f"profile-shot-{name}",
                 [f"--window-size={WINDOW_WIDTH},{height}", f"--screenshot={shot}", page.as_uri()])
    check(shot.exists(), "chromium wrote no screenshot")
    png = shot.read_bytes()
    if args.save_png:
        shutil.copyfile(shot, args.save_png.with_name(f"{args.save_png.stem}-{name}{args.save_png.suffix}"))
    counts = check_picture(png, m, data["colours"])
    print(f"{name}: picture: " + ", ".join(f"{c} {n} px" for c, n in sorted(counts.items())))
    m["png"] = png
    return m


# The demo's scenario whose page the README shows (docs/images/timeline.png).
DEMO_SCENARIO = 16


def check_demo(chromium: str, tmp_dir: Path, cli: str, args: argparse.Namespace) -> None:
    """`eventide demo --only 16 --timeline PAGE`: the page has the scenario's title and a note,
    counts the ops as the CLI does, and passes every check of a page."""
    page = tmp_dir / "demo.html"
    cmd = [cli, "demo", "--device", "cpu", "--only", str(DEMO_SCENARIO), "--timeline", str(page)]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{' '.join(cmd)} did not finish within {BROWSER_TIMEOUT_S} s")
    check(run.returncode == 0,
          f"{' '.join(cmd)} exited with {run.returncode}:\n{run.stdout[-3000:]}{run.stderr[-2000:]}")
    title = re.search(rf"^\[{DEMO_SCENARIO}/\d+\] (.*?)  \(", run.stdout, re.M)
    ops = re.search(r"^profile: (\d+) ops", run.stdout, re.M)
    check(title is not None and ops is not None, f"the demo printed no scenario title or profile line:\n{run.stdout}")
    m = check_one(chromium, tmp_dir, "demo", None, args, None, page=page)
    check(m["h1"] == f"Scenario {DEMO_SCENARIO}: {title.group(1)} (cpu)", f"demo: the page's heading is {m['h1']!r}")
    check(m["title"].startswith(m["h1"]), f"demo: the page's <title> is {m['title']!r}")
    check(bool(m["note"]) and len(m["note"]) > 40, f"demo: the page's note is {m['note']!r}")
    check(m["summary"].startswith(f"{ops.group(1)} ops"),
          f"demo: the CLI said {ops.group(0)!r}, the page's header {m['summary']!r}")
    # Scenario 16 makes its inputs first, and the matmuls of streams 1 and 2 read them: their
    # arrows (from the randn bars) held nothing back, and are not drawn until asked for.
    data = page_data(page.read_text(encoding="utf-8"))
    randn = {i for i, b in enumerate(data["bars"]) if b[3] >= 0 and data["texts"][b[3]] == "randn"}
    from_randn = [a for a in data["arrows"] if a[0] in randn]
    check(len(randn) == 4 and sum(1 for a in from_randn if not a[4]) > len(from_randn) // 2,
          f"demo: {len(randn)} randn bars, arrows from them {from_randn}")
    labelled = {mk["bar"]: mk["text"] for mk in m["marks_first"]}
    check(all(labelled.get(i) for i in randn),
          f"demo: a randn bar without a label: {[labelled.get(i) for i in sorted(randn)]}")
    if args.demo_png:
        args.demo_png.write_bytes(m["png"])
        print(f"demo: wrote {args.demo_png}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--save-png", type=Path, help="keep the screenshots here (-small, -big added to the name)")
    parser.add_argument("--save-html", type=Path, help="keep the pages here (-small, -big added to the name)")
    parser.add_argument("--cli", help="the eventide command: its demo's page (scenario 16) is checked too")
    parser.add_argument("--demo-png", type=Path, help="keep the demo page's screenshot here (with --cli; how "
                        "the README's docs/images/timeline.png is made)")
    args = parser.parse_args()

    chromium, why = find_chromium()
    if chromium is None:
        print("SKIP: no chromium found (install Debian's chromium: make deps installs it when "
              "run as root)")
        print(f"      {why}")
        return SKIP

    with tempfile.TemporaryDirectory(prefix="eventide-browser-") as tmp:
        tmp_dir = Path(tmp)
        small = profile_workload()
        print(f"small profile: {small!r}")
        check_one(chromium, tmp_dir, "small", small, args, None)
        big = big_workload(BIG_OPS)
        adds = sum(op["name"] == "add" for op in big.ops)
        check(adds == BIG_OPS and len(big.ops) <= BIG_OPS + BIG_OPS // 500,
              f"the big profile has {adds} adds and {len(big.ops)} ops, not {BIG_OPS} adds")
        check_one(chromium, tmp_dir, "big", big, args, PAGE_BYTES_PER_OP * len(big.ops) + PAGE_FIXED_BYTES)
        if args.cli:
            check_demo(chromium, tmp_dir, args.cli, args)
    demo = f" and of the demo's scenario {DEMO_SCENARIO}" if args.cli else ""
    print(f"PASS: the timeline pages of {len(small.ops)} and {BIG_OPS} ops{demo}, drawn by {chromium}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CheckFailed as failure:
        print(f"FAIL: {failure}", file=sys.stderr)
        sys.exit(1)
