// NVTX ranges: what eventide tells Nsight Systems (or any NVTX tool) it is doing, in the
// "eventide" NVTX domain. On builds with EVENTIDE_WITH_NVTX (CMake finds NVTX3's header-only
// C API, nvtx3/nvToolsExt.h, and the option is ON), an op's launch, a host-run op's run (a
// CPU worker's), a host wait (wait/synchronize/wait_all/wait_any) and a callback's run are
// each a range on the calling thread, named like the op ("matmul") or the call; a user's
// eventide::Range is one too.
// Without it, everything here compiles to nothing.
//
// Cost: NVTX3 calls a tool through a table of function pointers that its first call fills in
// (it loads the library named by NVTX_INJECTION64_PATH, if any); with no tool attached every
// pointer is then null, and a range is no call: one load of the pointer and a branch, plus
// the thread's lock count (below) and the domain's static guard, a load and a branch each,
// and a small attribute struct filled on the stack (checked in the disassembly of
// Event::wait). The domain is created once, at the first range.
//
// Locks: a range's push and pop call into the tool, which may do anything (allocate, take its
// own locks, even call back into the program), so a range is never opened or closed while the
// calling thread holds a runtime lock (core/runtime_lock.hpp): every Scope is declared
// before the locks of its function are taken, and so destroyed after they are let go. A scope
// also asks the thread's count of runtime locks (one thread-local load) and leaves its range
// out if one is held, so that a caller reached under a lock cannot break the rule. The
// tool's first call (loading it) happens at the first range, outside any lock as well.
//
// Thread-safety: NvtxScope pushes and pops on the calling thread (a scope lives on one
// thread's stack); start_range/end_range (eventide::Range) may end on another thread.
#pragma once

#include <cstdint>

#include "core/runtime_lock.hpp"

#if EVENTIDE_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace eventide::detail::nvtx {

#if EVENTIDE_WITH_NVTX

// The "eventide" domain (null while no tool is attached, which NVTX accepts).
inline nvtxDomainHandle_t domain() noexcept {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("eventide");
  return d;
}

inline nvtxEventAttributes_t attributes(const char* name) noexcept {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;  // the tool copies it: it need not outlive the call
  return a;
}

// A push/pop range for the scope of a C++ block, on the calling thread.
class Scope {
 public:
  explicit Scope(const char* name) noexcept : open_(runtime_locks_held() == 0) {
    if (!open_) [[unlikely]] return;
    const nvtxEventAttributes_t a = attributes(name);
    nvtxDomainRangePushEx(domain(), &a);
  }
  ~Scope() {
    if (open_) nvtxDomainRangePop(domain());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool open_;
};

// A start/end range, which may end on another thread and need not nest (eventide::Range).
// 0: left out (a runtime lock held, or no tool: NVTX then returns 0 too).
inline std::uint64_t start_range(const char* name) noexcept {
  if (runtime_locks_held() != 0) [[unlikely]] return 0;
  const nvtxEventAttributes_t a = attributes(name);
  return nvtxDomainRangeStartEx(domain(), &a);
}
// (Under a runtime lock, the range is left open in the tool rather than calling it there.)
inline void end_range(std::uint64_t id) noexcept {
  if (id != 0 && runtime_locks_held() == 0) nvtxDomainRangeEnd(domain(), id);
}

inline constexpr bool kEnabled = true;

#else

class Scope {
 public:
  explicit Scope(const char*) noexcept {}
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
};
inline std::uint64_t start_range(const char*) noexcept { return 0; }
inline void end_range(std::uint64_t) noexcept {}

inline constexpr bool kEnabled = false;

#endif

}  // namespace eventide::detail::nvtx
