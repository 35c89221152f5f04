// One event for several ops (tutorial point 2). Records accumulate: the event finishes when
// every tied op has, and time_elapsed() spans them all. Run by 09_multiple_ops_one_event.cpp
// and by `eventide demo`.
#pragma once

#include <cstdint>

#include <eventide/eventide.hpp>

#include "narrator.hpp"

namespace examples {

// Two matmuls of `n` x `n` on `device` tied to one event, the second held back until we say so.
inline void one_event_several_ops(Narrator& say, eventide::Device device, std::int64_t n) {
  namespace ev = eventide;
  ev::Tensor a = ev::randn({n, n}, ev::DType::f32, device);
  ev::Tensor b = ev::randn({n, n}, ev::DType::f32, device);
  // Op 2 goes to a side stream held back by a gate, so that it is certainly still pending
  // when op 1 is done (10_user_event_gate shows gates on their own).
  ev::UserEvent gate(device);
  ev::Stream side(device);
  side.wait(gate);
  ev::Tensor out1 = ev::matmul(a, b);
  ev::Tensor out2;
  {
    ev::StreamGuard guard(side);
    out2 = ev::matmul(b, a);
  }
  ev::Event e;
  e.record(out1);
  e.record(out2);
  say.say("e.record(out1); e.record(out2) -> " + e.str());
  out1.wait();
  say.say(format("op 1 done, op 2 held back    -> out1 ready %s, out2 ready %s, e.completed() = %s",
                 yes_no(out1.ready()), yes_no(out2.ready()), yes_no(e.completed())));
  say.check(!e.completed(), "the event must wait for every op tied to it");
  gate.set();
  e.wait();
  say.say(format("gate.set(); e.wait()         -> out2 ready %s, e.completed() = %s",
                 yes_no(out2.ready()), yes_no(e.completed())));
  say.check(out2.ready() && e.completed(), "the event must finish once both ops have");
  say.say(format("e.time_elapsed()             -> %.1f µs, from the start of op 1 to the end of op 2",
                 e.time_elapsed().count()));
}

}  // namespace examples
