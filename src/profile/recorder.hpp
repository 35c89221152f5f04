// ProfilerState: what a running eventide::Profiler records (eventide/profiler.hpp). The core
// does not know it: it reaches it through its observer (core/observer.hpp), which a running
// profiler installs (the Recorder, recorder.cpp).
//
// The running profiler's state is the Recorder's `current` (null when none runs). The core's
// hook sites read the observer pointer once, relaxed; that read may be stale, so the Recorder
// is a static object that is never destroyed, and each of its hooks takes the recorder's lock
// and reads `current` again before touching a state. stop() clears it under the same lock, so
// once stop() has taken the recorded data no hook can reach the state any more: the lock is
// what makes it safe to free. The lock is a leaf: nothing is called under it that could take
// another lock of the runtime, so the hooks may run under a stream's submit lock or an
// event's lock.
//
// States: recording (`current` points here, the Recorder is the core's observer) -> stopped
// (taken out by stop() or the Profiler's destructor; never recording again).
//
// Lifetime: owned by its Profiler. The state holds a Ref to each recorded Work (the fence and
// the outcome: its time, its error), so the Work outlives its stream and events until the
// profile is taken, and its address is never reused by another recorded Work.
//
// Out of memory, a hook leaves its entry out of the profile and counts it (entries_lost()):
// the hooks never throw (see core/observer.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
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

class Recorder;
class StreamState;

class ProfilerState {
 public:
  ProfilerState();

  // Starts recording; StateError if another profiler is recording.
  void start();
  // Stops recording; nothing happens if it was not recording.
  void stop_recording() noexcept;
  // Stops recording and builds the profile (see Profiler::stop). StateError if already
  // stopped. `between_waits` (may be empty) is called between slices of the wait.
  Profile stop(std::chrono::nanoseconds timeout, const std::function<void()>& between_waits);

  // Entries left out of the profile for lack of memory.
  std::uint64_t entries_lost() const noexcept { return lost_.load(std::memory_order_relaxed); }

 private:
  friend class Recorder;
  friend class eventide::HostWaitScope;
  friend class eventide::Range;

  enum class OpRole { op, wait };  // a wait: a stream's wait on an event
  struct OpEntry {
    Ref<Work> work;
    std::uint64_t id = 0;
    std::string stream;
    Device device;
    std::string detail;
    std::uint64_t event = 0;  // waits: the event waited on
    OpRole role = OpRole::op;
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
  struct RangeEntry {
    std::string name;
    std::uint32_t thread = 0;
    std::int64_t start_ns = 0, end_ns = 0;
  };
  struct Recorded {
    std::vector<OpEntry> ops;
    std::vector<RecordEntry> records;
    std::vector<HostWaitEntry> host_waits;
    std::vector<CallbackEntry> callbacks;
    std::vector<RangeEntry> ranges;
  };

  // --- What the Recorder's hooks do, under the recorder's lock. They may throw (out of
  // --- memory): the Recorder counts that in lost_.
  void add_op(const StreamState& stream, const Ref<Work>& work, std::string detail, OpRole role,
              std::uint64_t event);
  void add_record(std::uint64_t event, std::string event_name, const Ref<Work>& op, std::int64_t at_ns);
  // A host wait on event `event`, for its pending `ops`; on the fence (`timeline`, `seq`).
  void add_event_wait(std::uint64_t event, std::span<const Ref<Work>> ops, std::int64_t start_ns,
                      std::int64_t end_ns, bool finished);
  void add_fence_wait(const Timeline& timeline, std::uint64_t seq, std::int64_t start_ns,
                      std::int64_t end_ns, bool finished);
  // Ends the calling thread's last host wait on the same thing if it timed out just before
  // (a slice of this wait). Never throws.
  void wait_found_done(std::uint64_t event, const Timeline* timeline, std::uint64_t seq) noexcept;
  void add_callback(std::uint64_t event, std::string thread, std::int64_t start_ns, std::int64_t end_ns);
  // Records a host wait, or joins it to the calling thread's HostWaitScope.
  void add_host_wait(HostWaitEntry entry);
  void count_lost() noexcept { lost_.fetch_add(1, std::memory_order_relaxed); }

  std::uint64_t id_of(const Work* work) const noexcept;
  std::uint32_t thread_number() { return thread_number(std::this_thread::get_id()); }
  std::uint32_t thread_number(std::thread::id thread);

  const std::int64_t start_ns_;
  std::atomic<std::uint64_t> lost_{0};
  bool stopped_ = false;  // under the recorder's lock
  Recorded recorded_;     // under the recorder's lock while recording
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

}  // namespace eventide::detail
