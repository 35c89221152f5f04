// Beyond the tutorial: bounded waits. wait_for(timeout) returns false instead of blocking
// forever; wait_any returns the index of the first finished event (nullopt on timeout).
#include <chrono>
#include <cstdio>

#include <eventide/eventide.hpp>
namespace ev = eventide;
using namespace std::chrono_literals;

int main() {
  ev::UserEvent gate;  // holds one op back so the outcome is certain
  ev::Stream held;
  held.wait(gate);
  ev::Tensor slow;
  {
    ev::StreamGuard guard(held);
    slow = ev::matmul(ev::randn({512, 512}), ev::randn({512, 512}));
  }
  ev::Tensor fast = ev::matmul(ev::randn({512, 512}), ev::randn({512, 512}));

  ev::Event e_slow, e_fast;
  e_slow.record(slow);
  e_fast.record(fast);

  bool done = e_slow.wait_for(20ms);
  std::printf("e_slow.wait_for(20ms) -> %s\n", done ? "true" : "false");

  std::optional<std::size_t> first = ev::wait_any({e_slow, e_fast});
  std::printf("wait_any({e_slow, e_fast}) -> %zu\n", first.value_or(99));

  gate.set();
  bool all = ev::wait_all_for({e_slow, e_fast}, 30s);
  std::printf("after gate.set(): wait_all_for(30s) -> %s\n", all ? "true" : "false");
  return !done && first == 1u && all ? 0 : 1;
}
