// An event class of your own (tutorial point 12): 08_custom_event.hpp has the class and the
// scenario, which `eventide demo` runs too.
#include "08_custom_event.hpp"

int main() {
  return examples::run_example([](examples::Narrator& n) {
    examples::custom_event(n, eventide::default_device(), 1024);
  });
}
