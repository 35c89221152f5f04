// Beyond the tutorial: a UserEvent is finished by host code. A stream that waits on it runs its
// later work only after set(); the host never blocks. fail() fails that work instead. Run by
// 10_user_event_gate.cpp and by `eventide demo`.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <stdexcept>

#include <eventide/eventide.hpp>

#include "narrator.hpp"

namespace examples {

// Ops of `n` x `n` on `device` gated by a UserEvent that is set, then by one that fails.
inline void user_event_gate(Narrator& say, eventide::Device device, std::int64_t n) {
  namespace ev = eventide;
  using Clock = std::chrono::steady_clock;
  ev::Tensor a = ev::randn({n, n}, ev::DType::f32, device);
  ev::Tensor b = ev::randn({n, n}, ev::DType::f32, device);
  ev::UserEvent go(device);
  ev::Stream s(device);
  s.wait(go);  // returns at once
  ev::Tensor x, y;
  const auto t0 = Clock::now();
  {
    ev::StreamGuard guard(s);
    x = ev::matmul(a, b);  // enqueued behind the gate
    y = ev::add(x, x);
  }
  say.say(format("s.wait(go); 2 ops on s       -> host not blocked: returned after %.1f µs",
                 std::chrono::duration<double, std::micro>(Clock::now() - t0).count()));
  say.say(format("before go.set(): s.query() = %s, x ready %s, y ready %s", yes_no(s.query()),
                 yes_no(x.ready()), yes_no(y.ready())));
  say.check(!x.ready() && !y.ready(), "ops behind an unset UserEvent must not run");
  go.set();
  s.synchronize();
  say.say(format("go.set(); s.synchronize()    -> s.query() = %s, y ready %s", yes_no(s.query()),
                 yes_no(y.ready())));
  say.check(y.ready(), "ops must run once the UserEvent is set");

  // A failed gate: the gated op fails with an OpError whose cause is the host's error.
  ev::UserEvent input(device);
  ev::Stream s2(device);
  s2.wait(input);
  ev::Tensor z;
  {
    ev::StreamGuard guard(s2);
    z = ev::matmul(a, b);
  }
  input.fail(std::make_exception_ptr(std::runtime_error("input file missing")));
  bool failed = false;
  try {
    z.wait();
  } catch (const ev::OpError& err) {
    failed = true;
    say.say(std::string("input.fail(...); z.wait()    -> OpError: ") + err.what());
  }
  say.check(failed, "an op gated on a failed UserEvent must fail, not run");
  say.say(format("and the stream is broken from then on: s2.error() set: %s", yes_no(s2.error() != nullptr)));
  say.check(s2.error() != nullptr, "a stream that waited on a failed event reports it");
}

}  // namespace examples
