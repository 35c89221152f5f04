// The GPU path of an export (gpu_path.hpp): the users word, the exporter's native record, and
// the importer's GPU-side wait.
#include "ipc/gpu_path.hpp"

#include <span>
#include <string>

#include "core/event_kind.hpp"
#include "core/runtime.hpp"
#include "core/stream_state.hpp"
#include "eventide/errors.hpp"
#include "eventide/stream.hpp"
#include "ipc/watcher.hpp"

namespace eventide::ipc::detail {

namespace {

using eventide::detail::EventState;
using eventide::detail::StreamState;

// An imported event's kind on the GPU path (core/event_kind.hpp): the exporter's verdict is
// host work that host waits, poll and callbacks wait for, and that a stream's wait leaves out
// while it is pending, since streams order after the GPU-side marker recorded beside it (no
// host round trip). Once the verdict has finished, its error counts for streams too.
class HostVerdict final : public eventide::detail::EventKind {
 public:
  explicit HostVerdict(Ref<Work> verdict) noexcept : verdict_(std::move(verdict)) {}
  bool hidden_from_streams(const Work& work) const noexcept override {
    return &work == verdict_.get();
  }
  void cleared() noexcept override { verdict_ = nullptr; }  // reset: a plain event from now on

 private:
  Ref<Work> verdict_;
};

// A GPU-side wait for a native event launches none of the backend's kernels.
eventide::detail::LaunchOptions no_backend_kernels() {
  eventide::detail::LaunchOptions options;
  options.no_backend_kernels = true;
  return options;
}

}  // namespace

// --- the users word ------------------------------------------------------------------------

NativeUse acquire_native_use(Block& b) noexcept {
  std::uint32_t u = b.users.load(std::memory_order_acquire);
  for (;;) {
    if (b.state.load(std::memory_order_acquire) & kFinal) return NativeUse::finished;
    if (u & kClosing) {
      return (b.state.load(std::memory_order_acquire) & kFinal) ? NativeUse::finished : NativeUse::gone;
    }
    if ((u & kUserCount) == kUserCount) return NativeUse::gone;  // 2^31 importers: not reached
    if (b.users.compare_exchange_weak(u, u + 1, std::memory_order_acq_rel, std::memory_order_acquire)) break;
  }
  // Final meanwhile: no need to open it after all.
  if (b.state.load(std::memory_order_acquire) & kFinal) {
    b.users.fetch_sub(1, std::memory_order_release);
    futex_wake_all(&b.users);
    return NativeUse::finished;
  }
  return NativeUse::counted;
}

bool try_destroy(Retired& r) noexcept {
  std::uint32_t expected = 0;
  Block& b = r.map->block();
  if (!b.users.compare_exchange_strong(expected, kClosing, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
    return false;  // importers use it
  }
  r.native.reset();
  return true;
}

void Import::drop_native() noexcept {
  if (::getpid() != owner_pid) {
    // A forked child's copy: the count is the parent's to lower, and CUDA is not usable here.
    (void)native.release();
    counted = false;
    return;
  }
  native.reset();
  if (counted) {
    counted = false;
    Block& b = map->block();
    b.users.fetch_sub(1, std::memory_order_release);
    futex_wake_all(&b.users);  // an exporter's watcher may be waiting to destroy it
  }
}

NativeUse Import::open_native() {
  Block& b = map->block();
  NativeUse use = acquire_native_use(b);
  if (use != NativeUse::counted) return use;
  counted = true;
  try {
    native = backend->open_ipc_event(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(b.native), b.native_bytes));
  } catch (...) {
    drop_native();
    throw;
  }
  if (!native) {
    drop_native();
    throw InvalidArgument("import_event: this device cannot open native interprocess events");
  }
  return use;
}

void ExportState::retire_native() noexcept {
  if (!native) return;
  if (::getpid() != pid) {
    (void)native.release();
    return;
  }
  Retired r{map, std::move(native)};
  if (try_destroy(r)) return;
  try {
    Watcher::get().defer(std::move(r));
  } catch (...) {
    (void)r.native.release();  // no memory or thread for it: leaked rather than freed early
  }
}

// --- the exporter's record -----------------------------------------------------------------

void record_native_after(const std::shared_ptr<ExportState>& state, EventState& verdict,
                         Device device) {
  // Its handle is usable only from then on (kGpuReady), since a never-recorded event reads
  // complete. If the work fails first, the record never runs and the verdict says failed.
  Stream s(device);
  s.state()->wait(verdict);
  std::shared_ptr<ExportState> shared = state;
  s.enqueue("ipc export record", [s, shared] {
    shared->native->record_on(s.native_handle());
    shared->publish(kGpuReady);
  });
}

// --- the importer's wait -------------------------------------------------------------------

Event import_on_gpu(const std::shared_ptr<Import>& imp, Device target) {
  eventide::detail::Runtime& rt = eventide::detail::Runtime::get();
  imp->backend = &rt.context(target).backend();
  // Streams order after a marker recorded beside the verdict, which they leave out.
  Event out = Event::of_state(std::make_shared<EventState>(
      target, EventOptions{false}, std::make_unique<HostVerdict>(imp->verdict)));
  const Block& b = imp->map->block();
  const std::uint32_t s = b.state.load(std::memory_order_acquire);
  // Opened only while the work is not over and the exporter keeps its event for us (the
  // users word); otherwise the wait op below decides.
  if (s & kGpuReady) (void)imp->open_native();
  if (s & (kGpuReady | kDone)) {
    settle(*imp->gate, nullptr);
    imp->gate_done = true;
    imp->timeline->advance(1);
  }
  // The internal stream: waits for the gate (nothing to wait for when it is set), then on the
  // GPU for the exporter's native event, then the marker the event is tied to.
  std::shared_ptr<StreamState> stream = rt.create_stream(target);
  EventState gate(std::nullopt, EventOptions{false});
  gate.record(imp->gate, std::nullopt);
  stream->wait(gate);
  void* native_stream = stream->native_handle();
  std::shared_ptr<Import> held = imp;
  stream->launch("ipc wait", {}, {}, eventide::detail::Callback([held, native_stream] {
                   const Block& blk = held->map->block();
                   if (!held->native && (blk.state.load(std::memory_order_acquire) & kGpuReady) &&
                       held->open_native() == NativeUse::gone) {
                     throw OpError("process " + std::to_string(held->pid) +
                                       " let go of the GPU event it exported before its work "
                                       "was over (its runtime shut down): it cannot be waited "
                                       "for on the GPU",
                                   "import of " + held->handle);
                   }
                   // Without a record, or once the word is final, the exported work is over:
                   // nothing to wait for on the GPU.
                   if (held->native) held->native->wait_on(native_stream);
                 }),
                 no_backend_kernels());
  Ref<Work> marker = stream->mark(StreamState::MarkerTiming::untimed);
  // Once the stream has passed the wait on the GPU (or failed), the native event is closed
  // and the exporter told it may destroy its own (the users word).
  auto passed = std::make_shared<EventState>(target, EventOptions{false});
  passed->record(marker, target);
  // Runs once; holds `passed` until then.
  passed->add_callback([held, passed] { held->drop_native(); });
  out.state()->record(imp->verdict, std::nullopt);
  out.state()->record(std::move(marker), target);
  return out;
}

}  // namespace eventide::ipc::detail
