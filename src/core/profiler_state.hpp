// ProfilerState: what a running eventide::Profiler records (eventide/profiler.hpp), and the
// hooks the core calls to record it.
//
// The running profiler is `g_profiler` (null when none runs). The hot paths (launch, wait,
// record, a host wait, a callback) read it once, relaxed, and do nothing more when it is
// null; that read may be stale, so each hook takes `g_profiler_mu` and reads it again before
// touching the state. stop() clears it under the same lock, so once stop() has taken the
// recorded data no hook can reach the state any more: the lock is what makes it safe to free.
// g_profiler_mu is a leaf: nothing is called under it that could take another lock of the
// runtime, so the hooks may run under a stream's submit lock or an event's lock.
//
// States: recording (g_profiler points here) -> stopped (taken out of g_profiler by stop()
// or the Profiler's destructor; never recording again).
//
// Lifetime: owned by its Profiler. The state holds a Ref to each recorded Work (the fence and
// the outcome: its time, its error), so the Work outlives its stream and events until the
// profile is taken, and its address is never reused by another recorded Work.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/ref.hpp"
#include "core/work.hpp"
#include "eventide/device.hpp"
#include "eventide/profiler.hpp"

namespace eventide::detail {

class EventState;
class StreamState;
class TensorState;

class ProfilerState {
 public:
  ProfilerState();

  // --- Hooks: call only where active_profiler() was non-null. Thread-safe; cheap next to
  // --- what they record, and safe under a stream's or an event's lock. They never throw:
  // --- they run where the work they record is already done (numbered, enqueued, recorded),
  // --- or where nothing may fail (a destructor, the callback thread). Out of memory, the
  // --- entry is left out of the profile (counted in entries_lost()).

  // `work` (numbered, deps collected, not yet submitted) was launched on `stream`.
  static void on_launch(const StreamState& stream, const Ref<Work>& work, std::string detail) noexcept;
  // `work` is a wait of `stream` on `event`.
  static void on_wait(const StreamState& stream, const Ref<Work>& work, std::uint64_t event) noexcept;
  // `event` was tied to `op` (null: nothing, or an idle stream).
  static void on_record(std::uint64_t event, std::string event_name, const Ref<Work>& op,
                        std::int64_t at_ns) noexcept;
  // The calling thread blocked on `event`, waiting for `ops`, from `start_ns` to `end_ns`.
  static void on_host_wait(std::uint64_t event, const std::vector<Ref<Work>>& ops,
                           std::int64_t start_ns, std::int64_t end_ns, bool finished) noexcept;
  // The calling thread blocked until `timeline` passed `seq` (Tensor::wait,
  // Stream::synchronize), from `start_ns` to `end_ns`.
  static void on_fence_wait(const Timeline& timeline, std::uint64_t seq, std::int64_t start_ns,
                            std::int64_t end_ns, bool finished) noexcept;
  // A wait on `event` (or, with `timeline`, on that fence) found the work finished without
  // blocking. If the calling thread's last host wait was on the same thing and timed out
  // just before, that was a slice of this wait (a loop of short waits): it is finished now.
  static void on_wait_found_done(std::uint64_t event, const Timeline* timeline,
                                 std::uint64_t seq) noexcept;
  // A callback of `event` (0: unknown) ran on `thread` from `start_ns` to `end_ns`.
  static void on_callback(std::uint64_t event, const std::string& thread, std::int64_t start_ns,
                          std::int64_t end_ns) noexcept;

  // "f32[512, 512], f32[512, 512] -> f32[512, 512]"; empty if there is no memory for it.
  static std::string describe_tensors(std::span<TensorState* const> reads,
                                      std::span<TensorState* const> writes) noexcept;

  // Entries left out of the profile for lack of memory.
  std::uint64_t entries_lost() const noexcept { return lost_.load(std::memory_order_relaxed); }

  // --- For Profiler.
  // Starts recording; StateError if another profiler is recording.
  void start();
  // Stops recording; nothing happens if it was not recording.
  void stop_recording() noexcept;
  // Stops recording and builds the profile (see Profiler::stop). StateError if already
  // stopped. `between_waits` (may be empty) is called between slices of the wait.
  Profile stop(std::chrono::nanoseconds timeout, const std::function<void()>& between_waits);

