#include "backends/cpu/cpu_backend.hpp"

#include "backends/cpu/blas.hpp"

#include <cstdlib>
#include <string>
#include <thread>

#include "core/tensor_state.hpp"
#include "eventide/errors.hpp"

namespace eventide::backends::cpu {

namespace {

constexpr std::size_t kAlignment = 64;  // a cache line; AVX-512 loads

// A tensor's memory and its header in one allocation: the header in the first cache line,
// the data after it.
class HeapStorage final : public detail::Storage {
 public:
  static Ref<detail::Storage> make(std::size_t bytes) {
    std::size_t data = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* block = data >= bytes && data <= SIZE_MAX - kAlignment
                      ? std::aligned_alloc(kAlignment, kAlignment + data)
                      : nullptr;
    if (!block) {
      throw DeviceError("out of memory: could not allocate " + std::to_string(bytes) +
                        " bytes on cpu", "aligned_alloc", ENOMEM);
    }
    return Ref<detail::Storage>(::new (block) HeapStorage(static_cast<char*>(block) + kAlignment, bytes));
  }
  // `delete this` (the last reference) frees the whole block, header and data.
  static void operator delete(void* block) { std::free(block); }

 private:
  HeapStorage(void* data, std::size_t bytes) : Storage(data, bytes, Device::cpu()) {}
};
static_assert(sizeof(HeapStorage) <= kAlignment);

}  // namespace

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

std::shared_ptr<StreamState> CpuBackend::create_stream(std::uint64_t id) {
  return std::make_shared<CpuStream>(Device::cpu(), id, pool_);
}

std::shared_ptr<StreamState> CpuBackend::wrap_stream(void*, const std::function<std::uint64_t()>&) {
  throw InvalidArgument("Stream::from_native: the cpu has no native streams to wrap");
}

Ref<detail::Storage> CpuBackend::allocate(std::size_t bytes, StreamState&) {
  return HeapStorage::make(bytes);
}

Ref<detail::Storage> CpuBackend::allocate_host(std::size_t bytes) { return HeapStorage::make(bytes); }

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
