// Profile::timeline_html: one self-contained page (no script, font or style from elsewhere)
// with the profile drawn on a canvas by a small script of its own, zoomable and pannable.
//
// The page holds the profile as compact data, not as one element per op (a page of 10,000
// ops stays well under a megabyte and its bars stay apart when zoomed in):
//
//   <script type="application/json" id="eventide-timeline-data"> {
//     "unit": "µs" | "ms", "ns_per_unit": 1000 | 1000000,   one unit for the whole page
//     "t0", "t1":  the range drawn at first, ns from the profile's start
//     "texts":     a table of strings (labels, stream names, details, errors), by index
//     "colours":   the bars' fills, by index (-1 in a bar: the hatched wait pattern)
//     "kinds":     the bar kinds, by index: op, wait, hostwait, callback, range
//     "lanes":     [{"kind": "stream" | "host" | "range", "key", "title", "sub", "group"}], top to
//                  bottom
//     "bars":      [lane, kind, colour, label, start_ns, dur_ns, id, seq, detail, error, flags]
//                  (label, detail, error: indices into texts, -1 for none; flags: kFailed...)
//     "arrows":    [from bar, to bar, enters at its end (0/1), to the host (0/1)]
//   }
//
// A lane is a row of bars; its kind says what it holds. A lane of a new kind is a new entry in
// "lanes" with its bars in "bars" under a new entry of "kinds": the script draws any lane and
// any bar kind the same way, a bar in its colour (or hatched).
//
//   rows     a lane per stream (grouped by device), then one per host thread that waited and
//            per callback thread, then one per user-range lane (layout.hpp's RangeLane: a
//            thread's ranges at one nesting depth);
//   bars     ops at their times (a colour per op name, the name and duration written on them
//            where they fit), waits hatched, host waits, callbacks and user ranges (their
//            name on them); bars narrower than a
//            pixel are drawn merged into one per pixel run (the tooltip says how many);
//   arrows   from an op's end to what waited for it, with arrowheads;
//   axis     above and below, in the page's unit, re-labelled as the view zooms and pans;
//   tooltip  on hover, every figure of the bar, in the page's unit.
//
// Zoom: the mouse wheel (around the pointer), the + and − buttons or keys; pan: drag, or the
// arrow keys; "whole profile" resets. `window.eventideTimeline` lets a test or a console drive
// the view (view, set_view, zoom, pan, reset) and read what was drawn (stats).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <unordered_map>

#include "eventide/runtime.hpp"
#include "profile/json.hpp"
#include "profile/layout.hpp"

namespace eventide {

namespace {

using profile::append_json_string;
using profile::format_fixed;
using profile::JsonText;
using profile::Layout;

// Bar flags, as the script reads them.
constexpr int kFailed = 1;
constexpr int kInferred = 2;
constexpr int kTimedOut = 4;
constexpr int kMarker = 8;

// The page's unit: µs for a profile drawn over less than this, ms beyond.
constexpr double kMicrosecondsUpToNs = 10e6;

// Distinct, colour-blind-friendly colours (Tableau 10 and two more); names beyond them get
// golden-angle hues.
constexpr std::array<const char*, 12> kPalette = {
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#8cd17d"};
constexpr const char* kHostWaitColour = "#aab4c0";
constexpr const char* kCallbackColour = "#5b5f97";
constexpr const char* kRangeColour = "#e8d9a8";

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// A JSON string that is also safe inside a <script> element (no "</script>", no "<!--").
std::string json_string(const std::string& s) {
  std::string out;
  append_json_string(out, s, JsonText::in_html_script);
  return out;
}

std::string hsl_hex(double h, double s, double l) {
  auto f = [&](double n) {
    double k = std::fmod(n + h / 30.0, 12.0);
    double a = s * std::min(l, 1 - l);
    double v = l - a * std::max(-1.0, std::min({k - 3, 9 - k, 1.0}));
    return static_cast<int>(std::lround(v * 255));
  };
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", f(0), f(8), f(4));
  return buf;
}

// The script that draws the page from its data. Written for this page; it needs nothing else.
constexpr const char* kScript = R"JS(
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('eventide-timeline-data').textContent);
  var LABEL_W = 200, AXIS_H = 30, ROW_H = 36, BAR_H = 22, GAP = 10, RIGHT = 28;
  var MIN_SPAN_NS = 20, MAX_ARROWS = 3000;
  var unit = D.unit, per = D.ns_per_unit;
  var host = document.getElementById('timeline');
  var canvas = document.getElementById('timeline-canvas');
  var tip = document.getElementById('timeline-tip');
  var readout = document.getElementById('timeline-range');
  var ctx = canvas.getContext('2d');

