// The fake backend (fake_backend.hpp): its streams, its device, its kernels, and the registry
// of the test binary, which lists it alone.
#include "fake_backend.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "core/device_stream.hpp"
#include "core/runtime_lock.hpp"
#include "core/stream_state.hpp"
#include "core/tensor_state.hpp"
#include "core/timeline.hpp"
#include "core/work.hpp"
#include "fake/fake_capture.hpp"
#include "ops/kernels.hpp"

namespace eventide_fake {

namespace ev = eventide;
namespace detail = eventide::detail;
using detail::Ref;
using detail::StreamState;
using detail::TensorState;
using detail::Work;

namespace {

constexpr int kDevices = 2;
// What await_timing waits for delivered times at most: a test that forgets to deliver them
// fails on its wrong time instead of hanging.
constexpr std::chrono::seconds kTimingPatience{30};

class FakeDevice;

// Plain host memory standing for a fake device's (or, as staging, the host's).
class HostStorage final : public detail::Storage {
 public:
  static Ref<detail::Storage> make(std::size_t bytes, ev::Device device) {
    void* p = std::malloc(bytes > 0 ? bytes : 1);
    if (!p) throw ev::DeviceError("fake: out of memory", "malloc", 12);
    return Ref<detail::Storage>(new HostStorage(p, bytes, device));
  }
  ~HostStorage() override { std::free(data()); }

 private:
  HostStorage(void* data, std::size_t bytes, ev::Device device) : Storage(data, bytes, device) {}
};

// The counter the "device" writes, placed before the Timeline base that points at it.
struct CounterWord {
  std::atomic<std::uint64_t> word{0};
};

class FakeTimeline final : private CounterWord, public detail::DeviceTimeline {
 public:
  FakeTimeline(std::string name, FakeDevice& device);
  // The device writes its progress (no listener fires: that is the watcher's notify()).
  void write(std::uint64_t seq) noexcept { word.store(seq, std::memory_order_release); }
  void await_timing(Work& work) override;

 private:
  FakeDevice& device_;
};

class FakeStream;

// The device as the engine sees it: no watcher thread (the test takes the watcher's turns:
// run(), notify()), so watch() and wake() have nothing to do.
class FakeDevice final : public detail::DeviceEngine {
 public:
  explicit FakeDevice(ev::Device device) : device_(device) {}

  ev::Device device() const noexcept { return device_; }

  std::exception_ptr broken() const noexcept override {
    std::lock_guard lock(mu_);
    return broken_;
  }
  void wake() noexcept override {}
  void watch(std::shared_ptr<detail::DeviceStream>) noexcept override {}

  void add_stream(const std::shared_ptr<FakeStream>& stream) {
    std::lock_guard lock(mu_);
    std::erase_if(streams_, [](const std::weak_ptr<FakeStream>& w) { return w.expired(); });
    streams_.push_back(stream);
  }
  std::vector<std::shared_ptr<FakeStream>> streams() {
    std::vector<std::shared_ptr<FakeStream>> out;
    std::lock_guard lock(mu_);
    for (auto& w : streams_) {
      if (auto s = w.lock()) out.push_back(std::move(s));
    }
    return out;
  }

  // The device time of a work it runs now: (start, end).
  std::pair<std::int64_t, std::int64_t> take_time(bool span) {
    std::lock_guard lock(mu_);
    const std::int64_t start = now_;
    if (span) now_ += step_;
    return {start, now_};
  }
  void set_clock(std::int64_t now, std::int64_t step) {
    std::lock_guard lock(mu_);
    now_ = now;
    step_ = step;
  }

  // A time that arrives later (deliver()).
  void add_timing(Ref<Work> work, std::int64_t start, std::int64_t end) {
    std::lock_guard lock(mu_);
    late_.push_back({std::move(work), start, end});
  }
  void deliver() {
    std::vector<Late> due;
    {
      std::lock_guard lock(mu_);
      due.swap(late_);
    }
    for (Late& l : due) {
      l.work->merge_times(l.start, l.end);
      l.work->finish_timing();
    }
    std::lock_guard lock(mu_);
    cv_.notify_all();
  }
  void timing_changed() {
    std::lock_guard lock(mu_);
    cv_.notify_all();
  }
  void await_timing(Work& work) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, kTimingPatience, [&] { return work.timing_known(); });
  }

