// matmul on CUDA through cuBLASLt.
//
// eventide's tensors are row-major; cuBLASLt's matrices column-major. A row-major (m, k) @
// (k, n) is the column-major (n, k) @ (k, m) of the same memory with the operands swapped,
// so no transposition is ever materialised. Batches are strided. Accumulation is f32 for
// f32, f16 and bf16 inputs (f64 for f64); TF32 tensor cores for f32 only when the user allows
// it (set_allow_tf32), as PyTorch does. The plan of each shape (descriptors, layouts, the
// heuristic's algorithm) is made once and cached.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "eventide/dtype.hpp"

namespace eventide::backends::cuda {

// Workspace each stream gives cuBLASLt.
inline constexpr std::size_t kMatmulWorkspace = std::size_t{32} << 20;

struct MatmulShape {
  std::int64_t batch, m, k, n;
};

// Launches c = a @ b on `stream` (`device` current). DeviceError if cuBLASLt fails or finds
// no algorithm.
void matmul(int device, cudaStream_t stream, const void* a, const void* b, void* c,
            MatmulShape shape, DType dtype, bool tf32, void* workspace, std::size_t workspace_bytes);

}  // namespace eventide::backends::cuda