  // Lanes: their tops, a gap between groups.
  var y = AXIS_H + 6, lanes = D.lanes;
  for (var i = 0; i < lanes.length; i++) {
    if (i > 0 && lanes[i].group !== lanes[i - 1].group) y += GAP;
    lanes[i].y = y;
    lanes[i].bars = [];
    y += ROW_H;
  }
  var height = y + 4 + AXIS_H;
  var bars = D.bars.map(function (b, i) {
    return {i: i, lane: b[0], kind: D.kinds[b[1]], colour: b[2], label: b[3] < 0 ? '' : D.texts[b[3]],
            start: b[4], dur: b[5], id: b[6], seq: b[7], detail: b[8] < 0 ? '' : D.texts[b[8]],
            error: b[9] < 0 ? '' : D.texts[b[9]], flags: b[10]};
  });
  bars.forEach(function (b) { lanes[b.lane].bars.push(b); });
  lanes.forEach(function (l) { l.bars.sort(function (a, b) { return a.start - b.start; }); });

  var full = {a: D.t0, b: Math.max(D.t1, D.t0 + MIN_SPAN_NS)};
  var view = {a: full.a, b: full.b};
  var width = 0, plotW = 0, drawn = [], stats = {};

  function fmt(ns) {
    var v = ns / per, a = Math.abs(v);
    var d = a >= 1000 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
    return v.toFixed(d);
  }
  function withUnit(ns) { return fmt(ns) + ' ' + unit; }
  function x(ns) { return LABEL_W + (ns - view.a) / (view.b - view.a) * plotW; }
  function t(px) { return view.a + (px - LABEL_W) / plotW * (view.b - view.a); }

  var hatch = (function () {
    var c = document.createElement('canvas');
    c.width = c.height = 6;
    var g = c.getContext('2d');
    g.fillStyle = '#e4e7eb'; g.fillRect(0, 0, 6, 6);
    g.strokeStyle = '#9aa5b1'; g.lineWidth = 2;
    g.beginPath(); g.moveTo(-1, 7); g.lineTo(7, -1); g.moveTo(-1, 1); g.lineTo(1, -1);
    g.moveTo(5, 7); g.lineTo(7, 5); g.stroke();
    return ctx.createPattern(c, 'repeat');
  })();
  function fill(b) { return b.colour < 0 ? hatch : D.colours[b.colour]; }
  function light(hex) {
    if (typeof hex !== 'string') return true;
    var r = parseInt(hex.substr(1, 2), 16), g = parseInt(hex.substr(3, 2), 16), bl = parseInt(hex.substr(5, 2), 16);
    return 0.299 * r + 0.587 * g + 0.114 * bl > 150;
  }

  // Ticks of 1, 2 or 5 times a power of ten, about eight over the view.
  function ticks() {
    var raw = (view.b - view.a) / 8, m = Math.pow(10, Math.floor(Math.log10(raw))), r = raw / m;
    var step = m * (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10);
    var out = [];
    for (var v = Math.ceil(view.a / step) * step; v <= view.b + step * 1e-9; v += step) out.push(v);
    var digits = Math.max(0, -Math.floor(Math.log10(step / per) + 1e-9));
    return out.map(function (v) { return {ns: v, text: (v / per).toFixed(digits) + ' ' + unit}; });
  }

  function resize() {
    width = Math.max(600, Math.floor(host.clientWidth));
    plotW = width - LABEL_W - RIGHT;
    var dpr = window.devicePixelRatio || 1;
    canvas.style.width = width + 'px';
    canvas.style.height = height + 'px';
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    draw();
  }

