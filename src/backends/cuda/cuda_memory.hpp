// Memory of the CUDA backend.
//
// * Device memory comes from the device's stream-ordered pool (cudaMallocAsync on the stream
//   of the op that creates the tensor), which keeps freed blocks for reuse (the release
//   threshold is raised so that a training loop does not return memory to the driver every
//   step). A block is freed when its last reference goes, and ops hold references until they
//   have finished (the watcher releases them), so it is never freed while in use.
// * Pinned host memory (staging for copies, CPU tensors made by copies from a GPU, timeline
//   counters) comes from a caching pool: pinning is slow (cudaHostAlloc) and cudaFreeHost
//   synchronizes the device, so blocks are kept and reused by size class.
//
// Thread-safety: all functions, from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include <cuda.h>
#include <cuda_runtime.h>

#include "core/ref.hpp"
#include "core/tensor_state.hpp"

namespace eventide::backends::cuda {

using detail::Ref;
using detail::Storage;

// `bytes` of device memory on `device`, allocated in the order of `stream`.
Ref<Storage> allocate_device(Device device, std::size_t bytes, cudaStream_t stream);
// `bytes` of device memory on `device` that any stream may use at once: an idle block, or
// one allocated on a stream of the allocator's own and waited for there (memory for a graph
// that other code captures and replays: core/capture.hpp).
Ref<Storage> allocate_device_settled(Device device, std::size_t bytes);

// `bytes` of pinned, mapped host memory, as a CPU tensor's storage (device cpu).
Ref<Storage> allocate_pinned(std::size_t bytes);

// A pinned 64-bit word the GPU can read and write (a timeline's counter), leased from a
// process-wide pool: move-only, and back to the pool when the lease ends (no CUDA call: the
// pool keeps its pages for the process's life). host(): its address for the host; device():
// for the GPU.
class PinnedWord {
 public:
  PinnedWord() noexcept = default;
  // A word, zeroed. DeviceError if pinned memory cannot be had.
  static PinnedWord acquire();

  PinnedWord(PinnedWord&& other) noexcept
      : host_(std::exchange(other.host_, nullptr)), device_(std::exchange(other.device_, 0)) {}
  PinnedWord& operator=(PinnedWord&& other) noexcept {
    if (this != &other) {
      release();
      host_ = std::exchange(other.host_, nullptr);
      device_ = std::exchange(other.device_, 0);
    }
    return *this;
  }
  PinnedWord(const PinnedWord&) = delete;
  PinnedWord& operator=(const PinnedWord&) = delete;
  ~PinnedWord() { release(); }

  std::uint64_t* host() const noexcept { return host_; }
  CUdeviceptr device() const noexcept { return device_; }

 private:
  PinnedWord(std::uint64_t* host, CUdeviceptr device) noexcept : host_(host), device_(device) {}
  void release() noexcept;  // back to the pool

  std::uint64_t* host_ = nullptr;
  CUdeviceptr device_ = 0;
};

// Process exit: from here on device memory is not given back (the CUDA runtime is being torn
// down); the process's end releases it.
void memory_shutdown() noexcept;
// Whether memory_shutdown() was called (the process exits, or is a fork's child): objects
// that outlive the runtime (a graph's) make no CUDA call to let theirs go.
bool memory_shut_down() noexcept;

// Gives `device`'s block cache back to its pool and trims the pool to what is in use; the
// bytes of the block cache given back.
std::size_t empty_cache(Device device) noexcept;

// Raises the release threshold of `device`'s default pool (once).
void configure_pool(Device device);

}  // namespace eventide::backends::cuda
