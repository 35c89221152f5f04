// fork(): every step eventide takes around it, in one registry, in the order written here.
//
// pthread_atfork holds one set of eventide's handlers, which run the steps of every stage:
// prepare steps in the order of ForkStage, parent and child steps in the reverse order. So the
// order between the parts of eventide is this enum, not the order in which they happened to
// register. A stage's part sets its steps when it starts (set_fork_steps).
//
// The handler set is installed when the runtime starts, and again by whoever loads a library
// that registers handlers of its own that must run after eventide's prepare (OpenBLAS: its
// handler hangs while a matmul runs, so the runtime must quiesce first): pthread_atfork runs
// prepare handlers last registered first, and parent and child ones in registration order.
// However often installed, the steps run once per fork (the outermost call of each step acts).
//
// The steps run on the forking thread (the child's, in the child, its only thread), with no
// runtime lock held; they never throw. One fork runs the steps as they were set when its
// prepare began (a part that sets its steps meanwhile takes part from the next fork on), so
// that no stage runs a parent or child step without its prepare.
#pragma once

namespace eventide::detail {

enum class ForkStage : unsigned {
  // child: a new watcher thread for the imports made before the fork, once the runtime's
  // child step has put the runtime in order (src/ipc/watcher.cpp).
  ipc_watcher,
  // prepare: the timer thread finishes the timer it is running (a coroutine's timeout: its
  // decision and its hand-off to a callback thread), starts no other, and the queue's lock is
  // held: before the runtime's prepare, which holds the callback threads' queues that a running
  // timer hands coroutines to; child: a new timer thread if timers are scheduled, after the
  // runtime's child step has put those callback threads in order; both: let go of the lock
  // (src/core/timer.cpp).
  timer,
  // prepare: every device quiesces (running CPU ops get kForkGrace to finish, none starts)
  // and holds its locks; parent: goes on; child: a working CPU, the GPUs lost
  // (src/core/runtime.cpp).
  runtime,
  // prepare: takes the exporters' lock, after the runtime has quiesced (a running CPU body or
  // a callback may need it: export_event, dropping an ExportedEvent), so that the child finds
  // it free; child: closes its copies of the liveness locks' descriptors, so that the locks go
  // when the exporter goes, not when its last child does; both: let go of the lock
  // (src/ipc/export.cpp).
  ipc_exports,
  // child: marks the process as a forked child, whose MPI and NCCL are the parent's; first of
  // the child steps, before the runtime's starts workers that may run a queued collective
  // (src/distributed/process.cpp).
  distributed,
  count
};

struct ForkSteps {
  void (*prepare)() noexcept = nullptr;
  void (*parent)() noexcept = nullptr;
  void (*child)() noexcept = nullptr;
};

// Sets the steps of `stage` (once: a stage's first call sets them, later ones are ignored),
// and installs the handler set if it is not yet. From any thread; a fork racing with it runs
// all of the stage's steps or none.
void set_fork_steps(ForkStage stage, ForkSteps steps) noexcept;

// Registers the handler set with pthread_atfork (again): for a library loaded later whose own
// handlers must run after eventide's prepare (see above).
void install_fork_handlers() noexcept;

// What before_fork does with the locks it takes to quiesce: lets go of them at once (the
// bounded wait a binding runs first, with its own locks let go), or holds them across the fork
// (pthread_atfork's prepare step), so that the child finds them free; after_fork_in_parent is
// told the same, to let go of what was held.
enum class ForkLocks { release, hold };

// Which process after_fork runs in.
enum class ForkSide { parent, child };

}  // namespace eventide::detail
