#include "backends/cuda/cuda_matmul.hpp"

#include <cublasLt.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "eventide/errors.hpp"

namespace eventide::backends::cuda {

namespace {

void check_lt(cublasStatus_t status, const char* call, const std::string& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw DeviceError(std::string(call) + " failed " + what + ": " + cublasLtGetStatusName(status) +
                        " (" + cublasLtGetStatusString(status) + ")",
                    call, status);
}

struct Types {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;
};

Types types_for(DType dtype, bool tf32) {
  switch (dtype) {
    case DType::f32: return {CUDA_R_32F, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::f16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::f64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    default: break;
  }
  throw InvalidArgument("matmul does not support " + std::string(name(dtype)) +
                        " on cuda (supported: f32, f16, bf16, f64)");
}

// One cached plan: everything cublasLtMatmul needs but the pointers.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

using Key = std::tuple<int, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, bool>;

struct Cache {
  std::mutex mu;
  std::map<int, cublasLtHandle_t> handles;
  std::map<Key, std::unique_ptr<Plan>> plans;
};

Cache& cache() {
  static auto* c = new Cache();  // plans live as long as the process
  return *c;
}

cublasLtMatrixLayout_t layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols,
                              std::int64_t batch) {
  cublasLtMatrixLayout_t l = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&l, type, static_cast<std::uint64_t>(rows),
                                      static_cast<std::uint64_t>(cols), rows),
           "cublasLtMatrixLayoutCreate", "");
  if (batch > 1) {
    int count = static_cast<int>(batch);
    std::int64_t stride = rows * cols;
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                     sizeof stride);
  }
  return l;
}

std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle, MatmulShape s, DType dtype, bool tf32,
                                std::size_t workspace_bytes) {
  const Types t = types_for(dtype, tf32);
  auto plan = std::make_unique<Plan>();
  check_lt(cublasLtMatmulDescCreate(&plan->desc, t.compute, t.scale), "cublasLtMatmulDescCreate", "");
  // Column-major view of row-major memory: C^T (n, m) = B^T (n, k) @ A^T (k, m).
  plan->a = layout(t.data, s.n, s.k, s.batch);  // B
  plan->b = layout(t.data, s.k, s.m, s.batch);  // A
  plan->c = layout(t.data, s.n, s.m, s.batch);
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", "");
  std::uint64_t ws = workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->c,
                                                     plan->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  check_lt(st, "cublasLtMatmulAlgoGetHeuristic", "");
  if (found == 0) {
    throw DeviceError("cuBLASLt has no algorithm for matmul of (" + std::to_string(s.batch) + ", " +
                          std::to_string(s.m) + ", " + std::to_string(s.k) + ") @ (" +
                          std::to_string(s.k) + ", " + std::to_string(s.n) + ") " +
                          std::string(name(dtype)),
                      "cublasLtMatmulAlgoGetHeuristic");
  }
  plan->algo = result.algo;
  return plan;
}

}  // namespace

void matmul(int device, cudaStream_t stream, const void* a, const void* b, void* c, MatmulShape s,
            DType dtype, bool tf32, void* workspace, std::size_t workspace_bytes) {
  if (s.m == 0 || s.n == 0 || s.batch == 0) return;
  Cache& cc = cache();
  cublasLtHandle_t handle;
  Plan* plan;
  {
    std::lock_guard lock(cc.mu);
    auto& h = cc.handles[device];
    if (!h) check_lt(cublasLtCreate(&h), "cublasLtCreate", "on cuda:" + std::to_string(device));
    handle = h;
    Key key{device, s.batch, s.m, s.k, s.n, static_cast<int>(dtype), tf32};
    auto& p = cc.plans[key];
    if (!p) p = make_plan(handle, s, dtype, tf32, workspace_bytes);
    plan = p.get();
  }
  // The call's description, for a failure's message only.
  auto what = [&] {
    return "for matmul (" + std::to_string(s.batch) + " x " + std::to_string(s.m) + " x " +
           std::to_string(s.k) + " x " + std::to_string(s.n) + ", " + std::string(name(dtype)) +
           ") on cuda:" + std::to_string(device);
  };
  if (s.k == 0) {
    // Nothing to accumulate: C is zero (cuBLASLt with k = 0 is not defined for every algo).
    cudaError_t st = cudaMemsetAsync(c, 0, static_cast<std::size_t>(s.batch * s.m * s.n) * itemsize(dtype), stream);
    if (st != cudaSuccess) throw DeviceError(std::string("cudaMemsetAsync failed ") + what(), "cudaMemsetAsync", st);
    return;
  }
  if (dtype == DType::f64) {
    const double alpha = 1.0, beta = 0.0;
    if (cublasStatus_t st = cublasLtMatmul(handle, plan->desc, &alpha, b, plan->a, a, plan->b, &beta, c,
                                           plan->c, c, plan->c, &plan->algo, workspace, workspace_bytes, stream);
        st != CUBLAS_STATUS_SUCCESS) {
      check_lt(st, "cublasLtMatmul", what());
    }
  } else {
    const float alpha = 1.0f, beta = 0.0f;
    if (cublasStatus_t st = cublasLtMatmul(handle, plan->desc, &alpha, b, plan->a, a, plan->b, &beta, c,
                                           plan->c, c, plan->c, &plan->algo, workspace, workspace_bytes, stream);
        st != CUBLAS_STATUS_SUCCESS) {
      check_lt(st, "cublasLtMatmul", what());
    }
  }
}

}  // namespace eventide::backends::cuda
