// The profiler: what it records (ops with their streams, shapes and times; event records;
// stream waits and host waits; callbacks), that it stops (one at a time, nothing after
// stop(), no hang on work that never finishes), and that its exports are well formed: the
// Chrome trace against the Trace Event Format's rules that viewers rely on, the timeline page
// for what it must contain.
// One component's tests in one binary (one file per component), hence the length: each
// recorded kind and each export's rules has its own test.
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "profile/layout.hpp"
#include "test_util.hpp"

namespace {

using namespace eventide_test;
using nlohmann::json;

const ev::ProfiledOp* find_op(const ev::Profile& p, const std::string& name, std::size_t nth = 0) {
  for (const ev::ProfiledOp& op : p.ops()) {
    if (op.name == name && nth-- == 0) return &op;
  }
  return nullptr;
}

const ev::ProfiledOp* op_by_id(const ev::Profile& p, std::uint64_t id) {
  for (const ev::ProfiledOp& op : p.ops()) {
    if (op.id == id) return &op;
  }
  return nullptr;
}

bool contains(const std::vector<std::uint64_t>& ids, std::uint64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// Every time of the profile is ordered and within it.
void expect_times_inside(const ev::Profile& p) {
  const double slack = 1e-6;
  for (const ev::ProfiledOp& op : p.ops()) {
    SCOPED_TRACE(op.name + " #" + std::to_string(op.seq) + " on " + op.stream);
    ASSERT_EQ(op.start_us.has_value(), op.end_us.has_value());
    if (!op.start_us) continue;
    EXPECT_GE(*op.start_us, 0.0);
    EXPECT_LE(*op.start_us, *op.end_us);
    EXPECT_LE(*op.end_us, p.duration_us() + slack);
  }
  for (const ev::ProfiledHostWait& h : p.host_waits()) {
    EXPECT_GE(h.start_us, 0.0);
    EXPECT_LE(h.start_us, h.end_us);
    EXPECT_LE(h.end_us, p.duration_us() + slack);
  }
  for (const ev::ProfiledCallback& c : p.callbacks()) {
    EXPECT_GE(c.start_us, 0.0);
    EXPECT_LE(c.start_us, c.end_us);
    EXPECT_LE(c.end_us, p.duration_us() + slack);
  }
  for (const ev::ProfiledRecord& r : p.records()) {
    EXPECT_GE(r.at_us, 0.0);
    EXPECT_LE(r.at_us, p.duration_us() + slack);
  }
  for (const ev::ProfiledRange& r : p.ranges()) {
    EXPECT_GE(r.start_us, 0.0);
    EXPECT_LE(r.start_us, r.end_us);
    EXPECT_LE(r.end_us, p.duration_us() + slack);
  }
}

TEST(ProfilerTest, RecordsOpsWithTheirNamesStreamsShapesAndTimes) {
  run_with_deadline([] {
    ev::Stream s(ev::Device::cpu());
    ev::Profiler profiler;
    ev::Tensor c;
    {
      ev::StreamGuard guard(s);
      ev::Tensor a = ev::rand({64, 32}, ev::DType::f32, ev::Device::cpu());
      ev::Tensor b = ev::ones({32, 16}, ev::DType::f64, ev::Device::cpu());
      ev::Tensor b32 = ev::rand({32, 16}, ev::DType::f32, ev::Device::cpu());
      c = ev::matmul(a, b32);
    }
    c.wait();
    ev::Profile p = profiler.stop();

    ASSERT_EQ(p.ops().size(), 4u);
    const ev::ProfiledOp* rand = find_op(p, "rand");
    const ev::ProfiledOp* ones = find_op(p, "fill");  // ones() is a fill
    const ev::ProfiledOp* matmul = find_op(p, "matmul");
    ASSERT_TRUE(rand && ones && matmul);
    EXPECT_EQ(rand->detail, "-> f32[64, 32]");
    EXPECT_EQ(ones->detail, "-> f64[32, 16]");
    EXPECT_EQ(matmul->detail, "f32[64, 32], f32[32, 16] -> f32[64, 16]");
    for (const ev::ProfiledOp& op : p.ops()) {
      EXPECT_EQ(op.stream, s.str());
      EXPECT_EQ(op.device, ev::Device::cpu());
      EXPECT_FALSE(op.is_wait);
      EXPECT_TRUE(op.finished);
      EXPECT_TRUE(op.error.empty()) << op.error;
      EXPECT_TRUE(op.start_us.has_value()) << op.name;
      EXPECT_TRUE(op.waits_for.empty()) << "one stream: nothing to wait for elsewhere";
    }
    // Ids in enqueue order, seqs consecutive on the stream; the stream runs in order.
    for (std::size_t i = 1; i < p.ops().size(); ++i) {
      EXPECT_EQ(p.ops()[i].id, p.ops()[i - 1].id + 1);
      EXPECT_EQ(p.ops()[i].seq, p.ops()[i - 1].seq + 1);
      EXPECT_GE(*p.ops()[i].start_us, *p.ops()[i - 1].end_us);
    }
    expect_times_inside(p);
  });
}

TEST(ProfilerTest, OpTimesAreTheTimesOfTimeElapsed) {
  run_with_deadline([] {
    ev::Stream s(ev::Device::cpu());
    ev::Profiler profiler;
    ev::Event e = s.enqueue("sleep", [] { std::this_thread::sleep_for(5ms); });
    e.wait();
    const double elapsed = e.time_elapsed().count();
    ev::Profile p = profiler.stop();
    const ev::ProfiledOp* op = find_op(p, "sleep");
    ASSERT_TRUE(op && op->start_us);
    EXPECT_NEAR(*op->end_us - *op->start_us, elapsed, 0.01);
    EXPECT_GE(*op->end_us - *op->start_us, 5000.0);
  });
}

TEST(ProfilerTest, RecordsEventRecordsAndStreamWaitsWithWhatTheyWaitedFor) {
  run_with_deadline([] {
    ev::Stream producer(ev::Device::cpu());
    ev::Stream consumer(ev::Device::cpu());
    ev::Profiler profiler;
    ev::Tensor t = slow_tensor(producer, 10ms);
    ev::Event e(ev::Device::cpu());
    e.record(t);
    consumer.wait(e);
    ev::Event after = consumer.enqueue("after_wait", [] {});
    after.wait();
    ev::Profile p = profiler.stop();

    const ev::ProfiledOp* slow = find_op(p, "slow_fill");
    const ev::ProfiledOp* wait = find_op(p, "wait");
    const ev::ProfiledOp* next = find_op(p, "after_wait");
    ASSERT_TRUE(slow && wait && next);
    EXPECT_TRUE(wait->is_wait);
    EXPECT_EQ(wait->stream, consumer.str());
    EXPECT_TRUE(contains(wait->waits_for, slow->id));
    EXPECT_EQ(wait->detail.rfind("event ", 0), 0u) << wait->detail;
    // The wait held its stream until the producer had finished, and the next op ran after.
    ASSERT_TRUE(wait->start_us && slow->end_us && next->start_us);
    EXPECT_GE(*wait->end_us, *slow->end_us);
    EXPECT_GE(*next->start_us, *wait->end_us);

    // The record tied the event to the producer; the enqueue's own event was recorded too.
    const ev::ProfiledRecord* record = nullptr;
    for (const ev::ProfiledRecord& r : p.records()) {
      if (r.op == slow->id) record = &r;
    }
    ASSERT_NE(record, nullptr);
    EXPECT_NE(record->event, 0u);
    EXPECT_EQ(wait->detail, "event " + std::to_string(record->event));
    EXPECT_NE(record->event_name.find("Event"), std::string::npos) << record->event_name;
    expect_times_inside(p);
  });
}

TEST(ProfilerTest, AnOpUsingATensorOfAnotherStreamWaitsForItsProducer) {
  run_with_deadline([] {
    ev::Stream a(ev::Device::cpu());
    ev::Stream b(ev::Device::cpu());
    ev::Profiler profiler;
    ev::Tensor x = slow_tensor(a, 5ms, 2.0f, {8, 8});
    ev::Tensor y;
    {
      ev::StreamGuard guard(b);
      y = ev::add(x, x);
    }
    y.wait();
    ev::Profile p = profiler.stop();
    const ev::ProfiledOp* slow = find_op(p, "slow_fill");
    const ev::ProfiledOp* add = find_op(p, "add");
    ASSERT_TRUE(slow && add);
    EXPECT_EQ(add->stream, b.str());
    EXPECT_TRUE(contains(add->waits_for, slow->id));
    EXPECT_GE(*add->start_us, *slow->end_us);
  });
}

TEST(ProfilerTest, RecordsHostWaitsWithTheOpsWaitedFor) {
  run_with_deadline([] {
    ev::Stream s(ev::Device::cpu());
    ev::Profiler profiler;
    ev::Tensor t = slow_tensor(s, 10ms);
    ev::Event e(ev::Device::cpu());
    e.record(t);
    e.wait();
    e.wait();  // finished: costs nothing, not recorded
    ev::Profile p = profiler.stop();
    const ev::ProfiledOp* slow = find_op(p, "slow_fill");
    ASSERT_NE(slow, nullptr);
    ASSERT_EQ(p.host_waits().size(), 1u);
    const ev::ProfiledHostWait& h = p.host_waits()[0];
    EXPECT_TRUE(contains(h.ops, slow->id));
    EXPECT_TRUE(h.finished);
    EXPECT_EQ(h.thread, "thread 1");
    EXPECT_LE(h.start_us, *slow->end_us);
    EXPECT_GE(h.end_us, *slow->end_us);
    ASSERT_FALSE(p.records().empty());
    EXPECT_EQ(h.event, p.records().back().event);
    expect_times_inside(p);
  });
}

TEST(ProfilerTest, TimedOutHostWaitsInSlicesAreOneWait) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Profiler profiler;
    ev::Event e = s.enqueue("held", [] {});
    std::thread setter([&gate] {
      std::this_thread::sleep_for(10ms);
      gate.set();
    });
    // As Python's Event.wait does: short waits, one after the other, until it has finished.
    int slices = 1;
    while (!e.wait_for(1ms)) ++slices;
    setter.join();
    ev::Profile p = profiler.stop();
    EXPECT_GT(slices, 1);
    ASSERT_EQ(p.host_waits().size(), 1u);
    EXPECT_TRUE(p.host_waits()[0].finished);
    EXPECT_GE(p.host_waits()[0].end_us - p.host_waits()[0].start_us, 5000.0);
  });
}

