// EventState: what an Event handle points to. The state machine is in eventide/event.hpp;
// this is how it is kept.
//
// An event holds the Works it is tied to that have not finished yet (`pending_`), and a
// summary of those that have (their time span and first error). poll() folds finished Works
// into the summary; when none is left pending the event is FINISHED (or FAILED).
//
// Nobody is told of that transition unless someone listens: waiters (a Parker each) and
// callbacks. While there are listeners, the event is *armed*: one Listener sits on the fence
// of one pending Work; when it fires, the event folds what has finished and re-arms on the
// next pending Work, so an event never has more than one listener registered.
//
// Thread-safety: every member takes `mu_`; status_ is also readable without it (poll()'s fast
// path). Lock order: mu_ is never held while calling into a timeline or the dispatcher:
// listeners may fire inline, and they take mu_.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/runtime_lock.hpp"
#include "core/parker.hpp"
#include "core/profiler_state.hpp"
#include "core/small_vector.hpp"
#include "core/work.hpp"
#include "eventide/event.hpp"

namespace eventide::detail {

class StreamState;

class EventState : public std::enable_shared_from_this<EventState> {
 public:
  EventState(std::optional<Device> device, EventOptions options);
  // A UserEvent: PENDING from the start, on its own host timeline.
  static std::shared_ptr<EventState> make_user(std::optional<Device> device, EventOptions options);

  // Ties the event to `work`, of `device` (nullopt for host work). InvalidArgument if the
  // event belongs to another device.
  void record(Ref<Work> work, std::optional<Device> device);
  // Ties the event to nothing on `device` (a tensor no op produced): finishes it if empty.
  void record_nothing(Device device);
  // InvalidArgument if work of `device` cannot be recorded on this event (it belongs to
  // another device): checked before a marker is placed on `stream` for it.
  void check_device(Device device, const StreamState& stream);

  bool poll() noexcept;
  EventStatus status() noexcept;
  // Blocks until finished (true) or the deadline (false). StateError if EMPTY. Does not
  // throw the tied work's error: see error().
  bool wait_until(const Deadline& deadline);
  void reset();
  void add_callback(Callback fn);
  std::exception_ptr error();
  std::optional<Device> device();
  bool timing_enabled() const noexcept { return timing_; }
  bool is_user() const noexcept { return user_ != nullptr; }
  // Device microseconds from the earliest tied start to the latest end.
  double time_elapsed_us();
  // When the last tied work ended: in its device's clock (ns), and that work if it has a
  // stamp (a GPU marker: exact differences), else null; for elapsed_time().
  struct Completion {
    std::int64_t ns = 0;
    Ref<Work> work;
  };
  Completion completion();
  std::string str() const;
  // This event's id in profiles (given at the first call).
  std::uint64_t profile_id() const noexcept { return profile_event_id(profile_id_); }

  // What a stream waiting on this event must wait for.
  struct Snapshot {
    EventStatus status;
    std::vector<Ref<Work>> pending;
    std::exception_ptr error;
  };
  Snapshot snapshot();

  // Registers `parker` to be unparked when the event finishes; false (not registered) if it
  // has finished already.
  bool add_notifier(const Ref<Parker>& parker);
  void remove_notifier(const Parker* parker) noexcept;
  // How many times the event has finished: a waiter that sees it change was woken by a
  // completion, even if the event has been recorded again since (and is pending).
  std::uint64_t finishes() const noexcept { return finishes_.load(std::memory_order_acquire); }

  // UserEvent operations (is_user() only).
  void user_set();
  void user_fail(std::exception_ptr error);
  // Fails the current round if unset: the last UserEvent handle is gone.
  void user_abandon() noexcept;

  // Called by the armed listener.
  void on_armed_fence_passed() noexcept;

 private:
  struct Actions {
    std::vector<Callback> callbacks;
    std::optional<Device> device;  // whose dispatcher runs the callbacks (read under mu_)
    std::vector<Ref<Parker>> wake;
    Ref<Work> arm;
    bool expect_callbacks = false;  // a callback was added to pending work
  };
  struct UserPart {
    Ref<Timeline> timeline;
    Ref<Work> current;
    RuntimeMutex mu;  // serializes set / fail / reset / abandon
  };

  void fold_locked(const Ref<Work>& work);
  void fold_times_locked(const Ref<Work>& work);
  // Waits for the device times not known yet (GPU work), and folds them in.
  void resolve_timing();
  // Nothing pending: FINISHED or FAILED; hands the callbacks and waiters to `actions`.
  void finish_locked(Actions& actions);
  std::string str_locked() const;
  void refresh_locked(Actions& actions);
  void clear_locked();
  void run(Actions& actions) noexcept;
  void user_finish(std::exception_ptr error, bool is_set);
  // record() without the profiler, and with it (kept out of the hot path).
  void record_work(Ref<Work> work, std::optional<Device> device);
  [[gnu::cold, gnu::noinline]] void record_profiled(Ref<Work> work, std::optional<Device> device);
  // InvalidArgument unless this event may hold work of `device`; `what()` names the work
  // (only called to build the message). Under mu_.
  template <class What>
  void check_device_locked(Device device, const What& what) const {
    if (device_ && *device_ != device) [[unlikely]] throw_device_mismatch(device, what());
  }
  [[noreturn]] void throw_device_mismatch(Device device, const std::string& what) const;
  // wait_until once the event was found pending.
  bool wait_pending(const Deadline& deadline, std::uint64_t finished_before);
  bool finished_locked() const noexcept {
    auto s = status_.load(std::memory_order_relaxed);
    return s == EventStatus::finished || s == EventStatus::failed;
  }

  mutable RuntimeMutex mu_;
  std::atomic<EventStatus> status_{EventStatus::empty};
  std::atomic<std::uint64_t> finishes_{0};
  std::vector<Ref<Work>> pending_;
  // Finished work whose device time is not known yet (GPU work: it arrives later).
  std::vector<Ref<Work>> untimed_;
  std::size_t untimed_scan_at_ = 64;  // fold known times when untimed_ grows past this
  // Summary of finished tied work since the last reset, with the works that set the bounds
  // where those have stamps (GPU markers: exact differences), else null.
  std::int64_t min_start_ns_ = 0;
  std::int64_t max_end_ns_ = 0;
  std::int64_t completion_ns_ = 0;
  Ref<Work> earliest_;
  Ref<Work> latest_;
  Ref<Work> completion_work_;
  bool any_timed_ = false;
  bool any_completion_ = false;
  std::exception_ptr error_;
  std::uint32_t records_ = 0;

  const std::optional<Device> fixed_device_;
  std::optional<Device> device_;
  const bool timing_;
  std::vector<Callback> callbacks_;
  std::vector<Ref<Parker>> notifiers_;
  bool armed_ = false;
  std::unique_ptr<UserPart> user_;
  mutable std::atomic<std::uint64_t> profile_id_{0};
};

// Held by UserEvent handles only (not by plain Event copies): when the last one goes, an
// unset event fails instead of leaving its waiters waiting forever.
class UserEventSetter {
 public:
  explicit UserEventSetter(std::shared_ptr<EventState> state) : state_(std::move(state)) {}
  ~UserEventSetter() { state_->user_abandon(); }
  UserEventSetter(const UserEventSetter&) = delete;
  UserEventSetter& operator=(const UserEventSetter&) = delete;

 private:
  std::shared_ptr<EventState> state_;
};

}  // namespace eventide::detail
