// The timeline page's script: what it draws and how is described in timeline_script.hpp.
// Embedded in the library at build time (cmake/embed_text.cmake); the page writer
// (timeline_html.cpp) puts it in every page.
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('eventide-timeline-data').textContent);
  var LABEL_W = 150, AXIS_H = 30, ROW_H = 36, BAR_H = 22, GAP = 10, RIGHT = 28;
  var MIN_SPAN_NS = 20, MAX_ARROWS = 3000;
  // A label keeps 3 px clear of each end of its bar; a shortened name keeps 3 characters.
  var PAD = 6, MIN_CHARS = 3;
  // A bar this wide or wider always has a label (the stats list those that do not).
  var LABELLED_W = 40;
  var FAILED = 1, INFERRED = 2, TIMED_OUT = 4, MARKER = 8;
  var FAINT = {line: 'rgba(61,71,82,.2)', head: 'rgba(61,71,82,.3)', width: 1};
  var HELD = {line: 'rgba(61,71,82,.75)', head: '#3d4752', width: 1.2};
  var HOT = {line: '#1f2933', head: '#1f2933', width: 2};
  var unit = D.unit, per = D.ns_per_unit;
  var host = document.getElementById('timeline');
  var canvas = document.getElementById('timeline-canvas');
  var tip = document.getElementById('timeline-tip');
  var readout = document.getElementById('timeline-range');
  var everyBox = document.getElementById('every-dependency');
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
            error: b[9] < 0 ? '' : D.texts[b[9]], flags: b[10], into: [], out: []};
  });
  bars.forEach(function (b) { lanes[b.lane].bars.push(b); });
  lanes.forEach(function (l) { l.bars.sort(function (a, b) { return a.start - b.start; }); });
  var arrows = D.arrows.map(function (a) {
    return {from: a[0], to: a[1], atEnd: a[2] === 1, toHost: a[3] === 1, held: a[4] === 1};
  });
  arrows.forEach(function (a) { bars[a.from].out.push(a); bars[a.to].into.push(a); });

  var full = {a: D.t0, b: Math.max(D.t1, D.t0 + MIN_SPAN_NS)};
  var view = {a: full.a, b: full.b};
  var width = 0, plotW = 0, marks = [], stats = {}, hot = null, every = everyBox.checked;

  function fmt(ns) {
    var v = ns / per, a = Math.abs(v);
    var d = a >= 1000 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
    return v.toFixed(d);
  }
  function withUnit(ns) { return fmt(ns) + ' ' + unit; }
  function x(ns) { return LABEL_W + (ns - view.a) / (view.b - view.a) * plotW; }
  function t(px) { return view.a + (px - LABEL_W) / plotW * (view.b - view.a); }
  function barTop(lane) { return lane.y + (ROW_H - BAR_H) / 2; }

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

  // The marks of the view: a bar each, or one for a run of bars narrower than a pixel.
  function place() {
    var out = [], where = new Map(), shown = 0, merged = 0, runs = 0;
    lanes.forEach(function (l) {
      var run = null;
      function add(m) {
        out.push(m);
        m.bars.forEach(function (b) { where.set(b.i, m); });
      }
      function flush() {
        if (!run) return;
        add({x0: run.x0, x1: Math.max(run.x0 + 1, run.x1), lane: l, bars: run.bars, best: run.best});
        if (run.bars.length > 1) { merged += run.bars.length; runs++; }
        run = null;
      }
      l.bars.forEach(function (b) {
        if (b.start > view.b || b.start + b.dur < view.a) return;
        shown++;
        var x0 = x(b.start), x1 = x(b.start + b.dur);
        if (x1 - x0 < 1 && !(b.flags & MARKER)) {
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
        add({x0: x0, x1: b.flags & MARKER ? x0 + 2 : x1, lane: l, bars: [b], best: b});
      });
      flush();
    });
    return {marks: out, where: where, shown: shown, merged: merged, runs: runs};
  }

  // The longest text that fits `room` px: the name and duration, the name, the duration, or
  // the name shortened; '' if none does.
  function label(b, room) {
    if (room < PAD + 6) return '';
    var dur = withUnit(b.dur), name = b.label;
    var tries = name ? [name + ' ' + dur, name, dur] : [dur];
    for (var k = 0; k < tries.length; k++) {
      if (ctx.measureText(tries[k]).width + PAD <= room) return tries[k];
    }
    for (var n = name.length - 1; n >= MIN_CHARS; n--) {
      var s = name.slice(0, n).replace(/\s+$/, '') + '\u2026';
      if (ctx.measureText(s).width + PAD <= room) return s;
    }
    return '';
  }

  function paint(m) {
    var b = m.best, by = barTop(m.lane), w = m.x1 - m.x0;
    ctx.fillStyle = fill(b);
    ctx.fillRect(m.x0, by, w, BAR_H);
    m.text = '';
    if (m.bars.length > 1) return;
    ctx.lineWidth = b.flags & FAILED ? 2 : 0.5;
    ctx.strokeStyle = b.flags & FAILED ? '#b3261e' : 'rgba(0,0,0,.25)';
    if (w > 3) ctx.strokeRect(m.x0, by, w, BAR_H);
    var vx0 = Math.max(m.x0, LABEL_W), vx1 = Math.min(m.x1, LABEL_W + plotW);
    if (!(b.flags & MARKER)) m.text = label(b, vx1 - vx0);
    if (m.text) {
      ctx.fillStyle = light(fill(b)) ? '#1f2933' : '#ffffff';
      ctx.fillText(m.text, (vx0 + vx1) / 2, by + BAR_H / 2 + 4);
    }
    if (b === hot) {
      ctx.lineWidth = 2; ctx.strokeStyle = HOT.line;
      ctx.strokeRect(m.x0 - 1, by - 1, Math.max(w, 1) + 2, BAR_H + 2);
    }
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
    var p = place();
    marks = p.marks;
    var wanted = arrows.filter(function (a) { return p.where.has(a.from) || p.where.has(a.to); });
    var drawAll = wanted.length <= MAX_ARROWS;
    var drawn = {faint: 0, held: 0, hot: 0}, quiet = 0;
    function isHot(a) { return hot !== null && (a.from === hot.i || a.to === hot.i); }
    function each(list, style, key) {
      list.forEach(function (a) {
        arrow(p.where.get(a.from) || box(a.from), p.where.get(a.to) || box(a.to), a, style);
        drawn[key]++;
      });
    }
    var faint = wanted.filter(function (a) { return !a.held && !isHot(a); });
    if (drawAll && every) each(faint, FAINT, 'faint'); else if (drawAll) quiet = faint.length;
    marks.forEach(paint);
    if (drawAll) each(wanted.filter(function (a) { return a.held && !isHot(a); }), HELD, 'held');
    if (hot !== null) each(hot.into.concat(hot.out), HOT, 'hot');
    ctx.restore();

    var labelled = 0, unlabelled = [];
    marks.forEach(function (m) {
      if (m.text) labelled++;
      else if (m.bars.length === 1 && !(m.best.flags & MARKER) &&
               Math.min(m.x1, LABEL_W + plotW) - Math.max(m.x0, LABEL_W) >= LABELLED_W) unlabelled.push(m.best.i);
    });
    stats = {bars: bars.length, shown: p.shown, marks: marks.length, merged: p.merged, merged_runs: p.runs,
             arrows: drawn.faint + drawn.held + drawn.hot, arrows_faint: drawn.faint, arrows_held: drawn.held,
             arrows_hot: drawn.hot, arrows_quiet: quiet, arrows_hidden: drawAll ? 0 : wanted.length,
             every_dependency: every, labelled: labelled,
             unlabelled: unlabelled, labelled_w: LABELLED_W, hot: hot === null ? -1 : hot.i,
             ticks: tk.map(function (k) { return k.text; }), unit: unit, view: api.view(), width: width,
             height: height, plot: {x: LABEL_W, w: plotW}};
    readout.textContent = 'showing ' + withUnit(view.a) + ' to ' + withUnit(view.b) + ' (' + withUnit(view.b - view.a) +
        ') of ' + withUnit(full.a) + ' to ' + withUnit(full.b) +
        (p.merged ? ' · ' + p.merged + ' bars narrower than a pixel drawn merged' : '') +
        (drawAll ? '' : ' · arrows hidden: zoom in to see them');
    document.body.dataset.drawn = String(marks.length);
  }

  // Where a bar would be drawn (for an arrow whose other end is off the view).
  function box(i) {
    var b = bars[i];
    return {x0: x(b.start), x1: x(b.start + b.dur), lane: lanes[b.lane]};
  }

  function arrow(a, b, what, style) {
    var x1 = a.x1, x2 = what.atEnd ? b.x1 : b.x0;
    var down = b.lane.y >= a.lane.y;
    var y1 = barTop(a.lane) + (down ? BAR_H : 0);
    var y2 = barTop(b.lane) + (down ? 0 : BAR_H);
    var bend = Math.max(8, Math.abs(y2 - y1) / 2);
    ctx.strokeStyle = style.line;
    ctx.lineWidth = style.width;
    ctx.setLineDash(what.toHost ? [3, 2] : []);
    ctx.beginPath(); ctx.moveTo(x1, y1);
    ctx.bezierCurveTo(x1, y1 + (down ? bend : -bend), x2, y2 + (down ? -bend : bend), x2, y2);
    ctx.stroke();
    ctx.setLineDash([]);
    var s = down ? -1 : 1;
    ctx.fillStyle = style.head;
    ctx.beginPath(); ctx.moveTo(x2, y2); ctx.lineTo(x2 - 3.5, y2 + 7 * s); ctx.lineTo(x2 + 3.5, y2 + 7 * s);
    ctx.closePath(); ctx.fill();
  }

  function clampView(a, b) {
    var span = Math.min(Math.max(b - a, MIN_SPAN_NS), full.b - full.a);
    a = Math.max(full.a, Math.min(a, full.b - span));
    view.a = a; view.b = a + span;
    draw();
  }

  function setHot(b) {
    if (b === hot) return;
    hot = b;
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
    // Draws bar `i` (an index into the data's bars; -1: none) as the pointer does.
    select: function (i) { setHot(bars[i] || null); return api.stats(); },
    // Draws the arrows that held nothing back too (faint, under the bars), or not.
    every_dependency: function (on) { everyBox.checked = every = !!on; draw(); return api.stats(); },
    stats: function () { return stats; },
    // The bars drawn alone (not merged), where, and the text written on each.
    marks: function () {
      return marks.filter(function (m) { return m.bars.length === 1; }).map(function (m) {
        return {bar: m.best.i, x0: m.x0, x1: m.x1, y: barTop(m.lane), h: BAR_H, text: m.text};
      });
    }
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
      hot = null;
      clampView(drag.a - dt, drag.b - dt);
      tip.hidden = true;
      return;
    }
    if (ev.target === canvas) hover(plotX(ev), ev); else { tip.hidden = true; setHot(null); }
  });
  canvas.addEventListener('mouseleave', function () { tip.hidden = true; setHot(null); });

  // "matmul#3 on cpu stream 1"; "randn#1, randn#2 and 3 more".
  function named(i) {
    var b = bars[i], l = lanes[b.lane];
    return b.kind === 'op' || b.kind === 'wait' ? b.label + '#' + b.seq + ' on ' + l.key : b.label;
  }
  function list(arrowsIn) {
    var names = arrowsIn.slice(0, 3).map(function (a) { return named(a.from); });
    return names.join(', ') + (arrowsIn.length > 3 ? ' and ' + (arrowsIn.length - 3) + ' more' : '');
  }

  function hover(p, ev) {
    var hit = null;
    for (var i = 0; i < marks.length; i++) {
      var d = marks[i], by = barTop(d.lane);
      if (p.y >= by && p.y <= by + BAR_H && p.x >= d.x0 - 1 && p.x <= d.x1 + 1) { hit = d; break; }
    }
    setHot(hit && hit.bars.length === 1 ? hit.bars[0] : null);
    if (!hit) { tip.hidden = true; return; }
    var lines;
    if (hit.bars.length > 1) {
      var first = hit.bars[0], last = hit.bars[hit.bars.length - 1];
      lines = [hit.bars.length + ' bars narrower than a pixel, merged (zoom in to see them)',
               'from ' + withUnit(first.start) + ' to ' + withUnit(last.start + last.dur)];
    } else {
      var b = hit.bars[0], lane = hit.lane;
      var what = b.kind === 'op' || b.kind === 'wait' ? b.label + '  #' + b.seq + ' on ' + lane.key
                                                      : b.label + '  (' + lane.title + ', ' + lane.sub + ')';
      lines = [what];
      if (b.detail) lines.push(b.detail);
      lines.push('start ' + withUnit(b.start) + ', ' + (b.kind === 'op' || b.kind === 'callback' || b.kind === 'range' ? 'duration ' : 'waited ') +
                 withUnit(b.dur) + (b.flags & TIMED_OUT ? ' (timed out)' : ''));
      if (b.flags & INFERRED) lines.push('placed by what it waited for: no device time of its own');
      var held = b.into.filter(function (a) { return a.held; });
      var other = b.into.filter(function (a) { return !a.held; });
      if (held.length) lines.push('held back by ' + list(held));
      if (other.length) lines.push((held.length ? 'also after ' : 'after ') + list(other) + ' (done in time)');
      if (b.out.length) lines.push(b.out.length + (b.out.length === 1 ? ' bar' : ' bars') + ' waited for it');
      if (b.error) lines.push('error: ' + b.error);
    }
    tip.textContent = lines.join('\n');
    tip.hidden = false;
    var r = host.getBoundingClientRect();
    tip.style.left = Math.min(ev.clientX - r.left + 12, r.width - 380) + 'px';
    tip.style.top = (ev.clientY - r.top + 14) + 'px';
  }

  document.getElementById('zoom-in').onclick = function () { api.zoom(2); };
  document.getElementById('zoom-out').onclick = function () { api.zoom(0.5); };
  document.getElementById('zoom-reset').onclick = function () { api.reset(); };
  everyBox.onchange = function () { api.every_dependency(everyBox.checked); };
  document.addEventListener('keydown', function (ev) {
    if (ev.key === '+' || ev.key === '=') api.zoom(2);
    else if (ev.key === '-') api.zoom(0.5);
    else if (ev.key === '0') api.reset();
    else if (ev.key === 'ArrowLeft') api.pan(-(view.b - view.a) / 4 / per);
    else if (ev.key === 'ArrowRight') api.pan((view.b - view.a) / 4 / per);
    else if (ev.key === 'Escape') setHot(null);
  });
  window.addEventListener('resize', resize);
  resize();
})();