// The last slice of a loop of short waits may find the work finished without blocking (it
// ended between two slices): the wait is finished all the same.
TEST(ProfilerTest, ASliceThatFindsTheWorkDoneFinishesTheWait) {
  run_with_deadline([] {
    // The slices of one wait follow each other closely (Python's come every 20 ms at most,
    // and the join allows 2 ms after a timed-out one): on a loaded machine the test thread
    // can be preempted for longer between them, so the attempt is repeated until the second
    // slice came soon enough for the rule to apply.
    for (int attempt = 0; attempt < 20; ++attempt) {
      ev::UserEvent gate;
      ev::Stream s = gated_stream(gate);
      ev::Profiler profiler;
      ev::Event e = s.enqueue("held", [] {});
      EXPECT_FALSE(e.wait_for(1ms));  // a slice that times out
      const auto timed_out = std::chrono::steady_clock::now();
      gate.set();
      while (!e.poll()) std::this_thread::yield();
      const bool close = std::chrono::steady_clock::now() - timed_out < 1ms;
      EXPECT_TRUE(e.wait_for(1ms));   // the next slice: finished, nothing to block on
      ev::Profile p = profiler.stop();
      ASSERT_EQ(p.host_waits().size(), 1u);
      if (!close) continue;
      EXPECT_TRUE(p.host_waits()[0].finished);
      return;
    }
    GTEST_SKIP() << "the machine never ran the two slices within 1 ms of each other";
  });
}

