// eventide/dtype.hpp: element types of tensors.
//
// f32, f64, i32 and i64 work on every device. f16 and bf16 exist so that tensors of those
// types can be created and moved between devices; which ops accept them depends on the
// device (an op that does not throws InvalidArgument naming the dtype and the device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace eventide {

enum class DType : std::uint8_t { f32, f64, i32, i64, f16, bf16 };

// Bytes per element.
constexpr std::size_t itemsize(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
  }
  return 0;
}

constexpr bool is_floating(DType dtype) noexcept {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 ||
         dtype == DType::bf16;
}

// "f32", "f64", "i32", "i64", "f16", "bf16".
std::string_view name(DType dtype) noexcept;
// Parses the names above and the NumPy / PyTorch spellings ("float32", "int64", "half",
// "bfloat16", ...); throws InvalidArgument otherwise.
DType parse_dtype(std::string_view name);

std::ostream& operator<<(std::ostream& os, DType dtype);

namespace detail {
template <class T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct DTypeOf<std::int64_t> { static constexpr DType value = DType::i64; };
}  // namespace detail

// The dtype of a C++ element type: dtype_of<float> is DType::f32.
template <class T>
inline constexpr DType dtype_of = detail::DTypeOf<T>::value;

}  // namespace eventide
