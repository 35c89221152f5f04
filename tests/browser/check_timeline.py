"""The profiler's timeline page in a real browser: headless chromium lays it out and draws it.

Runs a small real workload with the eventide package (two streams of matmuls joined by an
event wait, a host wait, a callback), writes the timeline page, and checks it twice:

  1. ``--dump-dom`` of the page with a measuring script appended (it only reads the layout
     and writes what it found into a JSON element): a bar per op with times, each drawn with a
     non-zero width inside its stream's row, a row per stream, labels in µs;
  2. ``--screenshot``: the PNG, decoded here (zlib only), has the bars' colours (read from the
     page, and checked against the palette of src/profile/timeline_html.cpp) in about the
     number of pixels the bars cover, and at the places the layout put them.

Exit status: 0 passed, 1 failed, 77 skipped (no chromium: ctest's SKIP_RETURN_CODE).

Which browser: ``EVENTIDE_CHROMIUM`` (a path or a name on PATH), if set and not empty, is the
only one tried: if it is not an executable the check is skipped, saying so (set it to a
missing path to see the skip). Otherwise the first of chromium, chromium-browser,
google-chrome found on PATH. Chromium's complaints on stderr (no D-Bus here) are ignored.

Options: ``--save-png PATH`` keeps the screenshot, ``--save-html PATH`` keeps the page (as the
profiler wrote it, without the measuring script).

Run: ``PYTHONPATH=build/python EVENTIDE_DEVICE=cpu /usr/bin/python3 tests/browser/check_timeline.py``
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
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Optional

SKIP = 77
BROWSER_TIMEOUT_S = 60
WINDOW_WIDTH = 1440  # the page's SVG is 1360 wide, the body's margins 2 x 20: no scaling
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
PALETTE_SOURCE = Path(__file__).resolve().parents[2] / "src" / "profile" / "timeline_html.cpp"
BAR_CLASSES = ("op", "wait", "hostwait", "callback")


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


# --- the page --------------------------------------------------------------------------------

MEASURE_SCRIPT = """
<script>
(function () {
  function box(el) {
    const r = el.getBoundingClientRect();
    return {x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width, h: r.height};
  }
  const out = {bars: [], rows: [], labels: [], ticks: []};
  for (const el of document.querySelectorAll('rect.op, rect.wait, rect.hostwait, rect.callback')) {
    out.bars.push({cls: el.getAttribute('class'), id: el.dataset.id || null,
                   name: el.dataset.name || null, stream: el.dataset.stream || null,
                   thread: el.dataset.thread || null, fill: el.getAttribute('fill'),
                   computed_fill: getComputedStyle(el).fill, box: box(el)});
  }
  for (const el of document.querySelectorAll('g.row')) {
    out.rows.push({kind: el.dataset.kind, key: el.dataset.stream || el.dataset.thread,
                   title: el.querySelector('.row-title').textContent,
                   band: box(el.querySelector('rect.band'))});
  }
  for (const el of document.querySelectorAll('text.bar-label')) {
    // A label follows its bar.
    out.labels.push({text: el.textContent, box: box(el), bar: box(el.previousElementSibling)});
  }
  for (const el of document.querySelectorAll('text.tick')) out.ticks.push(el.textContent);
  out.svg = box(document.querySelector('svg.timeline'));
  // The content's height, not the window's (a short page still fills the window).
  const body = document.body.getBoundingClientRect();
  out.page = {w: document.documentElement.scrollWidth,
              h: Math.ceil(body.bottom + window.scrollY + parseFloat(getComputedStyle(document.body).marginBottom)),
              viewport: {w: window.innerWidth, h: window.innerHeight}};
  const json = document.createElement('script');
  json.type = 'application/json';
  json.id = 'eventide-measured';
  json.textContent = JSON.stringify(out).replace(/</g, '\\\\u003c');
  document.body.appendChild(json);
})();
</script>
"""


class DomBars(HTMLParser):
    """The bars, rows and label texts of the DOM chromium dumped."""

    def __init__(self) -> None:
        super().__init__()
        self.bars: list = []
        self.rows: list = []
        self.labels: list = []
        self._text: Optional[list] = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        classes = set(a.get("class", "").split())
        if tag == "rect" and classes & set(BAR_CLASSES):
            self.bars.append(a)
        elif tag == "g" and "row" in classes:
            self.rows.append(a)
        elif tag == "text" and "bar-label" in classes:
            self._text = []

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "text" and self._text is not None:
            self.labels.append("".join(self._text))
            self._text = None

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)


def measured(dom: str) -> dict:
    m = re.search(r'<script type="application/json" id="eventide-measured">(.*?)</script>', dom, re.S)
    check(m is not None, "the measuring script left no result in the DOM (did it run?)")
    return json.loads(m.group(1))


def check_dom(dom: str, prof: Any) -> dict:
    """The DOM after chromium ran the page; returns the measured layout."""
    timed = [op for op in prof.ops if op["start_us"] is not None]
    streams = {op["stream"] for op in prof.ops}
    parsed = DomBars()
    parsed.feed(dom)
    parsed.close()
    ops_in_dom = [b for b in parsed.bars if set(b["class"].split()) & {"op", "wait"}]
    check(len(ops_in_dom) == len(timed),
          f"{len(ops_in_dom)} op bars in the DOM for {len(timed)} ops with times")
    check(sorted(int(b["data-id"]) for b in ops_in_dom) == sorted(op["id"] for op in timed),
          "the bars' data-id are not the ops' ids")
    check(all(float(b["width"]) > 0 for b in parsed.bars), "a bar has no width in the DOM")
    dom_streams = {r["data-stream"] for r in parsed.rows if r.get("data-kind") == "stream"}
    check(dom_streams == streams, f"stream rows {sorted(dom_streams)}, ops on {sorted(streams)}")
    check(parsed.labels, "no bar has a label")
    for label in parsed.labels:
        check(re.fullmatch(r"(\w+ )?\d+(\.\d+)? µs", label) is not None, f"bar label {label!r} is not in µs")

    layout = measured(dom)
    bars = layout["bars"]
    check(len(bars) == len(parsed.bars), "the page script saw another number of bars than the DOM has")
    check(len(bars) == len(timed) + len(prof.host_waits) + len(prof.callbacks),
          f"{len(bars)} bars drawn for {len(timed)} ops, {len(prof.host_waits)} host waits and "
          f"{len(prof.callbacks)} callbacks")
    rows = {r["key"]: r for r in layout["rows"]}
    check({k for k, r in rows.items() if r["kind"] == "stream"} == streams, "a stream has no row")
    svg = layout["svg"]
    check(abs(svg["w"] - 1360) < 1, f"the SVG is drawn {svg['w']} px wide, not at its 1360 px")
    for bar in bars:
        b = bar["box"]
        what = f"bar {bar['cls']} {bar['name'] or bar['thread']}"
        check(b["w"] > 0 and b["h"] > 0, f"{what} is drawn with no area: {b}")
        check(svg["x"] - 1 <= b["x"] and b["x"] + b["w"] <= svg["x"] + svg["w"] + 1,
              f"{what} is outside the SVG: {b}, SVG {svg}")
        # Rows are keyed by stream; host rows by "host waits <thread>", or the callback thread.
        kind = bar["cls"].split()[0]
        key = (bar["stream"] if kind in ("op", "wait") else
               f"host waits {bar['thread']}" if kind == "hostwait" else bar["thread"])
        row = rows.get(key)
        check(row is not None, f"{what} has no row {key!r}")
        band = row["band"]
        check(band["y"] <= b["y"] and b["y"] + b["h"] <= band["y"] + band["h"],
              f"{what} is not inside its row: {b}, row {band}")
        if bar["fill"].startswith("#"):
            check(bar["computed_fill"] == css_rgb(bar["fill"]),
                  f"{what}: fill {bar['fill']} is drawn as {bar['computed_fill']}")
    # Labels are written only where the page's estimate of their width says they fit: in the
    # browser's font they must fit too.
    check(len(layout["labels"]) == len(parsed.labels), "the page script saw another number of labels")
    for label in layout["labels"]:
        t, b = label["box"], label["bar"]
        check(b["x"] - 0.5 <= t["x"] and t["x"] + t["w"] <= b["x"] + b["w"] + 0.5,
              f"label {label['text']!r} ({t['w']:.1f} px wide) overflows its bar ({b['w']:.1f} px)")
    check(layout["ticks"] and all(re.fullmatch(r"\d+(\.\d+)? (µs|ms|s)", t) for t in layout["ticks"]),
          f"axis ticks {layout['ticks']}")
    return layout


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
    # The host waits' and callbacks' bars: the literals passed to bar(..., "hostwait"/"callback").
    colours |= set(re.findall(r'bar\(s, "(?:hostwait|callback)",[^;]*?"(#[0-9a-fA-F]{6})"', text, re.S))
    return {c.lower() for c in colours}


def check_picture(png: bytes, layout: dict) -> dict:
    """The bars' colours are in the picture, where the layout put the bars; returns the pixel
    counts per colour."""
    pic = Picture(png)
    check(pic.height >= layout["page"]["h"] - 1, f"the screenshot ({pic.width}x{pic.height}) is "
          f"shorter than the page ({layout['page']['w']}x{layout['page']['h']})")
    check(pic.at(2, 2) == (255, 255, 255), f"the page's corner is {pic.at(2, 2)}, not white")
    palette = palette_from_source()
    by_colour: dict = {}
    for bar in layout["bars"]:
        if bar["fill"].startswith("#"):
            by_colour.setdefault(bar["fill"].lower(), []).append(bar)
    check(by_colour, "no bar has a plain colour")
    if palette is not None:
        unknown = set(by_colour) - palette
        check(not unknown, f"bar colours {sorted(unknown)} are not timeline_html.cpp's {sorted(palette)}")
    counts = {}
    for colour, bars in by_colour.items():
        want = rgb(colour)
        # The inside of each bar (its 0.5 px outline and rounded corners aside); labels cover
        # part of it.
        inside = 0
        for bar in bars:
            b = bar["box"]
            w, h = max(int(b["w"]) - 2, 0), max(int(b["h"]) - 2, 0)
            inside += w * h
            if w >= 4:
                x0, y0 = int(b["x"]) + 1, int(b["y"]) + 1
                got = pic.count(want, x0, y0, x0 + w, y0 + h)
                check(got >= 0.3 * w * h, f"bar {bar['name'] or bar['cls']} at {b}: only {got} of its "
                      f"{w * h} pixels are {colour}")
        # The legend's and the totals table's swatches (14 x 14) use the op colours too.
        swatches = 2 * 14 * 14
        got = pic.count_all(want)
        check(got >= 0.5 * inside, f"{colour}: {got} pixels, the bars' insides have {inside}")
        check(got <= 1.1 * sum(b["box"]["w"] * b["box"]["h"] for b in bars) + swatches + 50,
              f"{colour}: {got} pixels, more than its bars and swatches cover")
        counts[colour] = got
    # Waits are hatched: stripes of the pattern's two greys (timeline_html.cpp's #hatch) fill
    # most of the bar (its label aside).
    for bar in layout["bars"]:
        b = bar["box"]
        if bar["cls"].split()[0] != "wait" or b["w"] < 12:
            continue
        area = (int(b["x"]) + 1, int(b["y"]) + 1, int(b["x"] + b["w"]) - 1, int(b["y"] + b["h"]) - 1)
        inside = (area[2] - area[0]) * (area[3] - area[1])
        # The dark stripes are thin diagonals: smoothed, so a wider tolerance.
        light, dark = pic.count(rgb("#e4e7eb"), *area), pic.count(rgb("#9aa5b1"), *area, tolerance=24)
        check(light >= 0.25 * inside and dark >= 0.04 * inside,
              f"the wait at {b} is not hatched: of its {inside} pixels {light} are #e4e7eb and "
              f"{dark} about #9aa5b1")
        counts[f"wait {bar['id']}: #e4e7eb"] = light
        counts[f"wait {bar['id']}: #9aa5b1"] = dark
    return counts


# --- main ------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--save-png", type=Path, help="keep the screenshot here")
    parser.add_argument("--save-html", type=Path, help="keep the timeline page here")
    args = parser.parse_args()

    chromium, why = find_chromium()
    if chromium is None:
        print("SKIP: no chromium found (install Debian's chromium: make deps installs it when "
              "run as root)")
        print(f"      {why}")
        return SKIP

    prof = profile_workload()
    print(f"profile: {prof!r}")
    with tempfile.TemporaryDirectory(prefix="eventide-browser-") as tmp:
        tmp_dir = Path(tmp)
        page = tmp_dir / "timeline.html"
        prof.export_timeline(page)
        html = page.read_text(encoding="utf-8")
        check("</body>" in html, "the page has no </body>")
        probe = tmp_dir / "measure.html"
        probe.write_text(html.replace("</body>", MEASURE_SCRIPT + "</body>", 1), encoding="utf-8")
        if args.save_html:
            shutil.copyfile(page, args.save_html)

        dom = run_chromium(chromium, tmp_dir / "profile-dom",
                           [f"--window-size={WINDOW_WIDTH},900", "--dump-dom", probe.as_uri()])
        layout = check_dom(dom, prof)
        print(f"DOM: {len(layout['bars'])} bars on {len(layout['rows'])} rows, "
              f"page {layout['page']['w']}x{layout['page']['h']} px")

        height = int(layout["page"]["h"]) + 8
        shot = tmp_dir / "timeline.png"
        run_chromium(chromium, tmp_dir / "profile-shot",
                     [f"--window-size={WINDOW_WIDTH},{height}", f"--screenshot={shot}", page.as_uri()])
        check(shot.exists(), "chromium wrote no screenshot")
        png = shot.read_bytes()
        if args.save_png:
            shutil.copyfile(shot, args.save_png)
        counts = check_picture(png, layout)
        print("picture: " + ", ".join(f"{c} {n} px" for c, n in sorted(counts.items())))
    print(f"PASS: the timeline page of {len(prof.ops)} ops, drawn by {chromium}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CheckFailed as failure:
        print(f"FAIL: {failure}", file=sys.stderr)
        sys.exit(1)
