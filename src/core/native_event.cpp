// Events and the native events of a device (CUDA's cudaEvent_t): Event::from_native takes
// another library's event in, Event::native_handle gives one of eventide's out. Both put a
// little work on an internal stream of the device (DeviceContext::internal_stream), so that
// they follow the GPU-side protocol every other op does: no host round trip either way.
#include "core/backend.hpp"
#include "core/event_state.hpp"
#include "core/runtime.hpp"
#include "core/stream_state.hpp"
#include "eventide/errors.hpp"
#include "eventide/event.hpp"

namespace eventide {

namespace detail {

void* EventState::native_event(NativeEvents& events) {
  if (void* native = native_event_.load(std::memory_order_acquire)) return native;
  void* made = events.create();  // a CUDA call: not under the event's lock
  std::lock_guard lock(mu_);
  if (void* native = native_event_.load(std::memory_order_relaxed)) {
    events.destroy(made);  // another thread made one first (a CUDA call, no user object)
    return native;
  }
  native_events_ = &events;
  native_event_.store(made, std::memory_order_release);
  return made;
}

}  // namespace detail

Event Event::from_native(CUevent_st* native_event, Device device, EventOptions options) {
  if (!native_event) {
    throw InvalidArgument("Event::from_native: the native event is null");
  }
  auto& rt = detail::Runtime::get();
  detail::DeviceContext& ctx = rt.context(device);
  detail::NativeEvents* events = ctx.backend().native_events();
  if (!events) {
    throw InvalidArgument("Event::from_native: " + device.str() +
                          " has no native events (a cudaEvent_t belongs to a CUDA device: pass cuda:N)");
  }
  std::shared_ptr<detail::StreamState> stream = rt.internal_stream(device);
  void* native_stream = stream->native_handle();
  // Launched at once (an internal stream holds nothing): the GPU-side wait is issued now, for
  // the native event's most recent record as of this call.
  detail::LaunchOptions launch;
  launch.no_backend_kernels = true;
  detail::Ref<detail::Work> wait = stream->launch(
      "wait for a native event", {}, {},
      detail::Callback([events, native_event, native_stream] { events->wait(native_stream, native_event); }),
      launch);
  if (wait->failed_at_launch()) std::rethrow_exception(wait->error());
  detail::Ref<detail::Work> marker = stream->mark(options.enable_timing ? detail::StreamState::MarkerTiming::timed
                                                                        : detail::StreamState::MarkerTiming::untimed);
  Event out(device, options);
  out.state_->record(std::move(marker), device);
  return out;
}

CUevent_st* Event::native_handle() const {
  detail::EventState::Snapshot snap = state_->snapshot(detail::EventState::SnapshotFor::stream_wait);
  if (snap.status == EventStatus::empty) {
    throw StateError("Event::native_handle: " + str() +
                     " is empty, and a native event never recorded reads as passed: record work on it first");
  }
  const std::optional<Device> device = state_->device();
  detail::NativeEvents* events = nullptr;
  if (device) {
    if (detail::DeviceContext* ctx = detail::Runtime::get().find(*device)) events = ctx->backend().native_events();
  }
  if (!events) {
    throw StateError("Event::native_handle: " + str() + " is not an event of a device with native events "
                     "(a CUDA device): there is no cudaEvent_t to give");
  }
  for (const detail::Ref<detail::Work>& w : snap.pending) {
    if (!w->launched() || !w->timeline().device_written()) {
      throw StateError("Event::native_handle: " + str() + " covers " + w->describe() +
                       ", which is held on the host (behind a UserEvent or a CPU op) and so not on the "
                       "GPU yet: no native event can stand for it; wait for it first, or let an eventide "
                       "stream wait for the event (Stream::wait)");
    }
  }
  void* native = state_->native_event(*events);
  std::shared_ptr<detail::StreamState> stream = detail::Runtime::get().internal_stream(*device);
  void* native_stream = stream->native_handle();
  // Ordered after the pending work on the GPU (a failure there is the event's, not the
  // record's), then recorded: the native event passes once all of it has finished.
  detail::LaunchOptions options;
  options.also_after = snap.pending;
  options.no_backend_kernels = true;
  detail::Ref<detail::Work> record = stream->launch(
      "record a native event", {}, {},
      detail::Callback([events, native, native_stream] { events->record(native, native_stream); }), options);
  if (record->failed_at_launch()) std::rethrow_exception(record->error());
  return static_cast<CUevent_st*>(native);
}

}  // namespace eventide
