// The CPU kernels: elementwise loops the compiler vectorizes, Philox for random numbers,
// OpenBLAS's CBLAS for matmul. Each makes the body of one op, which uses its tensors' memory
// by address: the launch keeps that memory until the op has run (ops/kernels.hpp).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/blas.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "eventide/errors.hpp"
#include "eventide/half.hpp"
#include "ops/philox.hpp"

namespace eventide::backends::cpu {

namespace {

using ops::BinaryOp;
using ops::RandomKind;
using ops::TensorState;

[[noreturn]] void unsupported(const char* op, DType dtype, const char* supported) {
  throw InvalidArgument(std::string(op) + " does not support " + std::string(name(dtype)) +
                        " on cpu (supported: " + supported + ")");
}

template <class F>
void dispatch_numeric(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::i32: return f(std::int32_t{});
    case DType::i64: return f(std::int64_t{});
    default: unsupported(op, dtype, "f32, f64, i32, i64");
  }
}

// Integer arithmetic wraps (as on GPUs and in NumPy), without signed-overflow UB. Division
// is of floating types only (ops layer).
template <BinaryOp Op, class T>
T apply(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    const U x = static_cast<U>(a), y = static_cast<U>(b);
    if constexpr (Op == BinaryOp::add) return static_cast<T>(static_cast<U>(x + y));
    if constexpr (Op == BinaryOp::sub) return static_cast<T>(static_cast<U>(x - y));
    if constexpr (Op == BinaryOp::mul) return static_cast<T>(static_cast<U>(x * y));
    return T{};  // (div: refused before)
  } else {
    if constexpr (Op == BinaryOp::add) return a + b;
    if constexpr (Op == BinaryOp::sub) return a - b;
    if constexpr (Op == BinaryOp::mul) return a * b;
    return a / b;
  }
}

// One loop per op, so that each vectorizes.
template <BinaryOp Op, class T>
void binary_loop_of(const T* a, const T* b, T* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = apply<Op>(a[i], b[i]);
}

template <class T>
void binary_loop(BinaryOp op, const T* a, const T* b, T* out, std::int64_t n) {
  switch (op) {
    case BinaryOp::add: return binary_loop_of<BinaryOp::add>(a, b, out, n);
    case BinaryOp::sub: return binary_loop_of<BinaryOp::sub>(a, b, out, n);
    case BinaryOp::mul: return binary_loop_of<BinaryOp::mul>(a, b, out, n);
    case BinaryOp::div: return binary_loop_of<BinaryOp::div>(a, b, out, n);
  }
}

template <class T>
void random_fill(T* out, std::int64_t n, RandomKind kind, const ops::philox::Draw& draw) {
  namespace px = ops::philox;
  const std::uint64_t seed = draw.key(), offset = draw.first_block();
  if (kind == RandomKind::uniform) {
    constexpr std::int64_t per_block = std::is_same_v<T, double> ? 2 : 4;
    T v[per_block];
    for (std::int64_t i = 0; i < n; i += per_block) {
      const std::uint64_t block = offset + static_cast<std::uint64_t>(i / per_block);
      if constexpr (per_block == 2) {
        px::uniform_f64_block(seed, block, v);
      } else {
        px::uniform_f32_block(seed, block, v);
      }
      for (std::int64_t j = 0; j < per_block && i + j < n; ++j) out[i + j] = v[j];
    }
    return;
  }
  for (std::int64_t i = 0; i < n; i += 2) {
    T first, second;
    px::normal_pair<T>(seed, offset + static_cast<std::uint64_t>(i / 2), first, second);
    out[i] = first;
    if (i + 1 < n) out[i + 1] = second;
  }
}

// One element of a floating dtype as a double (every f32, f16 and bf16 is one exactly), and
// back, rounded once to nearest even. The 16-bit types go through float rounded to odd: rounded
// to nearest there, a double could round twice (1 + 2^-8 + 2^-40 would become bf16 1.0, not
// 1.0078125); rounded to odd, with float's 13 or more bits to spare, it cannot.
double load_floating(DType dtype, const void* p, std::int64_t i) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::f16: return f16_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(p)[i]);
    default: return 0;  // the ops layer lets floating dtypes only through
  }
}

