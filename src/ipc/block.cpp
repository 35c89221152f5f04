// The shared block's names, handles and messages (block.hpp).
#include "ipc/block.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>

#include "eventide/errors.hpp"

namespace eventide::ipc::detail {

Mapping::~Mapping() { munmap(block_, sizeof(Block)); }

std::string errno_text(int e) { return std::string(std::strerror(e)); }

std::string new_block_name() {
  static std::atomic<std::uint64_t> counter{0};
  std::random_device rd;
  char buf[96];
  std::snprintf(buf, sizeof buf, "/eventide.%d.%llu.%08x", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(++counter), static_cast<unsigned>(rd()));
  return buf;
}

namespace {

bool valid_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

}  // namespace

std::string name_from_handle(const std::string& handle) {
  auto bad = [&](const std::string& why) -> std::string {
    std::string shown = handle.size() > 80 ? handle.substr(0, 80) + "..." : handle;
    throw InvalidArgument("import_event: '" + shown + "' is not an eventide event handle (" + why +
                          "); handles look like 'eventide-ipc:1:eventide.4242.1.9f3a0c1d' and come "
                          "from ExportedEvent::handle()");
  };
  if (handle.rfind("eventide-ipc:", 0) != 0) return bad("it does not start with 'eventide-ipc:'");
  if (handle.rfind(kHandlePrefix, 0) != 0) {
    return bad("it is of another version of eventide's handles; this one reads version 1");
  }
  std::string rest = handle.substr(kHandlePrefix.size());
  if (rest.empty() || rest.size() > 200) return bad("its name is empty or too long");
  if (!std::all_of(rest.begin(), rest.end(), valid_name_char)) {
    return bad("its name has characters other than letters, digits, '.', '_' and '-'");
  }
  if (rest.rfind("eventide.", 0) != 0) return bad("its name does not start with 'eventide.'");
  return "/" + rest;
}

std::string handle_of(const std::string& name) { return std::string(kHandlePrefix) + name.substr(1); }

std::exception_ptr remote_failure(const Block& b, const std::string& handle) {
  std::uint32_t n = std::min<std::uint32_t>(b.error_bytes, sizeof b.error);
  std::string text(b.error, n);
  return std::make_exception_ptr(OpError("an event imported from process " + std::to_string(b.pid) +
                                             " failed there: " + text,
                                         "import of " + handle));
}

std::exception_ptr exporter_died(pid_t pid, const std::string& handle) {
  return std::make_exception_ptr(
      OpError("process " + std::to_string(pid) + ", which exported this event (" + handle +
                  "), exited or was killed before the event finished: nothing can finish it now",
              "import of " + handle));
}

}  // namespace eventide::ipc::detail
