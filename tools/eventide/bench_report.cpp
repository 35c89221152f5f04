#include "bench_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace eventide::cli {

namespace {

using bench::Bar;
using bench::Figure;
using bench::Unit;

const char* unit_name(Unit unit) {
  switch (unit) {
    case Unit::ns:
      return "ns";
    case Unit::gflops:
      return "GFLOP/s";
    case Unit::tflops:
      return "TFLOP/s";
  }
  return "?";
}

nlohmann::ordered_json bar_json(const Bar& b) {
  nlohmann::ordered_json j;
  j["label"] = b.label;
  j["value"] = b.value;
  if (b.p99) j["p99"] = *b.p99;
  return j;
}

Unit unit_of(const std::string& name) {
  for (Unit u : {Unit::ns, Unit::gflops, Unit::tflops}) {
    if (name == unit_name(u)) return u;
  }
  throw std::runtime_error("unknown unit \"" + name + "\" (ns, GFLOP/s or TFLOP/s)");
}

Bar bar_of(const nlohmann::json& j) {
  Bar b;
  b.label = j.at("label").get<std::string>();
  b.value = j.at("value").get<double>();
  if (j.contains("p99") && !j["p99"].is_null()) b.p99 = j["p99"].get<double>();
  return b;
}

std::size_t goals_met(const BenchRun& run, std::size_t* goals) {
  std::size_t met = 0, all = 0;
  for (const Figure& f : run.figures) {
    if (!f.met) continue;
    ++all;
    met += *f.met ? 1 : 0;
  }
  *goals = all;
  return met;
}

}  // namespace

std::string report_json(const BenchRun& run) {
  nlohmann::ordered_json j;
  j["eventide"] = run.version;
  j["device"] = run.device;
  j["device_name"] = run.device_name;
  j["device_description"] = run.device_description;
  j["host"] = run.host;
  j["date"] = run.date;
  j["command"] = run.command_line;
  j["quick"] = run.quick;
  j["filter"] = run.filter ? nlohmann::ordered_json(*run.filter) : nlohmann::ordered_json(nullptr);
  j["load_before"] = run.load_before;
  j["load_after"] = run.load_after;
  j["seconds"] = run.seconds;
  std::size_t goals = 0;
  const std::size_t met = goals_met(run, &goals);
  j["goals"] = goals;
  j["goals_met"] = met;
  nlohmann::ordered_json figures = nlohmann::ordered_json::array();
  for (const Figure& f : run.figures) {
    nlohmann::ordered_json x;
    x["name"] = f.name;
    x["title"] = f.title;
    x["unit"] = unit_name(f.unit);
    x["lower_is_better"] = bench::lower_is_better(f.unit);
    x["show_p99"] = f.show_p99;
    x["eventide"] = bar_json(f.ours);
    x["anchors"] = nlohmann::ordered_json::array();
    for (const Bar& a : f.anchors) x["anchors"].push_back(bar_json(a));
    if (f.ratio) x["ratio"] = *f.ratio;
    x["goal"] = f.goal;
    x["goal_value"] = f.goal_value ? nlohmann::ordered_json(*f.goal_value) : nlohmann::ordered_json(nullptr);
    x["met"] = f.met ? nlohmann::ordered_json(*f.met) : nlohmann::ordered_json(nullptr);
    x["note"] = f.note;
    x["values"] = f.values;
    figures.push_back(std::move(x));
  }
  j["figures"] = std::move(figures);
  j["failures"] = run.failures;
  return j.dump(2) + "\n";
}

