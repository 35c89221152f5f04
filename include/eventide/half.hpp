// eventide/half.hpp: f32 to f16 and bf16 bits, rounded to nearest even (NaN stays NaN, f16
// overflows to infinity), for filling tensors of those types from host values (from_host
// takes their bits as std::uint16_t). Pure functions: any thread.
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

}  // namespace eventide