  // Sticky: later work fails at once (fail_device() abandons what was in flight and held).
  void mark_broken(std::exception_ptr error) noexcept override {
    std::lock_guard lock(mu_);
    if (!broken_) broken_ = std::move(error);
  }

 private:
  struct Late {
    Ref<Work> work;
    std::int64_t start, end;
  };
  const ev::Device device_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr broken_;
  std::vector<std::weak_ptr<FakeStream>> streams_;
  std::vector<Late> late_;
  std::int64_t now_ = 1'000'000;
  std::int64_t step_ = 1000;
};

FakeTimeline::FakeTimeline(std::string name, FakeDevice& device)
    : DeviceTimeline(std::move(name), &word, device), device_(device) {}

void FakeTimeline::await_timing(Work& work) { device_.await_timing(work); }

// A fake stream on the core's device-stream engine (core/device_stream.hpp), as a GPU's is:
// the engine holds, launches, retires and abandons; what it launches goes into this stream's
// native queue, which run() executes as the device would: a wait for another stream's work
// stops it until that work has run; a body runs; a Work's end takes its time; a publication
// writes a sequence number into the counter. Publications may be left for later, as a GPU
// stream's are (DeviceStream's "Published").
class FakeStream final : public detail::DeviceStream {
 public:
  FakeStream(ev::Device device, std::uint64_t id, FakeDevice& owner, int priority = 0)
      : DeviceStream(device, id, detail::make_ref<FakeTimeline>(detail::stream_name(device, id), owner), owner),
        owner_(owner),
        priority_(priority) {}

  int priority() const noexcept override { return priority_; }

  std::exception_ptr device_error() const override { return owner_.broken(); }
  FakeTimeline& fake_timeline() const noexcept { return static_cast<FakeTimeline&>(timeline()); }