 private:
  struct OpEntry {
    Ref<Work> work;
    std::uint64_t id = 0;
    std::string stream;
    Device device;
    std::string detail;
    std::uint64_t event = 0;  // waits: the event waited on
    bool is_wait = false;
    std::vector<std::uint64_t> waits_for;
  };
  struct RecordEntry {
    std::uint64_t event = 0;
    std::string event_name;
    std::uint64_t op = 0;
    std::int64_t at_ns = 0;
  };
  struct HostWaitEntry {
    std::uint64_t event = 0;
    std::uint32_t thread = 0;
    std::int64_t start_ns = 0, end_ns = 0;
    bool finished = true;
    std::vector<std::uint64_t> ops;
  };
  struct CallbackEntry {
    std::uint64_t event = 0;
    std::string thread;
    std::int64_t start_ns = 0, end_ns = 0;
  };
  struct Recorded {
    std::vector<OpEntry> ops;
    std::vector<RecordEntry> records;
    std::vector<HostWaitEntry> host_waits;
    std::vector<CallbackEntry> callbacks;
  };

  // Records a host wait, or joins it to the calling thread's HostWaitGroup. Under g_profiler_mu.
  void add_host_wait(HostWaitEntry entry);
  friend class HostWaitGroup;

  // The running profiler's state, with g_profiler_mu held; null if none runs.
  static ProfilerState* locked_state() noexcept;
  // Under g_profiler_mu.
  void add_op(const StreamState& stream, const Ref<Work>& work, std::string detail, bool is_wait,
              std::uint64_t event);
  std::uint64_t id_of(const Work* work) const noexcept;
  std::uint32_t thread_number();

  const std::int64_t start_ns_;
  std::atomic<std::uint64_t> lost_{0};
  bool stopped_ = false;  // under g_profiler_mu
  Recorded recorded_;     // under g_profiler_mu while recording
  std::unordered_map<const Work*, std::uint64_t> ids_;
  // The same ids by fence. The recorded Works hold their timelines, so no address is reused.
  struct FenceHash {
    std::size_t operator()(const std::pair<const Timeline*, std::uint64_t>& f) const noexcept {
      return std::hash<const void*>{}(f.first) ^ (f.second * 0x9e3779b97f4a7c15ull);
    }
  };
  std::unordered_map<std::pair<const Timeline*, std::uint64_t>, std::uint64_t, FenceHash> fences_;
  std::unordered_map<std::thread::id, std::uint32_t> threads_;
};

// Makes the host waits the calling thread records while it lives one wait, from the first
// that blocked to the group's end, finished as finish() says: a waiter that waits in slices
// (Python's wait gives the interpreter back every 20 ms and checks for Ctrl-C) is one wait,
// also when its last slice found the work done (such a slice blocks nothing and records
// nothing). Groups do not nest: an inner one joins the outer. Costs one relaxed load when no
// profiler runs.
class HostWaitGroup {
 public:
  HostWaitGroup() noexcept;
  ~HostWaitGroup();
  HostWaitGroup(const HostWaitGroup&) = delete;
  HostWaitGroup& operator=(const HostWaitGroup&) = delete;
  // How the whole wait ended (default: not finished, as when an exception leaves it).
  void finish(bool finished) noexcept { finished_ = finished; }

 private:
  friend class ProfilerState;
  bool open_ = false;      // this group is the calling thread's (not nested, profiling)
  bool blocked_ = false;   // a slice blocked: there is a wait to record
  bool finished_ = false;
  std::uint64_t event_ = 0;
  std::int64_t start_ns_ = 0;
  std::vector<std::uint64_t> ops_;
};

// The running profiler (null: none). Read it relaxed on hot paths: see the header comment.
extern std::atomic<ProfilerState*> g_profiler;

inline bool profiling() noexcept { return g_profiler.load(std::memory_order_relaxed) != nullptr; }

// A process-unique id for an event, given the first time a profiler asks for it (`slot` is
// the event's own); ids are made small per profile when it is taken.
std::uint64_t profile_event_id(std::atomic<std::uint64_t>& slot) noexcept;

// `value` with `decimals` digits after the point, whatever the global locale.
std::string format_fixed(double value, int decimals);

}  // namespace eventide::detail
