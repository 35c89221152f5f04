// eventide/device.hpp: which device work runs on.
//
// A `Device` is a small value: a kind (cpu, cuda, or the kind of another compiled-in backend)
// and an index. Constructing one only checks the spelling ("cpu", "cpu:0", "cuda", "cuda:1");
// using a device that this machine does not have (creating a tensor or a stream on it) throws
// `InvalidArgument` naming it and what is available. Thread-safety: a plain value; the free
// functions may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace eventide {

// Which kind of device. The two the API names (Device::cpu(), Device::cuda()) have fixed
// values whether or not their backend is compiled in; the kind of any other backend (the
// test suite's "fake") gets the next value, in the order of this build's list of backends.
// The CPU, kind 0, is the host: the memory of a cpu tensor is the process's own.
enum class DeviceKind : std::uint8_t { cpu, cuda };

class Device {
 public:
  // The CPU.
  constexpr Device() noexcept = default;
  // Parses "cpu", "cpu:0", "cuda" (= "cuda:0") or "cuda:N". Throws InvalidArgument on any
  // other spelling. Implicit, so that `ev::zeros({2, 2}, ev::DType::f32, "cpu")` reads well.
  Device(std::string_view spec);   // NOLINT(google-explicit-constructor)
  Device(const char* spec);        // NOLINT(google-explicit-constructor)
  Device(const std::string& spec); // NOLINT(google-explicit-constructor)

  static constexpr Device cpu() noexcept { return Device(); }
  // Throws InvalidArgument for a negative index.
  static Device cuda(int index = 0);
  // Device `index` of the kind named `kind` ("cpu", "cuda", or another compiled-in backend's
  // kind). Throws InvalidArgument for an unknown kind or an index the kind does not have.
  static Device of(std::string_view kind, int index = 0);

  constexpr DeviceKind kind() const noexcept { return kind_; }
  constexpr int index() const noexcept { return index_; }
  constexpr bool is_cpu() const noexcept { return kind_ == DeviceKind::cpu; }
  constexpr bool is_cuda() const noexcept { return kind_ == DeviceKind::cuda; }
  // The kind's name: "cpu", "cuda", ... (what torch.device.type calls the type).
  std::string_view kind_name() const noexcept;

  // "cpu" or "cuda:N" (a kind with one device, as the cpu: its name alone).
  std::string str() const;

  friend constexpr bool operator==(Device a, Device b) noexcept {
    return a.kind_ == b.kind_ && a.index_ == b.index_;
  }

 private:
  constexpr Device(DeviceKind kind, int index) noexcept : kind_(kind), index_(index) {}

  DeviceKind kind_ = DeviceKind::cpu;
  int index_ = 0;
};

std::ostream& operator<<(std::ostream& os, Device device);

// The device ops use when none is given: the EVENTIDE_DEVICE environment variable if set
// (InvalidArgument if it does not name an available device), else device 0 of the available
// kind its backend ranks highest (cuda:0 when a GPU is present), else the CPU. Read once, at
// the first call.
Device default_device();

// Every device available here, the CPU first.
std::vector<Device> devices();

// Whether `device` exists on this machine.
bool is_available(Device device) noexcept;

struct DeviceInfo {
  Device device;
  std::string name;         // "cpu" / the GPU's product name
  std::string description;  // cores, BLAS, memory, ... in words
};

// Throws InvalidArgument if `device` is not available.
DeviceInfo device_info(Device device);

// DLPack (dlpack.h) names devices by a DLDeviceType and an id. These map both ways through
// the device type each compiled-in backend declares (kDLCPU = 1 for the cpu, kDLCUDA = 2 for
// cuda). Neither checks that the device is available here.
//
// The DLDeviceType of `device`'s memory. InvalidArgument if this build has no backend of its
// kind, or the kind has no DLPack device type.
int dlpack_device_type(Device device);
// The device whose memory DLPack describes as (device_type, device_id), or nullopt if no
// compiled-in backend declares that type. Host memory that another runtime allocated
// (kDLCUDAHost, kDLROCMHost) is the cpu's.
std::optional<Device> from_dlpack_device(int device_type, int device_id);

}  // namespace eventide

template <>
struct std::hash<eventide::Device> {
  std::size_t operator()(eventide::Device d) const noexcept {
    return (static_cast<std::size_t>(d.kind()) << 16) ^ static_cast<std::size_t>(d.index());
  }
};