BenchRun read_report_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("not JSON: ") + e.what());
  }
  BenchRun run;
  std::string where = "the run";
  try {
    auto text_of = [&](const char* key, std::string& out) {
      if (j.contains(key) && j[key].is_string()) out = j[key].get<std::string>();
    };
    text_of("eventide", run.version);
    text_of("device", run.device);
    text_of("device_name", run.device_name);
    text_of("device_description", run.device_description);
    text_of("host", run.host);
    text_of("date", run.date);
    text_of("command", run.command_line);
    text_of("load_before", run.load_before);
    text_of("load_after", run.load_after);
    if (j.contains("quick")) run.quick = j["quick"].get<bool>();
    if (j.contains("filter") && j["filter"].is_string()) run.filter = j["filter"].get<std::string>();
    if (j.contains("seconds")) run.seconds = j["seconds"].get<double>();
    for (const auto& x : j.at("figures")) {
      Figure f;
      f.name = x.at("name").get<std::string>();
      where = "figure \"" + f.name + "\"";
      f.title = x.at("title").get<std::string>();
      f.unit = unit_of(x.at("unit").get<std::string>());
      f.show_p99 = x.value("show_p99", false);
      f.ours = bar_of(x.at("eventide"));
      for (const auto& a : x.at("anchors")) f.anchors.push_back(bar_of(a));
      if (x.contains("ratio") && !x["ratio"].is_null()) f.ratio = x["ratio"].get<double>();
      f.goal = x.value("goal", std::string("-"));
      if (x.contains("goal_value") && !x["goal_value"].is_null()) f.goal_value = x["goal_value"].get<double>();
      if (x.contains("met") && !x["met"].is_null()) f.met = x["met"].get<bool>();
      f.note = x.value("note", std::string());
      if (x.contains("values")) f.values = x["values"].get<std::map<std::string, double>>();
      run.figures.push_back(std::move(f));
    }
    where = "the run";
    if (j.contains("failures")) run.failures = j["failures"].get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("not a bench.json: " + where + ": " + e.what());
  }
  return run;
}

std::string report_markdown(const BenchRun& run) {
  std::string md = "# eventide bench\n\n";
  md += "`" + run.command_line + "`: eventide " + run.version + " on " + run.device;
  if (run.device_name != run.device) md += " (" + run.device_name + ")";
  md += ", " + run.host + ", " + run.date + "; " + (run.quick ? "a quick run" : "a full run");
  if (run.filter) md += ", benchmarks matching `" + *run.filter + "`";
  char took[32];
  std::snprintf(took, sizeof took, "%.1f s", run.seconds);
  md += ", " + std::string(took) + ". Load average before " + run.load_before + ", after " +
        run.load_after + ".\n\n";
  md += "Every anchor was measured in the same process, in this run; the goals are the "
        "project's (docs/PERFORMANCE.md). Times read \"p50 / p99\"; the chart (bench.svg) "
        "draws the same figures from the same bench.json.\n\n";
  if (!run.device_description.empty()) md += "Device: " + run.device_description + "\n\n";
  md += bench::markdown_table(run.figures);
  if (!run.failures.empty()) {
    md += "\nFailed:\n\n";
    for (const std::string& f : run.failures) md += "- " + f + "\n";
  }
  return md;
}

// --- The chart ---------------------------------------------------------------------------------

namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Markdown's code spans read as plain text in a picture.
std::string plain(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '`'), s.end());
  return s;
}

// At most `max` characters (UTF-8 aware enough: cuts only before an ASCII byte).
std::string clip(const std::string& s, std::size_t max) {
  if (s.size() <= max) return s;
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "…";
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// Geometry, in pixels.
constexpr double kWidth = 1000;
constexpr double kLabelRight = 340;  // bar labels end here (right-aligned)
constexpr double kBarLeft = 350;
constexpr double kBarRight = 830;    // value labels go beyond, up to the right edge
constexpr double kRow = 18;
constexpr double kBarHeight = 12;
constexpr double kGroupTitle = 20;
constexpr double kGroupGap = 12;

const char* const kAnchorColors[] = {"#8d99a6", "#b3bcc5", "#d3d9df"};

// Where values go on the x axis of one panel.
struct Scale {
  bool log = false;
  double lo = 0, hi = 1;  // log: decades (log10); linear: the value range
  double x(double v) const {
    double t = log ? (std::log10(std::max(v, 1e-300)) - lo) / (hi - lo) : (v - lo) / (hi - lo);
    return kBarLeft + std::clamp(t, 0.0, 1.0) * (kBarRight - kBarLeft);
  }
};

// Ticks of a linear axis from 0 to at least `max`: 1, 2 or 5 times a power of ten apart; the
// last tick is the axis' end, so it must not fall short of `max`.
std::vector<double> linear_ticks(double max) {
  const double raw = max / 5;
  const double p = std::pow(10, std::floor(std::log10(raw)));
  double step = p;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) {
      step = m * p;
      break;
    }
  }
  std::vector<double> ticks;
  for (int i = 0;; ++i) {
    ticks.push_back(i * step);
    if (i * step >= max * 0.9999) break;
  }
  return ticks;
}

