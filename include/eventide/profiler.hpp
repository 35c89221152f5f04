// eventide/profiler.hpp: recording what device work ran, where and when, to look at it in
// the tools people already use (Perfetto, chrome://tracing) or as a picture.
//
//   {
//     ev::Profiler profiler;              // records from here...
//     auto out = ev::matmul(a, b);
//     ev::Event e; e.record(out); e.wait();
//     ev::Profile p = profiler.stop();    // ...to here (waits for the recorded work's times)
//     p.export_chrome_trace("trace.json");
//     p.export_timeline("timeline.html", {.title = "One matmul",
//                                         .note = "The host waits (grey) until the matmul ends."});
//   }
//
// What is recorded: every op enqueued while the profiler runs (name, stream, device, the
// shapes and dtypes it reads and writes, its device start and end: the same times as
// time_elapsed), every event record (which op it tied), every wait (a stream's wait on an
// event, a host thread's wait on an event, a tensor or a stream), every callback run
// (when, for which event), and every user range (eventide::Range, below) that began and ended
// while it ran.
// Work enqueued before the profiler started is not in the profile; an op that depends on
// such work shows no arrow from it.
//
// States: a Profiler records from its construction until stop() (or its destruction); then
// nothing more is recorded, and the Profile is a plain value that never changes.
//
// Cost: while no profiler runs, one relaxed atomic load per enqueue, record, host wait and
// callback (nothing measurable on the poll and record benchmarks). While one runs, each of
// those takes one process-wide lock to append its record, and keeps the op's Work (a small
// object, not its memory) alive until the profile is taken.
//
// Thread-safety: one profiler at a time per process (StateError for a second); work from
// every thread is recorded; a Profile may be read from several threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "eventide/device.hpp"