  function draw() {
    ctx.clearRect(0, 0, width, height);
    ctx.font = '11px system-ui, sans-serif';
    ctx.textBaseline = 'alphabetic';
    lanes.forEach(function (l, i) {
      ctx.fillStyle = i % 2 ? '#ffffff' : '#f4f6f8';
      ctx.fillRect(0, l.y, width, ROW_H);
      ctx.fillStyle = '#1f2933'; ctx.font = '600 13px system-ui, sans-serif'; ctx.textAlign = 'left';
      ctx.fillText(l.title, 14, l.y + 16, LABEL_W - 20);
      ctx.fillStyle = '#7b8794'; ctx.font = '11px system-ui, sans-serif';
      ctx.fillText(l.sub, 14, l.y + 29, LABEL_W - 20);
    });
    var bottom = height - AXIS_H;
    var tk = ticks();
    ctx.textAlign = 'center';
    tk.forEach(function (k) {
      var px = Math.round(x(k.ns)) + 0.5;
      ctx.strokeStyle = '#e4e7eb'; ctx.lineWidth = 1;
      ctx.beginPath(); ctx.moveTo(px, AXIS_H - 4); ctx.lineTo(px, bottom + 4); ctx.stroke();
      ctx.fillStyle = '#616e7c';
      ctx.fillText(k.text, px, AXIS_H - 10);
      ctx.fillText(k.text, px, bottom + 18);
    });
    ctx.strokeStyle = '#cbd2d9';
    ctx.beginPath(); ctx.moveTo(LABEL_W - 0.5, AXIS_H); ctx.lineTo(LABEL_W - 0.5, bottom); ctx.stroke();

    ctx.save();
    ctx.beginPath(); ctx.rect(LABEL_W, 0, plotW + RIGHT, height); ctx.clip();
    drawn = [];
    var shown = 0, merged = 0, runs = 0, where = new Map();
    lanes.forEach(function (l) {
      var by = l.y + (ROW_H - BAR_H) / 2, run = null;
      function flush() {
        if (!run) return;
        ctx.fillStyle = fill(run.best);
        ctx.fillRect(run.x0, by, Math.max(1, run.x1 - run.x0), BAR_H);
        drawn.push({x0: run.x0, x1: Math.max(run.x0 + 1, run.x1), lane: l, bars: run.bars});
        run.bars.forEach(function (b) { where.set(b.i, {x0: run.x0, x1: Math.max(run.x0 + 1, run.x1), lane: l}); });
        if (run.bars.length > 1) { merged += run.bars.length; runs++; }
        run = null;
      }
      l.bars.forEach(function (b) {
        if (b.start > view.b || b.start + b.dur < view.a) return;
        shown++;
        var x0 = x(b.start), x1 = x(b.start + b.dur);
        if (x1 - x0 < 1 && !(b.flags & 8)) {
          // Narrower than a pixel: merged with its neighbours into one mark per run.
          if (run && x0 <= run.x1 + 1) {
            run.x1 = Math.max(run.x1, x1);
            run.bars.push(b);
            if (b.dur > run.best.dur) run.best = b;
          } else {
            flush();
            run = {x0: x0, x1: x1, bars: [b], best: b};
          }
          return;
        }
        flush();
        if (b.flags & 8) { x1 = x0 + 2; }
        var w = x1 - x0;
        ctx.fillStyle = fill(b);
        ctx.fillRect(x0, by, w, BAR_H);
        ctx.lineWidth = b.flags & 1 ? 2 : 0.5;
        ctx.strokeStyle = b.flags & 1 ? '#b3261e' : 'rgba(0,0,0,.25)';
        if (w > 3) ctx.strokeRect(x0, by, w, BAR_H);
        drawn.push({x0: x0, x1: x1, lane: l, bars: [b]});
        where.set(b.i, {x0: x0, x1: x1, lane: l});
        var dur = withUnit(b.dur), text = '';
        var vx0 = Math.max(x0, LABEL_W), vx1 = Math.min(x1, LABEL_W + plotW), room = vx1 - vx0;
        if (b.label && ctx.measureText(b.label + ' ' + dur).width + 10 <= room) text = b.label + ' ' + dur;
        else if (ctx.measureText(dur).width + 8 <= room) text = dur;
        if (text) {
          ctx.fillStyle = light(fill(b)) ? '#1f2933' : '#ffffff';
          ctx.fillText(text, (vx0 + vx1) / 2, by + BAR_H / 2 + 4);
        }
      });
      flush();
    });
    var arrows = 0;
    var wanted = D.arrows.filter(function (a) { return where.has(a[0]) || where.has(a[1]); });
    if (wanted.length <= MAX_ARROWS) {
      ctx.lineWidth = 1.2;
      wanted.forEach(function (a) {
        var from = where.get(a[0]) || box(a[0]), to = where.get(a[1]) || box(a[1]);
        arrow(from, to, a[2], a[3]);
        arrows++;
      });
    }
    ctx.restore();
    stats = {bars: bars.length, shown: shown, marks: drawn.length, merged: merged, merged_runs: runs,
             arrows: arrows, arrows_hidden: wanted.length - arrows, ticks: tk.map(function (k) { return k.text; }),
             unit: unit, view: api.view(), width: width, height: height};
    readout.textContent = 'showing ' + withUnit(view.a) + ' to ' + withUnit(view.b) + ' (' + withUnit(view.b - view.a) +
        ') of ' + withUnit(full.a) + ' to ' + withUnit(full.b) +
        (merged ? ' · ' + merged + ' bars narrower than a pixel drawn merged' : '') +
        (wanted.length > arrows ? ' · arrows hidden: zoom in to see them' : '');
    document.body.dataset.drawn = String(drawn.length);
  }

