// Traces of several processes merged on one clock (issue 14, part 4): trace_rank_writer runs as
// two processes of a pretend job, each labelled with its rank and a clock offset, and
// `eventide trace merge` puts their traces into one; the result is read back with nlohmann's
// parser (not the library's writer) and checked: processes renumbered and sorted by rank,
// named by rank, every time shifted by its trace's clock offset, arrows kept apart; and the
// errors (unreadable, not JSON, not eventide's, two traces of one rank), and that no input is
// ever written to (the output is named by -o alone, and is never one of the inputs).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <eventide/eventide.hpp>

namespace {

namespace ev = eventide;
namespace fs = std::filesystem;
using nlohmann::json;

struct Ran {
  int status = -1;
  std::string output;  // stdout and stderr
};

// Runs a command line through the shell (paths are quoted by the caller), with a time limit.
Ran run(const std::string& command) {
  Ran r;
  std::FILE* p = popen(("timeout 60 " + command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

class TraceMergeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("eventide-trace-merge-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // A trace written by a process of its own.
  fs::path write(const std::string& name, int rank, int size, long long offset_ns,
                 const std::string& host = "") {
    fs::path out = dir_ / name;
    Ran r = run(std::string(EVENTIDE_TRACE_WRITER) + " " + q(out) + " " + std::to_string(rank) + " " +
                std::to_string(size) + " " + std::to_string(offset_ns) + (host.empty() ? "" : " " + host));
    EXPECT_EQ(r.status, 0) << r.output;
    return out;
  }

  Ran merge(const fs::path& out, const std::vector<fs::path>& inputs) {
    std::string command = std::string(EVENTIDE_CLI) + " trace merge -o " + q(out);
    for (const fs::path& in : inputs) command += " " + q(in);
    return run(command);
  }

  fs::path dir_;
};

// The times of a trace's timed events ("X" slices, "i" marks, flows), in order.
std::vector<double> times(const json& trace) {
  std::vector<double> t;
  for (const json& e : trace["traceEvents"]) {
    if (e.contains("ts")) t.push_back(e["ts"].get<double>());
  }
  return t;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::map<int, std::string> process_names(const json& trace) {
  std::map<int, std::string> names;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") names[e["pid"].get<int>()] = e["args"]["name"];
  }
  return names;
}

}  // namespace

TEST(TraceLabelTest, ALabelledProfileSaysWhoWroteItAndOnWhichClock) {
  EXPECT_EQ(ev::process_label().rank, -1);
  ev::ProcessLabel bad;
  bad.rank = 4;
  bad.size = 4;
  EXPECT_THROW(ev::set_process_label(bad), ev::InvalidArgument);
  bad.rank = -2;
  bad.size = 0;
  EXPECT_THROW(ev::set_process_label(bad), ev::InvalidArgument);
  ev::ProcessLabel label;
  label.rank = 3;
  label.size = 8;
  label.host = "node-7";
  label.clock_offset_ns = -1234;
  ev::set_process_label(label);
  EXPECT_EQ(ev::process_label().host, "node-7");
  ev::Profile p;
  {
    ev::Profiler profiler;
    ev::add(ev::ones({4}, ev::DType::f32, ev::Device::cpu()), ev::ones({4}, ev::DType::f32, ev::Device::cpu())).wait();
    p = profiler.stop();
  }
  ev::set_process_label({});
  EXPECT_EQ(p.process_label().rank, 3) << "the label as of stop()";
  EXPECT_GT(p.start_ns(), 0);
  json t = json::parse(p.chrome_trace());
  EXPECT_EQ(t["otherData"]["rank"], 3);
  EXPECT_EQ(t["otherData"]["size"], 8);
  EXPECT_EQ(t["otherData"]["host"], "node-7");
  EXPECT_EQ(t["otherData"]["clock_offset_ns"], -1234);
  EXPECT_EQ(t["otherData"]["start_ns"], p.start_ns());
  EXPECT_EQ(t["otherData"]["clock"], "steady");
  for (const auto& [pid, name] : process_names(t)) EXPECT_EQ(name.rfind("rank 3 · ", 0), 0u) << name;
  // Unlabelled: no rank, the host's own name.
  ev::Profile q;
  {
    ev::Profiler profiler;
    q = profiler.stop();
  }
  json u = json::parse(q.chrome_trace());
  EXPECT_FALSE(u["otherData"].contains("rank"));
  EXPECT_EQ(u["otherData"]["clock_offset_ns"], 0);
  EXPECT_TRUE(u["otherData"]["host"].is_string());
}

TEST_F(TraceMergeTest, TwoRanksAreMergedOnOneClockSortedByRank) {
  // Written in this order: rank 1 first, then rank 0 (whose clock is said to be 5 s behind
  // the reference: its events move 5 s later).
  constexpr long long kOffset = 5'000'000'000;
  fs::path r1 = write("rank1.json", 1, 2, 0, "node-b");
  fs::path r0 = write("rank0.json", 0, 2, kOffset, "node-a");
  fs::path out = dir_ / "merged.json";
  Ran m = merge(out, {r1, r0});
  ASSERT_EQ(m.status, 0) << m.output;
  EXPECT_NE(m.output.find("merged 2 traces (ranks 0, 1)"), std::string::npos) << m.output;

  json in0 = read_json(r0), in1 = read_json(r1), merged = read_json(out);
  const auto origin0 = in0["otherData"]["start_ns"].get<long long>() + kOffset;
  const auto origin1 = in1["otherData"]["start_ns"].get<long long>();
  const long long t0 = std::min(origin0, origin1);
  EXPECT_EQ(merged["otherData"]["start_ns"].get<long long>(), t0);
  ASSERT_EQ(merged["otherData"]["ranks"].size(), 2u);
  EXPECT_EQ(merged["otherData"]["ranks"][0]["rank"], 0);
  EXPECT_EQ(merged["otherData"]["ranks"][0]["host"], "node-a");
  EXPECT_EQ(merged["otherData"]["ranks"][1]["host"], "node-b");

  // Processes: rank 0's first, each named by its rank, no pid shared by two ranks.
  auto names = process_names(merged);
  auto names0 = process_names(in0), names1 = process_names(in1);
  ASSERT_EQ(names.size(), names0.size() + names1.size());
  int last_rank = -1;
  for (const auto& [pid, name] : names) {
    const int rank = name.rfind("rank 0 · ", 0) == 0 ? 0 : name.rfind("rank 1 · ", 0) == 0 ? 1 : -1;
    ASSERT_NE(rank, -1) << name;
    EXPECT_GE(rank, last_rank) << "pids in rank order";
    last_rank = rank;
  }
  EXPECT_EQ(names.begin()->second, "rank 0 · cpu");
  std::map<int, int> sort_index;
  for (const json& e : merged["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_sort_index") sort_index[e["pid"]] = e["args"]["sort_index"];
  }
  for (const auto& [pid, name] : names) {
    const bool rank1 = name.rfind("rank 1", 0) == 0;
    EXPECT_EQ(sort_index[pid] >= 1000, rank1) << name;
  }

  // Times: every event of each rank, shifted by its origin on the reference clock.
  const std::vector<double> tm = times(merged), ti0 = times(in0), ti1 = times(in1);
  ASSERT_EQ(tm.size(), ti0.size() + ti1.size());
  const double shift0 = static_cast<double>(origin0 - t0) / 1e3, shift1 = static_cast<double>(origin1 - t0) / 1e3;
  for (std::size_t i = 0; i < ti0.size(); ++i) EXPECT_NEAR(tm[i], ti0[i] + shift0, 1e-3);
  for (std::size_t i = 0; i < ti1.size(); ++i) EXPECT_NEAR(tm[ti0.size() + i], ti1[i] + shift1, 1e-3);
  EXPECT_GT(shift0, 4.9e6) << "rank 0 ran after rank 1 and its clock is 5 s behind";
  EXPECT_EQ(shift1, 0.0);

  // Arrows: each flow id belongs to one rank, and each has its start and its finish.
  std::map<std::uint64_t, std::set<std::string>> flow_phases;
  std::map<std::uint64_t, std::set<int>> flow_ranks;
  for (const json& e : merged["traceEvents"]) {
    if (e["ph"] != "s" && e["ph"] != "f") continue;
    const auto id = e["id"].get<std::uint64_t>();
    flow_phases[id].insert(e["ph"].get<std::string>());
    flow_ranks[id].insert(names[e["pid"].get<int>()].rfind("rank 0", 0) == 0 ? 0 : 1);
  }
  ASSERT_FALSE(flow_phases.empty()) << "the writer's stream wait draws an arrow";
  for (const auto& [id, phases] : flow_phases) {
    EXPECT_EQ(phases.size(), 2u) << "flow " << id;
    EXPECT_EQ(flow_ranks[id].size(), 1u) << "flow " << id << " joins two ranks";
  }
}

TEST_F(TraceMergeTest, OnOneMachineTheSteadyClockIsSharedAndTheOffsetIsZero) {
  fs::path first = write("first.json", 0, 2, 0);
  fs::path second = write("second.json", 1, 2, 0);
  fs::path out = dir_ / "merged.json";
  Ran m = merge(out, {second, first});
  ASSERT_EQ(m.status, 0) << m.output;
  json merged = read_json(out);
  // The second process ran after the first: all its slices lie after all of the first's.
  auto names = process_names(merged);
  double end0 = 0, start1 = 1e300;
  for (const json& e : merged["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const bool rank1 = names[e["pid"].get<int>()].rfind("rank 1", 0) == 0;
    const double ts = e["ts"].get<double>(), end = ts + e["dur"].get<double>();
    if (rank1) start1 = std::min(start1, ts);
    else end0 = std::max(end0, end);
  }
  EXPECT_LT(end0, start1) << "one clock: the first process's work ends before the second's starts";
}

TEST_F(TraceMergeTest, UnlabelledTracesTakeTheirPlaceInTheListAsRank) {
  fs::path a = write("a.json", -1, 0, 0), b = write("b.json", -1, 0, 0);
  fs::path out = dir_ / "merged.json";
  Ran m = merge(out, {a, b});
  ASSERT_EQ(m.status, 0) << m.output;
  auto names = process_names(read_json(out));
  EXPECT_EQ(names.begin()->second, "rank 0 · cpu");
  EXPECT_EQ(names.rbegin()->second.rfind("rank 1 · ", 0), 0u);
}

TEST_F(TraceMergeTest, ClearErrorsForInputsThatCannotBeMerged) {
  fs::path r0 = write("r0.json", 0, 2, 0), again = write("again.json", 0, 2, 0);
  fs::path out = dir_ / "merged.json";
  Ran dup = merge(out, {r0, again});
  EXPECT_EQ(dup.status, 1);
  EXPECT_NE(dup.output.find("eventide trace merge: " + r0.string() + " and " + again.string() +
                            " are both labelled rank 0: merge one trace per rank (each process "
                            "labels itself with set_process_label)\n"),
            std::string::npos)
      << dup.output;
  EXPECT_FALSE(fs::exists(out));
  // One rank by its label, one by its place in the list (it has none): each said.
  fs::path unlabelled = write("unlabelled.json", -1, 0, 0);
  Ran mixed = merge(out, {unlabelled, again});
  EXPECT_EQ(mixed.status, 1);
  EXPECT_NE(mixed.output.find(unlabelled.string() + " and " + again.string() + " are both rank 0 (" +
                              unlabelled.string() + " by its place in the list, having no label; " +
                              again.string() + " by its label): merge one trace per rank, or label "
                              "each process with set_process_label\n"),
            std::string::npos)
      << mixed.output;
  EXPECT_FALSE(fs::exists(out));

  Ran missing = merge(out, {r0, dir_ / "no-such.json"});
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("no-such.json: cannot be read"), std::string::npos) << missing.output;

  fs::path not_json = dir_ / "not.json";
  std::ofstream(not_json) << "{\"traceEvents\": [";
  Ran bad = merge(out, {r0, not_json});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("not.json: not JSON"), std::string::npos) << bad.output;

  fs::path foreign = dir_ / "foreign.json";
  std::ofstream(foreign) << "{\"traceEvents\": [{\"ph\": \"X\", \"pid\": 1, \"tid\": 1, \"ts\": 0, \"dur\": 1}]}";
  Ran other = merge(out, {r0, foreign});
  EXPECT_EQ(other.status, 1);
  EXPECT_NE(other.output.find("foreign.json: not a trace of eventide's profiler"), std::string::npos)
      << other.output;

  Ran usage = run(std::string(EVENTIDE_CLI) + " trace merge -o " + q(out));
  EXPECT_EQ(usage.status, 2) << usage.output;
}

TEST_F(TraceMergeTest, TheLongOptionNamesTheOutputToo) {
  fs::path r0 = write("r0.json", 0, 2, 0), r1 = write("r1.json", 1, 2, 0);
  fs::path out = dir_ / "merged.json";
  Ran m = run(std::string(EVENTIDE_CLI) + " trace merge " + q(r0) + " --output " + q(out) + " " + q(r1));
  ASSERT_EQ(m.status, 0) << m.output;
  EXPECT_NE(m.output.find("merged 2 traces (ranks 0, 1) into " + out.string()), std::string::npos) << m.output;
  EXPECT_EQ(read_json(out)["otherData"]["ranks"].size(), 2u);
}

// `trace merge r0.json r1.json` took r0.json as the output, overwrote it with r1's trace and
// exited 0. Without -o every name is an input: the call is refused, saying how to name the
// output, and nothing is written.
TEST_F(TraceMergeTest, WithoutDashOTheCallIsRefusedAndNoInputIsWritten) {
  fs::path r0 = write("r0.json", 0, 2, 0), r1 = write("r1.json", 1, 2, 0);
  const std::string before0 = bytes_of(r0), before1 = bytes_of(r1);
  Ran old = run(std::string(EVENTIDE_CLI) + " trace merge " + q(r0) + " " + q(r1));
  EXPECT_EQ(old.status, 2) << old.output;
  EXPECT_NE(old.output.find("eventide trace merge: no output named: name it with -o (eventide trace merge "
                            "-o merged.json " + r0.string() + " " + r1.string() + ")"),
            std::string::npos)
      << old.output;
  EXPECT_NE(old.output.find("usage: eventide trace merge"), std::string::npos) << old.output;
  EXPECT_EQ(bytes_of(r0), before0);
  EXPECT_EQ(bytes_of(r1), before1);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 2) << "nothing written";
}

// The output is refused when it is one of the inputs by another name too: the same path, a
// "./" or "dir/../" spelling, a hard link, a symbolic link. Exit status 2, the input's bytes
// unchanged.
TEST_F(TraceMergeTest, AnOutputThatIsOneOfTheInputsIsRefusedWhateverItsName) {
  fs::path r0 = write("r0.json", 0, 2, 0), r1 = write("r1.json", 1, 2, 0);
  const std::string before0 = bytes_of(r0), before1 = bytes_of(r1);
  fs::path hard = dir_ / "hard.json", soft = dir_ / "soft.json";
  fs::create_hard_link(r1, hard);
  fs::create_symlink(r0, soft);
  const std::vector<std::pair<fs::path, fs::path>> cases = {
      {r0, r0}, {r1, r1}, {dir_ / "." / "r0.json", r0}, {dir_ / "sub" / ".." / "r1.json", r1}, {hard, r1}, {soft, r0}};
  fs::create_directories(dir_ / "sub");
  for (const auto& [out, same] : cases) {
    Ran m = merge(out, {r0, r1});
    EXPECT_EQ(m.status, 2) << out << ": " << m.output;
    EXPECT_NE(m.output.find("eventide trace merge: the output " + out.string() + " is the input " +
                            same.string() + " (the same file): writing it would destroy that trace; "
                            "name a new file with -o"),
              std::string::npos)
        << m.output;
    EXPECT_EQ(bytes_of(r0), before0) << out;
    EXPECT_EQ(bytes_of(r1), before1) << out;
  }
}
