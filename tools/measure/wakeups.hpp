// tools/measure/wakeups.hpp: how long one thread takes to notice what another did, through
// eventide (UserEvent, callbacks, stream work) and through the standard primitives it
// replaces (std::atomic wait/notify, std::condition_variable, spinning), measured the same way.
//
// Each function returns one sample per round, in nanoseconds; the caller takes the p50 and
// p99 (measure.hpp's dist). Methods:
//
// * Ping-pong: two threads hand a turn back and forth through the primitive; half of one
//   round trip is one wake-up. Both threads stay hot, so waiters that spin before they sleep
//   (eventide's waits, libstdc++'s atomic wait) are caught while spinning.
// * Sleeping waiter: the waiter has been blocked for `idle` (far longer than any spin), so the
//   wake-up goes through the kernel; timed from just before the set to just after the waiter
//   returns.
// * Hand-offs (callbacks, stream work): from just before set() (or the end of an op's body) to
//   the first line of the function on the other thread (or the return of Event::wait).
//
// Every function blocks until its rounds are done and leaves no thread behind.
#pragma once

#include <chrono>
#include <vector>

namespace eventide::bench {

// --- The standard primitives (the anchors) ---------------------------------------------------

std::vector<double> atomic_ping_pong(int rounds);
std::vector<double> condvar_ping_pong(int rounds);
// Two threads spinning on an atomic: the floor of any hand-off.
std::vector<double> spin_ping_pong(int rounds);

std::vector<double> atomic_sleeping(int rounds, std::chrono::nanoseconds idle);
std::vector<double> condvar_sleeping(int rounds, std::chrono::nanoseconds idle);

// A thread blocked in std::atomic::wait runs a function once the host notifies it: what a
// callback thread built from the standard library costs. `idle`: how long the thread has been
// waiting (0: back to back).
std::vector<double> atomic_handoff(int rounds, std::chrono::nanoseconds idle);

// --- eventide ----------------------------------------------------------------------------------

// UserEvent::set() -> Event::wait() returns on the other thread, ping-pong/2.
std::vector<double> user_event_ping_pong(int rounds);
std::vector<double> user_event_sleeping(int rounds, std::chrono::nanoseconds idle);

// UserEvent::set() -> the first line of a callback on the runtime's callback thread. `idle`:
// sleep before each set, so that thread has gone to sleep; 0: back to back.
std::vector<double> user_event_callback(int rounds, std::chrono::nanoseconds idle);

// The end of an op's body on a CPU stream worker -> Event::wait returns on the host. The body
// spins (or, over 50 µs, sleeps) `body` first, so the host is already waiting: still spinning
// for a short body, asleep for a long one.
std::vector<double> stream_work_wake(int rounds, std::chrono::nanoseconds body);

// Stream::enqueue -> the op's body starts, on a CPU stream idle for `idle` before each op
// (longer than a worker's idle spell, 2 ms: the worker has gone back to the pool).
std::vector<double> idle_stream_pickup(int rounds, std::chrono::nanoseconds idle);

}  // namespace eventide::bench
