#include "backends/cpu/cpu_backend.hpp"

#include "backends/cpu/blas.hpp"
#include "backends/cpu/cpu_memory.hpp"

#include <string>
#include <thread>

#include "core/tensor_state.hpp"
#include "eventide/errors.hpp"

namespace eventide::backends::cpu {

CpuBackend::CpuBackend() : kernels_(make_kernels()) {}
CpuBackend::~CpuBackend() = default;

DeviceInfo CpuBackend::info() const {
  std::string desc = std::to_string(std::thread::hardware_concurrency()) +
                     " hardware threads; ops on up to " + std::to_string(pool_.max_threads()) +
                     " busy threads (EVENTIDE_CPU_THREADS); matmul by ";
  try {
    const blas::Api& b = blas::api();
    desc += "OpenBLAS (" + b.config + "; " + b.core + " kernels, " + b.chosen_by + "; " +
            std::to_string(b.threads) + " threads)";
  } catch (const Error& e) {
    desc += std::string("OpenBLAS, which could not be loaded: ") + e.what();
  }
  return DeviceInfo{Device::cpu(), "cpu", desc};
}

std::shared_ptr<StreamState> CpuBackend::create_stream(std::uint64_t id, int) {  // one priority: {0, 0}
  return std::make_shared<CpuStream>(Device::cpu(), id, pool_);
}

std::shared_ptr<StreamState> CpuBackend::wrap_stream(void*, const std::function<std::uint64_t()>&) {
  throw InvalidArgument("Stream::from_native: the cpu has no native streams to wrap");
}

Ref<detail::Storage> CpuBackend::allocate(std::size_t bytes, StreamState& stream) {
  return allocate_host_memory(bytes, &stream.timeline());
}

Ref<detail::Storage> CpuBackend::allocate_host(std::size_t bytes) { return allocate_host_memory(bytes); }

namespace {

constexpr int kDLCPU = 1, kDLCUDAHost = 3, kDLROCMHost = 11;  // dlpack.h's DLDeviceType
constexpr int kAlsoReads[] = {kDLCUDAHost, kDLROCMHost};

std::vector<std::unique_ptr<detail::DeviceBackend>> discover() {
  std::vector<std::unique_ptr<detail::DeviceBackend>> out;
  out.push_back(std::make_unique<CpuBackend>());
  return out;
}

std::string why_unavailable(Device) { return "there is one cpu device, cpu:0"; }

}  // namespace

ops::Kernels& kernels_of(detail::DeviceBackend& device) {
  return static_cast<CpuBackend&>(device).kernels();
}

constinit const detail::BackendDescriptor kDescriptor{
    .kind = "cpu",
    .indexing = detail::DeviceIndexing::single,
    .default_priority = 0,
    .dlpack_device_type = kDLCPU,
    .dlpack_also_reads = kAlsoReads,
    .discover = &discover,
    .why_unavailable = &why_unavailable,
    .has_native_streams = false,
};

}  // namespace eventide::backends::cpu
