// The steps of fork() as the runtime hands them to the dispatchers and the backends
// (Runtime::prepare_fork, DeviceBackend::before_fork).
#pragma once

namespace eventide::detail {

// What before_fork does with the locks it takes to quiesce: lets go of them at once (the
// bounded wait a binding runs first, with its own locks let go), or holds them across the fork
// (pthread_atfork's prepare step), so that the child finds them free; after_fork_in_parent is
// told the same, to let go of what was held.
enum class ForkLocks { release, hold };

// Which process after_fork runs in.
enum class ForkSide { parent, child };

}  // namespace eventide::detail