std::string tick_label(Unit unit, double v) {
  char buf[32];
  if (unit != Unit::ns || v == 0) {
    std::snprintf(buf, sizeof buf, "%g", v);
  } else if (v < 1e3) {
    std::snprintf(buf, sizeof buf, "%g ns", v);
  } else if (v < 1e6) {
    std::snprintf(buf, sizeof buf, "%g µs", v / 1e3);
  } else if (v < 1e9) {
    std::snprintf(buf, sizeof buf, "%g ms", v / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%g s", v / 1e9);
  }
  return buf;
}

double panel_height(const std::vector<const Figure*>& figures) {
  double h = 0;
  for (const Figure* f : figures) h += kGroupTitle + kRow * static_cast<double>(1 + f->anchors.size()) + kGroupGap;
  return h;
}

// One panel: a heading, the axis with its grid, and each figure's group of bars. Returns the
// SVG and advances `y`.
std::string panel(const std::string& heading, const std::vector<const Figure*>& figures, Unit unit,
                  double& y) {
  if (figures.empty()) return {};
  // The values this panel shows (bars and goals) fix its scale.
  double min = INFINITY, max = 0;
  for (const Figure* f : figures) {
    auto see = [&](double v) {
      if (v > 0) {
        min = std::min(min, v);
        max = std::max(max, v);
      }
    };
    see(f->ours.value);
    if (f->ours.p99) see(*f->ours.p99);
    for (const Bar& a : f->anchors) {
      see(a.value);
      if (a.p99) see(*a.p99);
    }
    if (f->goal_value) see(*f->goal_value);
  }
  if (max <= 0) return {};
  Scale scale;
  std::vector<double> ticks;
  // Times spread over orders of magnitude go on a log scale; a panel within one decade, and
  // throughput, on a linear one.
  if (unit == Unit::ns && max / min > 10) {
    scale.log = true;
    scale.lo = std::floor(std::log10(min));
    scale.hi = std::ceil(std::log10(max));
    if (scale.hi <= scale.lo) scale.hi = scale.lo + 1;
    for (double d = scale.lo; d <= scale.hi; d += 1) ticks.push_back(std::pow(10, d));
  } else {
    ticks = linear_ticks(max * 1.05);
    scale.lo = 0;
    scale.hi = ticks.back() > 0 ? ticks.back() : 1;
  }

  std::string s;
  y += 8;
  s += "<text class=\"heading\" x=\"20\" y=\"" + num(y + 14) + "\">" + xml_escape(heading) + "</text>\n";
  y += 24;
  const double axis_y = y + 12;
  const double top = axis_y + 6;
  const double bottom = top + panel_height(figures);
  for (double t : ticks) {
    const double x = scale.x(t);
    s += "<line class=\"grid\" x1=\"" + num(x) + "\" y1=\"" + num(top - 4) + "\" x2=\"" + num(x) +
         "\" y2=\"" + num(bottom - kGroupGap + 4) + "\"/>\n";
    s += "<text class=\"tick\" x=\"" + num(x) + "\" y=\"" + num(axis_y) + "\">" +
         xml_escape(tick_label(unit, t)) + "</text>\n";
  }
  y = top;
  for (const Figure* f : figures) {
    std::string title = plain(f->title);
    std::string verdict;
    if (f->goal != "-" && !f->goal.empty()) {
      verdict = "goal " + f->goal;
      if (f->met) verdict += *f->met ? ": met" : ": missed";
    }
    s += "<text class=\"group\" x=\"20\" y=\"" + num(y + 14) + "\">" + xml_escape(clip(title, 110));
    if (!verdict.empty()) {
      s += "  <tspan class=\"" + std::string(f->met && !*f->met ? "missed" : "met") + "\">" +
           xml_escape(verdict) + "</tspan>";
    }
    s += "</text>\n";
    y += kGroupTitle;
    const double group_top = y;
    // The goal: a dashed line down the whole group. Each value label starts right of it where
    // the bar ends left of it (the label used to start at the bar's end, and the line crossed
    // "3.4 ns / 3.8 ns"), so that no line ever runs through a label.
    const bool has_goal = f->goal_value && *f->goal_value > 0;
    const double goal_x = has_goal ? scale.x(*f->goal_value) : 0;
    std::vector<const Bar*> bars{&f->ours};
    for (const Bar& a : f->anchors) bars.push_back(&a);
    for (std::size_t i = 0; i < bars.size(); ++i) {
      const Bar& b = *bars[i];
      const bool ours = i == 0;
      // The bar is at least a pixel long, so that a value at the axis' start shows.
      const double x1 = kBarLeft + std::max(1.0, scale.x(b.value) - kBarLeft);
      const double by = y + (kRow - kBarHeight) / 2;
      // The text is the table's (bench::markdown_table): "p50 / p99", then the ratio.
      std::string value = bench::format_value(unit, b.value);
      if (b.p99) value += " / " + bench::format_value(unit, *b.p99);
      if (ours && f->ratio) {
        char buf[32];
        std::snprintf(buf, sizeof buf, " (%.1f%%)", 100 * *f->ratio);
        value += buf;
      }
      std::string tip = b.label + ": " + (b.p99 ? "p50 / p99 " : "") + value;
      // The figure and series name each drawn thing, so that a reader (or a test) can tie
      // the picture to bench.json and bench.md.
      std::string data = " data-figure=\"" + xml_escape(f->name) + "\" data-series=\"" +
                         xml_escape(ours ? std::string("eventide") : b.label) + "\"";
      s += "<text class=\"label" + std::string(ours ? " ours" : "") + "\" x=\"" + num(kLabelRight) +
           "\" y=\"" + num(y + 13) + "\">" + xml_escape(clip(b.label, 56)) + "</text>\n";
      s += "<rect class=\"bar\" data-stat=\"" + std::string(b.p99 ? "p50" : "value") + "\"" + data +
           " data-value=\"" + std::to_string(b.value) + "\" x=\"" + num(kBarLeft) + "\" y=\"" + num(by) +
           "\" width=\"" + num(x1 - kBarLeft) + "\" height=\"" + num(kBarHeight) +
           "\" fill=\"" +
           (ours ? std::string("#1f6fb2") : std::string(kAnchorColors[std::min<std::size_t>(i - 1, 2)])) +
           "\"><title>" + xml_escape(tip) + "</title></rect>\n";
      double text_x = x1;
      if (b.p99) {
        // The p99: a whisker from the bar's end (the p50) to a cap at the p99.
        const double x99 = std::max(x1, scale.x(*b.p99));
        const double mid = by + kBarHeight / 2;
        s += "<path class=\"p99\" data-stat=\"p99\"" + data + " data-value=\"" +
             std::to_string(*b.p99) + "\" d=\"M" + num(x1) + "," + num(mid) + " H" + num(x99) + " M" +
             num(x99) + "," + num(by - 1) + " V" + num(by + kBarHeight + 1) + "\"><title>" +
             xml_escape(b.label + ": p99 " + bench::format_value(unit, *b.p99)) + "</title></path>\n";
        text_x = std::max(x1, x99);
      }
      if (has_goal) text_x = std::max(text_x, goal_x);
      s += "<text class=\"value\"" + data + " x=\"" + num(text_x + 6) + "\" y=\"" + num(y + 13) + "\">" +
           xml_escape(value) + "</text>\n";
      y += kRow;
    }
    if (has_goal) {
      s += "<line class=\"goal\" data-figure=\"" + xml_escape(f->name) + "\" x1=\"" + num(goal_x) +
           "\" y1=\"" + num(group_top) + "\" x2=\"" + num(goal_x) + "\" y2=\"" + num(y) +
           "\"><title>goal " + xml_escape(f->goal) + "</title></line>\n";
    }
    y += kGroupGap;
  }
  return s;
}

}  // namespace

