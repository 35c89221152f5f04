#include "backends/cuda/cuda_memory.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "backends/cuda/cuda_api.hpp"
#include "eventide/errors.hpp"

namespace eventide::backends::cuda {

namespace {

std::atomic<bool> g_shut_down{false};

// Device blocks no op uses any more, kept for the next allocation of their size. A block
// comes back only when the last reference to its storage goes, and every op that used it
// holds a reference until it has finished on the GPU: a returned block is idle, and may be
// handed out at once for any stream of its device, with no ordering to add. Not so a block
// whose address left eventide (Storage::escaped: the user's kernels, another library through
// DLPack, which may still use it when they let go): it goes back to the pool on the legacy
// stream as before, ordered after the work of the blocking streams. That is what makes
// the cache this simple (and what a stream-ordered pool cannot assume: freeing on one stream
// and allocating on another makes the driver order the two). It spares the small ops of a
// chain the allocation calls (cudaSetDevice, cudaMallocAsync, cudaFreeAsync on the legacy
// stream), which cost them about 5 µs each on an H200. Blocks of up to 32 MiB are kept (the
// output of a bf16 matmul of n = 1024 is 2 MiB, and its op is host-bound too), up to a bound
// per device; an allocation that finds the device out of memory frees them all first.
constexpr std::size_t kCachedGranule = 512;                  // sizes rounded up to this
constexpr std::size_t kLargestCachedBlock = std::size_t{32} << 20;
constexpr std::size_t kMaxCachedPerDevice = std::size_t{256} << 20;

std::size_t cached_size(std::size_t bytes) noexcept {
  if (bytes == 0) bytes = 1;  // a zero-byte tensor still gets a distinct, valid pointer
  return (bytes + kCachedGranule - 1) / kCachedGranule * kCachedGranule;
}

class BlockCache {
 public:
  // A block of `size` (a cached_size) on `device`, or null if none is kept.
  void* take(int device, std::size_t size) noexcept {
    std::lock_guard lock(mu_);
    auto it = free_.find(Key{device, size});
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_[device] -= size;
    return p;
  }
  // Keeps an idle block (true), or refuses it (false: too large, over the bound, or no memory
  // to note it): the caller frees it.
  bool give(int device, std::size_t size, void* p) noexcept {
    if (size > kLargestCachedBlock) return false;
    std::lock_guard lock(mu_);
    try {
      if (cached_[device] + size > kMaxCachedPerDevice) return false;
      free_[Key{device, size}].push_back(p);
    } catch (...) {
      return false;
    }
    cached_[device] += size;
    return true;
  }
  // Hands every kept block of `device` back to the driver's pool (before an allocation that
  // found the device out of memory tries again).
  std::size_t release_all(int device) noexcept {
    std::vector<void*> blocks;
    std::size_t released = 0;
    {
      std::lock_guard lock(mu_);
      for (auto& [key, list] : free_) {
        if (key.device != device) continue;
        try {
          blocks.insert(blocks.end(), list.begin(), list.end());
        } catch (...) {
          break;  // no memory to list them: the ones listed go back, the rest stay kept
        }
        cached_[device] -= key.size * list.size();
        released += key.size * list.size();
        list.clear();
      }
    }
    for (void* p : blocks) (void)cudaFreeAsync(p, nullptr);
    if (!blocks.empty()) (void)cudaStreamSynchronize(nullptr);  // back in the pool before the retry
    return released;
  }

