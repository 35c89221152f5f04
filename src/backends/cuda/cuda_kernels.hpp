// The CUDA kernels of the ops that are not library calls, launched on a stream. Plain C++
// declarations: callers need no CUDA compiler. Each throws DeviceError if the launch fails.
// Built for sm_90 with PTX for other GPUs (src/CMakeLists.txt).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "eventide/dtype.hpp"
#include "ops/philox.hpp"

namespace eventide::backends::cuda::kernels {

// What binary() computes, elementwise: a + b, a - b, a * b or a / b (floating dtypes).
enum class BinaryKind { add, sub, mul, div };
// What random() draws: uniform in [0, 1), or standard normal.
enum class Distribution { uniform, normal };

void fill(void* out, std::int64_t n, DType dtype, double value, cudaStream_t stream);
void binary(BinaryKind kind, const void* a, const void* b, void* out, std::int64_t n, DType dtype,
            cudaStream_t stream);
// out = in converted from `from` to `to` (floating dtypes), rounded to nearest even.
void cast(const void* in, DType from, void* out, DType to, std::int64_t n, cudaStream_t stream);
// Philox numbers laid out as on the CPU (ops/philox.hpp); f16 and bf16 are drawn as f32. A
// draw whose cell is set reads its seed and base from there (device memory) when it runs.
void random(void* out, std::int64_t n, DType dtype, Distribution distribution, const ops::philox::Draw& draw,
            cudaStream_t stream);

// Makes CUDA load the kernels' code into the current device's context now
// (cudaFuncGetAttributes). Otherwise it is loaded at the first launch, and loading a module
// waits until the device is idle: behind another library's queued work, the first op would
// block its caller for as long (seen on the H200: 140-360 ms behind PyTorch's matmuls, with
// lazy and eager loading alike). False if CUDA refused (the launch then reports it).
bool load() noexcept;

// A kernel that spins `ns` nanoseconds by the GPU's clock and writes its own start and end
// (%globaltimer) to stamps[0..1]: the timing's calibration holds a stream busy with it, and
// tests time it. Test-only: a kernel that traps, leaving the context with a sticky error.
void spin(std::int64_t ns, unsigned long long* stamps, cudaStream_t stream);
void trap(cudaStream_t stream);

}  // namespace eventide::backends::cuda::kernels
