// Work: one op (or wait, or marker, or host-set step) on a timeline.
//
// A Work is created when an op is enqueued, gets the next sequence number of its stream's
// timeline, and is finished when that timeline passes its number. Before the timeline passes,
// the executor writes the outcome: `error` (null on success) and, for timed work, the device
// time of its start and end. After it has passed (completed() acquire), anyone may read them;
// they never change again.
//
// Tensors remember the Work that produced them, events hold the Works they are tied to, and
// ops hold the Works they depend on (`deps`), so a Work lives as long as any of those.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ref.hpp"
#include "core/spin_lock.hpp"
#include "core/small_vector.hpp"
#include "core/storage.hpp"
#include "core/timeline.hpp"
#include "eventide/detail/callback.hpp"

namespace eventide::detail {

class Work;

enum class DepKind : std::uint8_t {
  input,   // reads or writes a tensor another op produced: its failure propagates
  gate,    // the stream's latest wait: its failure propagates (the stream is broken)
  waited,  // a fence a wait (barrier) is waiting for: its failure propagates
  order,   // only ordering (a later write after a read): no failure propagates
  previous,  // a marker's: the work right before it on its stream, whose failure it reports
};

struct Dep {
  Ref<Work> work;
  DepKind kind;
};

// What a Work is. Ops and timed markers have device times; the rest do not.
enum class WorkKind : std::uint8_t {
  op,      // runs a body (an op, Stream::enqueue), timed from its start to its end
  wait,    // a barrier: finishes when the fences it waits for have passed
  marker,  // a point in the stream (record(stream)): runs nothing, and its time, start and
           // end alike, is when the device reached it; on a GPU it is in the native stream
           // itself, so it also follows whatever other code enqueued there before it
  untimed_marker,  // the same for an event with timing disabled: no time is taken
  host,    // a step host code takes (UserEvent::set)
};

// A point in a stream that the device itself stamped (a GPU marker's timed CUDA event). Two
// stamps of one device give the device time between them exactly as the device's clock reads
// it (cudaEventElapsedTime), where the Works' start_ns and end_ns for a marker are that point
// put on the timeline's clock, within the backend's calibration.
class Stamp : public RefCounted {
 public:
  // Device nanoseconds from this stamp to `later` (negative if `later` came first); nullopt
  // where the two cannot be compared (stamps of other devices or kinds).
  virtual std::optional<double> ns_until(const Stamp& later) const noexcept = 0;
};

class Work final : public RefCounted {
 public:
  Work(Ref<Timeline> timeline, std::string name, WorkKind kind)
      : timeline_(std::move(timeline)),
        name_(std::move(name)),
        kind_(kind),
        launch_(timeline_->device_written() ? kHeld : kLaunched) {}

  Timeline& timeline() const noexcept { return *timeline_; }
  const Ref<Timeline>& timeline_ref() const noexcept { return timeline_; }
  std::uint64_t seq() const noexcept { return seq_; }
  bool done() const noexcept { return timeline_->passed(seq_); }
  WorkKind kind() const noexcept { return kind_; }
  // Whether the work has device time of its own: ops (a span) and markers (a point).
  bool timed() const noexcept { return kind_ == WorkKind::op || kind_ == WorkKind::marker; }
  bool is_marker() const noexcept {
    return kind_ == WorkKind::marker || kind_ == WorkKind::untimed_marker;
  }
  // A marker's device stamp, where the backend took one (a GPU's); null otherwise. Set by the
  // backend before the work can finish, so valid once done().
  const Ref<Stamp>& stamp() const noexcept { return stamp_; }
  void set_stamp(Ref<Stamp> stamp) noexcept { stamp_ = std::move(stamp); }
  // Whether the work has been handed to its device: for a device-written timeline (a GPU's),
  // false from its creation until its launch has ended (a GPU op held on the host until
  // host-side work it depends on finishes has not been launched; nor has one whose launch is
  // under way on another thread, whose kernel may not be in its stream yet). Only launched
  // work progresses without the host, so only launched work may be waited for by a device.
  bool launched() const noexcept { return launch_.load(std::memory_order_acquire) != kHeld; }
  // Marks the launch as ended, by the thread that launched it. A work that failed by then
  // (a dependency's known failure, a broken device, a launch error) ran nothing on the
  // device (but a collective, which is issued all the same: must_issue), and its error is
  // final from here on, although it is not done() yet: work launched after it reads
  // failed_at_launch() and fails rather than runs. Nothing may set its error again.
  void set_launched() noexcept {
    launch_.store(error_ ? kLaunchedFailed : kLaunched, std::memory_order_release);
  }
  // Whether the work failed at its launch (then error() may be read before done()).
  bool failed_at_launch() const noexcept {
    return launch_.load(std::memory_order_acquire) == kLaunchedFailed;
  }
  // Whether the body runs even when a dependency failed (or the stream is broken): a
  // collective's, whose peers in other processes would otherwise wait for it forever. The
  // work fails all the same, with the dependency's error; what it computed is not used.
  // Set before it is submitted.
  bool must_issue() const noexcept { return must_issue_; }
  void set_must_issue() noexcept { must_issue_ = true; }
  // Whether the body launches no kernel at all and needs no timing (a native event's record or
  // wait): it runs at once, also while the device starts up (a GPU's CUPTI and kernel code),
  // untimed. Set before it is submitted.
  bool no_backend_kernels() const noexcept { return no_backend_kernels_; }
  void set_no_backend_kernels() noexcept { no_backend_kernels_ = true; }

