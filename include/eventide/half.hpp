// eventide/half.hpp: f32 to f16 and bf16 bits, rounded to nearest even (NaN stays NaN, f16
// overflows to infinity), for filling tensors of those types from host values (from_host
// takes their bits as std::uint16_t), and back (exact: every f16 and bf16 is an f32). Pure
// functions: any thread.
#pragma once

#include <cstdint>
#include <cstring>

namespace eventide {

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

inline std::uint16_t float_to_f16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (absx >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow: inf
  if (absx < 0x38800000u) {
    // Subnormal or zero in f16: shift the 24-bit significand into place, rounding.
    if (absx < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t exp = absx >> 23;
    const std::uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exp;  // 14..24
    std::uint32_t h = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1);
    const std::uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = ((absx - 0x38000000u) >> 13);
  const std::uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

inline float bf16_to_float(std::uint16_t bits) {
  const std::uint32_t x = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline float f16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  std::uint32_t exp = (bits >> 10) & 0x1fu;
  std::uint32_t mant = bits & 0x3ffu;
  std::uint32_t x;
  if (exp == 0x1fu) {
    x = sign | 0x7f800000u | (mant << 13);  // infinity, NaN (payload kept)
  } else if (exp != 0) {
    x = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    x = sign;  // signed zero
  } else {
    // Subnormal f16: normalize the significand (value = mant * 2^-24).
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    x = sign | static_cast<std::uint32_t>(112 - e) << 23 | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

}  // namespace eventide
