// One event for several ops (tutorial point 2): the scenario is in
// 09_multiple_ops_one_event.hpp, which `eventide demo` runs too.
#include "09_multiple_ops_one_event.hpp"

int main() {
  return examples::run_example([](examples::Narrator& n) {
    examples::one_event_several_ops(n, eventide::default_device(), 512);
  });
}
