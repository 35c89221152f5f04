#include "backends/cuda/cuda_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

#include "backends/cuda/cuda_api.hpp"
#include "eventide/errors.hpp"
#include "ops/philox.hpp"

namespace eventide::backends::cuda::kernels {

namespace {

constexpr int kThreads = 256;
// Enough blocks to fill the GPU, not one per element: the kernels stride over the rest. This
// many per multiprocessor, and this many multiprocessors where CUDA cannot say.
constexpr int kBlocksPerSm = 8;
constexpr int kSmsIfUnknown = 80;

int blocks_for(std::int64_t n) {
  static const int max_blocks = [] {
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    return (sms > 0 ? sms : kSmsIfUnknown) * kBlocksPerSm;
  }();
  std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > max_blocks ? max_blocks : b));
}

void check_launch(const char* kernel) {
  if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) {
    check(status, "cudaLaunchKernel", std::string("(") + kernel + ")");  // the text only then
  }
}

template <class T>
__device__ T from_float(float v);
template <> __device__ float from_float<float>(float v) { return v; }
template <> __device__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <class T>
__device__ float to_float(T v);
template <> __device__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

// Elements as double and back, rounded once to nearest even (a double rounded to float first
// and then to 16 bits could round twice: 1 + 2^-8 + 2^-40 would become bf16 1.0, not 1.0078125).
template <class T>
__device__ double load_as_double(T v) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
    return static_cast<double>(to_float(v));
  } else {
    return static_cast<double>(v);
  }
}
template <class T>
__device__ T store_from_double(double v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __double2half(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __double2bfloat16(v);
  } else {
    return static_cast<T>(v);
  }
}

template <class From, class To>
__global__ void cast_kernel(const From* in, To* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    out[i] = store_from_double<To>(load_as_double(in[i]));
  }
}

template <class T>
__global__ void fill_kernel(T* out, std::int64_t n, T value) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    out[i] = value;
  }
}

// Integers wrap around (as on the CPU) through unsigned arithmetic; half types compute in f32.
template <class T>
__device__ T arith(BinaryKind kind, T a, T b) {
  switch (kind) {
    case BinaryKind::add: return a + b;
    case BinaryKind::sub: return a - b;
    case BinaryKind::mul: return a * b;
    default: return a / b;
  }
}

// (Division is of floating types only: the ops layer refuses integers.)
template <class T>
__device__ T apply(BinaryKind kind, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return kind == BinaryKind::div ? T{} : static_cast<T>(arith<U>(kind, static_cast<U>(a), static_cast<U>(b)));
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return arith(kind, a, b);
  } else {
    return from_float<T>(arith(kind, to_float(a), to_float(b)));
  }
}

template <class T>
__global__ void binary_kernel(BinaryKind kind, const T* a, const T* b, T* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    out[i] = apply(kind, a[i], b[i]);
  }
}

namespace px = ops::philox;

// Uniform f32-layout numbers (and their f16/bf16 roundings): element i is value i % 4 of
// block offset + i / 4 (ops/philox.hpp's layout, as on the CPU).
template <class T>
__global__ void uniform32_kernel(T* out, std::int64_t n, px::Draw draw) {
  const std::uint64_t seed = draw.key(), offset = draw.first_block();
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    float v[4];
    px::uniform_f32_block(seed, offset + static_cast<std::uint64_t>(i / 4), v);
    out[i] = from_float<T>(v[i % 4]);
  }
}

__global__ void uniform64_kernel(double* out, std::int64_t n, px::Draw draw) {
  const std::uint64_t seed = draw.key(), offset = draw.first_block();
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    double v[2];
    px::uniform_f64_block(seed, offset + static_cast<std::uint64_t>(i / 2), v);
    out[i] = v[i % 2];
  }
}

// Box-Muller: the pair (2j, 2j+1) from block offset + j.
template <class T>
__global__ void normal32_kernel(T* out, std::int64_t n, px::Draw draw) {
  const std::uint64_t seed = draw.key(), offset = draw.first_block();
  const std::int64_t pairs = (n + 1) / 2;
  for (std::int64_t j = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; j < pairs;
       j += std::int64_t{gridDim.x} * blockDim.x) {
    float first, second;
    px::normal_pair<float>(seed, offset + static_cast<std::uint64_t>(j), first, second);
    out[2 * j] = from_float<T>(first);
    if (2 * j + 1 < n) out[2 * j + 1] = from_float<T>(second);
  }
}

__global__ void normal64_kernel(double* out, std::int64_t n, px::Draw draw) {
  const std::uint64_t seed = draw.key(), offset = draw.first_block();
  const std::int64_t pairs = (n + 1) / 2;
  for (std::int64_t j = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; j < pairs;
       j += std::int64_t{gridDim.x} * blockDim.x) {
    double first, second;
    px::normal_pair<double>(seed, offset + static_cast<std::uint64_t>(j), first, second);
    out[2 * j] = first;
    if (2 * j + 1 < n) out[2 * j + 1] = second;
  }
}

