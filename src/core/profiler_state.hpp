// Transitional, for code outside the core that has not moved yet: the profiler is an observer
// now (core/observer.hpp), implemented in src/profile/; the host-wait group is public as
// eventide::HostWaitScope. Remove this header once python/src/py_support.cpp uses
// eventide::HostWaitScope.
#pragma once

#include "core/observer.hpp"
#include "core/work.hpp"
#include "eventide/profiler.hpp"

namespace eventide::detail {

using HostWaitGroup = eventide::HostWaitScope;

// Whether an observer (a running profiler) is installed: one relaxed load.
inline bool profiling() noexcept { return observer() != nullptr; }

}  // namespace eventide::detail
