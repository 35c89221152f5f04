// Memory of the CPU backend: a tensor's storage.
//
// * Small tensors (under kCachedFrom) come from the C heap, header and data in one block.
// * Large ones come from a cache of blocks mapped from the kernel (mmap), by size class (eight
//   classes per power of two, so a block is at most 1/8 larger than asked). A block goes back
//   to the cache when its last reference goes, which is after every op that uses it has
//   finished (ops hold references), and the next allocation of its class takes it back.
//
// Why: the C heap gives large blocks back to the kernel when they are freed (munmap, or a
// trim of the heap's top), so every new large tensor was fresh memory, faulted in page by
// page as an op first wrote it. On the VMs we run on a fault costs 2-25 µs per 4 KiB page: an
// `add` of 1 MiB that takes 50 µs on warm memory took 0.6-3 ms on fresh pages, and the async
// pattern (ops issued far ahead of the worker, each holding its own output until it has run)
// made nearly every output fresh. Blocks of 2 MiB and more are also aligned to 2 MiB and
// advised as transparent huge pages, so their first touch is one fault per 2 MiB.
//
// Stream order: a block whose tensor is gone while ops of one stream still use it (an output
// used once and dropped long before the stream reaches it: `t = ones(...); del t`, issued far
// ahead) is *held*, and the next allocation of its class for an op of that same stream takes it
// at once (allocate_host_memory's `stream_order`): the stream runs that op after the ones still
// using it. Without this every such temporary took a fresh block, none came back in time, and
// 10,000 of 256 KiB left 2.5 GB resident. Only for memory that has not escaped (data_ptr,
// DLPack): others' uses of it are not seen. A held block whose ops have finished is free.
//
// The cache keeps at most CacheStats::limit_bytes of free and held blocks (a quarter of the machine's
// memory or of the cgroup's limit, whichever is less, at most 16 GiB; EVENTIDE_CPU_CACHE_MB
// sets it, 0 turns caching off, anything else is said on stderr and ignored); a block that
// would go over it goes back to the kernel. A failed mapping empties the cache and tries once
// more before it is out of memory. Builds with AddressSanitizer use the C heap for every
// size, so that it sees uses after free.
//
// Thread-safety: every function, from any thread. The cache's lock is a leaf: nothing else is
// taken, no user object is touched and no block is mapped or unmapped while it is held.
#pragma once

#include <cstddef>

#include "core/ref.hpp"
#include "core/tensor_state.hpp"

namespace eventide::backends::cpu {

// Large blocks: from here on (in bytes of data) they are mapped and cached.
inline constexpr std::size_t kCachedFrom = std::size_t{128} << 10;

// `bytes` of host memory as a CPU tensor's storage, aligned to 64 bytes at least. With
// `stream_order`, the memory is an output of the next op of that timeline, which the caller
// enqueues before anyone else sees the tensor: it may be a block that earlier ops of the
// timeline still use. DeviceError (ENOMEM) if the memory cannot be had.
detail::Ref<detail::Storage> allocate_host_memory(std::size_t bytes,
                                                  const detail::Timeline* stream_order = nullptr);

struct CacheStats {
  std::size_t cached_bytes = 0;   // free blocks kept for reuse
  std::size_t cached_blocks = 0;
  std::size_t held_bytes = 0;     // blocks held for their stream (see above)
  std::size_t limit_bytes = 0;    // the most free and held bytes kept (EVENTIDE_CPU_CACHE_MB)
  std::size_t reused = 0;         // large allocations served by a free block
  std::size_t recycled = 0;       // large allocations served in stream order by a held block
  std::size_t mapped = 0;         // large allocations mapped from the kernel
};
CacheStats cache_stats() noexcept;

// Whether large blocks are cached here (false under AddressSanitizer, or with a limit of 0).
bool caches_large_blocks() noexcept;

// Gives every free block back to the kernel, and lets go of the held ones (each goes back
// when its ops have finished: at once after a synchronize); returns the bytes released.
std::size_t empty_cache() noexcept;

// fork(), in the child: the cache starts over (its lock is not held across the fork: a thread
// that frees a tensor while the runtime prepares the fork would otherwise wait on it).
void cache_after_fork_in_child() noexcept;

}  // namespace eventide::backends::cpu
