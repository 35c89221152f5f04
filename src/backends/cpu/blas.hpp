// OpenBLAS, loaded at first use rather than linked.
//
// OpenBLAS picks its kernels from the CPU model once, when it loads, and falls back to its
// oldest (SSE3 "Prescott") kernels on models it does not know: Debian's 0.3.21 on this
// machine's Xeon runs sgemm at 30 GFLOP/s instead of ~200 (bench/matmul_bench.cpp). Loading
// it here lets eventide name the kernel family from the CPU's features first
// (OPENBLAS_CORETYPE, only when the user has not set it: SkylakeX with AVX-512, Haswell with
// AVX2). In a process that loaded OpenBLAS already (NumPy first), that instance is used as
// it is. Thread-safety: api() from any thread.
#pragma once

#include <string>

namespace eventide::backends::cpu::blas {

enum Order { kRowMajor = 101 };
enum Transpose { kNoTrans = 111 };

struct Api {
  void (*sgemm)(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a,
                int lda, const float* b, int ldb, float beta, float* c, int ldc);
  void (*dgemm)(int order, int ta, int tb, int m, int n, int k, double alpha, const double* a,
                int lda, const double* b, int ldb, double beta, double* c, int ldc);
  std::string config;     // openblas_get_config()
  std::string core;       // openblas_get_corename(): the kernel family in use
  int threads = 0;
  std::string chosen_by;  // "OPENBLAS_CORETYPE=SkylakeX set by eventide", ...
};

// Loads OpenBLAS on first use; DeviceError if it cannot.
const Api& api();

// A BLAS call in progress (held around every call into OpenBLAS). At process exit, OpenBLAS's
// own library teardown hangs forever if a call still runs on another thread, so the runtime
// waits for the calls in progress to end (wait_for_calls) even past its grace period: a
// matmul always ends, a hang would not.
class CallScope {
 public:
  CallScope() noexcept;
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
};
// Blocks until no BLAS call is in progress.
void wait_for_calls() noexcept;
// In the child of a fork: the parent's calls in progress are not the child's.
void forget_calls() noexcept;

}  // namespace eventide::backends::cpu::blas
