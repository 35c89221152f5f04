// Beyond the tutorial, a UserEvent as a gate: the scenario is in 10_user_event_gate.hpp, which
// `eventide demo` runs too.
#include "10_user_event_gate.hpp"

int main() {
  return examples::run_example([](examples::Narrator& n) {
    examples::user_event_gate(n, eventide::default_device(), 512);
  });
}
