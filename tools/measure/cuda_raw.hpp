// tools/measure/cuda_raw.hpp: owners of the raw CUDA objects that the CUDA measurements'
// anchors use (streams, events, memory, cuBLASLt called directly), shared by
// cuda_measure.cpp and cuda_graph_measure.cpp. Errors throw std::runtime_error naming the
// call; destructors ignore them (they never throw).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include <eventide/eventide.hpp>

namespace eventide::bench::cuda {

inline void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorName(status) + " (" +
                             cudaGetErrorString(status) + ")");
  }
}

inline void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(call) + " failed: cuBLAS status " +
                             std::to_string(static_cast<int>(status)));
  }
}

#define EVENTIDE_BENCH_CHECK(call) ::eventide::bench::cuda::check((call), #call)

// Owners of the raw CUDA objects the anchors use. Destructors ignore errors (never throw).
struct RawStream {
  cudaStream_t s = nullptr;
  RawStream() { EVENTIDE_BENCH_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~RawStream() {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  RawStream(const RawStream&) = delete;
  RawStream& operator=(const RawStream&) = delete;
};

struct RawEvent {
  cudaEvent_t e = nullptr;
  explicit RawEvent(unsigned flags = cudaEventDefault) {
    EVENTIDE_BENCH_CHECK(cudaEventCreateWithFlags(&e, flags));
  }
  ~RawEvent() { cudaEventDestroy(e); }
  RawEvent(const RawEvent&) = delete;
  RawEvent& operator=(const RawEvent&) = delete;
};

// Pinned, mapped host words that the host writes and kernels read (gates), and the reverse.
struct Pinned {
  std::uint64_t* host = nullptr;
  Pinned() {
    EVENTIDE_BENCH_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), 4096, cudaHostAllocMapped));
    std::memset(host, 0, 4096);
  }
  ~Pinned() { cudaFreeHost(host); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  // Word i, 64 bytes apart so that gate and reply do not share a cache line.
  volatile std::uint64_t& at(int i) { return *reinterpret_cast<volatile std::uint64_t*>(host + 8 * i); }
  std::uint64_t* device_ptr(int i) {
    void* p = nullptr;
    EVENTIDE_BENCH_CHECK(cudaHostGetDevicePointer(&p, host + 8 * i, 0));
    return static_cast<std::uint64_t*>(p);
  }
};

struct DeviceMemory {
  void* p = nullptr;
  explicit DeviceMemory(std::size_t bytes) { EVENTIDE_BENCH_CHECK(cudaMalloc(&p, bytes)); }
  ~DeviceMemory() { cudaFree(p); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
};

inline void use_device(Device gpu) { EVENTIDE_BENCH_CHECK(cudaSetDevice(gpu.index())); }


// cublasLtMatmul called directly: the heuristic's first algorithm for these layouts, with the
// workspace eventide gives it, on row-major n x n matrices (as C = B^T A^T in column-major).
class DirectLt {
 public:
  DirectLt(int n, ::eventide::DType dt, bool tf32) {
    const cudaDataType_t type =
        dt == ::eventide::DType::f32 ? CUDA_R_32F : dt == ::eventide::DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const cublasComputeType_t compute =
        dt == ::eventide::DType::f32 && tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    EVENTIDE_BENCH_CHECK(cublasLtCreate(&handle_));
    EVENTIDE_BENCH_CHECK(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F));
    EVENTIDE_BENCH_CHECK(cublasLtMatrixLayoutCreate(&layout_, type, n, n, n));
    EVENTIDE_BENCH_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
    cublasLtMatmulPreference_t pref = nullptr;
    EVENTIDE_BENCH_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    std::size_t ws = kWorkspaceBytes;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulAlgoGetHeuristic(handle_, desc_, layout_, layout_, layout_, layout_,
                                          pref, 1, &result, &found);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    check(st, "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0) throw std::runtime_error("cublasLtMatmulAlgoGetHeuristic found no algorithm");
    algo_ = result.algo;
  }
  ~DirectLt() {
    cudaFree(workspace_);
    if (layout_) cublasLtMatrixLayoutDestroy(layout_);
    if (desc_) cublasLtMatmulDescDestroy(desc_);
    if (handle_) cublasLtDestroy(handle_);
  }
  DirectLt(const DirectLt&) = delete;
  DirectLt& operator=(const DirectLt&) = delete;

  void run(const void* a, const void* b, void* c, cudaStream_t s) {
    const float alpha = 1, beta = 0;
    EVENTIDE_BENCH_CHECK(cublasLtMatmul(handle_, desc_, &alpha, b, layout_, a, layout_, &beta, c,
                                        layout_, c, layout_, &algo_, workspace_, kWorkspaceBytes, s));
  }

 private:
  static constexpr std::size_t kWorkspaceBytes = 32u << 20;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t layout_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  void* workspace_ = nullptr;
};

// Restores the TF32 setting a measurement changed, also when it throws.
class Tf32Setting {
 public:
  explicit Tf32Setting(bool allow) : saved_(::eventide::allow_tf32()) { ::eventide::set_allow_tf32(allow); }
  ~Tf32Setting() { ::eventide::set_allow_tf32(saved_); }
  Tf32Setting(const Tf32Setting&) = delete;
  Tf32Setting& operator=(const Tf32Setting&) = delete;

 private:
  bool saved_;
};


}  // namespace eventide::bench::cuda