  // Where a bar would be drawn (for an arrow whose other end is off the view).
  function box(i) {
    var b = bars[i];
    return {x0: x(b.start), x1: x(b.start + b.dur), lane: lanes[b.lane]};
  }

  function arrow(a, b, atEnd, toHost) {
    var x1 = a.x1, x2 = atEnd ? b.x1 : b.x0;
    var down = b.lane.y >= a.lane.y;
    var y1 = a.lane.y + (ROW_H - BAR_H) / 2 + (down ? BAR_H : 0);
    var y2 = b.lane.y + (ROW_H - BAR_H) / 2 + (down ? 0 : BAR_H);
    var bend = Math.max(8, Math.abs(y2 - y1) / 2);
    ctx.strokeStyle = 'rgba(61,71,82,.75)';
    ctx.setLineDash(toHost ? [3, 2] : []);
    ctx.beginPath(); ctx.moveTo(x1, y1);
    ctx.bezierCurveTo(x1, y1 + (down ? bend : -bend), x2, y2 + (down ? -bend : bend), x2, y2);
    ctx.stroke();
    ctx.setLineDash([]);
    var s = down ? -1 : 1;
    ctx.fillStyle = '#3d4752';
    ctx.beginPath(); ctx.moveTo(x2, y2); ctx.lineTo(x2 - 3.5, y2 + 7 * s); ctx.lineTo(x2 + 3.5, y2 + 7 * s);
    ctx.closePath(); ctx.fill();
  }

  function clampView(a, b) {
    var span = Math.min(Math.max(b - a, MIN_SPAN_NS), full.b - full.a);
    a = Math.max(full.a, Math.min(a, full.b - span));
    view.a = a; view.b = a + span;
    draw();
  }

  var api = {
    unit: unit,
    view: function () { return {start: view.a / per, end: view.b / per}; },
    full: function () { return {start: full.a / per, end: full.b / per}; },
    set_view: function (start, end) { clampView(start * per, end * per); return api.view(); },
    zoom: function (factor, at) {
      var c = at === undefined ? (view.a + view.b) / 2 : at * per;
      clampView(c - (c - view.a) / factor, c + (view.b - c) / factor);
      return api.view();
    },
    pan: function (by) { clampView(view.a + by * per, view.b + by * per); return api.view(); },
    reset: function () { clampView(full.a, full.b); return api.view(); },
    stats: function () { return stats; }
  };
  window.eventideTimeline = api;

  function plotX(ev) { var r = canvas.getBoundingClientRect(); return {x: ev.clientX - r.left, y: ev.clientY - r.top}; }
  canvas.addEventListener('wheel', function (ev) {
    var p = plotX(ev);
    if (p.x < LABEL_W) return;
    ev.preventDefault();
    var f = Math.exp(-ev.deltaY * (ev.deltaMode === 1 ? 0.05 : 0.002));
    api.zoom(f, t(p.x) / per);
  }, {passive: false});
  var drag = null;
  canvas.addEventListener('mousedown', function (ev) {
    var p = plotX(ev);
    if (p.x >= LABEL_W) { drag = {x: p.x, a: view.a, b: view.b}; canvas.classList.add('dragging'); }
  });
  window.addEventListener('mouseup', function () { drag = null; canvas.classList.remove('dragging'); });
  window.addEventListener('mousemove', function (ev) {
    if (drag) {
      var dt = (plotX(ev).x - drag.x) / plotW * (drag.b - drag.a);
      clampView(drag.a - dt, drag.b - dt);
      tip.hidden = true;
      return;
    }
    if (ev.target === canvas) hover(plotX(ev), ev); else tip.hidden = true;
  });
  canvas.addEventListener('mouseleave', function () { tip.hidden = true; });