  std::size_t run(std::size_t max, Progress progress) {
    std::lock_guard serial(run_mu_);
    if (progress != Progress::device_only) {
      // The watcher's part: held work whose host-side work has finished is launched, and what
      // was left unpublished is published (two looks, the stream quiet in between).
      release_if_due();
      const auto now = std::chrono::steady_clock::now();
      publish_if_due(now);
      publish_if_due(now + kQuietBeforePublish);
    }
    std::size_t ran = 0;
    while (ran < max) {
      Command next;
      {
        std::lock_guard lock(mu_);
        // A wait at the front stops the device until the other stream's work has run.
        while (!queue_.empty() && queue_.front().kind == Command::wait && queue_.front().work->done()) {
          queue_.pop_front();
        }
        if (queue_.empty() || queue_.front().kind == Command::wait) break;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      if (next.kind == Command::body) {
        execute_body(*next.work);
      } else if (next.kind == Command::end) {
        finish(*next.work);
        ++ran;
      } else {
        fake_timeline().write(next.seq);
        writes_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (progress == Progress::notify) turn();
    return ran;
  }

  void look() noexcept {
    release_if_due();
    publish_if_due(std::chrono::steady_clock::now());
  }

  // How many publications the device has written.
  std::size_t writes() const noexcept { return writes_.load(std::memory_order_relaxed); }

  // Other code's capture of the native queue.
  void begin_native_capture() {
    std::lock_guard lock(capture_mu_);
    if (native_capture_) throw ev::StateError(name() + " is being captured natively already");
    native_capture_ = std::make_shared<NativeCapture>();
    may_be_captured_.store(true, std::memory_order_release);
  }
  std::shared_ptr<NativeCapture> end_native_capture() {
    std::lock_guard lock(capture_mu_);
    if (!native_capture_) throw ev::StateError(name() + " is not being captured natively");
    native_capture_->open.store(false, std::memory_order_release);
    return std::exchange(native_capture_, nullptr);
  }

  // The watcher's turn for this stream: held work released, finished work retired, the
  // listeners of passed fences fired.
  void turn() noexcept {
    release_if_due();
    (void)retire();
  }

 protected:
  // The native interface. Any fake stream's work can be waited for on the device.
  bool can_wait_on_device(const Work& producer) noexcept override {
    return dynamic_cast<const FakeTimeline*>(&producer.timeline()) != nullptr;
  }
  void wait_on_device(const Work& producer) override {
    push({Command::wait, Ref<Work>(const_cast<Work*>(&producer))});
  }
  void launch_body(Work& work) override { push({Command::body, Ref<Work>(&work)}); }
  bool may_be_captured() const noexcept override { return may_be_captured_.load(std::memory_order_acquire); }
  std::unique_ptr<detail::GraphRecorder> follow_native_capture() override {
    std::shared_ptr<NativeCapture> open = open_capture();
    return open ? follow_fake_capture(std::move(open), name()) : nullptr;
  }
  // As a GPU stream's: nothing but the ops of a stream that follows the capture goes there.
  void check_submit() const override {
    std::shared_ptr<NativeCapture> open = open_capture();
    if (open && capture_native() != open.get()) {
      throw ev::StateError(name() + " is being captured by other code (a native capture): eventide "
                           "puts only its ops into that capture");
    }
  }
  void launch_marker(Work&) override {}  // its time is taken when the device reaches it
  void end_work(Work& work) override { push({Command::end, Ref<Work>(&work)}); }
  bool can_publish_later() const noexcept override { return true; }
  void publish_through(std::uint64_t seq) override { push({Command::write, nullptr, seq}); }
  void drop_native_work() noexcept override {
    std::deque<Command> dropped;
    {
      std::lock_guard lock(mu_);
      dropped.swap(queue_);
    }
    for (Command& c : dropped) {
      if (c.kind == Command::end) c.work->finish_timing();  // never run: no time to wait for
    }
    owner_.timing_changed();
  }

 private:
  struct Command {
    enum Kind { wait, body, end, write } kind = end;
    Ref<Work> work;
    std::uint64_t seq = 0;  // a write's
  };

  void push(Command c) {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(c));
  }
  // A body, as the device runs it: not where the work has failed already (a dependency's
  // failure is decided here: what it depends on has run).
  void execute_body(Work& work) {
    if (work.error()) return;
    detail::set_running_work(&work);
    try {
      work.body()();
    } catch (...) {
      work.set_error(detail::body_error(work, std::current_exception()));
    }
    detail::set_running_work(nullptr);
  }
  // The end of a Work: its time taken (delivered late). Its publication is a write.
  void finish(Work& work) {
    if (work.timed()) {
      auto [start, end] = owner_.take_time(work.kind() == detail::WorkKind::op);
      owner_.add_timing(Ref<Work>(&work), start, end);  // late: deliver_timings()
    } else {
      work.finish_timing();  // nothing to time
    }
  }

  std::shared_ptr<NativeCapture> open_capture() const {
    std::lock_guard lock(capture_mu_);
    return native_capture_;
  }

  FakeDevice& owner_;
  const int priority_;
  mutable std::mutex capture_mu_;  // a leaf: guards native_capture_
  std::shared_ptr<NativeCapture> native_capture_;
  std::atomic<bool> may_be_captured_{false};
  std::mutex run_mu_;
  detail::RuntimeMutex mu_;  // the native queue
  std::deque<Command> queue_;
  std::atomic<std::size_t> writes_{0};
};

[[noreturn]] void unsupported(const char* op) {
  throw ev::InvalidArgument(std::string(op) + " is not supported on the fake device");
}

class FakeKernels final : public eventide::ops::Kernels {
 public:
  using Body = eventide::ops::Body;
  explicit FakeKernels(FakeDevice& device) : device_(device) {}

  Body fill(StreamState&, const TensorState& out, double value) override {
    check();
    if (out.dtype != ev::DType::f32) unsupported("fill of a non-f32 tensor");
    auto* p = static_cast<float*>(out.storage->data());
    const std::int64_t n = out.numel;
    return {.run = [=] { std::fill_n(p, n, static_cast<float>(value)); }};
  }
  Body random(StreamState&, const TensorState&, eventide::ops::RandomKind,
              const eventide::ops::ReserveRandom&) override {
    unsupported("rand");
  }
  // Bound to where the stream's work went when it was made (ops::Body::capture_epoch), as a
  // GPU's body is bound to the native stream it launches on.
  Body binary(StreamState& s, eventide::ops::BinaryOp op, const TensorState& a, const TensorState& b,
              const TensorState& out) override {
    const std::uint64_t epoch = s.capture_epoch();
    check();
    if (out.dtype != ev::DType::f32) unsupported("arithmetic on a non-f32 tensor");
    auto* pa = static_cast<const float*>(a.storage->data());
    auto* pb = static_cast<const float*>(b.storage->data());
    auto* po = static_cast<float*>(out.storage->data());
    const std::int64_t n = out.numel;
    return {.run = [=] {
      using Op = eventide::ops::BinaryOp;
      for (std::int64_t i = 0; i < n; ++i) {
        po[i] = op == Op::add ? pa[i] + pb[i] : op == Op::sub ? pa[i] - pb[i] : op == Op::mul ? pa[i] * pb[i] : pa[i] / pb[i];
      }
    }, .capture_epoch = epoch};
  }
  Body matmul(StreamState&, const TensorState&, const TensorState&, const TensorState&) override {
    unsupported("matmul");
  }
  Body write_words(StreamState&, const TensorState&, std::uint64_t, std::uint64_t) override {
    unsupported("a graph's random numbers");
  }
  Body upload(StreamState&, const TensorState& out, const void* host) override {
    check();
    if (out.nbytes() > 0) std::memcpy(out.storage->data(), host, out.nbytes());
    return {};
  }
  void download(const TensorState& src, void* host) override {
    check();
    if (src.nbytes() > 0) std::memcpy(host, src.storage->data(), src.nbytes());
  }
  Body download_async(StreamState&, const TensorState& src, const TensorState& host) override {
    return copy(src, host);
  }
  Body upload_async(StreamState&, const TensorState& host, const TensorState& out) override {
    return copy(host, out);
  }

 private:
  void check() const {
    if (auto e = device_.broken()) std::rethrow_exception(e);
  }
  Body copy(const TensorState& src, const TensorState& dst) const {
    check();
    const void* from = src.storage->data();
    void* to = dst.storage->data();
    const std::size_t bytes = src.nbytes();
    return {.run = [=] {
      if (bytes > 0) std::memcpy(to, from, bytes);
    }};
  }

  FakeDevice& device_;
};

std::array<std::atomic<FakeDevice*>, kDevices> g_devices{};

class FakeBackend final : public detail::DeviceBackend {
 public:
  explicit FakeBackend(int index) : device_(ev::Device::of("fake", index)), state_(device_), kernels_(state_) {
    g_devices[static_cast<std::size_t>(index)].store(&state_);
  }
  ~FakeBackend() override {
    g_devices[static_cast<std::size_t>(device_.index())].store(nullptr);
  }

  ev::Device device() const override { return device_; }
  ev::DeviceInfo info() const override {
    return {device_, "fake", "a device the test drives by hand (tests/fake)"};
  }
  // Priorities as a GPU has them (least 0, greatest -3), for the core's clamping.
  std::pair<int, int> stream_priority_range() const override { return {0, -3}; }
  std::shared_ptr<StreamState> create_stream(std::uint64_t id, int priority) override {
    auto s = std::make_shared<FakeStream>(device_, id, state_, priority);
    state_.add_stream(s);
    return s;
  }
  std::shared_ptr<StreamState> wrap_stream(void*, const std::function<std::uint64_t()>&) override {
    throw ev::InvalidArgument("Stream::from_native: the fake device has no native streams");
  }
  Ref<detail::Storage> allocate(std::size_t bytes, StreamState&) override {
    if (auto e = state_.broken()) std::rethrow_exception(e);
    return HostStorage::make(bytes, device_);
  }
  Ref<detail::Storage> allocate_host(std::size_t bytes) override {
    return HostStorage::make(bytes, ev::Device::cpu());
  }
  eventide::ops::Kernels& kernels() noexcept { return kernels_; }
  void shutdown(std::chrono::steady_clock::time_point) noexcept override {
    std::exception_ptr e;
    try {
      e = std::make_exception_ptr(ev::StateError("the eventide runtime shut down"));
    } catch (...) {
      e = detail::out_of_memory_error();
    }
    try {
      for (auto& s : state_.streams()) s->abandon(e);
    } catch (...) {
    }
  }

 private:
  const ev::Device device_;
  FakeDevice state_;
  FakeKernels kernels_;
};

eventide::ops::Kernels& kernels_of(detail::DeviceBackend& device) {
  return static_cast<FakeBackend&>(device).kernels();
}

std::vector<std::unique_ptr<detail::DeviceBackend>> discover() {
  std::vector<std::unique_ptr<detail::DeviceBackend>> out;
  for (int i = 0; i < kDevices; ++i) out.push_back(std::make_unique<FakeBackend>(i));
  return out;
}

std::string why_unavailable(ev::Device device) {
  return "the fake kind has devices fake:0 to fake:" + std::to_string(kDevices - 1) + ", not " + device.str();
}

FakeStream& fake(const ev::Stream& stream) {
  if (stream.device().kind_name() != "fake") throw ev::InvalidArgument(stream.device().str() + " is not fake");
  return static_cast<FakeStream&>(*stream.state());
}

FakeDevice& fake(ev::Device device) {
  (void)ev::devices();  // starts the runtime, which makes the devices
  FakeDevice* d = device.kind_name() == "fake" && device.index() < kDevices
                      ? g_devices[static_cast<std::size_t>(device.index())].load()
                      : nullptr;
  if (!d) throw ev::InvalidArgument(device.str() + " is not a fake device of this runtime");
  return *d;
}

}  // namespace

std::size_t run(const ev::Stream& stream, std::size_t max, Progress progress) {
  return fake(stream).run(max, progress);
}
void notify(const ev::Stream& stream) { fake(stream).turn(); }
void begin_native_capture(const ev::Stream& stream) { fake(stream).begin_native_capture(); }
NativeGraph end_native_capture(const ev::Stream& stream) { return NativeGraph(fake(stream).end_native_capture()); }
std::size_t writes(const ev::Stream& stream) { return fake(stream).writes(); }
void look(const ev::Stream& stream) { fake(stream).look(); }
std::size_t held(const ev::Stream& stream) { return fake(stream).held_count(); }
void deliver_timings(ev::Device device) { fake(device).deliver(); }
void set_clock(ev::Device device, std::int64_t now_ns, std::int64_t step_ns) {
  fake(device).set_clock(now_ns, step_ns);
}
void fail_device(ev::Device device, const std::string& message) {
  FakeDevice& d = fake(device);
  d.mark_broken(std::make_exception_ptr(ev::DeviceError(message, "fake_device_trap", 719)));
  const std::exception_ptr error = d.broken();
  for (auto& s : d.streams()) s->abandon(error);
}

}  // namespace eventide_fake

// The fake kind: no DLPack device type, no native streams; ranked above nothing else here.
namespace eventide::backends::fake {
constinit const detail::BackendDescriptor kDescriptor{
    .kind = "fake",
    .indexing = detail::DeviceIndexing::indexed,
    .default_priority = 50,
    .dlpack_device_type = 0,
    .dlpack_also_reads = {},
    .discover = &eventide_fake::discover,
    .why_unavailable = &eventide_fake::why_unavailable,
    .has_native_streams = false,
};
}  // namespace eventide::backends::fake

// The registry of the test binary: the fake backend alone.
namespace eventide::detail {
std::span<const BackendDescriptor* const> compiled_backends() noexcept {
  static constexpr const BackendDescriptor* kBackends[] = {&backends::fake::kDescriptor};
  return kBackends;
}
}  // namespace eventide::detail

namespace eventide::ops {
std::span<const KernelsEntry> compiled_kernels() noexcept {
  static constexpr KernelsEntry kKernels[] = {{&backends::fake::kDescriptor, &eventide_fake::kernels_of}};
  return kKernels;
}
}  // namespace eventide::ops
