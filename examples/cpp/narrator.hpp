// How the examples tell what they see. A scenario says each step's outcome and checks what the
// tutorial promises; the example programs print the lines and fail on the first broken
// promise, and `eventide demo` runs the very same scenarios with a narrator of its own (its
// indented report, its FAILED sections). So the demo shows the examples' code, not a copy.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace examples {

class Narrator {
 public:
  virtual ~Narrator() = default;
  // One line of what the scenario saw.
  virtual void say(const std::string& line) = 0;
  // A promise of the tutorial's: throws (the narrator's own error) if it is broken.
  virtual void check(bool kept, const std::string& promise) = 0;
};

// printf into a std::string.
__attribute__((format(printf, 1, 2))) inline std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

inline const char* yes_no(bool b) { return b ? "true" : "false"; }

// The example programs' narrator: lines on stdout; a broken promise is an exception.
class PrintNarrator final : public Narrator {
 public:
  void say(const std::string& line) override { std::printf("%s\n", line.c_str()); }
  void check(bool kept, const std::string& promise) override {
    if (!kept) throw std::runtime_error("broken promise: " + promise);
  }
};

// main() of an example: runs `scenario` with a PrintNarrator; 0 if every promise held.
template <class Scenario>
int run_example(Scenario&& scenario) {
  try {
    PrintNarrator narrator;
    scenario(narrator);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: %s\n", e.what());
    return 1;
  }
}

}  // namespace examples