  function hover(p, ev) {
    var hit = null;
    for (var i = 0; i < drawn.length; i++) {
      var d = drawn[i], by = d.lane.y + (ROW_H - BAR_H) / 2;
      if (p.y >= by && p.y <= by + BAR_H && p.x >= d.x0 - 1 && p.x <= d.x1 + 1) { hit = d; break; }
    }
    if (!hit) { tip.hidden = true; return; }
    var lines;
    if (hit.bars.length > 1) {
      var first = hit.bars[0], last = hit.bars[hit.bars.length - 1];
      lines = [hit.bars.length + ' bars narrower than a pixel, merged (zoom in to see them)',
               'from ' + withUnit(first.start) + ' to ' + withUnit(last.start + last.dur)];
    } else {
      var b = hit.bars[0];
      var what = b.kind === 'op' || b.kind === 'wait' ? b.label + '  #' + b.seq + ' on ' + hit.lane.key : b.label;
      lines = [what];
      if (b.detail) lines.push(b.detail);
      lines.push('start ' + withUnit(b.start) + ', ' + (b.kind === 'op' || b.kind === 'callback' || b.kind === 'range' ? 'duration ' : 'waited ') +
                 withUnit(b.dur) + (b.flags & 4 ? ' (timed out)' : ''));
      if (b.flags & 2) lines.push('placed by what it waited for: no device time of its own');
      if (b.error) lines.push('error: ' + b.error);
    }
    tip.textContent = lines.join('\n');
    tip.hidden = false;
    var r = host.getBoundingClientRect();
    tip.style.left = Math.min(ev.clientX - r.left + 12, r.width - 320) + 'px';
    tip.style.top = (ev.clientY - r.top + 14) + 'px';
  }

  document.getElementById('zoom-in').onclick = function () { api.zoom(2); };
  document.getElementById('zoom-out').onclick = function () { api.zoom(0.5); };
  document.getElementById('zoom-reset').onclick = function () { api.reset(); };
  document.addEventListener('keydown', function (ev) {
    if (ev.key === '+' || ev.key === '=') api.zoom(2);
    else if (ev.key === '-') api.zoom(0.5);
    else if (ev.key === '0') api.reset();
    else if (ev.key === 'ArrowLeft') api.pan(-(view.b - view.a) / 4 / per);
    else if (ev.key === 'ArrowRight') api.pan((view.b - view.a) / 4 / per);
  });
  window.addEventListener('resize', resize);
  resize();
})();
)JS";

class PageWriter {
 public:
  explicit PageWriter(const Profile& p) : p_(p), layout_(profile::lay_out(p)) {}

  std::string write() {
    assign_colours();
    find_range();
    std::string data = data_json();
    return page(data);
  }

 private:
  void assign_colours() {
    for (const ProfiledOp& op : p_.ops()) {
      if (op.is_wait || colour_.count(op.name)) continue;
      const std::size_t i = names_.size();
      names_.push_back(op.name);
      colour_[op.name] = i < kPalette.size() ? std::string(kPalette[i])
                                             : hsl_hex(std::fmod(i * 137.508, 360.0), 0.55, 0.55);
    }
  }

  // The range drawn at first (ns), and the page's unit from its span.
  void find_range() {
    std::int64_t lo = INT64_MAX, hi = INT64_MIN;
    auto take = [&](std::int64_t a, std::int64_t b) {
      lo = std::min(lo, a);
      hi = std::max(hi, b);
    };
    for (const auto& s : layout_.spans) {
      if (s) take(s->start_ns, s->end_ns);
    }
    for (const ProfiledHostWait& h : p_.host_waits()) take(profile::to_ns(h.start_us), profile::to_ns(h.end_us));
    for (const ProfiledCallback& c : p_.callbacks()) take(profile::to_ns(c.start_us), profile::to_ns(c.end_us));
    for (const ProfiledRange& r : p_.ranges()) take(profile::to_ns(r.start_us), profile::to_ns(r.end_us));
    if (lo > hi) {
      lo = 0;
      hi = std::max<std::int64_t>(profile::to_ns(p_.duration_us()), 1000);
    }
    if (hi - lo < 1000) hi = lo + 1000;
    t0_ = lo;
    t1_ = hi;
    ms_ = static_cast<double>(hi - lo) >= kMicrosecondsUpToNs;
  }

  double ns_per_unit() const { return ms_ ? 1e6 : 1e3; }
  const char* unit() const { return ms_ ? "ms" : "µs"; }

  // A duration or time in the page's unit, as the script writes it ("12.5 µs", "0.004 ms").
  std::string in_unit(double ns) const {
    const double v = ns / ns_per_unit();
    const double a = std::abs(v);
    return format_fixed(v, a >= 1000 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3) + " " + unit();
  }

