// eventide/stream.hpp: streams, the in-order queues that device work runs on.
//
// A stream is a timeline: each op enqueued on it runs after the previous one, and the stream
// publishes how far it has got. Streams of one device run concurrently. Every op goes to the
// calling thread's *current stream* of its device: the device's default stream unless a
// `StreamGuard` says otherwise.
//
// * `wait(event)` makes work enqueued later on this stream start only after `event` has
//   finished; the host does not block. If `event` fails, that later work fails too (with an
//   OpError whose cause() is the event's error) instead of running: from then on the stream
//   is *broken*, like a GPU stream after a fault, and `error()` says why. Use another stream.
// * An op that reads a tensor produced on another stream waits for it by itself.
//
// Thread-safety: all members may be called from any thread; ops enqueued from several
// threads onto one stream run in the order their enqueue calls took effect.
// Lifetime: `Stream` is a cheap handle; dropping the last one never blocks: work already
// enqueued runs to the end.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "eventide/detail/callback.hpp"
#include "eventide/detail/duration.hpp"
#include "eventide/device.hpp"
#include "eventide/event.hpp"

namespace eventide {

class Tensor;

namespace detail {
class StreamState;
class Timeline;
}

// How far Stream::wait orders the stream's later work.
enum class WaitScope {
  eventide_work,  // eventide's own ops and markers (the default)
  native_stream,  // also what any code launches on the native stream after the call
};

// How a new stream is made.
struct StreamOptions {
  // Lower numbers are more urgent: on a GPU, the blocks of a more urgent stream's kernels are
  // scheduled before those of less urgent streams' (CUDA's stream priorities: they overtake
  // queued work, they do not preempt running blocks). Outside stream_priority_range(device)
  // it is clamped to the nearer end, as CUDA and PyTorch do; 0 is the default.
  int priority = 0;
};

// The stream priorities of `device` as {least, greatest} (PyTorch's
// Stream.priority_range()): {0, -5} on an H200; {0, 0} on the CPU, whose streams have one
// priority. InvalidArgument if the device is not available.
[[nodiscard]] std::pair<int, int> stream_priority_range(Device device = default_device());

// @code
//   ev::Stream s(ev::Device::cpu());
//   s.wait(gate);  // an Event or UserEvent: later work on s starts after it
//   ev::Tensor t = ev::empty({1024}, ev::DType::f32, ev::Device::cpu());
//   ev::Event done = s.enqueue("fill", [t] { std::fill_n(t.data<float>(), t.numel(), 1.0f); },
//                              {}, {t});  // reads, writes
//   done.wait();
// @endcode
class Stream {
 public:
  // A new stream on `device`. InvalidArgument if the device is not available.
  explicit Stream(Device device = default_device());
  // A new stream on `device` with `options` (its priority).
  //   ev::Stream copies(ev::Device::cuda(0), {.priority = ev::stream_priority_range().second});
  Stream(Device device, StreamOptions options);

  // The calling thread's current stream for `device` (its default stream unless a
  // StreamGuard is active on this thread).
  static Stream current(Device device = default_device());
  // The stream ops of `device` use when no StreamGuard says otherwise; shared by all threads.
  static Stream default_stream(Device device = default_device());
  // A stream over a native stream someone else owns (on CUDA, a cudaStream_t: PyTorch's, or
  // your own kernels'): markers recorded on it (Event::record) cover the work launched
  // there by any code, and eventide's ops run in its order. On CUDA, null and
  // cudaStreamLegacy are the legacy default stream, cudaStreamPerThread the calling thread's
  // per-thread default stream (usable from that thread only). Wrapping one native stream
  // twice gives the same Stream while it lives. Never destroys it: keep it alive while the
  // Stream (and work enqueued through it) is. InvalidArgument for the CPU, or if the native
  // stream belongs to another device.
  //
  // @code
  //   cudaStream_t native;
  //   cudaStreamCreate(&native);  // the user's own
  //   ev::Stream s = ev::Stream::from_native(ev::Device::cuda(0), native);
  //   ev::Event e;
  //   e.record(s);  // covers every launch on `native` so far, by any code
  // @endcode
  static Stream from_native(Device device, void* native_stream);
  // The same, on the device the native stream belongs to. InvalidArgument if no backend
  // knows it.
  static Stream from_native(void* native_stream);