namespace eventide {

namespace detail {
class ProfilerState;
}

// A part of a graph replay's op whose time is known: a node run on the host (its op's name),
// or a kernel, copy or memset that CUPTI reports on a GPU (the kernel's name).
struct ProfiledPart {
  std::string name;
  double start_us = 0, end_us = 0;
};

// Times are microseconds on the host's steady clock, from the start of the profile; device
// times (GPU) are converted to it.
struct ProfiledOp {
  std::uint64_t id = 0;     // unique within the profile, in the order the ops were enqueued
  std::string name;         // "matmul"
  std::string stream;       // "cuda:0 stream 3"
  Device device;
  std::uint64_t seq = 0;    // its number on its stream ("matmul#7" in error messages)
  std::string detail;       // "f32[512, 512], f32[512, 512] -> f32[512, 512]"; "event 2" for a wait
  bool is_wait = false;     // a stream's wait on an event (no device time of its own)
  bool is_marker = false;   // a marker (record(stream)): a point, start_us == end_us
  // False if it had not finished when the profile was taken (stop()'s time limit passed:
  // work held back by a UserEvent nobody set); it then has no times.
  bool finished = true;
  // None for work that ran nothing timed (a wait on a GPU, an op under
  // EVENTIDE_CUDA_TIMING=off). A wait on the CPU spans from when its stream reached it to
  // when what it waited for had finished.
  std::optional<double> start_us, end_us;
  std::string error;        // empty unless it failed
  std::vector<std::uint64_t> waits_for;  // ids of the ops it had to wait for on other streams
  // A graph replay's op: its parts whose times are known, in the order they ran (drawn inside
  // its bar); empty for any other op.
  std::vector<ProfiledPart> parts;
};

struct ProfiledRecord {
  std::uint64_t event = 0;  // an id per event, unique within the profile
  std::string event_name;   // "<Event pending on cpu, 1 op>" at the time of the record
  std::uint64_t op = 0;     // the op or marker the record tied (0: none: a tensor no op
                            // produced, or work from before the profile)
  double at_us = 0;         // when record() was called (host time)
};

// A host thread blocked on unfinished work: Event::wait (wait_for, wait_all) on a pending
// event, Tensor::wait, Stream::synchronize, synchronize(). Waits that find the work finished
// cost nothing and are not recorded.
struct ProfiledHostWait {
  std::uint64_t event = 0;  // 0: not an event's wait (a tensor's, a stream's)
  std::string thread;       // "thread 1": threads numbered in the order they first waited
  double start_us = 0, end_us = 0;
  bool finished = true;     // false: it timed out
  std::vector<std::uint64_t> ops;  // the ops waited for (a stream's: its last one)
};

// A callback run by a device's callback thread. One still running when the profile is taken
// is not in it.
struct ProfiledCallback {
  std::uint64_t event = 0;  // the event it was added to (0: unknown)
  std::string thread;       // "callbacks cpu"
  double start_us = 0, end_us = 0;
};

// A user's region of code (eventide::Range), on the host thread that opened it. In the order
// they began.
struct ProfiledRange {
  std::string name;
  std::string thread;       // "thread 1": numbered as the host waits' threads are
  double start_us = 0, end_us = 0;
};

// Who this process is among the processes of one job (the ranks of an `mpirun`), as its
// profiles say in their Chrome traces, so that `eventide trace merge` can put the traces of
// every rank into one, on one clock (README.md, "Traces of several processes").
struct ProcessLabel {
  int rank = -1;      // this process's rank; -1: not one rank of a job (the default)
  int size = 0;       // how many ranks the job has; 0: unknown
  std::string host;   // the machine's name; empty: the host name (gethostname) when the
                      // trace is written
  // Add this to a time of this process's steady clock (std::chrono::steady_clock, what the
  // profile's times are read from) to get the job's reference clock (rank 0's, say):
  // reference_ns = steady_ns + clock_offset_ns. 0 when unknown, and between processes of
  // one machine, which share the steady clock.
  std::int64_t clock_offset_ns = 0;
};

// Sets this process's label, for the profiles taken from now on (each takes it when it is
// stopped). Meant to be called once, early, by whatever knows the rank (a launcher's
// environment, an MPI or NCCL init such as ev.distributed's init()), and again when a better
// clock offset is measured. InvalidArgument for a rank below -1, a negative size, or a rank
// not below a known size. Thread-safe; never blocks on device work.
//
// @code
//   auto comm = ev::distributed::init();
//   ev::set_process_label({.rank = comm.rank(), .size = comm.size(),
//                          .clock_offset_ns = comm.clock_offset_ns()});
// @endcode
void set_process_label(ProcessLabel label);
// The label set last (a default ProcessLabel if none was).
ProcessLabel process_label();

// What a timeline page says about itself, above the picture: a title (its heading and the
// browser tab's; empty: "eventide timeline") and a note under it, a sentence of what to look
// at (empty: none). Both are plain text (the page escapes them).
struct TimelineOptions {
  std::string title;
  std::string note;
};

// @code
//   ev::Profile p = profiler.stop();
//   std::printf("%s\n", p.str().c_str());  // <Profile: 2 ops on 2 streams, ...>
//   for (const ev::ProfiledOp& op : p.ops())
//     std::printf("%s on %s\n", op.name.c_str(), op.stream.c_str());
//   p.export_chrome_trace("trace.json");  // https://ui.perfetto.dev, chrome://tracing
//   p.export_timeline("timeline.html", {.title = "Two matmuls"});
// @endcode
class Profile {
 public:
  Profile() = default;

