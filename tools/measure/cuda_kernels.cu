// Kernels for cuda_measure.cpp: one that holds until the host releases it (to time how long
// the host takes to notice the end of GPU work), and one that spins a set time and records
// its own start and end (to check op times against the kernel's own clock).
#include "cuda_kernels.hpp"

namespace eventide::bench::cuda::kernels {

namespace {

__device__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void hold_kernel(const volatile std::uint64_t* gate, std::uint64_t value,
                            volatile std::uint64_t* done) {
  while (*gate < value) {
  }
  __threadfence_system();
  if (done) *done = value;
}

__global__ void spin_kernel(long long ns, unsigned long long* stamps) {
  unsigned long long start = globaltimer(), now = start;
  while (static_cast<long long>(now - start) < ns) now = globaltimer();
  stamps[0] = start;
  stamps[1] = globaltimer();
}

__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

}  // namespace

void add(const float* a, const float* b, float* out, int n, cudaStream_t s) {
  constexpr int kThreads = 256;
  add_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, s>>>(a, b, out, n);
}

void hold(const std::uint64_t* gate, std::uint64_t value, std::uint64_t* done, cudaStream_t s) {
  hold_kernel<<<1, 1, 0, s>>>(gate, value, done);
}

void spin(long long ns, unsigned long long* stamps, cudaStream_t s) {
  spin_kernel<<<1, 1, 0, s>>>(ns, stamps);
}

}  // namespace eventide::bench::cuda::kernels
