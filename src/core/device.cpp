#include <charconv>
#include <ostream>

#include "eventide/device.hpp"
#include "eventide/dtype.hpp"
#include "eventide/errors.hpp"

namespace eventide {

namespace {

Device parse_device(std::string_view spec) {
  auto bad = [&](const std::string& why) -> InvalidArgument {
    return InvalidArgument("unknown device \"" + std::string(spec) + "\": " + why +
                           " (expected \"cpu\", \"cuda\" or \"cuda:N\")");
  };
  std::string_view kind = spec;
  std::string_view index;
  if (auto colon = spec.find(':'); colon != std::string_view::npos) {
    kind = spec.substr(0, colon);
    index = spec.substr(colon + 1);
    if (index.empty()) throw bad("no index after ':'");
  }
  int n = 0;
  if (!index.empty()) {
    auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), n);
    if (ec != std::errc() || end != index.data() + index.size() || n < 0) {
      throw bad("the index is not a non-negative integer");
    }
  }
  if (kind == "cpu") {
    if (n != 0) throw bad("there is one cpu device, cpu:0");
    return Device::cpu();
  }
  if (kind == "cuda") return Device::cuda(n);
  throw bad("unknown kind \"" + std::string(kind) + "\"");
}

}  // namespace

Device::Device(std::string_view spec) : Device(parse_device(spec)) {}
Device::Device(const char* spec)
    : Device(spec ? std::string_view(spec) : throw InvalidArgument("device: null string")) {}
Device::Device(const std::string& spec) : Device(std::string_view(spec)) {}

Device Device::cuda(int index) {
  if (index < 0) throw InvalidArgument("Device::cuda: negative index " + std::to_string(index));
  return Device(DeviceKind::cuda, index);
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& os, Device device) { return os << device.str(); }

// --- DType -------------------------------------------------------------------------------

std::string_view name(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f64" || s == "float64" || s == "double") return DType::f64;
  if (s == "i32" || s == "int32" || s == "int") return DType::i32;
  if (s == "i64" || s == "int64" || s == "long") return DType::i64;
  if (s == "f16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  throw InvalidArgument("unknown dtype \"" + std::string(s) +
                        "\" (expected f32, f64, i32, i64, f16 or bf16)");
}

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << name(dtype); }

}  // namespace eventide