TEST(ProfilerTest, RecordsCallbacksWithTheirEvent) {
  run_with_deadline([] {
    ev::Stream s(ev::Device::cpu());
    ev::Profiler profiler;
    ev::Event e = s.enqueue("work", [] { std::this_thread::sleep_for(2ms); });
    auto count = make_count();
    e.add_callback([count] {
      std::this_thread::sleep_for(1ms);
      ++*count;
    });
    ASSERT_TRUE(wait_for_count(*count, 1));
    // The callback is recorded once it has returned: a later callback of the same thread
    // starts after that.
    Flag flushed;
    e.add_callback([&flushed] { flushed.set(); });
    ASSERT_TRUE(flushed.wait_for(30s));
    ev::Profile p = profiler.stop();
    ASSERT_GE(p.callbacks().size(), 1u);
    const ev::ProfiledCallback& cb = p.callbacks()[0];
    EXPECT_EQ(cb.thread, "callbacks cpu");
    EXPECT_GE(cb.end_us - cb.start_us, 1000.0);
    const ev::ProfiledOp* work = find_op(p, "work");
    ASSERT_TRUE(work && work->end_us);
    EXPECT_GE(cb.start_us, *work->end_us);
    // Its event is the one the enqueue recorded on the op.
    bool tied = false;
    for (const ev::ProfiledRecord& r : p.records()) tied = tied || (r.event == cb.event && r.op == work->id);
    EXPECT_TRUE(tied);
    expect_times_inside(p);
  });
}

TEST(ProfilerTest, ASecondProfilerIsAStateError) {
  run_with_deadline([] {
    {
      ev::Profiler first;
      EXPECT_THROW_MSG(ev::Profiler second, ev::StateError, "another one is recording");
      first.stop();
      ev::Profiler after_stop;  // one at a time: the first has stopped
    }
    ev::Profiler after_destruction;  // a profiler dropped without stop() stopped too
  });
}

TEST(ProfilerTest, NothingIsRecordedAfterStopAndStopTwiceIsAStateError) {
  run_with_deadline([] {
    ev::Stream s(ev::Device::cpu());
    ev::Profiler profiler;
    s.enqueue("during", [] {}).wait();
    ev::Profile p = profiler.stop();
    ev::Event later = s.enqueue("after", [] {});
    later.wait();
    EXPECT_NE(find_op(p, "during"), nullptr);
    EXPECT_EQ(find_op(p, "after"), nullptr);
    EXPECT_THROW_MSG(profiler.stop(), ev::StateError, "stopped already");
    // A new profiler starts empty.
    ev::Profiler next;
    ev::Profile q = next.stop();
    EXPECT_TRUE(q.ops().empty());
    EXPECT_TRUE(q.records().empty());
    EXPECT_TRUE(q.host_waits().empty());
  });
}

TEST(ProfilerTest, WorkHeldByAUserEventNobodySetsDoesNotHangStop) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s = gated_stream(gate);
    ev::Stream free_stream(ev::Device::cpu());
    ev::Profiler profiler;
    s.enqueue("held", [] {});
    free_stream.enqueue("free", [] {}).wait();
    const auto before = std::chrono::steady_clock::now();
    ev::Profile p = profiler.stop(200ms);
    EXPECT_LT(std::chrono::steady_clock::now() - before, 20s);
    const ev::ProfiledOp* held = find_op(p, "held");
    const ev::ProfiledOp* free = find_op(p, "free");
    ASSERT_TRUE(held && free);
    EXPECT_FALSE(held->finished);
    EXPECT_FALSE(held->start_us.has_value());
    EXPECT_TRUE(free->finished);
    // The page and the trace take it too.
    EXPECT_NE(p.chrome_trace().find("held (not finished)"), std::string::npos);
    EXPECT_FALSE(p.timeline_html().empty());
    gate.set();
    s.synchronize();
  });
}

TEST(ProfilerTest, RecordsTheErrorOfAFailedOp) {
  run_with_deadline([] {
    ev::Stream s(ev::Device::cpu());
    ev::Profiler profiler;
    ev::Event e = s.enqueue("boom", [] { throw std::runtime_error("kaput"); });
    EXPECT_THROW(e.wait(), ev::OpError);
    ev::Profile p = profiler.stop();
    const ev::ProfiledOp* boom = find_op(p, "boom");
    ASSERT_NE(boom, nullptr);
    EXPECT_NE(boom->error.find("kaput"), std::string::npos) << boom->error;
    EXPECT_NE(boom->error.find("boom"), std::string::npos) << boom->error;
  });
}

TEST(ProfilerTest, RecordsWorkFromManyThreads) {
  for_thread_counts([](int n) {
    const int per_thread = iterations(50);
    ev::Profiler profiler;
    run_threads(n, [&](int) {
      ev::Stream s(ev::Device::cpu());
      ev::Event last;
      for (int i = 0; i < per_thread; ++i) last = s.enqueue("tiny", [] {});
      last.wait();
    });
    ev::Profile p = profiler.stop();
    EXPECT_EQ(p.ops().size(), static_cast<std::size_t>(n * per_thread));
    std::set<std::uint64_t> ids;
    std::set<std::string> streams;
    for (const ev::ProfiledOp& op : p.ops()) {
      ids.insert(op.id);
      streams.insert(op.stream);
    }
    EXPECT_EQ(ids.size(), p.ops().size());
    EXPECT_EQ(streams.size(), static_cast<std::size_t>(n));
    expect_times_inside(p);
  });
}

