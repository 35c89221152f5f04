// Host waits on fences (core/wait.cpp, beside the event waits: EventState::wait_until,
// wait_all, wait_any).
//
// Every host wait spins for a few microseconds, then registers the calling thread's Parker
// to be woken and sleeps (Parker, core/parker.hpp); on a timeline the device writes, it naps
// and reads the counter itself instead of sleeping until woken (WaitPacer). A pool thread
// that waits lets its pool run other work meanwhile (BlockingRegion).
//
// Thread-safety: any number of threads may wait on one fence or event at once; each parks on
// its own Parker. A wait never holds a runtime lock while it blocks.
//
// Memory ordering: a wait that returns true has seen the fence pass with an acquire load:
// everything the work before the fence wrote is visible to the caller.
#pragma once

#include <cstdint>

#include "core/parker.hpp"

namespace eventide::detail {

class Timeline;

// Blocks until `timeline` passes `seq` (true), or the deadline (false). StateError if the
// calling op would wait on its own stream's later work (it could never finish).
bool wait_for_fence(Timeline& timeline, std::uint64_t seq, const Deadline& deadline);

}  // namespace eventide::detail