  // Valid once done() (or failed_at_launch()). A GPU op whose inputs were still running when
  // it was launched learns only later whether they failed: its error is then decided on the
  // first read, from its dependencies (all done by then).
  const std::exception_ptr& error() const noexcept {
    if (deferred_.load(std::memory_order_acquire)) decide_error();
    return error_;
  }

  // Device time. On the CPU it is known when the work is done; on a GPU it arrives later
  // (timing_known() false until then: Timeline::await_timing gets it). has_times() is false
  // for work that ran nothing timed.
  bool timing_known() const noexcept { return timing_known_.load(std::memory_order_acquire); }
  bool has_times() const noexcept { return has_times_.load(std::memory_order_acquire); }
  std::int64_t start_ns() const noexcept { return start_ns_.load(std::memory_order_relaxed); }
  std::int64_t end_ns() const noexcept { return end_ns_.load(std::memory_order_relaxed); }

  // "matmul#3 on cpu stream 1".
  std::string describe() const;
  const std::string& name() const noexcept { return name_; }

  // --- For the backend that runs it. ---
  void set_seq(std::uint64_t seq) noexcept { seq_ = seq; }
  void set_error(std::exception_ptr e) noexcept { error_ = std::move(e); }
  // The error is decided later (see error()); keeps the deps until then.
  void decide_error_later() noexcept { deferred_.store(true, std::memory_order_release); }
  // Final times, known when the work finishes (CPU, host work).
  void set_times(std::int64_t start_ns, std::int64_t end_ns) noexcept {
    start_ns_.store(start_ns, std::memory_order_relaxed);
    end_ns_.store(end_ns, std::memory_order_relaxed);
    has_times_.store(true, std::memory_order_relaxed);
    timing_known_.store(true, std::memory_order_release);
  }
  // When a host-run stream reached this work but had to wait for its dependencies (for the
  // profiler's drawing of a wait): kept in start_ns until set_times().
  void set_reached(std::int64_t ns) noexcept {
    if (start_ns_.load(std::memory_order_relaxed) == 0) start_ns_.store(ns, std::memory_order_relaxed);
  }
  // Times arriving piece by piece (one per kernel of a GPU op): the earliest start and the
  // latest end are kept. finish_timing() makes them final.
  void merge_times(std::int64_t start_ns, std::int64_t end_ns) noexcept;
  void finish_timing() noexcept { timing_known_.store(true, std::memory_order_release); }

  // The parts of a graph replay's op whose times are known, which the profiler draws inside
  // its bar: the nodes run on the host, the kernels and copies CUPTI reports on a GPU. Kept
  // only for a work marked before it is submitted (LaunchOptions::keeps_parts, while a
  // profiler records); added while it runs or as its times arrive (const: the parts are the
  // profile's record of a run, not the work's state), read once timing_known(). Times on the
  // timeline's clock, as start_ns(). A part that finds no memory is left out.
  struct Part {
    std::string name;
    std::int64_t start_ns = 0, end_ns = 0;
  };
  void set_keeps_parts();
  bool keeps_parts() const noexcept { return parts_ != nullptr; }
  void add_part(std::string_view name, std::int64_t start_ns, std::int64_t end_ns) const noexcept;
  std::vector<Part> parts() const;