TEST(ProfilerTest, StrSummarizesTheProfile) {
  run_with_deadline([] {
    ev::Stream s(ev::Device::cpu());
    ev::Profiler profiler;
    s.enqueue("one", [] {}).wait();
    ev::Profile p = profiler.stop();
    const std::string str = p.str();
    EXPECT_EQ(str.rfind("<Profile: 1 op on 1 stream, 1 record, ", 0), 0u) << str;
    EXPECT_EQ(ev::Profile().str(), "<Profile: 0 ops on 0 streams, 0 records, 0 host waits, 0 callbacks, 0.0 µs>");
  });
}

// --- Exports -------------------------------------------------------------------------------

// A profile with some of everything: two streams whose work overlaps, a wait between them,
// an op reading the other stream's tensor, a host wait, a callback, a failed op.
ev::Profile rich_profile() {
  ev::Stream a(ev::Device::cpu());
  ev::Stream b(ev::Device::cpu());
  ev::Profiler profiler;
  // Stream a starts once the host is about to wait (and 5 ms more), so that the host wait
  // below surely blocks, however slow this machine (a sanitizer) makes the steps before it.
  ev::UserEvent gate;
  Flag about_to_wait;
  std::thread opener([&] {
    if (about_to_wait.wait_for(30s)) std::this_thread::sleep_for(5ms);
    gate.set();
  });
  a.wait(gate);
  ev::Tensor x = slow_tensor(a, 5ms, 1.0f, {16, 16});
  ev::Event xa(ev::Device::cpu());
  xa.record(x);
  b.enqueue("b_busy", [] { std::this_thread::sleep_for(3ms); });
  b.wait(xa);
  ev::Tensor y;
  {
    ev::StreamGuard guard(b);
    y = ev::matmul(x, x);
  }
  ev::Event failed = a.enqueue("boom", [] { throw std::runtime_error("kaput"); });
  Flag called;
  ev::Event ye(ev::Device::cpu());
  ye.record(y);
  ye.add_callback([&called] { called.set(); });
  about_to_wait.set();
  ye.wait();
  opener.join();
  try {
    failed.wait();
  } catch (const ev::OpError&) {
  }
  EXPECT_TRUE(called.wait_for(30s));
  Flag flushed;  // the callback above is recorded once the next one of its thread starts
  ye.add_callback([&flushed] { flushed.set(); });
  EXPECT_TRUE(flushed.wait_for(30s));
  return profiler.stop();
}

TEST(ProfilerTest, ChromeTraceFollowsTheTraceEventFormat) {
  run_with_deadline([] {
    ev::Profile p = rich_profile();
    ASSERT_FALSE(p.host_waits().empty());
    ASSERT_FALSE(p.callbacks().empty());
    json trace = json::parse(p.chrome_trace());
    ASSERT_TRUE(trace.is_object());
    ASSERT_TRUE(trace["traceEvents"].is_array());

    using Track = std::pair<long, long>;  // (pid, tid)
    std::map<Track, std::string> thread_names;
    std::map<long, std::string> process_names;
    struct SliceSpan {
      double ts, dur;
    };
    std::map<Track, std::vector<SliceSpan>> slices;
    std::map<std::uint64_t, json> starts, finishes;
    std::set<std::uint64_t> op_ids_in_trace;
    for (const json& ev : trace["traceEvents"]) {
      ASSERT_TRUE(ev.contains("ph") && ev["ph"].is_string()) << ev.dump();
      ASSERT_TRUE(ev.contains("pid")) << ev.dump();
      const std::string ph = ev["ph"];
      const Track track{ev["pid"].get<long>(), ev.value("tid", 0L)};
      if (ph == "M") {
        ASSERT_TRUE(ev["args"].contains("name") || ev["args"].contains("sort_index")) << ev.dump();
        if (ev["name"] == "thread_name") thread_names[track] = ev["args"]["name"];
        if (ev["name"] == "process_name") process_names[track.first] = ev["args"]["name"];
        continue;
      }
      ASSERT_TRUE(ev.contains("ts") && ev["ts"].is_number()) << ev.dump();
      const double ts = ev["ts"];
      EXPECT_GE(ts, 0.0) << ev.dump();
      if (ph == "X") {
        ASSERT_TRUE(ev.contains("dur") && ev["dur"].is_number()) << ev.dump();
        ASSERT_TRUE(ev["name"].is_string()) << ev.dump();
        EXPECT_GE(ev["dur"].get<double>(), 0.0) << ev.dump();
        slices[track].push_back({ts, ev["dur"]});
        if (ev["args"].contains("id") && (ev["cat"] == "op" || ev["cat"] == "wait")) {
          op_ids_in_trace.insert(ev["args"]["id"].get<std::uint64_t>());
        }
      } else if (ph == "s" || ph == "f") {
        ASSERT_TRUE(ev.contains("id")) << ev.dump();
        auto& side = ph == "s" ? starts : finishes;
        EXPECT_TRUE(side.emplace(ev["id"].get<std::uint64_t>(), ev).second) << "flow id used twice: " << ev.dump();
      } else {
        EXPECT_EQ(ph, "i") << "unexpected phase: " << ev.dump();
      }
    }

    // Every op with times is a slice, on a named track of a named process.
    for (const ev::ProfiledOp& op : p.ops()) {
      if (op.start_us) EXPECT_TRUE(op_ids_in_trace.count(op.id)) << op.name << " is not in the trace";
    }
    for (const auto& [track, list] : slices) {
      EXPECT_TRUE(thread_names.count(track)) << "no thread_name for pid " << track.first << " tid " << track.second;
      EXPECT_TRUE(process_names.count(track.first)) << "no process_name for pid " << track.first;
      // Slices of a track do not overlap (viewers nest overlapping slices, or drop them).
      for (std::size_t i = 1; i < list.size(); ++i) {
        EXPECT_GE(list[i].ts + 1e-9, list[i - 1].ts + list[i - 1].dur);
      }
    }
    EXPECT_TRUE(std::any_of(thread_names.begin(), thread_names.end(),
                            [](const auto& t) { return t.second.rfind("host waits", 0) == 0; }));
    EXPECT_TRUE(std::any_of(thread_names.begin(), thread_names.end(),
                            [](const auto& t) { return t.second == "callbacks cpu"; }));

    // Flows: each start has its finish (same id, name and category), and each end binds to a
    // slice of its track that is open at its time ([ts, ts + dur), as Perfetto binds).
    ASSERT_FALSE(starts.empty()) << "no arrows";
    EXPECT_EQ(starts.size(), finishes.size());
    auto inside_a_slice = [&](const json& ev) {
      const Track track{ev["pid"].get<long>(), ev.value("tid", 0L)};
      const double ts = ev["ts"];
      for (const SliceSpan& s : slices[track]) {
        if (s.ts <= ts && ts < s.ts + s.dur) return true;
      }
      return false;
    };
    for (const auto& [id, s] : starts) {
      ASSERT_TRUE(finishes.count(id)) << "flow " << id << " has no finish";
      const json& f = finishes[id];
      EXPECT_EQ(s["name"], f["name"]);
      EXPECT_EQ(s["cat"], f["cat"]);
      EXPECT_EQ(f.value("bp", ""), "e");
      EXPECT_TRUE(inside_a_slice(s)) << "flow start outside any slice: " << s.dump();
      EXPECT_TRUE(inside_a_slice(f)) << "flow finish outside any slice: " << f.dump();
      EXPECT_LE(s["ts"].get<double>(), f["ts"].get<double>() + 1e-6) << "an arrow back in time";
    }
    // The arrows the profile says there are: one per dependency, host wait op and callback.
    std::size_t expected = 0;
    for (const ev::ProfiledOp& op : p.ops()) expected += op.waits_for.size();
    for (const ev::ProfiledHostWait& h : p.host_waits()) {
      if (h.finished) expected += h.ops.size();  // a wait that timed out saw nothing end
    }
    EXPECT_GE(starts.size(), expected);
  });
}

