// The compiled-in backends, asked in turn for the devices they find. Adding a backend: a
// folder under src/backends and one entry here.
#include "core/backend.hpp"

#include "backends/cpu/cpu_backend.hpp"

#if EVENTIDE_WITH_CUDA
#include "backends/cuda/cuda_backend.hpp"
#endif

namespace eventide::detail {

std::vector<std::unique_ptr<DeviceBackend>> discover_devices() {
  std::vector<std::unique_ptr<DeviceBackend>> out;
  out.push_back(std::make_unique<backends::cpu::CpuBackend>());
#if EVENTIDE_WITH_CUDA
  for (auto& d : backends::cuda::discover()) out.push_back(std::move(d));
#endif
  return out;
}

std::string why_unavailable(Device device) {
  if (device.is_cpu()) return "there is one cpu device, cpu:0";
#if EVENTIDE_WITH_CUDA
  return backends::cuda::why_unavailable(device);
#else
  return "this build of eventide has no CUDA backend (configure with EVENTIDE_WITH_CUDA=ON)";
#endif
}

}  // namespace eventide::detail