  const std::vector<ProfiledOp>& ops() const noexcept { return ops_; }
  const std::vector<ProfiledRecord>& records() const noexcept { return records_; }
  const std::vector<ProfiledHostWait>& host_waits() const noexcept { return host_waits_; }
  const std::vector<ProfiledCallback>& callbacks() const noexcept { return callbacks_; }
  const std::vector<ProfiledRange>& ranges() const noexcept { return ranges_; }
  // From the profiler's start to when stop() had every time: every time above is within it.
  double duration_us() const noexcept { return duration_us_; }
  // When the profiler started, on this process's steady clock (ns since its epoch): the
  // origin of every time above. Traces of several processes are aligned by it (with each
  // process's clock offset).
  std::int64_t start_ns() const noexcept { return start_ns_; }
  // The process's label when the profile was taken (set_process_label).
  const ProcessLabel& process_label() const noexcept { return label_; }
  // "<Profile: 12 ops on 2 streams, 3 records, 1 host wait, 0 callbacks, 1.25 ms>" (and
  // ", 2 ranges" before the duration when there are user ranges).
  std::string str() const;

  // The Trace Event Format (JSON) that Perfetto and chrome://tracing load: a process per
  // device with a track per stream (named "rank 2 · cuda:0" when the process has a rank), ops as complete events, the dependencies of waits and
  // ops on other streams as flow arrows, event records as instant marks where their op ends;
  // host waits and callbacks in a "host" process, a track per thread; user ranges there too,
  // as complete events (category "range") on a track per thread ("ranges · thread 1"), nested
  // as they were. Its "otherData" says who wrote it and on which clock: "producer",
  // "duration_us", "clock" ("steady"), "start_ns", "clock_offset_ns", "host", "os_pid", and
  // "rank" and "size" where known (`eventide trace merge` reads them). The export_ functions
  // throw Error naming the path if the file cannot be written.
  std::string chrome_trace() const;
  void export_chrome_trace(const std::string& path) const;
  // A self-contained HTML page with the timeline drawn on a canvas by the page's own script:
  // the options' title and note, then streams as rows, ops as bars (each op name in the same
  // colour on every page, the name and duration written on every bar wide enough), arrows for
  // dependencies (from what held each bar back; all of a bar's own when the pointer is on it,
  // every one, faint under the bars, when asked), user ranges as bars on their thread's rows
  // (a row per nesting depth), all times in one unit (µs, or ms for a profile over 10 ms); the
  // wheel zooms, a drag pans, hovering a bar shows its details. Its header counts ops as ops() does
  // (waits and markers included, and says how many of each). Without options: no note, the
  // title "eventide timeline" (overloads rather than a default argument: programs built
  // against the one-argument forms keep running with this library).
  std::string timeline_html() const;
  std::string timeline_html(const TimelineOptions& options) const;
  void export_timeline(const std::string& path) const;
  void export_timeline(const std::string& path, const TimelineOptions& options) const;

 private:
  friend class detail::ProfilerState;
  std::vector<ProfiledOp> ops_;
  std::vector<ProfiledRecord> records_;
  std::vector<ProfiledHostWait> host_waits_;
  std::vector<ProfiledCallback> callbacks_;
  std::vector<ProfiledRange> ranges_;
  double duration_us_ = 0;
  std::int64_t start_ns_ = 0;
  ProcessLabel label_;
};

// @code
//   ev::Profiler profiler;            // records from here...
//   ev::Tensor out = ev::matmul(a, b);
//   ev::Profile p = profiler.stop();  // ...to here (waits for out's device times)
// @endcode
class Profiler {
 public:
  // Starts recording. StateError if another profiler is running.
  Profiler();
  // Stops recording (without waiting) if stop() was not called.
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // How long stop() waits for the recorded work to finish by default.
  static constexpr std::chrono::seconds kDefaultStopTimeout{10};

  // Stops recording and returns what was recorded, once every recorded op has finished and
  // its device time is known: blocks until then, or until `timeout` has passed; ops still
  // unfinished then (held back by a UserEvent nobody sets) are in the profile with
  // finished == false (so are, in the body of an op, later ops of its own stream: they
  // cannot run before it returns). StateError if already stopped.
  Profile stop(std::chrono::nanoseconds timeout = kDefaultStopTimeout);
  // The same, calling `between_waits` every few milliseconds while it waits; what it throws
  // ends the wait and comes out of stop() (the profile is then lost): how a binding lets an
  // interrupt (Ctrl-C) end a long stop().
  Profile stop(std::chrono::nanoseconds timeout, const std::function<void()>& between_waits);

