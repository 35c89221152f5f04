// The GPU tests' skip: where the device is not available (CI has no GPU), the test is skipped
// with the reason eventide gives, and where to run it.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include <eventide/eventide.hpp>

namespace eventide_test {

inline std::string why_unavailable(eventide::Device device) {
  try {
    eventide::device_info(device);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "?";
}

}  // namespace eventide_test

// GTEST_SKIP returns from the test body: a macro, so that it does.
#define EVENTIDE_REQUIRE_DEVICE(device)                                                        \
  do {                                                                                         \
    if (!eventide::is_available(device)) {                                                     \
      GTEST_SKIP() << "no " << (device).str() << " here (" << eventide_test::why_unavailable(device) \
                   << "): run scripts/gpu-check.sh on a machine with a GPU";                   \
    }                                                                                          \
  } while (0)