 private:
  struct Key {
    int device;
    std::size_t size;
    friend bool operator<(const Key& a, const Key& b) noexcept {
      return a.device != b.device ? a.device < b.device : a.size < b.size;
    }
  };
  std::mutex mu_;  // a leaf: nothing is called under it
  std::map<Key, std::vector<void*>> free_;
  std::map<int, std::size_t> cached_;
};

BlockCache& block_cache() {
  static auto* cache = new BlockCache();  // never destroyed: storages come back during exit
  return *cache;
}

class DeviceStorage final : public Storage {
 public:
  DeviceStorage(void* data, std::size_t bytes, Device device) : Storage(data, bytes, device) {}
  ~DeviceStorage() override {
    if (g_shut_down.load(std::memory_order_acquire)) return;
    // Every op using the memory has finished (they hold references until then): the block is
    // idle. Kept for the next allocation of its size, or back to the pool at once, on any
    // stream.
    if (!escaped() && block_cache().give(device().index(), cached_size(bytes()), data())) return;
    DeviceScope scope(device().index(), std::nothrow);
    if (const cudaError_t st = cudaFreeAsync(data(), nullptr); st != cudaSuccess) {
      char what[32];  // a destructor: no allocation for the message
      std::snprintf(what, sizeof what, "on cuda:%d", device().index());
      check_nothrow(st, "cudaFreeAsync", what);
    }
  }
};

// Size classes: powers of two from 4 KiB. Blocks above the largest class are pinned and
// unpinned one by one.
constexpr std::size_t kMinClass = 4096;
constexpr std::size_t kMaxClass = std::size_t{1} << 30;
constexpr std::size_t kMaxCached = std::size_t{2} << 30;  // pinned bytes kept for reuse

class PinnedPool {
 public:
  void* take(std::size_t bytes, std::size_t& capacity) {
    capacity = round(bytes);
    {
      std::lock_guard lock(mu_);
      auto& list = free_[capacity];
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        cached_ -= capacity;
        return p;
      }
    }
    void* p = nullptr;
    check(cudaHostAlloc(&p, capacity, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc",
          "for " + std::to_string(bytes) + " bytes of pinned host memory");
    return p;
  }
  void give(void* p, std::size_t capacity) noexcept {
    {
      std::lock_guard lock(mu_);
      if (capacity <= kMaxClass && cached_ + capacity <= kMaxCached) {
        try {
          free_[capacity].push_back(p);
          cached_ += capacity;
          return;
        } catch (...) {
        }
      }
    }
    check_nothrow(cudaFreeHost(p), "cudaFreeHost", "");
  }

 private:
  static std::size_t round(std::size_t bytes) {
    if (bytes > kMaxClass) return (bytes + kMinClass - 1) / kMinClass * kMinClass;
    std::size_t c = kMinClass;
    while (c < bytes) c <<= 1;
    return c;
  }
  std::mutex mu_;
  std::map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0;
};

PinnedPool& pinned_pool() {
  static auto* pool = new PinnedPool();  // never destroyed: blocks come back during exit
  return *pool;
}

class PinnedStorage final : public Storage {
 public:
  PinnedStorage(void* data, std::size_t bytes, std::size_t capacity)
      : Storage(data, bytes, Device::cpu()), capacity_(capacity) {}
  ~PinnedStorage() override { pinned_pool().give(data(), capacity_); }

 private:
  std::size_t capacity_;
};

// Pinned words, handed out from pages of pinned memory, one word per cache line so that the
// GPU's writes to one counter do not disturb the host's reads of another.
constexpr std::size_t kWordPageBytes = 4096;
constexpr std::size_t kCacheLineBytes = 64;

// A word of a page: its address for the host and for the GPU.
struct WordSlot {
  std::uint64_t* host = nullptr;
  CUdeviceptr device = 0;
};

class WordPool {
 public:
  WordSlot take() {
    std::lock_guard lock(mu_);
    if (free_.empty()) grow();
    WordSlot w = free_.back();
    free_.pop_back();
    *w.host = 0;
    return w;
  }
  void give(WordSlot w) noexcept {
    std::lock_guard lock(mu_);
    try {
      free_.push_back(w);
    } catch (...) {
      // Lost: one word.
    }
  }

