// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
// counter-based generator behind rand and randn on every device: element i of a draw is a
// pure function of (seed, counter block, lane), so the CPU, the GPU and any number of
// threads produce the same numbers for the same seed.
//
// Layout: uniform f32: element i uses lane i % 4 of block offset + i / 4. uniform f64:
// lanes 2(i % 2), 2(i % 2)+1 of block offset + i / 2 (53 bits). normal (Box-Muller): the pair
// (2j, 2j+1) uses block offset + j: two uniforms from lanes 0-1 (f32: lane 0 and lane 1) or
// 0-3 (f64), giving r cos(t) and r sin(t). blocks_for() is how many blocks a draw uses.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define EVENTIDE_HD __host__ __device__
#else
#define EVENTIDE_HD
#endif

namespace eventide::ops::philox {

using Block = std::array<std::uint32_t, 4>;

EVENTIDE_HD inline void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                                std::uint32_t& lo) {
  std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

// The 4 x 32-bit output for counter `block` under key `seed`.
EVENTIDE_HD inline void generate(std::uint64_t seed, std::uint64_t block, std::uint32_t out[4]) {
  std::uint32_t c0 = static_cast<std::uint32_t>(block), c1 = static_cast<std::uint32_t>(block >> 32);
  std::uint32_t c2 = 0, c3 = 0;
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, hi0, lo0);
    mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    std::uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

// [0, 1) from 24 and 53 bits.
EVENTIDE_HD inline float unit_f32(std::uint32_t x) { return static_cast<float>(x >> 8) * 0x1.0p-24f; }
EVENTIDE_HD inline double unit_f64(std::uint32_t lo, std::uint32_t hi) {
  std::uint64_t x = (static_cast<std::uint64_t>(hi) << 32) | lo;
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}
// (0, 1]: the logarithm in Box-Muller needs it non-zero.
EVENTIDE_HD inline float open_f32(std::uint32_t x) { return (static_cast<float>(x >> 8) + 1.0f) * 0x1.0p-24f; }
EVENTIDE_HD inline double open_f64(std::uint32_t lo, std::uint32_t hi) {
  std::uint64_t x = (static_cast<std::uint64_t>(hi) << 32) | lo;
  return (static_cast<double>(x >> 11) + 1.0) * 0x1.0p-53;
}

// One block's values in the layout above, written once for every backend (the CPU's loops and
// the GPU's kernels call these): four f32 uniforms, two f64 uniforms, or one Box-Muller pair.
EVENTIDE_HD inline void uniform_f32_block(std::uint64_t seed, std::uint64_t block, float out[4]) {
  std::uint32_t r[4];
  generate(seed, block, r);
  for (int j = 0; j < 4; ++j) out[j] = unit_f32(r[j]);
}
EVENTIDE_HD inline void uniform_f64_block(std::uint64_t seed, std::uint64_t block, double out[2]) {
  std::uint32_t r[4];
  generate(seed, block, r);
  out[0] = unit_f64(r[0], r[1]);
  out[1] = unit_f64(r[2], r[3]);
}
// T: float (two uniforms from lanes 0 and 1) or double (from lanes 0-1 and 2-3).
template <class T>
EVENTIDE_HD inline void normal_pair(std::uint64_t seed, std::uint64_t block, T& first, T& second) {
  std::uint32_t r[4];
  generate(seed, block, r);
  T u1, u2;
  if constexpr (sizeof(T) == sizeof(double)) {
    u1 = open_f64(r[0], r[1]);
    u2 = unit_f64(r[2], r[3]);
  } else {
    u1 = open_f32(r[0]);
    u2 = unit_f32(r[1]);
  }
  const T radius = std::sqrt(T(-2) * std::log(u1));
  const T angle = static_cast<T>(6.283185307179586) * u2;  // 2 pi
  first = radius * std::cos(angle);
  second = radius * std::sin(angle);
}

// Where a draw's counter blocks start: a seed and a first block known at the call, or, for a
// draw captured in a graph, read when the draw runs from `cell` (a seed and a base that each
// replay writes first), with `offset` counted from that base.
struct Draw {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  const std::uint64_t* cell = nullptr;  // in the memory of the device that runs the draw

  EVENTIDE_HD std::uint64_t key() const { return cell ? cell[0] : seed; }
  EVENTIDE_HD std::uint64_t first_block() const { return cell ? cell[1] + offset : offset; }
};

inline std::uint64_t blocks_for(std::int64_t numel, bool is_f64, bool normal) {
  auto n = static_cast<std::uint64_t>(numel);
  if (normal) return (n + 1) / 2;
  return is_f64 ? (n + 1) / 2 : (n + 3) / 4;
}

}  // namespace eventide::ops::philox
