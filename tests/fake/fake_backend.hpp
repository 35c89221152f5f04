// A fake device kind, "fake", for testing the core with no other backend: the test binary
// links eventide_core and this folder alone (no cpu, no CUDA), so whatever works here is all
// the core needs of a backend.
//
// It behaves like a GPU whose every step the test takes by hand. Its streams run on the core's
// device-stream engine (core/device_stream.hpp), as the CUDA backend's do: holding, launching,
// late errors, retiring and abandoning are the engine's code, not a copy; what the fake adds
// is the native side (a queue per stream that run() executes) and the watcher's turns, which
// the test takes:
//
//   - Each stream's timeline is device-written (Timeline::device_written()): a counter that
//     only run() advances, as a GPU writes its progress into host memory. Its writes may be
//     left for later by the engine, as on a GPU: a burst of works is published once, and
//     whoever waits for one has it published (run(..., Progress::device_only) shows it). Waiters nap and read
//     it themselves; listeners (callbacks, sleeping waiters) fire only at the watcher's turn
//     (Progress::notify, the default, or notify()).
//   - Work that depends on host-side work not finished yet (a UserEvent) is held on the host
//     (Work::launched() false), with every later work of its stream, until the watcher's turn
//     (run(), notify()) after that work finished. Work that depends on another fake stream's
//     unfinished work is launched at once, its error decided later (Work::decide_error_later):
//     the device waits for the other stream.
//   - Times arrive late: run() leaves a finished op's or marker's time unknown until
//     deliver_timings(); Timeline::await_timing (what time_elapsed waits on) blocks until then.
//   - Other code may capture a stream's native queue (begin_native_capture), as
//     torch.cuda.graph captures a GPU stream: eventide's ops issued there follow that capture
//     (core/capture.hpp), their bodies taken into it, not run; the NativeGraph it ends in
//     replays them as that code would, and lets go what it kept when it goes, as CUDA does.
//   - A device failure is sticky and found late: fail_device() fails everything in flight and
//     held (their fences pass, failed), later work fails at once, and device_error() (what
//     synchronize raises) reports it.
//
// Devices: fake:0 and fake:1. Their clock is a counter the test sets (set_clock); each work
// run() executes takes `step` nanoseconds of it.
//
// Thread-safety: all functions, from any thread; run() and fail_device() of one stream are
// serialized.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <eventide/eventide.hpp>

namespace eventide_fake {

// What run() does besides the device's part: the watcher's look before (held work released,
// what was left unpublished published) and its turn after (notify); the look alone (silent);
// or nothing but the device (device_only: what was left unpublished stays so).
enum class Progress { notify, silent, device_only };

// Executes the launched work of `stream` in order, at most `max` works, stopping at one that
// waits for another stream's work not yet run (as a GPU stream waits). Unless device_only,
// the watcher first releases held work whose host-side dependencies have finished and
// publishes what the launches left unpublished. With Progress::notify the watcher's turn
// follows (listeners of the passed fences fire). Returns how many works ran.
std::size_t run(const eventide::Stream& stream, std::size_t max = SIZE_MAX,
                Progress progress = Progress::notify);
// The watcher's turn alone: fires the listeners of the fences `stream` has passed.
void notify(const eventide::Stream& stream);
// How many works of `stream` are held on the host.
std::size_t held(const eventide::Stream& stream);
// One look of the watcher at `stream`: held work released, and what is due published (what a
// listener or a poll demanded; what the stream left unpublished is due only once the stream
// has been quiet for DeviceStream::kQuietBeforePublish, which one look never sees).
void look(const eventide::Stream& stream);
// How many publications (counter writes) the device has made for `stream`.
std::size_t writes(const eventide::Stream& stream);
// The late times of every work the device has run so far arrive.
void deliver_timings(eventide::Device device);
// The device clock (ns) and how far each work run advances it.
void set_clock(eventide::Device device, std::int64_t now_ns, std::int64_t step_ns = 1000);
// A sticky device error: every work in flight or held fails with a DeviceError carrying
// `message`, and so does every later one.
void fail_device(eventide::Device device, const std::string& message);

// Other code's capture of `stream`'s native queue (see the header comment). StateError if
// one is open there already.
void begin_native_capture(const eventide::Stream& stream);

struct NativeCapture;
// What other code's capture made: the bodies it took, in order.
class NativeGraph {
 public:
  explicit NativeGraph(std::shared_ptr<NativeCapture> capture) noexcept : capture_(std::move(capture)) {}
  NativeGraph(NativeGraph&&) noexcept = default;
  // Lets go what the graph kept (eventide's CaptureState, released on the dispatcher).
  ~NativeGraph();
  std::size_t nodes() const;
  // Runs the bodies on this thread, in order, as that code's replay would on the device.
  void replay() const;

 private:
  std::shared_ptr<NativeCapture> capture_;
};

// Ends the capture begun on `stream`. StateError if none is open.
NativeGraph end_native_capture(const eventide::Stream& stream);

}  // namespace eventide_fake