__device__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(long long ns, unsigned long long* stamps) {
  unsigned long long start = globaltimer(), now = start;
  while (static_cast<long long>(now - start) < ns) now = globaltimer();
  stamps[0] = start;
  stamps[1] = globaltimer();
}

__global__ void trap_kernel() { __trap(); }

template <class F>
void by_dtype(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::i32: return f(std::int32_t{});
    case DType::i64: return f(std::int64_t{});
    case DType::f16: return f(__half{});
    case DType::bf16: return f(__nv_bfloat16{});
  }
  throw InvalidArgument(std::string(op) + ": unknown dtype");
}

// The floating dtypes only: cast's pairs (16 kernels, not 36).
template <class F>
void by_floating(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::f16: return f(__half{});
    case DType::bf16: return f(__nv_bfloat16{});
    default: throw InvalidArgument("cast: needs floating dtypes");
  }
}

}  // namespace

void fill(void* out, std::int64_t n, DType dtype, double value, cudaStream_t stream) {
  if (n == 0) return;
  by_dtype(dtype, "fill", [&](auto zero) {
    using T = decltype(zero);
    T v;
    if constexpr (std::is_same_v<T, __half>) {
      v = __float2half_rn(static_cast<float>(value));
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      v = __float2bfloat16_rn(static_cast<float>(value));
    } else {
      v = static_cast<T>(value);
    }
    fill_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(out), n, v);
  });
  check_launch("fill");
}

void binary(BinaryKind kind, const void* a, const void* b, void* out, std::int64_t n, DType dtype,
            cudaStream_t stream) {
  if (n == 0) return;
  const char* op = kind == BinaryKind::add ? "add" : kind == BinaryKind::sub ? "sub" : kind == BinaryKind::mul ? "mul" : "div";
  by_dtype(dtype, op, [&](auto zero) {
    using T = decltype(zero);
    binary_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        kind, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n);
  });
  check_launch(op);
}

void cast(const void* in, DType from, void* out, DType to, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  by_floating(from, [&](auto from_zero) {
    by_floating(to, [&](auto to_zero) {
      using From = decltype(from_zero);
      using To = decltype(to_zero);
      cast_kernel<From, To><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const From*>(in),
                                                                    static_cast<To*>(out), n);
    });
  });
  check_launch("cast");
}

void random(void* out, std::int64_t n, DType dtype, Distribution distribution, const ops::philox::Draw& draw,
            cudaStream_t stream) {
  if (n == 0) return;
  const bool normal = distribution == Distribution::normal;
  const std::int64_t threads_needed = normal ? (n + 1) / 2 : n;
  const int blocks = blocks_for(threads_needed);
  switch (dtype) {
    case DType::f32:
      normal ? normal32_kernel<float><<<blocks, kThreads, 0, stream>>>(static_cast<float*>(out), n, draw)
             : uniform32_kernel<float><<<blocks, kThreads, 0, stream>>>(static_cast<float*>(out), n, draw);
      break;
    case DType::f16:
      normal ? normal32_kernel<__half><<<blocks, kThreads, 0, stream>>>(static_cast<__half*>(out), n, draw)
             : uniform32_kernel<__half><<<blocks, kThreads, 0, stream>>>(static_cast<__half*>(out), n, draw);
      break;
    case DType::bf16:
      normal ? normal32_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out), n, draw)
             : uniform32_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out), n, draw);
      break;
    case DType::f64:
      normal ? normal64_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<double*>(out), n, draw)
             : uniform64_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<double*>(out), n, draw);
      break;
    default:
      throw InvalidArgument(std::string(normal ? "randn" : "rand") + ": needs a floating dtype");
  }
  check_launch(normal ? "randn" : "rand");
}

bool load() noexcept {
  // One function per kernel template the ops use first; the module comes with the first.
  const void* kernels[] = {
      reinterpret_cast<const void*>(&fill_kernel<float>),
      reinterpret_cast<const void*>(&binary_kernel<float>),
      reinterpret_cast<const void*>(&cast_kernel<float, __half>),
      reinterpret_cast<const void*>(&uniform32_kernel<float>),
      reinterpret_cast<const void*>(&normal32_kernel<float>),
      reinterpret_cast<const void*>(&spin_kernel),
  };
  bool ok = true;
  for (const void* k : kernels) {
    cudaFuncAttributes attributes;
    if (cudaFuncGetAttributes(&attributes, k) != cudaSuccess) {
      (void)cudaGetLastError();
      ok = false;
    }
  }
  return ok;
}

void spin(std::int64_t ns, unsigned long long* stamps, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<long long>(ns), stamps);
  check_launch("spin");
}

void trap(cudaStream_t stream) {
  trap_kernel<<<1, 1, 0, stream>>>();
  check_launch("trap");
}

}  // namespace eventide::backends::cuda::kernels
