// `eventide trace merge -o OUT IN...`: the Chrome traces of several processes of one job (one
// per rank, each written by Profile::export_chrome_trace) as one trace on one clock.
//
// Each input must be eventide's (its "otherData" has "start_ns", the profile's start on the
// writer's steady clock, and "clock_offset_ns", from that clock to the job's reference clock:
// ProcessLabel). Its events are shifted so that every time is on the reference clock, from the
// earliest input's start; its processes are renumbered after those of the ranks before it
// (inputs sorted by rank), named "rank R · ..." and sorted by rank; its flow ids are
// renumbered so that arrows of different ranks never join. An input without a rank takes its
// position on the command line as its rank (two processes profiled without a label); two
// inputs of one rank are an error. The output is never one of the inputs (the same file by
// device and inode, whatever the path says: a link, "./r0.json"), and it is written only
// after every input has been read and checked.
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace eventide::cli {

namespace {

using nlohmann::json;

struct Input {
  std::string path;
  json trace;
  int rank = -1;
  bool rank_given = false;
  std::int64_t origin_ns = 0;  // the profile's start on the reference clock
};

// Why `path` cannot be merged, in a sentence that names it.
[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw std::runtime_error(path + ": " + why);
}

// Whether `v` is an integer a std::int64_t holds (an unsigned one past it wrapped around).
bool fits_int64(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX);
  return v.is_number_integer();
}

// A string field of an event, "" where it has none; the file and the event named where it is
// of another type ("ph": 5 gave a bare json.exception.type_error).
std::string string_field(const json& ev, const char* key, const std::string& path, std::size_t index) {
  auto it = ev.find(key);
  if (it == ev.end()) return "";
  if (!it->is_string()) {
    fail(path, "event " + std::to_string(index) + ": \"" + key + "\" is " + it->type_name() + ", not a string");
  }
  return it->get<std::string>();
}

Input read_input(const std::string& path, int position) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  Input input;
  input.path = path;
  // A bound on nesting: a trace of eventide's is 4 deep, and a value nested 100,000 deep
  // crashed the merge (nlohmann's dump and destructor recurse).
  constexpr int kMaxDepth = 64;
  try {
    input.trace = json::parse(text.str(), [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) fail(path, "nested deeper than " + std::to_string(kMaxDepth) + " levels: not a Chrome trace");
      return true;
    });
  } catch (const json::parse_error& e) {
    fail(path, std::string("not JSON (") + e.what() + ")");
  }
  if (!input.trace.is_object() || !input.trace.contains("traceEvents") ||
      !input.trace["traceEvents"].is_array()) {
    fail(path, "not a Chrome trace (no \"traceEvents\" array)");
  }
  const json* other = input.trace.contains("otherData") ? &input.trace["otherData"] : nullptr;
  if (other && other->is_object() && other->contains("start_ns") && (*other)["start_ns"].is_number_integer() &&
      !fits_int64((*other)["start_ns"])) {
    fail(path, "\"start_ns\" is not a 64-bit integer");
  }
  if (!other || !other->is_object() || !other->contains("start_ns") ||
      !fits_int64((*other)["start_ns"])) {
    fail(path, "not a trace of eventide's profiler (its \"otherData\" has no \"start_ns\"), so its "
               "clock is unknown: profile with eventide 0.2 or later, or leave it out");
  }
  std::int64_t offset = 0;
  if (other->contains("clock_offset_ns")) {
    if (!fits_int64((*other)["clock_offset_ns"])) fail(path, "\"clock_offset_ns\" is not a 64-bit integer");
    offset = (*other)["clock_offset_ns"].get<std::int64_t>();
  }
  input.origin_ns = (*other)["start_ns"].get<std::int64_t>() + offset;
  if (other->contains("rank")) {
    const json& rank = (*other)["rank"];
    if (!fits_int64(rank) || rank.get<std::int64_t>() < 0 || rank.get<std::int64_t>() > INT_MAX) {
      fail(path, "\"rank\" is not a rank (an integer from 0 to " + std::to_string(INT_MAX) + ")");
    }
    input.rank = static_cast<int>(rank.get<std::int64_t>());
    input.rank_given = true;
  } else {
    input.rank = position;
  }
  return input;
}

// How `in` got its rank, for the message about two inputs of one rank.
std::string how_ranked(const Input& in) {
  return in.path + (in.rank_given ? " by its label" : " by its place in the list, having no label");
}

// The input that `output` names, by file identity (device and inode), or null. An output that
// does not exist yet is none of them: an input that does not exist fails to be read anyway.
const std::string* input_named_by(const std::string& output, const std::vector<std::string>& inputs) {
  struct stat out {};
  if (::stat(output.c_str(), &out) != 0) return nullptr;
  for (const std::string& in : inputs) {
    struct stat st {};
    if (::stat(in.c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino) return &in;
  }
  return nullptr;
}

}  // namespace