  int text(const std::string& s) {
    if (s.empty()) return -1;
    auto [it, added] = text_index_.try_emplace(s, static_cast<int>(texts_.size()));
    if (added) texts_.push_back(s);
    return it->second;
  }

  int colour(const std::string& hex) {
    auto [it, added] = colour_index_.try_emplace(hex, static_cast<int>(colours_.size()));
    if (added) colours_.push_back(hex);
    return it->second;
  }

  struct Lane {
    std::string kind, key, title, sub;
    int group = 0;
  };

  std::string data_json() {
    // Lanes: a stream's, grouped by device; then host threads' and callback threads'.
    std::vector<Lane> lanes;
    std::optional<Device> device;
    int group = -1;
    for (const profile::StreamTrack& st : layout_.streams) {
      if (!device || *device != st.device) ++group;
      device = st.device;
      lanes.push_back(Lane{"stream", st.stream, profile::short_stream_name(st), st.device.str(), group});
    }
    ++group;
    std::map<std::string, std::size_t> host;
    auto host_lane = [&](const std::string& key, const std::string& title, const std::string& sub) {
      auto [it, added] = host.try_emplace(key, lanes.size());
      if (added) lanes.push_back(Lane{"host", key, title, sub, group});
      return it->second;
    };

    std::string bars;
    std::size_t count = 0;
    auto bar = [&](std::size_t lane, int kind, int fill, int label, std::int64_t start, std::int64_t end,
                   std::uint64_t id, std::uint64_t seq, int detail, int error, int flags) {
      bars += count ? ",\n[" : "[";
      bars += std::to_string(lane) + "," + std::to_string(kind) + "," + std::to_string(fill) + "," +
              std::to_string(label) + "," + std::to_string(start) + "," +
              std::to_string(std::max<std::int64_t>(0, end - start)) + "," + std::to_string(id) + "," +
              std::to_string(seq) + "," + std::to_string(detail) + "," + std::to_string(error) + "," +
              std::to_string(flags) + "]";
      return count++;
    };

    const auto& ops = p_.ops();
    std::vector<std::size_t> op_bar(ops.size(), SIZE_MAX);
    for (std::size_t r = 0; r < layout_.streams.size(); ++r) {
      for (std::size_t i : layout_.streams[r].ops) {
        const ProfiledOp& op = ops[i];
        const auto& span = layout_.spans[i];
        if (!span) continue;
        const int flags = (op.error.empty() ? 0 : kFailed) | (span->inferred ? kInferred : 0) |
                          (op.is_marker ? kMarker : 0);
        op_bar[i] = bar(r, op.is_wait ? 1 : 0, op.is_wait ? -1 : colour(colour_.at(op.name)),
                        text(op.is_wait ? "wait" : op.name), span->start_ns, span->end_ns, op.id, op.seq,
                        text(op.detail), text(op.error), flags);
      }
    }
    std::vector<std::size_t> host_wait_bar, callback_bar;
    for (const ProfiledHostWait& w : p_.host_waits()) {
      const std::size_t lane = host_lane("host waits " + w.thread, w.thread, "host waits");
      host_wait_bar.push_back(bar(lane, 2, colour(kHostWaitColour),
                                  text(profile::host_wait_label(p_, layout_, w) + " (" + w.thread + ")"),
                                  profile::to_ns(w.start_us), profile::to_ns(w.end_us), w.event, 0, -1, -1,
                                  w.finished ? 0 : kTimedOut));
    }
    for (const ProfiledCallback& c : p_.callbacks()) {
      std::string dev = c.thread.rfind("callbacks ", 0) == 0 ? c.thread.substr(10) : c.thread;
      const std::size_t lane = host_lane(c.thread, "callbacks", dev);
      callback_bar.push_back(bar(lane, 3, colour(kCallbackColour),
                                 text("callback of event " + std::to_string(c.event) + " (" + c.thread + ")"),
                                 profile::to_ns(c.start_us), profile::to_ns(c.end_us), c.event, 0, -1, -1, 0));
    }
    // User ranges: a lane per thread and nesting depth (layout.hpp's RangeLane), after the
    // host threads'.
    ++group;
    std::vector<std::size_t> range_lane(layout_.range_lanes.size());
    for (std::size_t i = 0; i < layout_.range_lanes.size(); ++i) {
      const profile::RangeLane& l = layout_.range_lanes[i];
      range_lane[i] = lanes.size();
      lanes.push_back(Lane{"range", "ranges " + l.thread + " " + std::to_string(l.depth), l.thread,
                           l.depth == 0 ? "ranges" : "ranges, depth " + std::to_string(l.depth), group});
    }
    for (std::size_t i = 0; i < p_.ranges().size(); ++i) {
      const ProfiledRange& r = p_.ranges()[i];
      bar(range_lane[layout_.range_lane_of[i]], 4, colour(kRangeColour), text(r.name + " (range, " + r.thread + ")"),
          profile::to_ns(r.start_us), profile::to_ns(r.end_us), 0, 0, -1, -1, 0);
    }

    std::string arrows;
    std::size_t n_arrows = 0;
    for (const profile::Arrow& a : profile::arrows(p_, layout_)) {
      const std::size_t from = op_bar[a.from];
      if (from == SIZE_MAX) continue;
      std::size_t to = SIZE_MAX;
      switch (a.to) {
        case profile::Arrow::To::op: to = op_bar[a.index]; break;
        case profile::Arrow::To::host_wait: to = host_wait_bar[a.index]; break;
        case profile::Arrow::To::callback: to = callback_bar[a.index]; break;
      }
      if (to == SIZE_MAX) continue;
      arrows += (n_arrows++ ? ",[" : "[") + std::to_string(from) + "," + std::to_string(to) + "," +
                (a.at_end ? "1" : "0") + "," + (a.to == profile::Arrow::To::op ? "0" : "1") + "]";
    }

    std::string j = "{\"unit\":" + json_string(unit()) + ",\"ns_per_unit\":" +
                    std::to_string(static_cast<long>(ns_per_unit())) + ",\"t0\":" + std::to_string(t0_) +
                    ",\"t1\":" + std::to_string(t1_) + ",\n\"kinds\":[\"op\",\"wait\",\"hostwait\",\"callback\",\"range\"]";
    j += ",\n\"colours\":[";
    for (std::size_t i = 0; i < colours_.size(); ++i) {
      if (i) j += ',';
      j += json_string(colours_[i]);
    }
    j += "],\n\"texts\":[";
    for (std::size_t i = 0; i < texts_.size(); ++i) {
      if (i) j += ",\n";
      j += json_string(texts_[i]);
    }
    j += "],\n\"lanes\":[";
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      const Lane& l = lanes[i];
      j += std::string(i ? ",\n" : "") + "{\"kind\":" + json_string(l.kind) + ",\"key\":" + json_string(l.key) +
           ",\"title\":" + json_string(l.title) + ",\"sub\":" + json_string(l.sub) +
           ",\"group\":" + std::to_string(l.group) + "}";
    }
    j += "],\n\"bars\":[\n" + bars + "],\n\"arrows\":[" + arrows + "]}";
    return j;
  }

  std::string page(const std::string& data) const {
    std::size_t waits = 0;
    for (const ProfiledOp& op : p_.ops()) waits += op.is_wait;
    auto count = [](std::size_t n, const char* one, const char* many) {
      return std::to_string(n) + " " + (n == 1 ? one : many);
    };
    std::string summary = count(p_.ops().size() - waits, "op", "ops") + ", " + count(waits, "wait", "waits") +
                          " on " + count(layout_.streams.size(), "stream", "streams") + " · " +
                          count(p_.records().size(), "record", "records") + " · " +
                          count(p_.host_waits().size(), "host wait", "host waits") + " · " +
                          count(p_.callbacks().size(), "callback", "callbacks") + " · " +
                          count(p_.ranges().size(), "range", "ranges") + " · profile " +
                          in_unit(p_.duration_us() * 1e3) + ", drawn " + in_unit(static_cast<double>(t0_)) +
                          " to " + in_unit(static_cast<double>(t1_)) + " · times in " + unit();
    std::string h;
    h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta name=\"generator\" content=\"eventide " + std::string(version()) + "\">\n"
         "<title>eventide timeline</title>\n<style>\n"
         "body{margin:16px 20px;font:13px/1.45 system-ui,-apple-system,\"Segoe UI\",Roboto,\"DejaVu Sans\","
         "\"Liberation Sans\",sans-serif;color:#1f2933;background:#fff}\n"
         "h1{font-size:18px;margin:0 0 2px;font-weight:600}\n"
         ".summary{color:#52606d;margin:0 0 10px}\n"
         ".legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:0 0 10px;padding:0;list-style:none}\n"
         ".legend li{display:flex;align-items:center;gap:6px}\n"
         ".swatch{width:14px;height:14px;border-radius:3px;display:inline-block}\n"
         ".swatch.wait{background:repeating-linear-gradient(45deg,#e4e7eb 0 3px,#9aa5b1 3px 5px)}\n"
         ".controls{display:flex;align-items:center;gap:6px;margin:0 0 6px;color:#52606d}\n"
         ".controls button{font:inherit;min-width:28px;padding:1px 8px;border:1px solid #cbd2d9;"
         "border-radius:4px;background:#f4f6f8;cursor:pointer}\n"
         "#timeline{position:relative;max-width:1360px}\n"
         "#timeline-canvas{display:block;cursor:grab}\n"
         "#timeline-canvas.dragging{cursor:grabbing}\n"
         "#timeline-tip{position:absolute;pointer-events:none;white-space:pre;background:#1f2933;color:#fff;"
         "font-size:12px;padding:4px 8px;border-radius:4px;max-width:300px;overflow:hidden;z-index:1}\n"
         "table{border-collapse:collapse;margin-top:14px;font-variant-numeric:tabular-nums}\n"
         "th,td{padding:3px 12px 3px 0;text-align:right}\n"
         "th:first-child,td:first-child{text-align:left}\n"
         "th{color:#52606d;font-weight:600;border-bottom:1px solid #cbd2d9}\n"
         ".empty{color:#7b8794;font-style:italic}\n"
         "</style>\n</head>\n<body>\n";
    h += "<h1>eventide timeline</h1>\n<p class=\"summary\">" + escape(summary) + "</p>\n";
    if (p_.ops().empty()) h += "<p class=\"empty\">No ops were recorded.</p>\n";
    h += "<ul class=\"legend\">";
    for (const std::string& n : names_) {
      h += "<li><span class=\"swatch\" style=\"background:" + colour_.at(n) + "\"></span>" + escape(n) + "</li>";
    }
    if (waits) h += "<li><span class=\"swatch wait\"></span>wait</li>";
    h += "</ul>\n";
    h += "<div class=\"controls\"><button id=\"zoom-out\" title=\"zoom out (-)\">−</button>"
         "<button id=\"zoom-in\" title=\"zoom in (+)\">+</button>"
         "<button id=\"zoom-reset\" title=\"the whole profile (0)\">whole profile</button>"
         "<span>wheel: zoom, drag: pan</span> · <span id=\"timeline-range\"></span></div>\n";
    h += "<div id=\"timeline\"><canvas id=\"timeline-canvas\" aria-label=\"timeline of " +
         std::to_string(p_.ops().size()) + " ops\"></canvas><div id=\"timeline-tip\" hidden></div></div>\n";
    h += "<noscript><p class=\"empty\">The timeline is drawn by the page's own script: allow "
         "scripts to see it (the totals below need none).</p></noscript>\n";
    // Per op name: how many, how long.
    if (!names_.empty()) {
      std::map<std::string, std::pair<std::size_t, double>> totals;
      for (std::size_t i = 0; i < p_.ops().size(); ++i) {
        const ProfiledOp& op = p_.ops()[i];
        if (op.is_wait || !layout_.spans[i]) continue;
        auto& t = totals[op.name];
        ++t.first;
        t.second += static_cast<double>(layout_.spans[i]->end_ns - layout_.spans[i]->start_ns);
      }
      h += "<table class=\"totals\"><tr><th>op</th><th>count</th><th>total</th><th>mean</th></tr>\n";
      for (const std::string& n : names_) {
        auto it = totals.find(n);
        if (it == totals.end()) continue;
        const auto& [n_ops, total] = it->second;
        h += "<tr><td><span class=\"swatch\" style=\"background:" + colour_.at(n) + "\"></span> " + escape(n) +
             "</td><td>" + std::to_string(n_ops) + "</td><td>" + in_unit(total) + "</td><td>" +
             in_unit(total / static_cast<double>(n_ops)) + "</td></tr>\n";
      }
      h += "</table>\n";
    }
    h += "<script type=\"application/json\" id=\"eventide-timeline-data\">" + data + "</script>\n";
    h += "<script>" + std::string(kScript) + "</script>\n";
    h += "</body>\n</html>\n";
    return h;
  }

  const Profile& p_;
  Layout layout_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, std::string> colour_;
  std::vector<std::string> texts_, colours_;
  std::unordered_map<std::string, int> text_index_, colour_index_;
  std::int64_t t0_ = 0, t1_ = 1000;
  bool ms_ = false;
};

}  // namespace

std::string Profile::timeline_html() const { return PageWriter(*this).write(); }

void Profile::export_timeline(const std::string& path) const {
  profile::write_text_file(path, timeline_html(), "export_timeline");
}

}  // namespace eventide
