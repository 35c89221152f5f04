#include "backends/cpu/cpu_backend.hpp"

#include <cblas.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "core/tensor_state.hpp"
#include "eventide/errors.hpp"

namespace eventide::backends::cpu {

namespace {

class HeapStorage final : public detail::Storage {
 public:
  using Storage::Storage;
  ~HeapStorage() override { std::free(data()); }
};

constexpr std::size_t kAlignment = 64;  // a cache line; AVX-512 loads

}  // namespace

CpuBackend::CpuBackend() : kernels_(make_kernels()) {}
CpuBackend::~CpuBackend() = default;

DeviceInfo CpuBackend::info() const {
  std::string desc = std::to_string(std::thread::hardware_concurrency()) + " hardware threads; " +
                     "matmul by OpenBLAS (" + openblas_get_config() + ", " +
                     std::to_string(openblas_get_num_threads()) + " threads)";
  return DeviceInfo{Device::cpu(), "cpu", desc};
}

std::shared_ptr<StreamState> CpuBackend::create_stream(std::uint64_t id) {
  return std::make_shared<CpuStream>(Device::cpu(), id, pool_);
}

Ref<detail::Storage> CpuBackend::allocate(std::size_t bytes) {
  std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;  // a valid pointer even for empty tensors
  void* p = rounded >= bytes ? std::aligned_alloc(kAlignment, rounded) : nullptr;
  if (!p) {
    throw DeviceError("out of memory: could not allocate " + std::to_string(bytes) +
                      " bytes on cpu", "aligned_alloc", ENOMEM);
  }
  return Ref<detail::Storage>(new HeapStorage(p, bytes, Device::cpu()));
}

}  // namespace eventide::backends::cpu
