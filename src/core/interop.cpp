#include "eventide/interop.hpp"

#include "core/event_state.hpp"
#include "core/runtime.hpp"
#include "eventide/event.hpp"
#include "core/runtime_lock.hpp"

namespace eventide::interop {

void record_nothing(Event& event, Device device) { event.state()->record_nothing(device); }

void run_when_unlocked(void (*fn)(void*), void* arg) noexcept { detail::run_when_unlocked(fn, arg); }
std::uint64_t deferred_releases() noexcept { return detail::deferred_releases(); }
void pause_for_fork() noexcept { detail::Runtime::pause_for_fork(); }
void resume_after_fork() noexcept { detail::Runtime::resume_after_fork_pause(); }
void shutdown() noexcept { detail::Runtime::get().shutdown(); }

}  // namespace eventide::interop
