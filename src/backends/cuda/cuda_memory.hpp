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

#include <cuda.h>
#include <cuda_runtime.h>

#include "core/ref.hpp"
#include "core/tensor_state.hpp"

namespace eventide::backends::cuda {

using detail::Ref;
using detail::Storage;

// `bytes` of device memory on `device`, allocated in the order of `stream`.
Ref<Storage> allocate_device(Device device, std::size_t bytes, cudaStream_t stream);

// `bytes` of pinned, mapped host memory, as a CPU tensor's storage (device cpu).
Ref<Storage> allocate_pinned(std::size_t bytes);

// A pinned 64-bit word the GPU can read and write (timeline counters, gates): host address
// and device address. Words are recycled when their owner releases them.
struct PinnedWord {
  std::uint64_t* host = nullptr;
  CUdeviceptr device = 0;
};
PinnedWord acquire_word();
void release_word(PinnedWord word) noexcept;

// Process exit: from here on device memory is not given back (the CUDA runtime is being torn
// down); the process's end releases it.
void memory_shutdown() noexcept;

// Raises the release threshold of `device`'s default pool (once).
void configure_pool(Device device);

}  // namespace eventide::backends::cuda
