#include "core/runtime.hpp"

#include <algorithm>
#include <cstdlib>

#include "core/stream_state.hpp"
#include "core/timer.hpp"
#include "eventide/errors.hpp"
#include "eventide/runtime.hpp"
#include "eventide/tensor.hpp"
#include "eventide/version.hpp"

namespace eventide {
namespace detail {

// --- DeviceContext -----------------------------------------------------------------------

DeviceContext::DeviceContext(std::unique_ptr<DeviceBackend> backend)
    : device_(backend->device()), backend_(std::move(backend)), dispatcher_(device_.str()) {}

std::shared_ptr<StreamState> DeviceContext::default_stream() {
  if (!default_made_.load(std::memory_order_acquire)) {
    std::lock_guard lock(default_mu_);
    if (!default_stream_) default_stream_ = create_stream(0);
    default_made_.store(true, std::memory_order_release);
  }
  return default_stream_;
}

std::shared_ptr<StreamState> DeviceContext::create_stream(std::uint64_t id, int priority) {
  // {least, greatest}, greatest the smaller number: a priority outside goes to the nearer end.
  const auto [least, greatest] = backend_->stream_priority_range();
  priority = std::clamp(priority, std::min(least, greatest), std::max(least, greatest));
  auto stream = backend_->create_stream(id, priority);
  std::lock_guard lock(mu_);
  std::erase_if(streams_, [](const std::weak_ptr<StreamState>& w) { return w.expired(); });
  streams_.push_back(stream);
  return stream;
}

std::shared_ptr<StreamState> DeviceContext::internal_stream(const std::function<std::uint64_t()>& make_id) {
  std::lock_guard lock(internal_mu_);
  for (const auto& s : internal_) {
    if (s->own_work_done()) return s;
  }
  if (internal_.size() < kInternalStreams) {
    // Made under the lock: the lock is a leaf beside the backend's (a stream's making takes
    // none of the runtime's other locks but mu_, below).
    internal_.push_back(create_stream(make_id()));
    return internal_.back();
  }
  // All busy: the next in turn (what goes there then also waits for what is queued there).
  internal_next_ = (internal_next_ + 1) % internal_.size();
  return internal_[internal_next_];
}

std::shared_ptr<StreamState> DeviceContext::wrap_stream(void* native,
                                                        const std::function<std::uint64_t()>& make_id) {
  bool made = false;
  auto stream = backend_->wrap_stream(native, [&] {
    made = true;
    return make_id();
  });
  if (!made) return stream;  // a wrapper that lives already, tracked since it was made
  std::lock_guard lock(mu_);
  std::erase_if(streams_, [](const std::weak_ptr<StreamState>& w) { return w.expired(); });
  streams_.push_back(stream);
  return stream;
}

std::vector<std::shared_ptr<StreamState>> DeviceContext::live_streams() {
  std::vector<std::shared_ptr<StreamState>> out;
  std::lock_guard lock(mu_);
  for (const auto& w : streams_) {
    if (auto s = w.lock()) out.push_back(std::move(s));
  }
  return out;
}

std::pair<std::uint64_t, std::uint64_t> DeviceContext::reserve_random(std::uint64_t blocks) {
  std::lock_guard lock(mu_);
  auto first = offset_;
  offset_ += blocks;
  return {seed_, first};
}

void DeviceContext::manual_seed(std::uint64_t seed) {
  std::lock_guard lock(mu_);
  seed_ = seed;
  offset_ = 0;
}

void DeviceContext::shutdown(Clock::time_point deadline) noexcept { backend_->shutdown(deadline); }

// --- Runtime -----------------------------------------------------------------------------

namespace {

std::atomic<Runtime*> g_runtime{nullptr};

// Shuts the runtime down during static destruction, before the libraries it uses (the BLAS,
// the CUDA runtime) tear themselves down.
struct ShutdownAtExit {
  ~ShutdownAtExit() {
    if (Runtime* r = g_runtime.load()) r->shutdown();
  }
};

// The runtime's stage of fork() (core/fork.hpp).
void on_fork_prepare() noexcept {
  if (Runtime* r = g_runtime.load()) r->prepare_fork();
}
void on_fork_parent() noexcept {
  if (Runtime* r = g_runtime.load()) r->after_fork(ForkSide::parent);
}
void on_fork_child() noexcept {
  if (Runtime* r = g_runtime.load()) r->after_fork(ForkSide::child);
}

thread_local std::vector<std::pair<Device, std::shared_ptr<StreamState>>> tls_current;
thread_local std::optional<Device> tls_block_device;

}  // namespace

Runtime& Runtime::get() {
  // Leaked on purpose: see the header.
  static Runtime* runtime = [] {
    auto* r = new Runtime();
    g_runtime.store(r);
    static ShutdownAtExit at_exit;
    set_fork_steps(ForkStage::runtime, {&on_fork_prepare, &on_fork_parent, &on_fork_child});
    return r;
  }();
  return *runtime;
}

Runtime::Runtime() {
  for (const BackendDescriptor* kind : compiled_backends()) {
    for (auto& backend : kind->discover()) {
      contexts_.push_back(std::make_unique<DeviceContext>(std::move(backend)));
    }
  }
}

void Runtime::check_running() const {
  if (!running_.load(std::memory_order_acquire)) {
    throw StateError("the eventide runtime has shut down (process exit): no new work");
  }
}

DeviceContext* Runtime::find(Device device) noexcept {
  for (auto& c : contexts_) {
    if (c->device() == device && !c->lost_in_fork()) return c.get();
  }
  return nullptr;
}

DeviceContext& Runtime::context(Device device) {
  if (DeviceContext* c = find(device)) return *c;
  for (auto& c : contexts_) {
    if (c->device() == device) {
      throw StateError(device.str() + " cannot be used in this process: it is the child of a fork() "
                       "of a process that had started using it, and CUDA does not survive fork. "
                       "Start the child with the 'spawn' or 'forkserver' method, or fork before "
                       "the first use of the GPU");
    }
  }
  throw InvalidArgument("device " + device.str() + " is not available: " + why_unavailable(device));
}

std::vector<Device> Runtime::devices() const {
  std::vector<Device> out;
  for (const auto& c : contexts_) {
    if (!c->lost_in_fork()) out.push_back(c->device());
  }
  return out;
}

Device Runtime::default_device() {
  std::call_once(default_device_once_, [this] {
    try {
      if (const char* env = std::getenv("EVENTIDE_DEVICE"); env && *env) {
        Device d;
        try {
          d = Device(env);
        } catch (const InvalidArgument& e) {
          throw InvalidArgument(std::string("EVENTIDE_DEVICE: ") + e.what());
        }
        if (!find(d)) {
          throw InvalidArgument("EVENTIDE_DEVICE=" + std::string(env) + " is not available: " +
                                why_unavailable(d));
        }
        default_device_ = d;
      } else {
        // Device 0 of the available kind that ranks highest (a GPU over the CPU).
        const BackendDescriptor* best = nullptr;
        for (const auto& c : contexts_) {
          const BackendDescriptor* kind = find_backend(c->device().kind());
          if (c->device().index() == 0 && kind && !c->lost_in_fork() &&
              (!best || kind->default_priority > best->default_priority)) {
            best = kind;
            default_device_ = c->device();
          }
        }
        if (!best) default_device_ = Device::cpu();
      }
    } catch (...) {
      default_device_error_ = std::current_exception();
    }
  });
  if (default_device_error_) std::rethrow_exception(default_device_error_);
  return *default_device_;
}

Dispatcher& Runtime::dispatcher(const std::optional<Device>& device) {
  if (device) {
    if (DeviceContext* c = find(*device)) return c->dispatcher();
  }
  return host_dispatcher_;
}

std::shared_ptr<StreamState> Runtime::create_stream(Device device, int priority) {
  check_running();
  DeviceContext& c = context(device);
  return c.create_stream(next_stream_id_.fetch_add(1, std::memory_order_relaxed) + 1, priority);
}

std::shared_ptr<StreamState> Runtime::internal_stream(Device device) {
  check_running();
  return context(device).internal_stream(
      [this] { return next_stream_id_.fetch_add(1, std::memory_order_relaxed) + 1; });
}

std::shared_ptr<StreamState> Runtime::wrap_stream(Device device, void* native) {
  check_running();
  DeviceContext& c = context(device);
  return c.wrap_stream(native, [this] { return next_stream_id_.fetch_add(1, std::memory_order_relaxed) + 1; });
}

Device Runtime::native_stream_device(void* native) {
  for (auto& c : contexts_) {
    if (c->backend().owns_native_stream(native)) return c->device();
  }
  throw InvalidArgument("Stream::from_native: no device of this process knows the native stream " +
                        std::to_string(reinterpret_cast<std::uintptr_t>(native)) +
                        (std::any_of(contexts_.begin(), contexts_.end(),
                                     [](const auto& c) {
                                       const BackendDescriptor* kind = find_backend(c->device().kind());
                                       return kind && kind->has_native_streams && !c->lost_in_fork();
                                     })
                             ? ""
                             : " (no " + native_stream_kinds() + " device is available)"));
}

std::shared_ptr<StreamState> Runtime::current_stream(Device device) {
  for (const auto& [d, s] : tls_current) {
    if (d == device && s) return s;
  }
  return context(device).default_stream();
}

void Runtime::shutdown() noexcept {
  if (!running_.exchange(false)) return;
  // Callbacks first: those of work failed below would run against a half-destroyed program.
  // One grace period for all the runtime's threads (not one each, one after another).
  const Clock::time_point deadline = Clock::now() + kExitGrace;
  // Timers before the callback threads they hand coroutines to (core/timer.hpp).
  if (TimerQueue* timers = TimerQueue::existing()) timers->shutdown(deadline);
  host_dispatcher_.request_stop();
  for (auto& c : contexts_) c->dispatcher().request_stop();
  host_dispatcher_.join_until(deadline);
  for (auto& c : contexts_) c->dispatcher().join_until(deadline);
  for (auto& c : contexts_) {
    // A device lost in a fork has no threads here to stop, and its API may not be called.
    if (!c->lost_in_fork()) c->shutdown(deadline);
  }
}

std::size_t Runtime::empty_cache() noexcept {
  std::size_t released = 0;
  for (auto& c : contexts_) {
    if (!c->lost_in_fork()) released += c->backend().empty_cache();
  }
  return released;
}

void Runtime::prepare_fork() noexcept {
  const Clock::time_point deadline = Clock::now() + kForkGrace;
  auto each = [&](bool cpu, ForkLocks locks) {
    for (auto& c : contexts_) {
      if (!c->lost_in_fork() && (c->device() == Device::cpu()) == cpu) c->backend().before_fork(deadline, locks);
    }
  };
  // The CPU's running bodies finish first, with the GPUs' watchers still going (a body may
  // wait for GPU work); then the GPUs' watchers stop between two turns, before the CPU pool
  // holds its lock (a watcher's turn may hand the pool work, and must not find that lock held
  // by this thread while this thread waits for the turn to end); then the pool holds its lock.
  each(true, ForkLocks::release);
  each(false, ForkLocks::hold);
  each(true, ForkLocks::hold);
  host_dispatcher_.before_fork();
  for (auto& c : contexts_) c->dispatcher().before_fork();
}

void Runtime::after_fork(ForkSide side) noexcept {
  host_dispatcher_.after_fork(side);
  for (auto& c : contexts_) c->dispatcher().after_fork(side);
  // The CPU first: in the child, a GPU's failed work may resume CPU streams, whose pool must
  // be in order by then.
  for (bool cpu : {true, false}) {
    for (auto& c : contexts_) {
      if (c->lost_in_fork() || (c->device() == Device::cpu()) != cpu) continue;
      if (side == ForkSide::parent) {
        c->backend().after_fork_in_parent(ForkLocks::hold);
        if (cpu) c->backend().after_fork_in_parent(ForkLocks::release);  // prepare_fork's first step
      } else if (!c->backend().after_fork_in_child()) {
        c->set_lost_in_fork();
      }
    }
  }
}

void Runtime::pause_for_fork() noexcept {
  Runtime* r = g_runtime.load();
  if (!r) return;
  const Clock::time_point deadline = Clock::now() + kForkGrace;
  for (auto& c : r->contexts_) {
    if (!c->lost_in_fork()) c->backend().before_fork(deadline, ForkLocks::release);
  }
}

void Runtime::resume_after_fork_pause() noexcept {
  Runtime* r = g_runtime.load();
  if (!r) return;
  for (auto& c : r->contexts_) {
    if (!c->lost_in_fork()) c->backend().after_fork_in_parent(ForkLocks::release);
  }
}

std::shared_ptr<StreamState> exchange_current_stream(Device device,
                                                     std::shared_ptr<StreamState> stream) noexcept {
  for (auto& [d, s] : tls_current) {
    if (d == device) return std::exchange(s, std::move(stream));
  }
  if (stream) {
    try {
      tls_current.emplace_back(device, std::move(stream));  // no allocation once reserved
    } catch (...) {
      // Out of memory, and the caller did not reserve_current_stream() first: the stream is
      // not made current.
    }
  }
  return nullptr;
}

void reserve_current_stream(Device device) {
  for (auto& [d, s] : tls_current) {
    if (d == device) return;
  }
  tls_current.reserve(tls_current.size() + 1);
}

std::optional<Device> exchange_block_device(std::optional<Device> device) noexcept {
  return std::exchange(tls_block_device, device);
}

std::optional<Device> block_device() noexcept { return tls_block_device; }

}  // namespace detail

// --- Public runtime functions ------------------------------------------------------------

Device default_device() { return detail::Runtime::get().default_device(); }

std::vector<Device> devices() { return detail::Runtime::get().devices(); }

bool is_available(Device device) noexcept {
  try {
    return detail::Runtime::get().find(device) != nullptr;
  } catch (...) {
    return false;
  }
}

DeviceInfo device_info(Device device) { return detail::Runtime::get().context(device).backend().info(); }

void manual_seed(std::uint64_t seed) {
  for (Device d : devices()) manual_seed(seed, d);
}

void manual_seed(std::uint64_t seed, Device device) {
  detail::Runtime::get().context(device).manual_seed(seed);
}

namespace {
std::atomic<bool> g_allow_tf32{false};
}

void set_allow_tf32(bool allow) noexcept { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() noexcept { return g_allow_tf32.load(std::memory_order_relaxed); }

std::string_view version() noexcept { return EVENTIDE_VERSION_STRING; }

}  // namespace eventide