  Device device() const;
  // The stream's priority (StreamOptions): the one it was made with, clamped, or for a
  // wrapped native stream its own (PyTorch's torch.cuda.Stream(priority=-1) keeps -1).
  [[nodiscard]] int priority() const noexcept;
  // The native stream (a cudaStream_t on CUDA), for launching your own device work in this
  // stream's order; null on the CPU.
  void* native_handle() const;
  // A number unique among this process's streams.
  std::uint64_t id() const;
  // "cpu stream 3".
  std::string str() const;

  // Later work on this stream starts after `event` has finished. Never blocks. StateError if
  // `event` is EMPTY (it would never finish). Works with UserEvents. On a GPU, waiting for GPU
  // work is done by the GPU; eventide's own work that waits for host-side work (a UserEvent,
  // a CPU op) is held on the host and launched when it finishes (see GUARANTEES.md: work
  // other code launches on the native stream meanwhile does not wait for it).
  void wait(const Event& event);
  // wait(event), and with `WaitScope::native_stream` also every later launch on the native
  // stream by any code (another library's kernels: DLPack's stream handshake). Where part of
  // the event's work is still held on the host (behind a UserEvent or a CPU op), the GPU
  // cannot be told to wait for it: the calling thread then blocks until the event has
  // finished, and rethrows its error. On the CPU the two scopes are the same.
  void wait(const Event& event, WaitScope scope);
  // PyTorch's spelling of wait(event).
  void wait_event(const Event& event) { wait(event); }
  // Later work on this stream starts after the work enqueued so far on `other` (through a
  // marker on `other`, so on a GPU the other code's work there too).
  void wait_stream(const Stream& other);
  // A new event with a marker at the current end of this stream (PyTorch's
  // Stream.record_event).
  Event record_event(EventOptions options = {}) const;

  // Non-blocking: true when all work enqueued so far has finished (on a GPU, the other code's
  // work on the native stream too).
  [[nodiscard]] bool query() const;
  // Blocks until all work enqueued so far has finished (on a GPU, the other code's work on
  // the native stream too). Does not throw for failed ops (their events and tensors carry the
  // errors); throws DeviceError if the device has failed.
  void synchronize() const;
  // Like synchronize(), up to `timeout`: true once the work enqueued before the call has
  // finished (then DeviceError if the device has failed), false on timeout. Waiting again
  // waits for the same work: use a SyncPoint to wait in steps for a fixed end.
  [[nodiscard]] bool synchronize_for(std::chrono::nanoseconds timeout) const;
  template <class Rep, class Period>
  [[nodiscard]] bool synchronize_for(std::chrono::duration<Rep, Period> timeout) const {
    return synchronize_for(detail::saturating_ns(timeout));
  }
  // Like synchronize(), until `deadline` on the steady clock.
  [[nodiscard]] bool synchronize_until(std::chrono::steady_clock::time_point deadline) const;
  // Why the stream is broken (a wait on a failed event), else null.
  std::exception_ptr error() const;

  // Enqueues user work `fn` on this stream, ordered after the work enqueued before it and
  // after the ops that produced `reads` and `writes`; ops enqueued later that use `writes`
  // wait for it. If `fn` throws, the returned event fails with an OpError (cause: what it
  // threw), and so does later work that reads `writes`. Returns an event recorded on it.
  //  * CPU streams: `fn` is the work. It runs on the stream's worker thread and may touch the
  //    contents of `reads` and `writes` (Tensor::data) and nothing else of eventide's memory.
  //  * CUDA streams: `fn` launches the work. It runs at once, on the calling thread, after
  //    the stream has been made to wait (on the GPU) for what the work depends on; it launches
  //    kernels on native_handle(), and the work is done when they are.
  template <class F>
  Event enqueue(std::string name, F&& fn, std::vector<Tensor> reads = {},
                std::vector<Tensor> writes = {}) {
    if constexpr (detail::is_nullable_callable<std::decay_t<F>>) {
      if (fn == nullptr) return enqueue_impl(std::move(name), detail::Callback(), {}, {});
    }
    return enqueue_impl(std::move(name), detail::Callback(std::forward<F>(fn)), std::move(reads),
                        std::move(writes));
  }

