#include "backends/cpu/blas.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "core/parker.hpp"
#include "core/runtime.hpp"
#include "eventide/errors.hpp"

namespace eventide::backends::cpu::blas {

namespace {

// The kernel family for this CPU, or null to let OpenBLAS decide.
const char* core_for_this_cpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return nullptr;
}

template <class F>
F symbol(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (!p) {
    throw DeviceError(std::string("OpenBLAS has no symbol ") + name, "dlsym");
  }
  return reinterpret_cast<F>(p);
}

Api load() {
  Api a;
  if (std::getenv("OPENBLAS_CORETYPE")) {
    a.chosen_by = std::string("OPENBLAS_CORETYPE=") + std::getenv("OPENBLAS_CORETYPE") + " (set by the user)";
  } else if (const char* core = core_for_this_cpu()) {
    // Before OpenBLAS loads: it reads the variable in its constructor.
    setenv("OPENBLAS_CORETYPE", core, 0);
    a.chosen_by = std::string("OPENBLAS_CORETYPE=") + core + " (set by eventide from the CPU's features)";
  } else {
    a.chosen_by = "OpenBLAS's own CPU detection";
  }
  void* lib = nullptr;
  std::string tried;
  for (const char* name : {"libopenblas.so.0", EVENTIDE_OPENBLAS_PATH}) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL))) break;
    tried += std::string(tried.empty() ? "" : "; ") + dlerror();
  }
  if (!lib) throw DeviceError("cannot load OpenBLAS (install libopenblas0): " + tried, "dlopen");
  // OpenBLAS's own fork handler hangs while a matmul runs: eventide's must run before it, to
  // let running matmuls finish first, so they are installed again, after OpenBLAS's.
  detail::install_fork_handlers();
  a.sgemm = symbol<decltype(a.sgemm)>(lib, "cblas_sgemm");
  a.dgemm = symbol<decltype(a.dgemm)>(lib, "cblas_dgemm");
  a.config = symbol<char* (*)()>(lib, "openblas_get_config")();
  a.core = symbol<char* (*)()>(lib, "openblas_get_corename")();
  a.threads = symbol<int (*)()>(lib, "openblas_get_num_threads")();
  return a;
}

}  // namespace

const Api& api() {
  static const Api a = load();
  return a;
}

namespace {
std::atomic<std::uint32_t> g_calls{0};
}  // namespace

CallScope::CallScope() noexcept { g_calls.fetch_add(1, std::memory_order_acq_rel); }

CallScope::~CallScope() {
  if (g_calls.fetch_sub(1, std::memory_order_acq_rel) == 1) detail::futex_wake_all(g_calls);
}

void wait_for_calls() noexcept {
  for (std::uint32_t n; (n = g_calls.load(std::memory_order_acquire)) != 0;) {
    detail::futex_wait(g_calls, n, std::nullopt);
  }
}

void forget_calls() noexcept { g_calls.store(0, std::memory_order_release); }

}  // namespace eventide::backends::cpu::blas
