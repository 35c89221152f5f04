#include "core/work.hpp"

#include <chrono>
#include <mutex>
#include <new>
#include <optional>
#include <utility>

#include "eventide/errors.hpp"
#include "core/timeline.hpp"

namespace eventide::detail {

std::string Work::describe() const {
  return name_ + "#" + std::to_string(seq_) + " on " + timeline_->name();
}

void Work::merge_times(std::int64_t start_ns, std::int64_t end_ns) noexcept {
  std::lock_guard lock(exec_mu_);
  if (!has_times_.load(std::memory_order_relaxed)) {
    start_ns_.store(start_ns, std::memory_order_relaxed);
    end_ns_.store(end_ns, std::memory_order_relaxed);
    has_times_.store(true, std::memory_order_release);
    return;
  }
  if (start_ns < start_ns_.load(std::memory_order_relaxed)) start_ns_.store(start_ns, std::memory_order_relaxed);
  if (end_ns > end_ns_.load(std::memory_order_relaxed)) end_ns_.store(end_ns, std::memory_order_relaxed);
}

void Work::set_keeps_parts() { parts_ = std::make_unique<std::vector<Part>>(); }

void Work::add_part(std::string_view name, std::int64_t start_ns, std::int64_t end_ns) const noexcept {
  if (!parts_) return;
  std::lock_guard lock(exec_mu_);
  try {
    parts_->push_back(Part{std::string(name), start_ns, end_ns});
  } catch (...) {
    // (Out of memory: the profile shows the replay without this part.)
  }
}

std::vector<Work::Part> Work::parts() const {
  if (!parts_) return {};
  std::lock_guard lock(exec_mu_);
  return *parts_;
}

void Work::decide_error() const noexcept {
  std::lock_guard lock(exec_mu_);
  if (!deferred_.load(std::memory_order_relaxed)) return;  // decided by another thread
  if (!error_) error_ = first_dependency_error(*this);
  deferred_.store(false, std::memory_order_release);
}

void Work::release_execution_state() noexcept {
  if (deferred_.load(std::memory_order_acquire)) decide_error();
  std::optional<Deps> deps;  // moved out without allocating
  std::optional<Keep> keep;
  Callback body;
  {
    std::lock_guard lock(exec_mu_);
    deps.emplace(std::move(deps_));
    keep.emplace(std::move(keep_));
    body = std::move(body_);
  }
  // Destroyed here, outside the lock: they may free memory.
}

std::string describe_error(const std::exception_ptr& error) { return error_what(error); }

const char* error_what(const std::exception_ptr& error) noexcept {
  if (!error) return "no error";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

const std::exception_ptr& out_of_memory_error() noexcept {
  static const std::exception_ptr error = std::make_exception_ptr(std::bad_alloc());
  return error;
}

namespace {

// Made here (one per process), not where the first one is needed: that may be out of memory.
[[maybe_unused]] const std::exception_ptr& g_out_of_memory = out_of_memory_error();

// An exception_ptr to E(args...), made in place: make_exception_ptr copies its argument, and
// copying an OpError allocates (its op name). Throws what making it throws (bad_alloc).
template <class E, class... A>
std::exception_ptr error_ptr(A&&... args) {
  try {
    throw E(std::forward<A>(args)...);
  } catch (const E&) {
    return std::current_exception();
  }
}

}  // namespace

std::exception_ptr root_cause(const std::exception_ptr& error) noexcept {
  try {
    std::rethrow_exception(error);
  } catch (const OpError& e) {
    if (e.cause()) return e.cause();
  } catch (...) {
  }
  return error;
}

std::exception_ptr dependency_error(const Work& work, const Dep& dep) noexcept {
  const std::exception_ptr& cause = dep.work->error();
  try {
    std::string why;
    switch (dep.kind) {
      case DepKind::input:
        why = "a tensor it uses was produced by " + dep.work->describe() + ", which failed";
        break;
      case DepKind::gate:
      case DepKind::waited:
        why = "its stream waits on an event whose work failed (" + dep.work->describe() + ")";
        break;
      case DepKind::order:
        why = "ordering dependency " + dep.work->describe() + " failed";
        break;
      case DepKind::previous:
        why = "the work before it on its stream, " + dep.work->describe() + ", failed";
        break;
    }
    std::exception_ptr root = root_cause(cause);
    std::string name = work.describe();
    return error_ptr<OpError>(name + " did not run: " + why + ": " + error_what(root), name,
                              std::move(root));
  } catch (...) {
    return cause;  // out of memory for the message: it fails with what made it fail
  }
}

std::exception_ptr first_dependency_error(const Work& work) noexcept {
  for (const Dep& dep : work.deps()) {
    if (dep.kind != DepKind::order && dep.work->error()) return dependency_error(work, dep);
  }
  return nullptr;
}

std::exception_ptr body_error(const Work& work, std::exception_ptr thrown) noexcept {
  try {
    std::string name = work.describe();
    return error_ptr<OpError>(name + " failed: " + error_what(thrown), name, thrown);
  } catch (...) {
    return thrown;  // out of memory for the message (often what the body threw, too)
  }
}

std::exception_ptr shutdown_error(const Work& work) noexcept {
  try {
    return error_ptr<StateError>(work.describe() + " did not run: the eventide runtime shut down");
  } catch (...) {
    return out_of_memory_error();
  }
}

namespace {
thread_local const Work* tls_running = nullptr;
}

const Work* running_work() noexcept { return tls_running; }
void set_running_work(const Work* work) noexcept { tls_running = work; }

void check_not_waiting_on_self(const Timeline& timeline, std::uint64_t seq) {
  const Work* running = tls_running;
  if (running && &running->timeline() == &timeline && seq >= running->seq()) {
    throw StateError(running->describe() + " waits for work queued behind it on " +
                     timeline.name() + ": that would never finish");
  }
}

std::int64_t host_now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace eventide::detail