  using Deps = SmallVector<Dep, 3>;
  Deps& deps() noexcept { return deps_; }
  const Deps& deps() const noexcept { return deps_; }
  Callback& body() noexcept { return body_; }
  bool has_body() const noexcept { return static_cast<bool>(body_); }
  // The memory the body uses (its tensors' storage, and what else its kernel named), held
  // until the work has run (StreamState::launch fills it before the work is submitted).
  // Inline room for a product's two inputs, its output and its workspace.
  using Keep = SmallVector<Ref<Storage>, 4>;
  Keep& keep() noexcept { return keep_; }
  // Drops the body, the memory it kept and the deps once the work has run: the op no longer
  // needs them. Decides a deferred error first, while the deps are there.
  void release_execution_state() noexcept;
  // Intrusive link for a backend's queue.
  Work* next = nullptr;

 private:
  void decide_error() const noexcept;

  Ref<Timeline> timeline_;
  std::uint64_t seq_ = 0;
  std::string name_;
  WorkKind kind_;
  enum : std::uint8_t { kHeld, kLaunched, kLaunchedFailed };
  std::atomic<std::uint8_t> launch_;
  bool must_issue_ = false;
  bool no_backend_kernels_ = false;
  mutable std::exception_ptr error_;
  mutable std::atomic<bool> deferred_{false};
  mutable SpinLock exec_mu_;  // deferred error vs. release of the deps
  std::atomic<bool> timing_known_{false};
  std::atomic<bool> has_times_{false};
  std::atomic<std::int64_t> start_ns_{0};
  std::atomic<std::int64_t> end_ns_{0};
  Deps deps_;
  Callback body_;
  Keep keep_;
  Ref<Stamp> stamp_;
  mutable std::unique_ptr<std::vector<Part>> parts_;  // under exec_mu_ once submitted
};

// The errors a Work fails with. They are made where nothing may fail (a worker, a listener,
// a Work's deferred error), so none of these throws: when memory for the message runs out,
// the work still fails, with the best error at hand (the cause itself, or the bad_alloc).
//
// The error a Work gets when it is skipped because `dep` failed, naming both; without
// memory, `dep`'s own error.
std::exception_ptr dependency_error(const Work& work, const Dep& dep) noexcept;
// The first error among deps whose failure propagates, as dependency_error; null if none.
// Every dep must be done.
std::exception_ptr first_dependency_error(const Work& work) noexcept;
// The error of a Work whose body threw `thrown`: an OpError naming the work, whose cause()
// is `thrown`; without memory, `thrown` itself.
std::exception_ptr body_error(const Work& work, std::exception_ptr thrown) noexcept;
// The error of a Work that did not run because the runtime shut down (a StateError); without
// memory, a std::bad_alloc.
std::exception_ptr shutdown_error(const Work& work) noexcept;
// The root cause: the cause() of an OpError, else the error itself.
std::exception_ptr root_cause(const std::exception_ptr& error) noexcept;
// what() of an exception_ptr, for messages.
std::string describe_error(const std::exception_ptr& error);
// The same without allocating, for code that must not fail (error reports in destructors and
// threads): the text lives as long as `error` does.
const char* error_what(const std::exception_ptr& error) noexcept;
// A std::bad_alloc made at start-up (never allocated when memory is short), for errors that
// cannot be made any other way.
const std::exception_ptr& out_of_memory_error() noexcept;

// The Work the calling thread is running (a stream worker inside a body), else null.
const Work* running_work() noexcept;
void set_running_work(const Work* work) noexcept;
// StateError if the calling thread runs work on `timeline` and `seq` comes after it: that
// wait could never end (the thread would wait for work queued behind itself).
void check_not_waiting_on_self(const Timeline& timeline, std::uint64_t seq);

// Monotonic nanoseconds of the host clock (steady_clock): the CPU device's time base.
std::int64_t host_now_ns() noexcept;

}  // namespace eventide::detail