TEST(ProfilerTest, TimelinePageIsSelfContainedWithItsDataAndABarPerOp) {
  run_with_deadline([] {
    ev::Profile p = rich_profile();
    const std::string html = p.timeline_html();
    auto count = [&](const std::string& needle) {
      std::size_t n = 0;
      for (std::size_t at = html.find(needle); at != std::string::npos; at = html.find(needle, at + 1)) ++n;
      return n;
    };
    // The data the page's script draws: one JSON element, readable as it is.
    const std::string open = "<script type=\"application/json\" id=\"eventide-timeline-data\">";
    ASSERT_EQ(count(open), 1u);
    const std::size_t from = html.find(open) + open.size();
    const std::size_t to = html.find("</script>", from);
    ASSERT_NE(to, std::string::npos);
    const json data = json::parse(html.substr(from, to - from));
    const json& texts = data["texts"];
    std::size_t timed_ops = 0, timed_waits = 0;
    std::set<std::string> streams;
    for (const ev::ProfiledOp& op : p.ops()) {
      if (!op.start_us) continue;
      (op.is_wait ? timed_waits : timed_ops) += 1;
      streams.insert(op.stream);
    }
    std::size_t ops = 0, waits = 0;
    bool failed_with_error = false;
    for (const json& b : data["bars"]) {
      const std::string kind = data["kinds"][b[1].get<int>()];
      ops += kind == "op";
      waits += kind == "wait";
      EXPECT_GE(b[5].get<std::int64_t>(), 0) << "a bar of negative duration";
      if ((b[10].get<int>() & 1) && b[9].get<int>() >= 0) {
        failed_with_error |= texts[b[9].get<int>()].get<std::string>().find("kaput") != std::string::npos;
      }
    }
    EXPECT_EQ(ops, timed_ops);
    EXPECT_EQ(waits, timed_waits);
    std::set<std::string> lanes;
    for (const json& l : data["lanes"]) {
      if (l["kind"] == "stream") lanes.insert(l["key"].get<std::string>());
    }
    EXPECT_EQ(lanes, streams);
    EXPECT_GE(data["arrows"].size(), 1u);
    bool detail = false;
    for (const json& t : texts) detail |= t.get<std::string>() == "f32[16, 16], f32[16, 16] -> f32[16, 16]";
    EXPECT_TRUE(detail) << "the ops' details are in the page's texts";
    EXPECT_TRUE(failed_with_error) << "the failed op is flagged, with its error";
    EXPECT_TRUE(data["unit"] == "µs" || data["unit"] == "ms");
    // No element per op: the page's size does not grow by one element per bar.
    EXPECT_EQ(count("<rect"), 0u);
    EXPECT_EQ(count("<canvas"), 1u);
    // Self-contained: nothing is fetched.
    EXPECT_EQ(html.find("<script src"), std::string::npos);
    EXPECT_EQ(html.find("<link"), std::string::npos);
    EXPECT_EQ(html.find("@import"), std::string::npos);
    EXPECT_EQ(count("http"), 0u);
  });
}