std::string report_svg(const BenchRun& run) {
  std::vector<const Figure*> times, throughputs;
  Unit throughput_unit = Unit::gflops;
  for (const Figure& f : run.figures) {
    if (f.unit == Unit::ns) {
      times.push_back(&f);
    } else {
      throughputs.push_back(&f);
      throughput_unit = f.unit;
    }
  }
  std::string body;
  double y = 0;
  std::string subtitle = run.host + (run.quick ? "; a quick run" : "") +
                         "; every anchor measured in the same process, same run";
  body += "<text class=\"title\" x=\"20\" y=\"28\">" +
          xml_escape("eventide " + run.version + " bench on " + run.device +
                     (run.device_name != run.device ? " (" + run.device_name + ")" : "") + ", " +
                     run.date.substr(0, 10)) +
          "</text>\n";
  body += "<text class=\"subtitle\" x=\"20\" y=\"47\">" + xml_escape(clip(subtitle, 150)) + "</text>\n";
  // Legend.
  body += "<rect x=\"20\" y=\"58\" width=\"14\" height=\"10\" fill=\"#1f6fb2\"/>"
          "<text class=\"legend\" x=\"40\" y=\"67\">eventide</text>\n"
          "<rect x=\"110\" y=\"58\" width=\"14\" height=\"10\" fill=\"#8d99a6\"/>"
          "<text class=\"legend\" x=\"130\" y=\"67\">anchors (what eventide replaces)</text>\n"
          "<line class=\"goal\" x1=\"345\" y1=\"56\" x2=\"345\" y2=\"70\"/>"
          "<text class=\"legend\" x=\"352\" y=\"67\">the project's goal</text>\n"
          "<rect x=\"470\" y=\"58\" width=\"22\" height=\"10\" fill=\"#8d99a6\"/>"
          "<path class=\"p99\" d=\"M492,63 H510 M510,56 V70\"/>"
          "<text class=\"legend\" x=\"518\" y=\"67\">times: the bar ends at the p50, "
          "the whisker at the p99</text>\n";
  y = 74;
  body += panel("Time per call or wake-up: p50 (bar) and p99 (whisker), shorter is better",
                times, Unit::ns, y);
  body += panel(std::string("Throughput, ") + unit_name(throughput_unit) + " (longer is better)",
                throughputs, throughput_unit, y);
  if (run.figures.empty()) {
    body += "<text class=\"subtitle\" x=\"20\" y=\"100\">no figures</text>\n";
    y = 110;
  }
  const double height = y + 10;

  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" +
         num(height) + "\" viewBox=\"0 0 " + num(kWidth) + " " + num(height) +
         "\" role=\"img\" aria-labelledby=\"chart-title\">\n";
  svg += "<title id=\"chart-title\">eventide bench on " + xml_escape(run.device) +
         ": each figure beside its anchors</title>\n";
  svg += "<style>\n"
         "  text { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; "
         "font-size: 11px; fill: #24292f; }\n"
         "  .title { font-size: 16px; font-weight: 600; }\n"
         "  .subtitle { fill: #57606a; }\n"
         "  .heading { font-size: 13px; font-weight: 600; }\n"
         "  .group { font-size: 12px; font-weight: 600; }\n"
         "  .met { fill: #1a7f37; font-weight: 400; }\n"
         "  .missed { fill: #cf222e; font-weight: 400; }\n"
         "  .label { text-anchor: end; fill: #57606a; }\n"
         "  .label.ours { fill: #1f6fb2; font-weight: 600; }\n"
         "  .tick { text-anchor: middle; fill: #57606a; font-size: 10px; }\n"
         "  .grid { stroke: #d8dee4; stroke-width: 1; }\n"
         "  .p99 { stroke: #24292f; stroke-width: 1.5; fill: none; }\n"
         "  .goal { stroke: #cf222e; stroke-width: 1.5; stroke-dasharray: 4 3; }\n"
         "</style>\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  svg += body;
  svg += "</svg>\n";
  return svg;
}

}  // namespace eventide::cli