// `d` as the float next to it whose last bit is odd, unless it is a float (round to odd).
float to_float_rounded_to_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 1u) == 0) f = std::nextafter(f, d > static_cast<double>(f) ? INFINITY : -INFINITY);
  return f;
}

template <class Load>
void store_floating(DType dtype, void* p, std::int64_t n, Load&& load) {
  switch (dtype) {
    case DType::f32:
      for (std::int64_t i = 0; i < n; ++i) static_cast<float*>(p)[i] = static_cast<float>(load(i));
      return;
    case DType::f64:
      for (std::int64_t i = 0; i < n; ++i) static_cast<double*>(p)[i] = load(i);
      return;
    case DType::f16:
      for (std::int64_t i = 0; i < n; ++i) {
        static_cast<std::uint16_t*>(p)[i] = float_to_f16(to_float_rounded_to_odd(load(i)));
      }
      return;
    case DType::bf16:
      for (std::int64_t i = 0; i < n; ++i) {
        static_cast<std::uint16_t*>(p)[i] = float_to_bf16(to_float_rounded_to_odd(load(i)));
      }
      return;
    default: return;
  }
}

class CpuKernels final : public ops::Kernels {
 public:
  ops::Body fill(StreamState&, const TensorState& out, double value) override {
    void* p = out.storage->data();
    const std::int64_t n = out.numel;
    ops::Body body;
    switch (out.dtype) {
      case DType::f16:
      case DType::bf16: {
        std::uint16_t bits = out.dtype == DType::f16 ? float_to_f16(static_cast<float>(value))
                                                     : float_to_bf16(static_cast<float>(value));
        body.run = [p, n, bits] { std::fill_n(static_cast<std::uint16_t*>(p), n, bits); };
        break;
      }
      default:
        dispatch_numeric("fill", out.dtype, [&](auto zero) {
          using T = decltype(zero);
          if constexpr (std::is_integral_v<T>) {
            // [min, -min) exactly: -min (2^31, 2^63) is a double, max might round up to it.
            const double lo = static_cast<double>(std::numeric_limits<T>::min());
            if (!(value >= lo && value < -lo)) {
              throw InvalidArgument("full: " + std::to_string(value) + " does not fit in " +
                                    std::string(name(out.dtype)));
            }
          }
          const T v = static_cast<T>(value);
          body.run = [p, n, v] { std::fill_n(static_cast<T*>(p), n, v); };
        });
    }
    return body;
  }

  ops::Body random(StreamState&, const TensorState& out, RandomKind kind,
                   const ops::ReserveRandom& reserve) override {
    const char* op = kind == RandomKind::uniform ? "rand" : "randn";
    if (out.dtype != DType::f32 && out.dtype != DType::f64) unsupported(op, out.dtype, "f32, f64");
    const ops::philox::Draw draw =
        reserve(ops::philox::blocks_for(out.numel, out.dtype == DType::f64, kind == RandomKind::normal));
    void* p = out.storage->data();
    const std::int64_t n = out.numel;
    if (out.dtype == DType::f32) {
      return {.run = [=] { random_fill(static_cast<float*>(p), n, kind, draw); }};
    }
    return {.run = [=] { random_fill(static_cast<double*>(p), n, kind, draw); }};
  }

  ops::Body binary(StreamState&, BinaryOp op, const TensorState& a, const TensorState& b,
                   const TensorState& out) override {
    const void* pa = a.storage->data();
    const void* pb = b.storage->data();
    void* po = out.storage->data();
    const std::int64_t n = out.numel;
    ops::Body body;
    dispatch_numeric(ops::name(op), out.dtype, [&](auto zero) {
      using T = decltype(zero);
      body.run = [=] {
        binary_loop<T>(op, static_cast<const T*>(pa), static_cast<const T*>(pb), static_cast<T*>(po), n);
      };
    });
    return body;
  }

