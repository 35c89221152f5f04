// The commands of the `eventide` program, one per source file; main.cpp parses argv and
// calls them. Each returns the process exit status and writes to stdout (errors to stderr).
#pragma once

#include <eventide/eventide.hpp>

namespace eventide::cli {

// Exit statuses: 0 success, 1 something the command checked went wrong, 2 bad usage (the
// usual convention of command-line tools, so scripts can tell "wrong call" from "failed").
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// Runs every scenario of the seed tutorial on `device`, printing what happened; kExitOk when
// every scenario passed its checks.
int run_demo(Device device);

// Lists the devices, the default device and the version.
int run_info();

}  // namespace eventide::cli
