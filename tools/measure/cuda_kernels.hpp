// Kernels for cuda_measure.cpp, launched on a given stream (compiled by nvcc in
// cuda_kernels.cu; this header is plain C++).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace eventide::bench::cuda::kernels {

// Spins until *gate >= value (host-written pinned memory), then writes *done = value (when
// `done` is not null): GPU work that ends exactly when the host says.
void hold(const std::uint64_t* gate, std::uint64_t value, std::uint64_t* done, cudaStream_t s);

// Spins `ns` nanoseconds of the GPU's %globaltimer and writes its own start and end to
// stamps[0] and stamps[1].
void spin(long long ns, unsigned long long* stamps, cudaStream_t s);

// out[i] = a[i] + b[i] for i < n: the same elementwise add as eventide's f32 add, launched
// raw (<<<>>>), for the launch path's anchor.
void add(const float* a, const float* b, float* out, int n, cudaStream_t s);

}  // namespace eventide::bench::cuda::kernels
