// Beyond the tutorial: a UserEvent is finished by host code. A stream that waits on it runs its
// later work only after set(); the host never blocks. fail() fails that work instead.
#include <cstdio>
#include <stdexcept>

#include <eventide/eventide.hpp>
namespace ev = eventide;

int main() {
  ev::Tensor a = ev::randn({512, 512}), b = ev::randn({512, 512});

  ev::UserEvent go;
  ev::Stream s;
  s.wait(go);  // returns at once
  ev::Tensor out;
  {
    ev::StreamGuard guard(s);
    out = ev::matmul(a, b);  // enqueued behind the gate
  }
  std::printf("before set(): out ready = %s\n", out.ready() ? "true" : "false");
  if (out.ready()) return 1;

  go.set();
  out.wait();
  std::printf("after set():  out ready = %s\n", out.ready() ? "true" : "false");

  // A failed gate: the gated op fails with an OpError whose cause is the host's error.
  ev::UserEvent input;
  ev::Stream s2;
  s2.wait(input);
  ev::Tensor z;
  {
    ev::StreamGuard guard(s2);
    z = ev::matmul(a, b);
  }
  input.fail(std::make_exception_ptr(std::runtime_error("input not available")));
  try {
    z.wait();
    return 1;
  } catch (const ev::OpError& e) {
    std::printf("after fail(): z.wait() threw OpError: %s\n", e.what());
  }
  return 0;
}