TEST(ProfilerTest, ExportsWriteFilesAndNameAPathTheyCannotWrite) {
  run_with_deadline([] {
    ev::Profile p = rich_profile();
    const auto dir = std::filesystem::temp_directory_path() /
                     ("eventide_profiler_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string trace = (dir / "trace.json").string();
    const std::string page = (dir / "timeline.html").string();
    p.export_chrome_trace(trace);
    p.export_timeline(page);
    auto read = [](const std::string& path) {
      std::ifstream f(path);
      std::stringstream ss;
      ss << f.rdbuf();
      return ss.str();
    };
    EXPECT_EQ(read(trace), p.chrome_trace());
    EXPECT_EQ(read(page), p.timeline_html());
    const std::string bad = (dir / "no such dir" / "trace.json").string();
    EXPECT_THROW_MSG(p.export_chrome_trace(bad), ev::Error, "export_chrome_trace", "no such dir");
    EXPECT_THROW_MSG(p.export_timeline(bad), ev::Error, "export_timeline", "no such dir");
    std::filesystem::remove_all(dir);
  });
}

// The timeline page's data (the JSON its script draws) and its summary line.
json page_data(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"eventide-timeline-data\">";
  const std::size_t from = html.find(open);
  if (from == std::string::npos) return json();
  const std::size_t to = html.find("</script>", from);
  return json::parse(html.substr(from + open.size(), to - from - open.size()));
}

std::string page_summary(const std::string& html) {
  const std::string open = "<p class=\"summary\">";
  const std::size_t from = html.find(open);
  if (from == std::string::npos) return "";
  return html.substr(from + open.size(), html.find("</p>", from) - from - open.size());
}

// Per op name, the colour of its bars (a name drawn in two colours fails the test).
std::map<std::string, std::string> colour_per_name(const std::string& html) {
  const json data = page_data(html);
  std::map<std::string, std::string> out;
  for (const json& b : data["bars"]) {
    if (data["kinds"][b[1].get<int>()] != "op") continue;
    const std::string name = data["texts"][b[3].get<int>()];
    const std::string colour = data["colours"][b[2].get<int>()];
    auto [it, added] = out.try_emplace(name, colour);
    EXPECT_EQ(it->second, colour) << name << " is drawn in two colours";
  }
  return out;
}

TEST(ProfilerTest, TimelinePageCarriesTheTitleAndNoteItIsGivenEscaped) {
  run_with_deadline([] {
    ev::Tensor a = ev::zeros({8, 8});
    ev::Profiler profiler;
    ev::add(a, a).wait();
    ev::Profile p = profiler.stop();
    const std::string plain = p.timeline_html();
    EXPECT_NE(plain.find("<title>eventide timeline</title>"), std::string::npos);
    EXPECT_NE(plain.find("<h1>eventide timeline</h1>"), std::string::npos);
    EXPECT_EQ(plain.find("class=\"note\""), std::string::npos) << "no note unless one is given";

    const ev::TimelineOptions options{.title = "Two <streams> & one", .note = "Look at \"the join\"."};
    const std::string html = p.timeline_html(options);
    EXPECT_NE(html.find("<title>Two &lt;streams&gt; &amp; one · eventide timeline</title>"), std::string::npos);
    EXPECT_NE(html.find("<h1>Two &lt;streams&gt; &amp; one</h1>"), std::string::npos);
    EXPECT_NE(html.find("<p class=\"note\">Look at &quot;the join&quot;.</p>"), std::string::npos);
    EXPECT_EQ(page_data(html), page_data(plain)) << "the options change the heading, not the data";

    const auto path = std::filesystem::temp_directory_path() /
                      ("eventide_timeline_title_" + std::to_string(::getpid()) + ".html");
    p.export_timeline(path.string(), options);
    std::ifstream f(path);
    std::stringstream written;
    written << f.rdbuf();
    EXPECT_EQ(written.str(), html);
    std::filesystem::remove(path);
  });
}

TEST(ProfilerTest, TimelineColoursAreTheSameOnEveryPageWhateverTheOrderOfTheOps) {
  run_with_deadline([] {
    ev::Tensor a = ev::zeros({8, 8});
    ev::Stream s(ev::Device::cpu());
    auto user_op = [&s] { s.enqueue("my_kernel", [] {}).wait(); };
    ev::Profile first, second;
    {
      ev::Profiler profiler;
      ev::matmul(a, a).wait();
      ev::add(a, a).wait();
      ev::mul(a, a).wait();
      user_op();
      first = profiler.stop();
    }
    {
      ev::Profiler profiler;
      user_op();
      ev::mul(a, a).wait();
      ev::add(a, a).wait();
      ev::randn({8, 8}).wait();
      ev::matmul(a, a).wait();
      second = profiler.stop();
    }
    const auto one = colour_per_name(first.timeline_html());
    const auto two = colour_per_name(second.timeline_html());
    for (const char* name : {"matmul", "add", "mul", "my_kernel"}) {
      ASSERT_TRUE(one.count(name) && two.count(name)) << name;
      EXPECT_EQ(one.at(name), two.at(name)) << name << " changed colour from one page to the next";
    }
    // eventide's own ops never share a colour.
    std::set<std::string> own;
    for (const char* name : {"matmul", "add", "mul", "randn"}) own.insert(two.at(name));
    EXPECT_EQ(own.size(), 4u);
  });
}

TEST(ProfilerTest, TimelineHeaderCountsTheOpsAsTheProfileDoes) {
  run_with_deadline([] {
    ev::Tensor a = ev::zeros({8, 8}, ev::DType::f32, ev::Device::cpu());  // (the streams' device)
    ev::Stream s1(ev::Device::cpu()), s2(ev::Device::cpu());
    ev::UserEvent gate;
    ev::Profiler profiler;
    s1.wait(gate);  // a wait
    ev::Tensor x;
    {
      ev::StreamGuard guard(s1);
      x = ev::add(a, a);
    }
    ev::Event marker;
    marker.record(s2);  // a marker
    gate.set();
    x.wait();
    marker.wait();
    ev::Profile p = profiler.stop();
    std::size_t waits = 0, markers = 0;
    for (const ev::ProfiledOp& op : p.ops()) {
      waits += op.is_wait;
      markers += op.is_marker;
    }
    ASSERT_EQ(waits, 1u);
    ASSERT_EQ(markers, 1u);
    // What the CLI prints ("profile: 3 ops, ...") and Python's len(prof.ops) count: all of them.
    const std::string summary = page_summary(p.timeline_html());
    EXPECT_EQ(summary.rfind(std::to_string(p.ops().size()) + " ops (1 wait, 1 marker) on 2 streams · ", 0), 0u)
        << summary;
  });
}

// Of the arrows into one target, those from the ops that ended last are held_back, unless the
// op before the target on its stream ended later still (then none is).
void expect_held_back_marks_the_last_to_end(const ev::Profile& p) {
  namespace prof = eventide::profile;
  const prof::Layout layout = prof::lay_out(p);
  const std::vector<prof::Arrow> arrows = prof::arrows(p, layout);
  std::map<std::pair<int, std::size_t>, std::vector<const prof::Arrow*>> into;
  for (const prof::Arrow& a : arrows) into[{static_cast<int>(a.to), a.index}].push_back(&a);
  std::vector<std::optional<std::int64_t>> before(p.ops().size());
  for (const prof::StreamTrack& t : layout.streams) {
    std::optional<std::int64_t> previous;
    for (std::size_t i : t.ops) {
      before[i] = previous;
      if (layout.spans[i]) previous = layout.spans[i]->end_ns;
    }
  }
  for (const auto& [target, in] : into) {
    std::optional<std::int64_t> last;
    for (const prof::Arrow* a : in) {
      if (const auto& span = layout.spans[a->from]) last = std::max(last.value_or(span->end_ns), span->end_ns);
    }
    const bool op = target.first == static_cast<int>(prof::Arrow::To::op);
    const bool none = !last || (op && before[target.second] && *before[target.second] >= *last);
    for (const prof::Arrow* a : in) {
      const bool expected = !none && layout.spans[a->from] && layout.spans[a->from]->end_ns == *last;
      EXPECT_EQ(a->held_back, expected) << "arrow from " << p.ops()[a->from].name << "#" << p.ops()[a->from].seq;
    }
  }
}

TEST(ProfilerTest, AnArrowIsHeldBackOnlyIfItsOpIsWhatItsTargetWaitedForLast) {
  run_with_deadline([] {
    ev::Stream a(ev::Device::cpu()), b(ev::Device::cpu()), c(ev::Device::cpu());
    ev::UserEvent gate;
    ev::Profiler profiler;
    a.wait(gate);  // nothing of a runs before everything is enqueued
    ev::Tensor x = slow_tensor(a, 2ms, 1.0f, {8, 8});
    ev::Event x_done;
    x_done.record(x);
    // b is busy until 5 ms after x is made: its matmul reads x, but what it waited for last is
    // b's own work.
    b.enqueue("b_busy", [x_done] {
      while (!x_done.poll()) std::this_thread::sleep_for(200us);
      std::this_thread::sleep_for(5ms);
    });
    ev::Tensor y, z;
    {
      ev::StreamGuard guard(b);
      y = ev::matmul(x, x);
    }
    {
      ev::StreamGuard guard(c);  // nothing before it on c: x held it back
      z = ev::matmul(x, x);
    }
    gate.set();
    y.wait();
    z.wait();
    ev::Profile p = profiler.stop();
    const ev::ProfiledOp* made_x = find_op(p, "slow_fill");
    ASSERT_NE(made_x, nullptr);
    namespace prof = eventide::profile;
    const prof::Layout layout = prof::lay_out(p);
    int into_b = 0, into_c = 0;
    for (const prof::Arrow& arrow : prof::arrows(p, layout)) {
      if (arrow.to != prof::Arrow::To::op || p.ops()[arrow.from].id != made_x->id) continue;
      const ev::ProfiledOp& target = p.ops()[arrow.index];
      if (target.name != "matmul") continue;
      const bool on_b = std::any_of(layout.streams.begin(), layout.streams.end(), [&](const prof::StreamTrack& t) {
        return t.stream == target.stream &&
               std::any_of(t.ops.begin(), t.ops.end(), [&](std::size_t i) { return p.ops()[i].name == "b_busy"; });
      });
      (on_b ? into_b : into_c) += 1;
      EXPECT_EQ(arrow.held_back, !on_b) << (on_b ? "b's matmul waited for b_busy last, not for x"
                                                 : "c's matmul waited for x alone");
    }
    EXPECT_EQ(into_b, 1);
    EXPECT_EQ(into_c, 1);
    expect_held_back_marks_the_last_to_end(p);
    expect_held_back_marks_the_last_to_end(rich_profile());
  });
}

TEST(ProfilerTest, AnEmptyProfileExportsToo) {
  run_with_deadline([] {
    ev::Profiler profiler;
    ev::Profile p = profiler.stop();
    json trace = json::parse(p.chrome_trace());
    EXPECT_TRUE(trace["traceEvents"].is_array());
    EXPECT_NE(p.timeline_html().find("No ops were recorded"), std::string::npos);
  });
}

}  // namespace