 private:
  std::shared_ptr<detail::ProfilerState> state_;
};

// Joins the host waits the calling thread does while it lives into one wait in the profile,
// from the first that blocked to the scope's end: for code that waits in several timed steps,
// such as a language binding that checks for signals between them. Without it, each step that
// blocked would be a wait of its own, and a last step that found the work done (it blocks
// nothing, so it records nothing) would leave the wait looking timed out.
//
//   {
//     ev::HostWaitScope scope;              // no profiler running: does nothing
//     bool done = false;
//     while (!done) {
//       done = event.wait_for(20ms);        // each step a slice of one wait...
//       if (!done) check_for_signals();     // ...which may throw: the wait did not finish
//     }
//     scope.finish(true);                   // ...that finished
//   }
//
// The joined wait is an event's (ProfiledHostWait::event) if every step waited on that one
// event, else no event's; its ops are every op the steps waited for. Scopes do not nest: one
// opened while the thread has another open joins the outer one (and records nothing itself).
// A scope opened while no profiler runs records nothing, even if one starts meanwhile.
//
// Cost: one relaxed atomic load when no profiler runs. Thread-safety: a scope belongs to the
// thread that made it, and must be destroyed on that thread. Never throws (out of memory, the
// wait is left out of the profile, as any entry the profiler cannot keep).
class HostWaitScope {
 public:
  HostWaitScope() noexcept;
  ~HostWaitScope();
  HostWaitScope(const HostWaitScope&) = delete;
  HostWaitScope& operator=(const HostWaitScope&) = delete;

  // How the whole wait ended: `finished` true if what it waited for finished, false if it
  // timed out or was given up (the default, as when an exception leaves the scope).
  void finish(bool finished) noexcept { finished_ = finished; }

 private:
  friend class detail::ProfilerState;
  bool open_ = false;     // the calling thread's scope (not nested, a profiler running)
  bool blocked_ = false;  // a step blocked: there is a wait to record
  bool finished_ = false;
  std::uint64_t event_ = 0;
  std::int64_t start_ns_ = 0;
  std::vector<std::uint64_t> ops_;
};

// A named region of the user's code, from construction to destruction: in the profile (a
// ProfiledRange, if a profiler records both when it opens and when it closes) and, on builds
// with NVTX (EVENTIDE_WITH_NVTX), as an NVTX range in the "eventide" domain, so Nsight
// Systems shows it beside eventide's own ranges (each op's launch, host wait and callback).
//
//   void step(ev::Tensor& x) {
//     ev::Range r("step");                  // from here...
//     auto y = ev::matmul(x, x);
//     ev::Event e; e.record(y); e.wait();
//   }                                       // ...to here
//
// Ranges may nest, on one thread or several. A range belongs to the thread that opened it
// (the profile's thread; NVTX shows it there), but may be closed on another thread and need
// not close in the reverse order of opening (NVTX start/end ranges, not push/pop).
// One opened while no profiler runs is not in a profile, even if one starts meanwhile; one
// still open when the profile is taken is not in it either.
//
// Cost: with no profiler and no NVTX tool attached, a relaxed atomic load and a branch at
// each end (and NVTX's own load and branch). Thread-safety: different ranges may be opened
// and closed at once from any threads. Never throws (out of memory, the range is left out of
// the profile; the name is taken by value, so any copy of it is the caller's).
class Range {
 public:
  explicit Range(std::string name) noexcept;
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  std::string name_;              // kept only while a profiler records
  std::uint64_t nvtx_id_ = 0;     // 0: no NVTX range open
  std::int64_t start_ns_ = -1;    // -1: no profiler recorded its start
  std::thread::id thread_;        // the opening thread, for the profile
};

}  // namespace eventide