int run_trace_merge(const TraceMergeOptions& options) {
  if (const std::string* same = input_named_by(options.output, options.inputs)) {
    std::fprintf(stderr,
                 "eventide trace merge: the output %s is the input %s (the same file): writing it "
                 "would destroy that trace; name a new file with -o\n",
                 options.output.c_str(), same->c_str());
    return kExitUsage;
  }
  std::vector<Input> inputs;
  try {
    for (std::size_t i = 0; i < options.inputs.size(); ++i) {
      inputs.push_back(read_input(options.inputs[i], static_cast<int>(i)));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eventide trace merge: %s\n", e.what());
    return kExitFailed;
  }
  std::stable_sort(inputs.begin(), inputs.end(),
                   [](const Input& a, const Input& b) { return a.rank < b.rank; });
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    const Input& a = inputs[i - 1];
    const Input& b = inputs[i];
    if (a.rank != b.rank) continue;
    if (a.rank_given && b.rank_given) {
      std::fprintf(stderr,
                   "eventide trace merge: %s and %s are both labelled rank %d: merge one trace per "
                   "rank (each process labels itself with set_process_label)\n",
                   a.path.c_str(), b.path.c_str(), a.rank);
    } else {
      std::fprintf(stderr,
                   "eventide trace merge: %s and %s are both rank %d (%s; %s): merge one trace per "
                   "rank, or label each process with set_process_label\n",
                   a.path.c_str(), b.path.c_str(), a.rank, how_ranked(a).c_str(), how_ranked(b).c_str());
    }
    return kExitFailed;
  }
  std::int64_t t0 = inputs.front().origin_ns;
  for (const Input& in : inputs) t0 = std::min(t0, in.origin_ns);

  json events = json::array();
  json ranks = json::array();
  int next_pid = 0;
  std::uint64_t next_flow_base = 0;
  try {
    for (std::size_t r = 0; r < inputs.size(); ++r) {
      Input& in = inputs[r];
      const double shift_us = static_cast<double>(in.origin_ns - t0) / 1e3;
      const std::string prefix = "rank " + std::to_string(in.rank) + " · ";
      std::map<std::int64_t, int> pids;  // the input's pid -> the merged trace's
      auto pid_of = [&](const json& pid) {
        const std::int64_t key = pid.is_number_integer() ? pid.get<std::int64_t>() : 0;
        auto [it, added] = pids.try_emplace(key, 0);
        if (added) it->second = ++next_pid;
        return it->second;
      };
      std::uint64_t max_flow = 0;
      std::size_t index = 0;
      for (json ev : in.trace["traceEvents"]) {
        ++index;
        if (!ev.is_object()) continue;
        if (ev.contains("pid")) ev["pid"] = pid_of(ev["pid"]);
        if (ev.contains("ts") && ev["ts"].is_number()) ev["ts"] = ev["ts"].get<double>() + shift_us;
        const std::string ph = string_field(ev, "ph", in.path, index);
        if ((ph == "s" || ph == "t" || ph == "f") && ev.contains("id") && ev["id"].is_number_unsigned()) {
          const std::uint64_t id = ev["id"].get<std::uint64_t>();
          max_flow = std::max(max_flow, id);
          ev["id"] = next_flow_base + id;
        }
        const std::string name = string_field(ev, "name", in.path, index);
        if (ph == "M" && name == "process_name" && ev.contains("args") &&
            ev["args"].is_object() && ev["args"].contains("name") && ev["args"]["name"].is_string()) {
          const std::string label = ev["args"]["name"].get<std::string>();
          if (label.rfind(prefix, 0) != 0) ev["args"]["name"] = prefix + label;
        }
        if (ph == "M" && name == "process_sort_index" && ev.contains("args") &&
            ev["args"].is_object()) {
          // By rank first, then as the rank's trace had them.
          const json& given = ev["args"].contains("sort_index") ? ev["args"]["sort_index"] : json(0);
          if (!given.is_number_integer() || !fits_int64(given) || std::llabs(given.get<std::int64_t>()) >= 1000) {
            fail(in.path, "event " + std::to_string(index) + ": \"sort_index\" is not an integer below 1000");
          }
          const int within = static_cast<int>(given.get<std::int64_t>());
          ev["args"]["sort_index"] = static_cast<int>(r) * 1000 + within;
        }
        events.push_back(std::move(ev));
      }
      next_flow_base += max_flow;
      json rank = in.trace["otherData"];
      rank["rank"] = in.rank;
      rank["file"] = in.path;
      rank["shift_us"] = shift_us;
      std::vector<int> merged_pids;
      for (const auto& [from, to] : pids) merged_pids.push_back(to);
      std::sort(merged_pids.begin(), merged_pids.end());
      rank["pids"] = merged_pids;
      ranks.push_back(std::move(rank));
    }
  } catch (const std::exception& e) {  // a field of the wrong type, named (fail), or JSON's own
    std::fprintf(stderr, "eventide trace merge: %s\n", e.what());
    return kExitFailed;
  }

  // One event a line, as the profiler writes them.
  std::string out = "{\"traceEvents\":[\n";
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (i) out += ",\n";
    out += events[i].dump(-1, ' ', false, json::error_handler_t::replace);
  }
  json other = {{"producer", "eventide " + std::string(version()) + " trace merge"},
                {"clock", "reference"},
                {"start_ns", t0},
                {"ranks", std::move(ranks)}};
  out += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":";
  out += other.dump(-1, ' ', false, json::error_handler_t::replace);
  out += "}\n";
  std::ofstream file(options.output, std::ios::binary | std::ios::trunc);
  if (!file || !(file << out) || !file.flush()) {
    std::fprintf(stderr, "eventide trace merge: cannot write %s\n", options.output.c_str());
    return kExitFailed;
  }
  std::printf("merged %zu traces (ranks", inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) std::printf("%s%d", i ? ", " : " ", inputs[i].rank);
  std::printf(") into %s: %zu events, %d processes\n", options.output.c_str(), events.size(), next_pid);
  return kExitOk;
}

}  // namespace eventide::cli
