// Profile::timeline_html: one self-contained page (no script, font or style from elsewhere)
// with the profile drawn as an SVG timeline.
//
//   rows     a row per stream (grouped by device), then a row per host thread that waited
//            and per callback thread, then a row per user-range lane (layout.hpp's
//            RangeLane: a thread's ranges at one nesting depth);
//   bars     ops at their times (class "op", a colour per op name, the microseconds written
//            on them where they fit), waits hatched (class "wait"), host waits and callbacks
//            (classes "hostwait", "callback"), user ranges (class "range", their name on
//            them); each has a <title> (the browser shows it on
//            hover) and data- attributes with its figures;
//   arrows   from an op's end to what waited for it (a wait or op of another stream, a host
//            wait that saw it end, a callback), with arrowheads;
//   axis     above and below, in µs, ms or s, from the first thing drawn to the last.
//
// Everything is laid out here, in C++, so the page needs nothing to run; its little CSS
// only styles.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <unordered_map>

#include "eventide/runtime.hpp"
#include "profile/layout.hpp"

namespace eventide {

namespace {

using profile::format_fixed;
using profile::Layout;

// Geometry, in the SVG's user units (CSS pixels at the page's natural width).
constexpr double kWidth = 1360;
constexpr double kLabelWidth = 200;
constexpr double kRightMargin = 28;
constexpr double kPlotWidth = kWidth - kLabelWidth - kRightMargin;
constexpr double kAxisHeight = 30;
constexpr double kRowHeight = 36;
constexpr double kBarHeight = 22;
constexpr double kGroupGap = 10;
constexpr double kMinBarWidth = 2;
constexpr double kCharWidth = 6.4;  // of the 11 px label font, on average

// Distinct, colour-blind-friendly colours (Tableau 10 and two more); names beyond them get
// golden-angle hues.
constexpr std::array<const char*, 12> kPalette = {
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#8cd17d"};

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

std::string num(double v) { return format_fixed(v, 1); }

// "512.3 µs", "3.25 µs", "1523 µs".
std::string duration_text(double us) {
  if (us < 10) return format_fixed(us, 2) + " µs";
  if (us < 1000) return format_fixed(us, 1) + " µs";
  return format_fixed(us, 0) + " µs";
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

// Light bars get dark text, dark bars white.
bool is_light(const std::string& hex) {
  int r = std::stoi(hex.substr(1, 2), nullptr, 16);
  int g = std::stoi(hex.substr(3, 2), nullptr, 16);
  int b = std::stoi(hex.substr(5, 2), nullptr, 16);
  return 0.299 * r + 0.587 * g + 0.114 * b > 150;
}

struct Row {
  std::string key;    // data-stream / data-thread
  std::string title;  // big label
  std::string sub;    // small label under it
  std::string kind;   // "stream", "host"
  double y = 0;       // top
};

struct Box {  // a drawn bar, for the arrows
  std::size_t row = 0;
  double x0 = 0, x1 = 0;
};

class PageWriter {
 public:
  explicit PageWriter(const Profile& p) : p_(p), layout_(profile::lay_out(p)) {}

  std::string write() {
    assign_colours();
    place_rows();
    find_range();
    std::string svg = draw();
    return page(svg);
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

  void place_rows() {
    double y = kAxisHeight + 6;
    std::optional<Device> device;
    for (const profile::StreamTrack& st : layout_.streams) {
      if (device && *device != st.device) y += kGroupGap;
      device = st.device;
      rows_.push_back(Row{st.stream, profile::short_stream_name(st), st.device.str(), "stream", y});
      y += kRowHeight;
    }
    std::map<std::string, std::size_t> host;
    auto host_row = [&](const std::string& key, const std::string& title, const std::string& sub) {
      auto [it, added] = host.try_emplace(key, rows_.size());
      if (added) {
        if (it->second == stream_rows_end()) y += kGroupGap;
        rows_.push_back(Row{key, title, sub, "host", y});
        y += kRowHeight;
      }
      return it->second;
    };
    stream_rows_ = rows_.size();
    for (const ProfiledHostWait& h : p_.host_waits()) {
      host_wait_rows_.push_back(host_row("host waits " + h.thread, h.thread, "host waits"));
    }
    for (const ProfiledCallback& c : p_.callbacks()) {
      std::string device = c.thread.rfind("callbacks ", 0) == 0 ? c.thread.substr(10) : c.thread;
      callback_rows_.push_back(host_row(c.thread, "callbacks", device));
    }
    for (const profile::RangeLane& lane : layout_.range_lanes) {
      range_lane_rows_.push_back(host_row("ranges " + lane.thread + " " + std::to_string(lane.depth), lane.thread,
                                          lane.depth == 0 ? "ranges" : "ranges, depth " + std::to_string(lane.depth)));
    }
    height_ = y + 4 + kAxisHeight;
  }

  std::size_t stream_rows_end() const { return stream_rows_; }

  void find_range() {
    double lo = INFINITY, hi = -INFINITY;
    auto take = [&](double a, double b) {
      lo = std::min(lo, a);
      hi = std::max(hi, b);
    };
    for (const auto& s : layout_.spans) {
      if (s) take(s->start_ns / 1000.0, s->end_ns / 1000.0);
    }
    for (const ProfiledHostWait& h : p_.host_waits()) take(h.start_us, h.end_us);
    for (const ProfiledCallback& c : p_.callbacks()) take(c.start_us, c.end_us);
    for (const ProfiledRange& r : p_.ranges()) take(r.start_us, r.end_us);
    if (!(lo <= hi)) {
      lo = 0;
      hi = std::max(p_.duration_us(), 1.0);
    }
    if (hi - lo < 1) hi = lo + 1;
    // Ticks of 1, 2 or 5 times a power of ten, about eight of them; the range snapped to them.
    const double raw = (hi - lo) / 8;
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    step_ = magnitude * (raw / magnitude < 1.5 ? 1 : raw / magnitude < 3.5 ? 2 : raw / magnitude < 7.5 ? 5 : 10);
    t0_ = std::floor(lo / step_) * step_;
    t1_ = std::max(t0_ + step_, hi);
  }

  double x(double us) const { return kLabelWidth + (us - t0_) / (t1_ - t0_) * kPlotWidth; }

  std::string tick_label(double us) const {
    if (step_ >= 1e6) return format_fixed(us / 1e6, step_ >= 1e7 ? 0 : 1) + " s";
    if (step_ >= 1e3) return format_fixed(us / 1e3, step_ >= 1e4 ? 0 : 1) + " ms";
    return format_fixed(us, step_ >= 1 ? 0 : step_ >= 0.1 ? 1 : 2) + " µs";
  }

  std::string draw() {
    std::string s;
    s += "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" viewBox=\"0 0 " + num(kWidth) +
         " " + num(height_) + "\" width=\"" + num(kWidth) + "\" height=\"" + num(height_) +
         "\" role=\"img\" aria-label=\"timeline of " + std::to_string(p_.ops().size()) + " ops\">\n";
    s += "<defs>\n"
         "<marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" "
         "markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" "
         "fill=\"#3d4752\"/></marker>\n"
         "<pattern id=\"hatch\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\" "
         "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#e4e7eb\"/>"
         "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#9aa5b1\" stroke-width=\"2.5\"/></pattern>\n"
         "<clipPath id=\"plot\"><rect x=\"" + num(kLabelWidth) + "\" y=\"0\" width=\"" +
         num(kPlotWidth + kRightMargin) + "\" height=\"" + num(height_) + "\"/></clipPath>\n"
         "</defs>\n";
    draw_rows(s);
    draw_axis(s);
    s += "<g clip-path=\"url(#plot)\">\n";
    draw_bars(s);
    draw_arrows(s);
    s += "</g>\n</svg>\n";
    return s;
  }

  void draw_rows(std::string& s) {
    s += "<g class=\"rows\">\n";
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      const Row& r = rows_[i];
      s += "<g class=\"row\" data-kind=\"" + r.kind + "\" data-" +
           (r.kind == "stream" ? "stream" : "thread") + "=\"" + escape(r.key) + "\">";
      s += "<rect class=\"band\" x=\"0\" y=\"" + num(r.y) + "\" width=\"" + num(kWidth) +
           "\" height=\"" + num(kRowHeight) + "\" fill=\"" + (i % 2 ? "#ffffff" : "#f4f6f8") + "\"/>";
      s += "<text class=\"row-title\" x=\"14\" y=\"" + num(r.y + 16) + "\">" + escape(r.title) + "</text>";
      s += "<text class=\"row-sub\" x=\"14\" y=\"" + num(r.y + 29) + "\">" + escape(r.sub) + "</text>";
      s += "</g>\n";
    }
    s += "<line class=\"divider\" x1=\"" + num(kLabelWidth - 0.5) + "\" y1=\"" + num(kAxisHeight) +
         "\" x2=\"" + num(kLabelWidth - 0.5) + "\" y2=\"" + num(height_ - kAxisHeight) + "\"/>\n";
    s += "</g>\n";
  }

  void draw_axis(std::string& s) {
    s += "<g class=\"axis\">\n";
    const double bottom = height_ - kAxisHeight;
    for (double t = t0_; t <= t1_ + step_ * 1e-9; t += step_) {
      const double px = x(t);
      s += "<line class=\"grid\" x1=\"" + num(px) + "\" y1=\"" + num(kAxisHeight - 4) + "\" x2=\"" +
           num(px) + "\" y2=\"" + num(bottom + 4) + "\"/>";
      const std::string label = tick_label(t);
      s += "<text class=\"tick\" x=\"" + num(px) + "\" y=\"" + num(kAxisHeight - 10) + "\">" + label + "</text>";
      s += "<text class=\"tick\" x=\"" + num(px) + "\" y=\"" + num(bottom + 18) + "\">" + label + "</text>\n";
    }
    s += "</g>\n";
  }

  double bar_y(std::size_t row) const { return rows_[row].y + (kRowHeight - kBarHeight) / 2; }

  // A bar: its rect with a <title>, and its label where it fits.
  void bar(std::string& s, const char* cls, std::size_t row, double start_us, double end_us,
           const std::string& fill, const std::string& title, const std::string& data,
           const std::string& name, bool failed) {
    double x0 = x(start_us);
    double w = std::max(x(end_us) - x0, kMinBarWidth);
    const double y = bar_y(row);
    s += std::string("<rect class=\"") + cls + (failed ? " failed" : "") + "\" x=\"" + num(x0) +
         "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(kBarHeight) +
         "\" rx=\"3\" fill=\"" + fill + "\"" + data + "><title>" + escape(title) + "</title></rect>";
    const std::string dur = duration_text(end_us - start_us);
    std::string label;
    if (!name.empty() && (name.size() + 1 + dur.size()) * kCharWidth + 10 <= w) {
      label = name + " " + dur;
    } else if (dur.size() * kCharWidth + 8 <= w) {
      label = dur;
    }
    if (!label.empty()) {
      const bool dark_text = fill.rfind("url(", 0) == 0 || is_light(fill);
      s += "<text class=\"bar-label" + std::string(dark_text ? " dark" : "") + "\" x=\"" +
           num(x0 + w / 2) + "\" y=\"" + num(y + kBarHeight / 2 + 4) + "\">" + escape(label) + "</text>";
    }
    s += "\n";
    boxes_.push_back(Box{row, x0, x0 + w});
  }

  static std::string data_attr(const char* name, const std::string& value) {
    return std::string(" data-") + name + "=\"" + escape(value) + "\"";
  }

  void draw_bars(std::string& s) {
    const auto& ops = p_.ops();
    op_box_.assign(ops.size(), SIZE_MAX);
    for (std::size_t r = 0; r < layout_.streams.size(); ++r) {
      for (std::size_t i : layout_.streams[r].ops) {
        const ProfiledOp& op = ops[i];
        const auto& span = layout_.spans[i];
        if (!span) continue;
        const double start = span->start_ns / 1000.0;
        const double end = span->end_ns / 1000.0;
        std::string title = op.name + "  #" + std::to_string(op.seq) + " on " + op.stream;
        if (!op.detail.empty()) title += "\n" + op.detail;
        title += "\nstart " + format_fixed(start, 1) + " µs, " +
                 (op.is_wait ? "waited " : "duration ") + duration_text(end - start);
        if (span->inferred) title += " (placed by what it waited for: no device time of its own)";
        if (!op.error.empty()) title += "\nerror: " + op.error;
        std::string data = data_attr("id", std::to_string(op.id)) + data_attr("name", op.name) +
                           data_attr("stream", op.stream) + data_attr("start-us", format_fixed(start, 3)) +
                           data_attr("dur-us", format_fixed(end - start, 3));
        if (!op.detail.empty()) data += data_attr("detail", op.detail);
        if (!op.error.empty()) data += data_attr("error", op.error);
        op_box_[i] = boxes_.size();
        if (op.is_wait) {
          bar(s, "wait", r, start, end, "url(#hatch)", title, data, "", !op.error.empty());
        } else {
          bar(s, "op", r, start, end, colour_.at(op.name), title, data, op.name, !op.error.empty());
        }
      }
    }
    for (std::size_t h = 0; h < p_.host_waits().size(); ++h) {
      const ProfiledHostWait& w = p_.host_waits()[h];
      std::string title = profile::host_wait_label(p_, layout_, w) + " (" + w.thread + ")\nstart " +
                          format_fixed(w.start_us, 1) + " µs, waited " + duration_text(w.end_us - w.start_us) +
                          (w.finished ? "" : " (timed out)");
      std::string data = data_attr("event", std::to_string(w.event)) + data_attr("thread", w.thread) +
                         data_attr("start-us", format_fixed(w.start_us, 3)) +
                         data_attr("dur-us", format_fixed(w.end_us - w.start_us, 3));
      host_wait_box_.push_back(boxes_.size());
      bar(s, "hostwait", host_wait_rows_[h], w.start_us, w.end_us, "#aab4c0", title, data, "wait", false);
    }
    for (std::size_t c = 0; c < p_.callbacks().size(); ++c) {
      const ProfiledCallback& cb = p_.callbacks()[c];
      std::string title = "callback of event " + std::to_string(cb.event) + " (" + cb.thread + ")\nstart " +
                          format_fixed(cb.start_us, 1) + " µs, ran " + duration_text(cb.end_us - cb.start_us);
      std::string data = data_attr("event", std::to_string(cb.event)) + data_attr("thread", cb.thread) +
                         data_attr("start-us", format_fixed(cb.start_us, 3)) +
                         data_attr("dur-us", format_fixed(cb.end_us - cb.start_us, 3));
      callback_box_.push_back(boxes_.size());
      bar(s, "callback", callback_rows_[c], cb.start_us, cb.end_us, "#5b5f97", title, data, "callback", false);
    }
    for (std::size_t i = 0; i < p_.ranges().size(); ++i) {
      const ProfiledRange& r = p_.ranges()[i];
      std::string title = r.name + " (range, " + r.thread + ")\nstart " + format_fixed(r.start_us, 1) +
                          " µs, lasted " + duration_text(r.end_us - r.start_us);
      std::string data = data_attr("name", r.name) + data_attr("thread", r.thread) +
                         data_attr("start-us", format_fixed(r.start_us, 3)) +
                         data_attr("dur-us", format_fixed(r.end_us - r.start_us, 3));
      bar(s, "range", range_lane_rows_[layout_.range_lane_of[i]], r.start_us, r.end_us, "#e8d9a8", title, data,
          r.name, false);
    }
  }

  // From the end of `from` to `to` (its end if `at_end`, else its start), leaving and
  // entering the bars at their top or bottom edge.
  void arrow(std::string& s, std::size_t from, std::size_t to, bool at_end, const char* cls) {
    const Box& a = boxes_[from];
    const Box& b = boxes_[to];
    const double x1 = a.x1;
    const double x2 = at_end ? b.x1 : b.x0;
    const bool down = rows_[b.row].y >= rows_[a.row].y;
    const double y1 = bar_y(a.row) + (down ? kBarHeight : 0);
    const double y2 = bar_y(b.row) + (down ? 0 : kBarHeight);
    const double bend = std::max(8.0, std::abs(y2 - y1) / 2);
    s += std::string("<path class=\"") + cls + "\" d=\"M" + num(x1) + "," + num(y1) + " C" + num(x1) + "," +
         num(y1 + (down ? bend : -bend)) + " " + num(x2) + "," + num(y2 + (down ? -bend : bend)) + " " +
         num(x2) + "," + num(y2) + "\" marker-end=\"url(#arrow)\"/>\n";
  }

  void draw_arrows(std::string& s) {
    s += "<g class=\"arrows\">\n";
    for (const profile::Arrow& a : profile::arrows(p_, layout_)) {
      const std::size_t from = op_box_[a.from];
      if (from == SIZE_MAX) continue;
      switch (a.to) {
        case profile::Arrow::To::op:
          if (op_box_[a.index] != SIZE_MAX) arrow(s, from, op_box_[a.index], a.at_end, "dep");
          break;
        case profile::Arrow::To::host_wait:
          arrow(s, from, host_wait_box_[a.index], a.at_end, "dep host");
          break;
        case profile::Arrow::To::callback:
          arrow(s, from, callback_box_[a.index], a.at_end, "dep host");
          break;
      }
    }
    s += "</g>\n";
  }

  std::string page(const std::string& svg) const {
    std::size_t waits = 0;
    for (const ProfiledOp& op : p_.ops()) waits += op.is_wait;
    const double span_us = t1_ - t0_;
    auto count = [](std::size_t n, const char* one, const char* many) {
      return std::to_string(n) + " " + (n == 1 ? one : many);
    };
    std::string summary = count(p_.ops().size() - waits, "op", "ops") + ", " + count(waits, "wait", "waits") +
                          " on " + count(layout_.streams.size(), "stream", "streams") + " · " +
                          count(p_.records().size(), "record", "records") + " · " +
                          count(p_.host_waits().size(), "host wait", "host waits") + " · " +
                          count(p_.callbacks().size(), "callback", "callbacks") + " · profile " +
                          duration_text(p_.duration_us()) + ", drawn " + tick_label(t0_) + " to " +
                          tick_label(t1_) + " (" + duration_text(span_us) + ")";
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
         "svg.timeline{display:block;max-width:100%;height:auto;font-family:inherit}\n"
         ".row-title{font-size:13px;font-weight:600;fill:#1f2933}\n"
         ".row-sub{font-size:11px;fill:#7b8794}\n"
         ".divider{stroke:#cbd2d9}\n"
         ".grid{stroke:#e4e7eb;stroke-width:1}\n"
         ".tick{font-size:11px;fill:#616e7c;text-anchor:middle}\n"
         ".op,.wait,.hostwait,.callback,.range{stroke:rgba(0,0,0,.25);stroke-width:.5}\n"
         ".op:hover,.wait:hover,.hostwait:hover,.callback:hover,.range:hover{stroke:#111;stroke-width:1.5}\n"
         ".failed{stroke:#b3261e;stroke-width:2;stroke-dasharray:4 2}\n"
         ".bar-label{font-size:11px;fill:#fff;text-anchor:middle;pointer-events:none}\n"
         ".bar-label.dark{fill:#1f2933}\n"
         ".dep{fill:none;stroke:#3d4752;stroke-width:1.2;opacity:.75}\n"
         ".dep.host{stroke-dasharray:3 2}\n"
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
    h += svg;
    // Per op name: how many, how long.
    if (!names_.empty()) {
      std::map<std::string, std::pair<std::size_t, double>> totals;
      for (std::size_t i = 0; i < p_.ops().size(); ++i) {
        const ProfiledOp& op = p_.ops()[i];
        if (op.is_wait || !layout_.spans[i]) continue;
        auto& t = totals[op.name];
        ++t.first;
        t.second += (layout_.spans[i]->end_ns - layout_.spans[i]->start_ns) / 1000.0;
      }
      h += "<table class=\"totals\"><tr><th>op</th><th>count</th><th>total</th><th>mean</th></tr>\n";
      for (const std::string& n : names_) {
        auto it = totals.find(n);
        if (it == totals.end()) continue;
        const auto& [count, total] = it->second;
        h += "<tr><td><span class=\"swatch\" style=\"background:" + colour_.at(n) +
             "\"></span> " + escape(n) + "</td><td>" + std::to_string(count) + "</td><td>" +
             duration_text(total) + "</td><td>" + duration_text(total / count) + "</td></tr>\n";
      }
      h += "</table>\n";
    }
    h += "</body>\n</html>\n";
    return h;
  }

  const Profile& p_;
  Layout layout_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, std::string> colour_;
  std::vector<Row> rows_;
  std::size_t stream_rows_ = 0;
  std::vector<std::size_t> host_wait_rows_, callback_rows_, range_lane_rows_;
  std::vector<Box> boxes_;
  std::vector<std::size_t> op_box_, host_wait_box_, callback_box_;
  double height_ = 0;
  double t0_ = 0, t1_ = 1, step_ = 1;
};

}  // namespace

std::string Profile::timeline_html() const { return PageWriter(*this).write(); }

void Profile::export_timeline(const std::string& path) const {
  profile::write_text_file(path, timeline_html(), "export_timeline");
}

}  // namespace eventide
