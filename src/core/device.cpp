#include <algorithm>
#include <array>
#include <cstdlib>
#include <cctype>
#include <charconv>
#include <ostream>

#include "core/backend.hpp"
#include "eventide/device.hpp"
#include "eventide/dtype.hpp"
#include "eventide/errors.hpp"

namespace eventide {

namespace {

using detail::BackendDescriptor;
using detail::DeviceIndexing;

// A device kind: its name and numbering. The table is the two kinds the API names (their
// DeviceKind values are fixed), then every other kind of this build's backends.
struct KindEntry {
  std::string_view name;
  DeviceIndexing indexing;
  const BackendDescriptor* backend;  // null where this build has no backend of the kind
};

// Built at the first use of a device, allocating nothing (a device's name is read where
// nothing may fail).
struct KindTable {
  static constexpr std::size_t kMax = 16;  // DeviceKind is a byte; a handful of backends
  std::array<KindEntry, kMax> entries{};
  std::size_t count = 0;
  const KindEntry* begin() const noexcept { return entries.data(); }
  const KindEntry* end() const noexcept { return entries.data() + count; }
  std::size_t size() const noexcept { return count; }
  const KindEntry& operator[](std::size_t i) const noexcept { return entries[i]; }
};

const KindTable& kinds() noexcept {
  static const KindTable table = [] {
    KindTable t;
    t.entries[t.count++] = {"cpu", DeviceIndexing::single, nullptr};
    t.entries[t.count++] = {"cuda", DeviceIndexing::indexed, nullptr};
    for (const BackendDescriptor* b : detail::compiled_backends()) {
      KindEntry* it = std::find_if(t.entries.data(), t.entries.data() + t.count,
                                   [&](const KindEntry& k) { return k.name == b->kind; });
      if (it == t.entries.data() + t.count) {
        if (t.count == KindTable::kMax) std::abort();  // a build with more backends than kinds
        t.entries[t.count++] = {b->kind, b->indexing, b};
      } else {
        it->indexing = b->indexing;
        it->backend = b;
      }
    }
    return t;
  }();
  return table;
}

const KindEntry* find_kind(DeviceKind kind) noexcept {
  const KindTable& t = kinds();
  const auto i = static_cast<std::size_t>(kind);
  return i < t.size() ? &t[i] : nullptr;
}

// `"cpu", "cuda" or "cuda:N"`: every spelling this build parses, for messages.
std::string spellings() {
  std::vector<std::string> all;
  for (const KindEntry& k : kinds()) {
    all.push_back("\"" + std::string(k.name) + "\"");
    if (k.indexing == DeviceIndexing::indexed) all.push_back("\"" + std::string(k.name) + ":N\"");
  }
  std::string out;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i > 0) out += i + 1 == all.size() ? " or " : ", ";
    out += all[i];
  }
  return out;
}

// The device `index` of the kind at `position` of the table; `bad` makes the error.
template <class Bad>
Device make_device(std::size_t position, int index, const Bad& bad) {
  const KindEntry& k = kinds()[position];
  if (k.indexing == DeviceIndexing::single && index != 0) {
    throw bad("there is one " + std::string(k.name) + " device, " + std::string(k.name) + ":0");
  }
  return Device::of(k.name, index);
}

Device parse_device(std::string_view spec) {
  auto bad = [&](const std::string& why) -> InvalidArgument {
    return InvalidArgument("unknown device \"" + std::string(spec) + "\": " + why + " (expected " +
                           spellings() + ")");
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
  const auto& t = kinds();
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i].name == kind) return make_device(i, n, bad);
  }
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

Device Device::of(std::string_view kind, int index) {
  const auto& t = kinds();
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i].name != kind) continue;
    if (index < 0 || (t[i].indexing == DeviceIndexing::single && index != 0)) {
      throw InvalidArgument("Device::of: " + std::string(kind) + " has no device " + std::to_string(index));
    }
    return Device(static_cast<DeviceKind>(i), index);
  }
  throw InvalidArgument("Device::of: unknown kind \"" + std::string(kind) + "\" (expected " +
                        spellings() + ")");
}

std::string_view Device::kind_name() const noexcept {
  const KindEntry* k = find_kind(kind_);
  return k ? k->name : std::string_view("?");
}

std::string Device::str() const {
  const KindEntry* k = find_kind(kind_);
  if (k && k->indexing == DeviceIndexing::single) return std::string(k->name);
  return std::string(kind_name()) + ":" + std::to_string(index_);
}

int dlpack_device_type(Device device) {
  const BackendDescriptor* b = detail::find_backend(device.kind());
  if (!b || b->dlpack_device_type == 0) {
    throw InvalidArgument("DLPack: " + device.str() + " has no DLPack device type" +
                          (b ? "" : " (this build has no " + std::string(device.kind_name()) + " backend)"));
  }
  return b->dlpack_device_type;
}

std::optional<Device> from_dlpack_device(int device_type, int device_id) {
  const auto& t = kinds();
  for (std::size_t i = 0; i < t.size(); ++i) {
    const BackendDescriptor* b = t[i].backend;
    if (!b) continue;
    const bool reads = b->dlpack_device_type == device_type ||
                       std::find(b->dlpack_also_reads.begin(), b->dlpack_also_reads.end(), device_type) !=
                           b->dlpack_also_reads.end();
    if (!reads) continue;
    if (t[i].indexing == DeviceIndexing::single) device_id = 0;
    if (device_id < 0) return std::nullopt;
    return Device::of(t[i].name, device_id);
  }
  return std::nullopt;
}

namespace detail {

const BackendDescriptor* find_backend(DeviceKind kind) noexcept {
  const KindEntry* k = find_kind(kind);
  return k ? k->backend : nullptr;
}

std::string native_stream_kinds() {
  std::string out;
  for (const KindEntry& k : kinds()) {
    if (k.indexing == DeviceIndexing::single || (k.backend && !k.backend->has_native_streams)) continue;
    std::string upper(k.name);
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    out += (out.empty() ? "" : " or ") + upper;
  }
  return out;
}

std::string why_unavailable(Device device) {
  if (const BackendDescriptor* b = find_backend(device.kind())) return b->why_unavailable(device);
  std::string upper(device.kind_name());
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return "this build of eventide has no " + upper + " backend (configure with EVENTIDE_WITH_" + upper + "=ON)";
}

}  // namespace detail

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
