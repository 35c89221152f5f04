// Profile::timeline_html: one self-contained page (no script, font or style from elsewhere)
// with the profile drawn on a canvas by a small script of its own (timeline.js),
// zoomable and pannable.
//
// The page, top to bottom: its title (TimelineOptions::title, else "eventide timeline") and
// note (a line of what to look at); a summary that counts ops as Profile::ops() does (so as
// the CLI's "profile: N ops" and Python's len(prof.ops)), saying how many are waits and
// markers; a legend (a swatch per op name, waits, the arrows); the controls; the canvas; a
// table of totals per op name.
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
//     "arrows":    [from bar, to bar, enters at its end (0/1), to the host (0/1),
//                   held its target back (0/1): layout.hpp's Arrow::held_back]
//   }
//
// A lane is a row of bars; its kind says what it holds. A lane of a new kind is a new entry in
// "lanes" with its bars in "bars" under a new entry of "kinds": the script draws any lane and
// any bar kind the same way, a bar in its colour (or hatched).
//
//   rows     a lane per stream (grouped by device), then one per host thread that waited and
//            per callback thread, then one per user-range lane (layout.hpp's RangeLane: a
//            thread's ranges at one nesting depth);
//   bars     ops at their times (a colour per op name, kPalette's, the same on every page),
//            waits hatched, markers as 2 px ticks, host waits, callbacks and user ranges; a
//            bar's label is its name (the lane says the thread); the script writes on each
//            bar what of its name and duration fits;
//   arrows   from an op's end to what waited for it: what held an op back, over the bars;
//            all of a bar's own when the pointer is on it; the rest faint under the bars
//            when "every dependency" is ticked.
//
// Zoom: the mouse wheel (around the pointer), the + and − buttons or keys; pan: drag, or the
// arrow keys; "whole profile" resets. timeline_script.hpp says what the script draws and what
// `window.eventideTimeline` offers a test.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "eventide/runtime.hpp"
#include "profile/json.hpp"
#include "profile/layout.hpp"
#include "profile/timeline_script.hpp"

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

// The ops' colours, colour-blind-friendly: Tableau 10's, then ten more of Tableau 20's (none of
// its greys: no op should look like a host wait).
constexpr std::array<const char*, 20> kPalette = {
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#a0cbe8", "#ffbe7d", "#8cd17d", "#b6992d", "#499894",
    "#86bcb6", "#f1ce63", "#d37295", "#fabfd2", "#d4a6c8", "#9d7660"};
// eventide's own op names, each with the colour of its place in kPalette, the commonest first:
// no two of them ever share a colour.
constexpr std::array<std::string_view, kPalette.size()> kOwnOps = {
    "randn", "matmul", "add", "fill", "copy", "all_reduce", "mul",
    "sub", "cast", "rand", "broadcast", "from_host", "empty", "all_gather",
    "reduce_scatter", "barrier", "div", "send", "recv", "from_external"};
constexpr const char* kMarkerColour = "#323f4b";
constexpr const char* kHostWaitColour = "#aab4c0";
constexpr const char* kCallbackColour = "#5b5f97";
constexpr const char* kRangeColour = "#e8d9a8";

// An op name's colour, the same on every page and every run (never the order the names came
// in): eventide's own ops have theirs (kOwnOps); any other name (a user's enqueue) takes the
// palette entry its FNV-1a hash picks, which may also be one of eventide's: the legend, the
// label and the tooltip tell them apart.
std::string op_colour(const std::string& name) {
  if (name == "marker") return kMarkerColour;
  for (std::size_t i = 0; i < kOwnOps.size(); ++i) {
    if (kOwnOps[i] == name) return kPalette[i];
  }
  std::uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  return kPalette[h % kPalette.size()];
}

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

class PageWriter {
 public:
  PageWriter(const Profile& p, const TimelineOptions& options)
      : p_(p), options_(options), layout_(profile::lay_out(p)) {}

  std::string write() {
    assign_colours();
    find_range();
    std::string data = data_json();
    return page(data);
  }

