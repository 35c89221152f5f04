// eventide/interop.hpp: what a language binding (the Python package) needs of the runtime
// beyond the API: the rule for releasing its objects, and the runtime's steps around fork and
// exit. Programs in C++ need none of it.
//
// The lock rule: no thread releases or runs a user's object (a Python callable, exception or
// array) while it holds one of the runtime's locks, since the release may take a lock of the
// user's own (Python's GIL) that another thread holds while it waits for the runtime's lock.
// The runtime keeps the rule for what it owns (callbacks, from_external's owners); a binding's
// own handles keep it by releasing through run_when_unlocked.
//
// Thread-safety: every function, from any thread.
#pragma once

#include <cstdint>

namespace eventide {
class Event;
class Device;
}  // namespace eventide

namespace eventide::interop {

// Ties `event` to nothing on `device`: an EMPTY event becomes FINISHED at once. For another
// library's objects that stand for no pending work: a torch event never recorded (its query()
// is True), a tensor in host memory (its op ran when it returned). InvalidArgument for an
// event of another device.
//
// @code
//   ev::Event e;                                        // stands for a NumPy array
//   ev::interop::record_nothing(e, ev::Device::cpu());  // FINISHED at once
//   e.wait();                                           // returns at once
// @endcode
void record_nothing(Event& event, Device device);

// Runs fn(arg) now if the calling thread holds no runtime lock, else when it lets go of its
// last one (on this thread). If that cannot be recorded (out of memory), fn is not run: the
// object is leaked rather than released under a lock.
//
// @code
//   void release_now(void* obj) {  // takes the GIL: never under a runtime lock
//     PyGILState_STATE state = PyGILState_Ensure();
//     Py_DECREF(static_cast<PyObject*>(obj));
//     PyGILState_Release(state);
//   }
//   ev::interop::run_when_unlocked(&release_now, obj);  // in a handle's reset()
// @endcode
void run_when_unlocked(void (*fn)(void*), void* arg) noexcept;
// How many releases have waited for their thread to let go of the runtime's locks (tests of
// the rule).
std::uint64_t deferred_releases() noexcept;

// fork(): the runtime's pthread_atfork handlers quiesce it (running CPU ops get 2 s to finish,
// none starts) and hold its locks across the fork. A binding whose ops need a lock the forking
// thread holds (the GIL) calls pause_for_fork() first with that lock let go, and
// resume_after_fork() afterwards in the parent. No-ops before the runtime has started.
//
// @code
//   {
//     py::gil_scoped_release unlocked;  // a running op's body may need the GIL
//     ev::interop::pause_for_fork();
//   }
//   if (fork() != 0) ev::interop::resume_after_fork();  // in the parent
// @endcode
void pause_for_fork() noexcept;
void resume_after_fork() noexcept;

// What process exit does, now: queued work fails, running work gets its grace period to
// finish, threads stop; later calls that would start work throw StateError. For an
// interpreter's exit hook, which runs before the interpreter goes away (the runtime's own
// exit step comes later, during static destruction). Idempotent.
//
// @code
//   py::module_::import("atexit").attr("register")(py::cpp_function([] {
//     py::gil_scoped_release release;  // a running callback may need the GIL to finish
//     ev::interop::shutdown();
//   }));
// @endcode
void shutdown() noexcept;

}  // namespace eventide::interop
