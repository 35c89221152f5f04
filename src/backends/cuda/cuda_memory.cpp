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

class DeviceStorage final : public Storage {
 public:
  DeviceStorage(void* data, std::size_t bytes, Device device) : Storage(data, bytes, device) {}
  ~DeviceStorage() override {
    if (g_shut_down.load(std::memory_order_acquire)) return;
    // Every op using the memory has finished (they hold references until then), so it can go
    // back to the pool at once, on any stream.
    int previous = -1;
    cudaGetDevice(&previous);
    if (previous != device().index()) cudaSetDevice(device().index());
    if (const cudaError_t st = cudaFreeAsync(data(), nullptr); st != cudaSuccess) {
      char what[32];  // a destructor: no allocation for the message
      std::snprintf(what, sizeof what, "on cuda:%d", device().index());
      check_nothrow(st, "cudaFreeAsync", what);
    }
    if (previous >= 0 && previous != device().index()) cudaSetDevice(previous);
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

void configure_pool(Device device) {
  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, device.index()), "cudaDeviceGetDefaultMemPool",
        "on " + device.str());
  std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
        "cudaMemPoolSetAttribute", "(release threshold) on " + device.str());
}

Ref<Storage> allocate_device(Device device, std::size_t bytes, cudaStream_t stream) {
  use_device(device);
  void* p = nullptr;
  // A zero-byte tensor still gets a distinct, valid pointer.
  check(cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, stream), "cudaMallocAsync",
        "for " + std::to_string(bytes) + " bytes on " + device.str());
  return Ref<Storage>(new DeviceStorage(p, bytes, device));
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