  ops::Body matmul(StreamState&, const TensorState& a, const TensorState& b,
                   const TensorState& out) override {
    if (a.dtype != DType::f32 && a.dtype != DType::f64) unsupported("matmul", a.dtype, "f32, f64");
    const bool batched = a.shape.size() == 3;
    const std::int64_t batch = batched ? a.shape[0] : 1;
    const std::int64_t m = a.shape[batched ? 1 : 0];
    const std::int64_t k = a.shape[batched ? 2 : 1];
    const std::int64_t n = b.shape[batched ? 2 : 1];
    for (std::int64_t d : {m, k, n}) {
      if (d > INT_MAX) {
        throw InvalidArgument("matmul: dimension " + std::to_string(d) +
                              " exceeds the BLAS limit of " + std::to_string(INT_MAX));
      }
    }
    const void* pa = a.storage->data();
    const void* pb = b.storage->data();
    void* po = out.storage->data();
    const bool f64 = a.dtype == DType::f64;
    const blas::Api* lib = &blas::api();  // loads OpenBLAS at the first matmul, on this thread
    return {.run = [=] {
      const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
      blas::CallScope in_blas;  // exit waits for it (blas.hpp)
      for (std::int64_t i = 0; i < batch; ++i) {
        if (m == 0 || n == 0) break;
        if (f64) {
          const double* A = static_cast<const double*>(pa) + i * m * k;
          const double* B = static_cast<const double*>(pb) + i * k * n;
          double* C = static_cast<double*>(po) + i * m * n;
          lib->dgemm(blas::kRowMajor, blas::kNoTrans, blas::kNoTrans, M, N, K, 1.0, A,
                     std::max(K, 1), B, std::max(N, 1), 0.0, C, std::max(N, 1));
        } else {
          const float* A = static_cast<const float*>(pa) + i * m * k;
          const float* B = static_cast<const float*>(pb) + i * k * n;
          float* C = static_cast<float*>(po) + i * m * n;
          lib->sgemm(blas::kRowMajor, blas::kNoTrans, blas::kNoTrans, M, N, K, 1.0f, A,
                     std::max(K, 1), B, std::max(N, 1), 0.0f, C, std::max(N, 1));
        }
      }
    }};
  }

  ops::Body cast(StreamState&, const TensorState& src, const TensorState& out) override {
    const void* in = src.storage->data();
    void* po = out.storage->data();
    const std::int64_t n = out.numel;
    const DType from = src.dtype, to = out.dtype;
    return {.run = [=] {
      store_floating(to, po, n, [&](std::int64_t i) { return load_floating(from, in, i); });
    }};
  }

  ops::Body upload(StreamState&, const TensorState& out, const void* host) override {
    // The cpu's memory is host memory, and no op has used `out` yet: copied now.
    if (out.nbytes() > 0) std::memcpy(out.storage->data(), host, out.nbytes());
    return {};
  }

  ops::Body write_words(StreamState&, const TensorState& out, std::uint64_t first, std::uint64_t second) override {
    auto* p = static_cast<std::uint64_t*>(out.storage->data());
    return {.run = [=] {
      p[0] = first;
      p[1] = second;
    }};
  }

  void download(const TensorState& src, void* host) override {
    if (src.nbytes() > 0) std::memcpy(host, src.storage->data(), src.nbytes());
  }

  // The cpu's memory is host memory: both halves of a copy between devices are copies on a
  // cpu stream, after the producer of what they read.
  ops::Body download_async(StreamState&, const TensorState& src, const TensorState& host) override {
    return copy(src, host);
  }
  ops::Body upload_async(StreamState&, const TensorState& host, const TensorState& out) override {
    return copy(host, out);
  }

 private:
  static ops::Body copy(const TensorState& src, const TensorState& dst) {
    const void* from = src.storage->data();
    void* to = dst.storage->data();
    const std::size_t bytes = src.nbytes();
    return {.run = [=] {
      if (bytes > 0) std::memcpy(to, from, bytes);
    }};
  }
};

}  // namespace

std::unique_ptr<ops::Kernels> make_kernels() { return std::make_unique<CpuKernels>(); }

}  // namespace eventide::backends::cpu