  friend bool operator==(const Stream& a, const Stream& b) noexcept { return a.state_ == b.state_; }

  // For the runtime and bindings.
  explicit Stream(std::shared_ptr<detail::StreamState> state) noexcept : state_(std::move(state)) {}
  const std::shared_ptr<detail::StreamState>& state() const noexcept { return state_; }

 private:
  Event enqueue_impl(std::string name, detail::Callback fn, std::vector<Tensor> reads,
                     std::vector<Tensor> writes);

  std::shared_ptr<detail::StreamState> state_;
};

// The end of the work enqueued so far on one stream, on every stream of a device, or on every
// stream of every device: what synchronize() waits for, as a value that can be polled and
// waited for in steps (by a caller that checks for signals between them, as the Python
// package does). Fixed when it is made: work enqueued later is not part of it, so waiting in
// steps never chases other threads' new work.
//   ev::SyncPoint end(ev::Device::cuda(0));
//   while (!end.wait_for(20ms)) check_for_interrupts();
// Making one never blocks; on a stream with a native one (a GPU) it places a marker, which
// also covers the work other code launched there. The device forms also cover the work other
// code queued on the device's streams that eventide never saw (PyTorch's, CuPy's, your own),
// as torch.cuda.synchronize() does: on a GPU, a device-wide synchronize made by a thread of
// the runtime (cudaDeviceSynchronize), waited for here without a busy loop. Thread-safety:
// const members from any thread. Lifetime: holds the streams it covers.
class SyncPoint {
 public:
  explicit SyncPoint(const Stream& stream);
  // Every stream of `device` that is alive. InvalidArgument if the device is not available.
  explicit SyncPoint(Device device);
  // Every stream of every device.
  SyncPoint();

  // Non-blocking: true once all of it has finished (also when ops in it failed).
  [[nodiscard]] bool query() const;
  // Blocks until all of it has finished; then throws DeviceError if a device it covers has
  // failed as a whole (a GPU's sticky error). Failed ops do not throw: their events and
  // tensors carry the errors.
  void wait() const;
  // Like wait(), up to `timeout`: false on timeout (and no DeviceError check then).
  [[nodiscard]] bool wait_for(std::chrono::nanoseconds timeout) const;
  template <class Rep, class Period>
  [[nodiscard]] bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
    return wait_for(detail::saturating_ns(timeout));
  }
  // Like wait(), until `deadline` on the steady clock: false once it has passed.
  [[nodiscard]] bool wait_until(std::chrono::steady_clock::time_point deadline) const {
    return wait_until(std::optional<std::chrono::steady_clock::time_point>(deadline));
  }

 private:
  struct Point {
    std::shared_ptr<detail::StreamState> stream;
    std::uint64_t seq;
  };
  // A point of a whole device, beyond eventide's streams (DeviceBackend::device_wide_point).
  struct DevicePoint {
    Device device;
    std::shared_ptr<detail::Timeline> timeline;  // holds the timeline's reference
    std::uint64_t seq;
  };
  void add(const std::shared_ptr<detail::StreamState>& stream);
  void add_device(Device device);
  [[nodiscard]] bool wait_until(const std::optional<std::chrono::steady_clock::time_point>& deadline) const;

  std::vector<Point> points_;
  std::vector<DevicePoint> device_points_;
};

// Makes `stream` the calling thread's current stream for its device for the guard's scope,
// then restores the previous one; record() of an event with no device uses the innermost
// guard's device. Guards nest. Not movable: it belongs to one scope of one thread.
//
// @code
//   ev::Stream s;
//   {
//     ev::StreamGuard guard(s);  // ops of s's device go to s...
//     out = ev::matmul(a, b);
//   }                            // ...until here
// @endcode
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
  Stream previous_;
  std::optional<Device> previous_block_device_;
};

}  // namespace eventide
