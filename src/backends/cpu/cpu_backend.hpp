// The CPU device: streams run by a worker pool (cpu_stream.hpp), memory from the C heap and,
// for large tensors, a cache of mapped blocks (cpu_memory.hpp), kernels in plain C++ and
// OpenBLAS (cpu_kernels.cpp). Device time is the host's
// steady_clock, taken on the worker right before and after each op's body.
#pragma once

#include <memory>

#include "backends/cpu/blas.hpp"
#include "backends/cpu/cpu_memory.hpp"
#include "backends/cpu/cpu_stream.hpp"
#include "core/backend.hpp"
#include "ops/kernels.hpp"

namespace eventide::backends::cpu {

std::unique_ptr<ops::Kernels> make_kernels();

// The cpu backend as the core sees it (core/backend.hpp): kind "cpu", one device, the host.
extern const detail::BackendDescriptor kDescriptor;
// Its kernels, as the ops layer finds them (ops/kernels.hpp): `device` is a CpuBackend.
ops::Kernels& kernels_of(detail::DeviceBackend& device);

class CpuBackend final : public detail::DeviceBackend {
 public:
  CpuBackend();
  ~CpuBackend() override;

  Device device() const override { return Device::cpu(); }
  DeviceInfo info() const override;
  // Its ops' bodies use their memory by address and nothing of their stream: a graph replays them.
  std::string why_no_capture() const override { return {}; }
  std::shared_ptr<StreamState> create_stream(std::uint64_t id, int priority) override;
  std::shared_ptr<StreamState> wrap_stream(void* native,
                                           const std::function<std::uint64_t()>& make_id) override;
  Ref<detail::Storage> allocate(std::size_t bytes, StreamState& stream) override;
  Ref<detail::Storage> allocate_host(std::size_t bytes) override;
  ops::Kernels& kernels() noexcept { return *kernels_; }
  void shutdown(std::chrono::steady_clock::time_point deadline) noexcept override {
    pool_.stop(deadline);
    // A matmul still running past the grace: OpenBLAS's teardown, which runs next, would hang
    // forever on it (blas.hpp). It ends by itself.
    blas::wait_for_calls();
  }
  void before_fork(std::chrono::steady_clock::time_point deadline, detail::ForkLocks locks) noexcept override {
    pool_.before_fork(deadline, locks);
  }
  void after_fork_in_parent(detail::ForkLocks locks) noexcept override { pool_.after_fork_in_parent(locks); }
  std::size_t empty_cache() noexcept override { return cpu::empty_cache(); }
  bool after_fork_in_child() noexcept override {
    cache_after_fork_in_child();
    blas::forget_calls();
    pool_.after_fork_in_child();
    return true;
  }

 private:
  WorkerPool pool_;
  std::unique_ptr<ops::Kernels> kernels_;
};

}  // namespace eventide::backends::cpu