 private:
  // The op names in the order they first came (the legend's order), each with its colour.
  void assign_colours() {
    for (const ProfiledOp& op : p_.ops()) {
      if (op.is_wait || colour_.count(op.name)) continue;
      names_.push_back(op.name);
      colour_[op.name] = op_colour(op.name);
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
                                  text(profile::host_wait_label(p_, layout_, w)),
                                  profile::to_ns(w.start_us), profile::to_ns(w.end_us), w.event, 0, -1, -1,
                                  w.finished ? 0 : kTimedOut));
    }
    for (const ProfiledCallback& c : p_.callbacks()) {
      std::string dev = c.thread.rfind("callbacks ", 0) == 0 ? c.thread.substr(10) : c.thread;
      const std::size_t lane = host_lane(c.thread, "callbacks", dev);
      callback_bar.push_back(bar(lane, 3, colour(kCallbackColour),
                                 text("callback of event " + std::to_string(c.event)),
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
      bar(range_lane[layout_.range_lane_of[i]], 4, colour(kRangeColour), text(r.name),
          profile::to_ns(r.start_us), profile::to_ns(r.end_us), 0, 0, -1, -1, 0);
    }
    // The parts of graph replays: a lane per stream that replayed, after the ranges', its
    // nodes (or kernels) under the replay's bar in time.
    ++group;
    for (const profile::StreamTrack& st : layout_.streams) {
      std::size_t lane = SIZE_MAX;
      for (std::size_t i : st.ops) {
        for (const ProfiledPart& part : ops[i].parts) {
          if (lane == SIZE_MAX) {
            lane = lanes.size();
            lanes.push_back(Lane{"range", st.stream + " graph nodes", profile::short_stream_name(st),
                                 "graph nodes", group});
          }
          bar(lane, 4, colour(op_colour(part.name)), text(part.name), profile::to_ns(part.start_us),
              profile::to_ns(part.end_us), ops[i].id, 0, -1, -1, 0);
        }
      }
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
                (a.at_end ? "1" : "0") + "," + (a.to == profile::Arrow::To::op ? "0" : "1") + "," +
                (a.held_back ? "1" : "0") + "]";
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
    has_arrows_ = n_arrows != 0;
    return j;
  }

  std::string page(const std::string& data) const {
    std::size_t waits = 0, markers = 0;
    for (const ProfiledOp& op : p_.ops()) {
      waits += op.is_wait;
      markers += op.is_marker;
    }
    auto count = [](std::size_t n, const char* one, const char* many) {
      return std::to_string(n) + " " + (n == 1 ? one : many);
    };
    // Every op of the profile, as ops() holds them, then how many of those are waits and
    // markers: "26 ops (5 waits, 2 markers) on 4 streams".
    std::string among;
    if (waits) among = count(waits, "wait", "waits");
    if (markers) among += (among.empty() ? "" : ", ") + count(markers, "marker", "markers");
    std::string summary = count(p_.ops().size(), "op", "ops") + (among.empty() ? "" : " (" + among + ")") +
                          " on " + count(layout_.streams.size(), "stream", "streams") + " · " +
                          count(p_.records().size(), "event record", "event records") + " · " +
                          count(p_.host_waits().size(), "host wait", "host waits") + " · " +
                          count(p_.callbacks().size(), "callback", "callbacks") + " · " +
                          count(p_.ranges().size(), "range", "ranges") + " · profile " +
                          in_unit(p_.duration_us() * 1e3) + ", drawn " + in_unit(static_cast<double>(t0_)) +
                          " to " + in_unit(static_cast<double>(t1_)) + " · times in " + unit();
    std::string h;
    h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta name=\"generator\" content=\"eventide " + std::string(version()) + "\">\n"
         "<title>" + escape(options_.title.empty() ? "eventide timeline" : options_.title + " · eventide timeline") +
         "</title>\n<style>\n"
         "body{margin:16px 20px;font:13px/1.45 system-ui,-apple-system,\"Segoe UI\",Roboto,\"DejaVu Sans\","
         "\"Liberation Sans\",sans-serif;color:#1f2933;background:#fff}\n"
         "h1{font-size:18px;margin:0 0 2px;font-weight:600}\n"
         ".note{margin:0 0 4px;max-width:1100px}\n"
         ".summary{color:#52606d;margin:0 0 10px}\n"
         ".legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:0 0 10px;padding:0;list-style:none}\n"
         ".legend li{display:flex;align-items:center;gap:6px}\n"
         ".swatch{width:14px;height:14px;border-radius:3px;display:inline-block}\n"
         ".swatch.wait{background:repeating-linear-gradient(45deg,#e4e7eb 0 3px,#9aa5b1 3px 5px)}\n"
         ".arrow{width:22px;height:0;border-top:2px solid #3d4752;display:inline-block}\n"
         ".controls{display:flex;align-items:center;gap:6px;margin:0 0 6px;color:#52606d}\n"
         ".controls button{font:inherit;min-width:28px;padding:1px 8px;border:1px solid #cbd2d9;"
         "border-radius:4px;background:#f4f6f8;cursor:pointer}\n"
         ".controls label{display:flex;align-items:center;gap:4px;margin:0 6px}\n"
         "#timeline{position:relative;max-width:1360px}\n"
         "#timeline-canvas{display:block;cursor:grab}\n"
         "#timeline-canvas.dragging{cursor:grabbing}\n"
         "#timeline-tip{position:absolute;pointer-events:none;white-space:pre;background:#1f2933;color:#fff;"
         "font-size:12px;padding:4px 8px;border-radius:4px;max-width:360px;overflow:hidden;z-index:1}\n"
         "table{border-collapse:collapse;margin-top:14px;font-variant-numeric:tabular-nums}\n"
         "th,td{padding:3px 12px 3px 0;text-align:right}\n"
         "th:first-child,td:first-child{text-align:left}\n"
         "th{color:#52606d;font-weight:600;border-bottom:1px solid #cbd2d9}\n"
         ".empty{color:#7b8794;font-style:italic}\n"
         "</style>\n</head>\n<body>\n";
    h += "<h1>" + escape(options_.title.empty() ? "eventide timeline" : options_.title) + "</h1>\n";
    if (!options_.note.empty()) h += "<p class=\"note\">" + escape(options_.note) + "</p>\n";
    h += "<p class=\"summary\">" + escape(summary) + "</p>\n";
    if (p_.ops().empty()) h += "<p class=\"empty\">No ops were recorded.</p>\n";
    h += "<ul class=\"legend\">";
    for (const std::string& n : names_) {
      h += "<li><span class=\"swatch\" style=\"background:" + colour_.at(n) + "\"></span>" + escape(n) + "</li>";
    }
    if (waits) h += "<li><span class=\"swatch wait\"></span>wait</li>";
    if (has_arrows_) {
      h += "<li><span class=\"arrow\"></span>what held it back (point at a bar for all its arrows)</li>";
    }
    h += "</ul>\n";
    h += "<div class=\"controls\"><button id=\"zoom-out\" title=\"zoom out (-)\">−</button>"
         "<button id=\"zoom-in\" title=\"zoom in (+)\">+</button>"
         "<button id=\"zoom-reset\" title=\"the whole profile (0)\">whole profile</button>"
         "<label title=\"also the dependencies that held nothing back, faint\"><input type=\"checkbox\" "
         "id=\"every-dependency\">every dependency</label>"
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
    h += "<script>" + std::string(profile::kTimelineScript) + "</script>\n";
    h += "</body>\n</html>\n";
    return h;
  }

  const Profile& p_;
  const TimelineOptions& options_;
  Layout layout_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, std::string> colour_;
  std::vector<std::string> texts_, colours_;
  std::unordered_map<std::string, int> text_index_, colour_index_;
  std::int64_t t0_ = 0, t1_ = 1000;
  bool ms_ = false;
  bool has_arrows_ = false;
};

}  // namespace

std::string Profile::timeline_html() const { return timeline_html(TimelineOptions{}); }

std::string Profile::timeline_html(const TimelineOptions& options) const {
  return PageWriter(*this, options).write();
}

void Profile::export_timeline(const std::string& path) const { export_timeline(path, TimelineOptions{}); }

void Profile::export_timeline(const std::string& path, const TimelineOptions& options) const {
  profile::write_text_file(path, timeline_html(options), "export_timeline");
}

}  // namespace eventide
