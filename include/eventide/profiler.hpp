// eventide/profiler.hpp: recording what device work ran, where and when, to look at it in
// the tools people already use (Perfetto, chrome://tracing) or as a picture.
//
//   {
//     ev::Profiler profiler;              // records from here...
//     auto out = ev::matmul(a, b);
//     ev::Event e; e.record(out); e.wait();
//     ev::Profile p = profiler.stop();    // ...to here (waits for the recorded work's times)
//     p.export_chrome_trace("trace.json");
//     p.export_timeline("timeline.html");
//   }
//
// What is recorded: every op enqueued while the profiler runs (name, stream, device, the
// shapes and dtypes it reads and writes, its device start and end: the same times as
// time_elapsed), every event record (which op it tied), every wait (a stream's wait on an
// event, a host thread's wait), and every callback run (when, for which event).
//
// Cost: while no profiler runs, one relaxed atomic load per enqueue and per record (nothing
// measurable on the poll and record benchmarks). Thread-safety: one profiler at a time per
// process (StateError for a second); work from every thread is recorded.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eventide/device.hpp"

namespace eventide {

namespace detail {
class ProfilerState;
}

// Times are microseconds on the host's steady clock, from the start of the profile; device
// times (GPU) are converted to it.
struct ProfiledOp {
  std::uint64_t id = 0;     // unique within the profile
  std::string name;         // "matmul"
  std::string stream;       // "cuda:0 stream 3"
  Device device;
  std::string detail;       // "f32[512, 512], f32[512, 512] -> f32[512, 512]"
  bool is_wait = false;     // a stream's wait on an event (no device time of its own)
  std::optional<double> start_us, end_us;  // none for work that ran nothing timed
  std::string error;        // empty unless it failed
  std::vector<std::uint64_t> waits_for;  // ids of the ops it had to wait for on other streams
};

struct ProfiledRecord {
  std::uint64_t event = 0;  // an id per event
  std::string event_name;   // "<Event pending on cpu, 1 op>" at the time of the record
  std::uint64_t op = 0;     // the op the record tied (0: none, an idle stream)
  double at_us = 0;
};

struct ProfiledHostWait {
  std::uint64_t event = 0;
  std::string thread;       // "thread 1"
  double start_us = 0, end_us = 0;
  std::vector<std::uint64_t> ops;  // the ops waited for
};

struct ProfiledCallback {
  std::uint64_t event = 0;
  std::string thread;       // "callbacks cpu"
  double start_us = 0, end_us = 0;
};

class Profile {
 public:
  Profile() = default;

  const std::vector<ProfiledOp>& ops() const noexcept { return ops_; }
  const std::vector<ProfiledRecord>& records() const noexcept { return records_; }
  const std::vector<ProfiledHostWait>& host_waits() const noexcept { return host_waits_; }
  const std::vector<ProfiledCallback>& callbacks() const noexcept { return callbacks_; }

  // The Trace Event Format (JSON) that Perfetto and chrome://tracing load: a track per
  // stream, ops as complete events, records and waits as flow arrows, callbacks on their own
  // track. Throws Error if the file cannot be written.
  std::string chrome_trace() const;
  void export_chrome_trace(const std::string& path) const;
  // A self-contained HTML page with an SVG timeline: streams as rows, ops as bars with their
  // microseconds, arrows for waits; hovering a bar shows its details.
  std::string timeline_html() const;
  void export_timeline(const std::string& path) const;

 private:
  friend class detail::ProfilerState;
  std::vector<ProfiledOp> ops_;
  std::vector<ProfiledRecord> records_;
  std::vector<ProfiledHostWait> host_waits_;
  std::vector<ProfiledCallback> callbacks_;
};

class Profiler {
 public:
  // Starts recording. StateError if another profiler is running.
  Profiler();
  // Stops recording (without waiting) if stop() was not called.
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Stops recording and returns what was recorded, once every recorded op has finished and
  // its device time is known (blocks until then). StateError if already stopped.
  Profile stop();

 private:
  std::shared_ptr<detail::ProfilerState> state_;
};

}  // namespace eventide