 private:
  void grow() {
    void* page = nullptr;
    check(cudaHostAlloc(&page, kWordPageBytes, cudaHostAllocMapped | cudaHostAllocPortable),
          "cudaHostAlloc", "for timeline counters");
    std::memset(page, 0, kWordPageBytes);
    void* dev = nullptr;
    check(cudaHostGetDevicePointer(&dev, page, 0), "cudaHostGetDevicePointer", "for timeline counters");
    for (std::size_t off = 0; off < kWordPageBytes; off += kCacheLineBytes) {
      free_.push_back(WordSlot{reinterpret_cast<std::uint64_t*>(static_cast<char*>(page) + off),
                               reinterpret_cast<CUdeviceptr>(static_cast<char*>(dev) + off)});
    }
  }
  std::mutex mu_;
  std::vector<WordSlot> free_;
};

WordPool& word_pool() {
  static auto* pool = new WordPool();  // never destroyed: words come back during exit
  return *pool;
}

}  // namespace

void memory_shutdown() noexcept { g_shut_down.store(true, std::memory_order_release); }

bool memory_shut_down() noexcept { return g_shut_down.load(std::memory_order_acquire); }

void configure_pool(Device device) {
  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, device.index()), "cudaDeviceGetDefaultMemPool",
        "on " + device.str());
  std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
        "cudaMemPoolSetAttribute", "(release threshold) on " + device.str());
}

std::size_t empty_cache(Device device) noexcept {
  DeviceScope scope(device.index(), std::nothrow);
  const std::size_t released = block_cache().release_all(device.index());
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, device.index()) == cudaSuccess) (void)cudaMemPoolTrimTo(pool, 0);
  (void)cudaGetLastError();
  return released;
}

Ref<Storage> allocate_device(Device device, std::size_t bytes, cudaStream_t stream) {
  const std::size_t size = cached_size(bytes);
  void* p = size <= kLargestCachedBlock ? block_cache().take(device.index(), size) : nullptr;
  if (!p) {
    DeviceScope scope(device);
    // Rounded as the cache rounds, so that the block can be kept when it comes back.
    cudaError_t st = cudaMallocAsync(&p, size, stream);
    if (st == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      block_cache().release_all(device.index());
      st = cudaMallocAsync(&p, size, stream);
    }
    check(st, "cudaMallocAsync", [&] { return "for " + std::to_string(bytes) + " bytes on " + device.str(); });
  }
  try {
    return Ref<Storage>(new DeviceStorage(p, bytes, device));
  } catch (...) {
    if (!block_cache().give(device.index(), size, p)) (void)cudaFreeAsync(p, stream);
    throw;
  }
}

namespace {

// The allocator's own stream on each device, made at first use and kept for the process (no
// work but allocations is queued there).
cudaStream_t settling_stream(Device device) {
  static std::mutex mu;
  static auto* streams = new std::vector<cudaStream_t>();  // never destroyed: used until exit
  std::lock_guard lock(mu);
  const auto index = static_cast<std::size_t>(device.index());
  if (streams->size() <= index) streams->resize(index + 1, nullptr);
  cudaStream_t& s = (*streams)[index];
  if (!s) {
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
          [&] { return "(the allocator's stream on " + device.str() + ")"; });
  }
  return s;
}

}  // namespace

Ref<Storage> allocate_device_settled(Device device, std::size_t bytes) {
  DeviceScope scope(device);
  cudaStream_t own = settling_stream(device);
  Ref<Storage> storage = allocate_device(device, bytes, own);
  // A new block may be ordered after frees on other streams, in `own`'s order (a cached one
  // is idle already; the wait is then for an idle stream).
  check(cudaStreamSynchronize(own), "cudaStreamSynchronize",
        [&] { return "(the allocator's stream on " + device.str() + ")"; });
  return storage;
}

Ref<Storage> allocate_pinned(std::size_t bytes) {
  std::size_t capacity = 0;
  void* p = pinned_pool().take(bytes, capacity);
  return Ref<Storage>(new PinnedStorage(p, bytes, capacity));
}

PinnedWord PinnedWord::acquire() {
  const WordSlot w = word_pool().take();
  return PinnedWord(w.host, w.device);
}

void PinnedWord::release() noexcept {
  if (host_) word_pool().give(WordSlot{std::exchange(host_, nullptr), std::exchange(device_, 0)});
}

}  // namespace eventide::backends::cuda