// --- User ranges (ev::Range) -------------------------------------------------------------

namespace {

const ev::ProfiledRange* find_range(const ev::Profile& p, const std::string& name) {
  for (const ev::ProfiledRange& r : p.ranges()) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

// Two nested ranges around an op and its wait on this thread, one on another thread.
ev::Profile ranges_profile() {
  ev::Profiler profiler;
  {
    ev::Range outer("step");
    ev::Stream s(ev::Device::cpu());
    ev::Event e = s.enqueue("sleep", [] { std::this_thread::sleep_for(3ms); });
    {
      ev::Range inner("wait for it");
      e.wait();  // blocks: a host wait of this thread
      std::this_thread::sleep_for(1ms);
    }
  }
  std::thread([] {
    ev::Range other("elsewhere");
    std::this_thread::sleep_for(1ms);
  }).join();
  return profiler.stop();
}

}  // namespace

TEST(ProfilerTest, RecordsUserRangesWithTheirThreadInTheOrderTheyBegan) {
  run_with_deadline([] {
    ev::Range before("before the profiler");  // open before: not in the profile
    ev::Profile p = ranges_profile();
    ASSERT_EQ(p.ranges().size(), 3u) << p.str();
    EXPECT_EQ(p.ranges()[0].name, "step");
    EXPECT_EQ(p.ranges()[1].name, "wait for it");
    EXPECT_EQ(p.ranges()[2].name, "elsewhere");
    const ev::ProfiledRange& outer = p.ranges()[0];
    const ev::ProfiledRange& inner = p.ranges()[1];
    EXPECT_LE(outer.start_us, inner.start_us);
    EXPECT_GE(outer.end_us, inner.end_us);
    EXPECT_GE(inner.end_us - inner.start_us, 1000.0);
    EXPECT_EQ(outer.thread, inner.thread);
    EXPECT_NE(p.ranges()[2].thread, outer.thread);
    EXPECT_EQ(find_range(p, "before the profiler"), nullptr);
    EXPECT_NE(p.str().find("3 ranges"), std::string::npos) << p.str();
    // The thread of a range is named as the same thread's host waits are.
    ASSERT_FALSE(p.host_waits().empty());
    EXPECT_EQ(p.host_waits()[0].thread, outer.thread);
    expect_times_inside(p);
  });
}

TEST(ProfilerTest, ARangeStillOpenWhenTheProfileIsTakenIsLeftOut) {
  run_with_deadline([] {
    ev::Profiler profiler;
    auto open = std::make_unique<ev::Range>("still open");
    { ev::Range closed("closed"); }
    ev::Profile p = profiler.stop();
    open.reset();  // after stop(): recorded nowhere
    ASSERT_EQ(p.ranges().size(), 1u);
    EXPECT_EQ(p.ranges()[0].name, "closed");
  });
}

TEST(ProfilerTest, RangesFromManyThreadsAreAllRecorded) {
  for_thread_counts([](int threads) {
    ev::Profiler profiler;
    run_threads(threads, [](int i) {
      for (int k = 0; k < 20; ++k) {
        ev::Range r("range " + std::to_string(i));
        ev::Range nested("nested");
      }
    });
    ev::Profile p = profiler.stop();
    EXPECT_EQ(p.ranges().size(), static_cast<std::size_t>(threads) * 40);
    std::set<std::string> names;
    for (const ev::ProfiledRange& r : p.ranges()) names.insert(r.thread);
    EXPECT_EQ(names.size(), static_cast<std::size_t>(threads));
  });
}

TEST(ProfilerTest, ChromeTraceHasUserRangesAsNestedCompleteEventsOnTheirThreadsTrack) {
  run_with_deadline([] {
    ev::Profile p = ranges_profile();
    const json trace = json::parse(p.chrome_trace());
    std::map<std::string, json> ranges;
    std::map<std::pair<int, int>, std::string> track_names;
    for (const json& ev : trace["traceEvents"]) {
      if (ev["ph"] == "M" && ev["name"] == "thread_name") {
        track_names[{ev["pid"].get<int>(), ev["tid"].get<int>()}] = ev["args"]["name"];
      }
      if (ev.value("cat", "") == "range") ranges[ev["name"].get<std::string>()] = ev;
    }
    ASSERT_EQ(ranges.size(), 3u);
    const json& outer = ranges["step"];
    const json& inner = ranges["wait for it"];
    EXPECT_EQ(outer["ph"], "X");
    EXPECT_EQ(outer["tid"], inner["tid"]) << "one thread's ranges share a track";
    EXPECT_NE(outer["tid"], ranges["elsewhere"]["tid"]);
    EXPECT_LE(outer["ts"].get<double>(), inner["ts"].get<double>());
    EXPECT_GE(outer["ts"].get<double>() + outer["dur"].get<double>(),
              inner["ts"].get<double>() + inner["dur"].get<double>())
        << "the inner range is nested in the outer one";
    const std::pair<int, int> track{outer["pid"].get<int>(), outer["tid"].get<int>()};
    EXPECT_EQ(track_names[track], "ranges · " + p.ranges()[0].thread);
  });
}

TEST(ProfilerTest, TimelinePageDrawsUserRangesOnARowPerThreadAndDepth) {
  run_with_deadline([] {
    ev::Profile p = ranges_profile();
    const std::string html = p.timeline_html();
    const std::string open = "<script type=\"application/json\" id=\"eventide-timeline-data\">";
    const std::size_t from = html.find(open);
    ASSERT_NE(from, std::string::npos);
    const std::size_t to = html.find("</script>", from);
    const json data = json::parse(html.substr(from + open.size(), to - from - open.size()));
    std::vector<std::string> range_lanes;
    for (const json& l : data["lanes"]) {
      if (l["kind"] == "range") range_lanes.push_back(l["sub"].get<std::string>() + " / " + l["title"].get<std::string>());
    }
    std::size_t bars = 0;
    bool named = false;
    for (const json& b : data["bars"]) {
      if (data["kinds"][b[1].get<int>()] != "range") continue;
      ++bars;
      EXPECT_EQ(data["lanes"][b[0].get<int>()]["kind"], "range") << "a range's bar is on a range lane";
      named |= data["texts"][b[3].get<int>()].get<std::string>().rfind("wait for it", 0) == 0;
    }
    EXPECT_EQ(bars, 3u);
    EXPECT_TRUE(named) << "a range's bar carries its name";
    // Lanes: the first thread at depths 0 and 1, the other thread at depth 0.
    ASSERT_EQ(range_lanes.size(), 3u);
    EXPECT_EQ(std::count_if(range_lanes.begin(), range_lanes.end(),
                            [](const std::string& l) { return l.rfind("ranges, depth 1", 0) == 0; }),
              1) << "the nested range has a lane below";
  });
}
