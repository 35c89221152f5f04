// Memory of the CPU backend (cpu_memory.hpp).
#include "backends/cpu/cpu_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "eventide/errors.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define EVENTIDE_CPU_HEAP_ONLY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EVENTIDE_CPU_HEAP_ONLY 1
#endif
#endif

namespace eventide::backends::cpu {

using detail::Ref;

namespace {

constexpr std::size_t kAlignment = 64;                    // a cache line; AVX-512 loads
constexpr std::size_t kPage = 4096;                       // what mmap hands out (at least)
constexpr std::size_t kHugePage = std::size_t{2} << 20;   // x86-64's transparent huge page

[[noreturn]] void out_of_memory(std::size_t bytes, const char* call) {
  throw DeviceError("out of memory: could not allocate " + std::to_string(bytes) + " bytes on cpu",
                    call, ENOMEM);
}

// A small tensor's memory and its header in one block of the C heap: the header in the first
// cache line, the data after it.
class HeapStorage final : public detail::Storage {
 public:
  static Ref<detail::Storage> make(std::size_t bytes) {
    std::size_t data = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* block = data >= bytes && data <= SIZE_MAX - kAlignment
                      ? std::aligned_alloc(kAlignment, kAlignment + data)
                      : nullptr;
    if (!block) out_of_memory(bytes, "aligned_alloc");
    return Ref<detail::Storage>(::new (block) HeapStorage(static_cast<char*>(block) + kAlignment, bytes));
  }
  // `delete this` (the last reference) frees the whole block, header and data.
  static void operator delete(void* block) { std::free(block); }

 private:
  HeapStorage(void* data, std::size_t bytes) : Storage(data, bytes, Device::cpu()) {}
};
static_assert(sizeof(HeapStorage) <= kAlignment);

// The size class of a large block: `bytes` rounded up to the page, then to an eighth of the
// power of two at or below it. 0 where that would overflow.
std::size_t size_class(std::size_t bytes) noexcept {
  if (bytes > (SIZE_MAX >> 2)) return 0;
  const std::size_t paged = (bytes + kPage - 1) / kPage * kPage;
  const int top = 63 - __builtin_clzll(static_cast<unsigned long long>(paged));
  const std::size_t step = std::max(kPage, std::size_t{1} << (top - 3));
  return (paged + step - 1) / step * step;
}

// The memory limit of this process's cgroup (v2's memory.max, v1's memory.limit_in_bytes),
// or SIZE_MAX where there is none: a container's limit, not the machine's RAM, is what the
// kernel holds the process to.
std::size_t cgroup_limit() noexcept {
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::FILE* f = std::fopen(path, "r");
    if (!f) continue;
    char text[64] = {};
    const bool read = std::fgets(text, sizeof text, f) != nullptr;
    std::fclose(f);
    if (!read) continue;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (end != text && v > 0) return static_cast<std::size_t>(std::min<unsigned long long>(v, SIZE_MAX));
    // "max": no limit at this level
  }
  return SIZE_MAX;
}

std::size_t read_limit() noexcept {
  if (const char* env = std::getenv("EVENTIDE_CPU_CACHE_MB")) {
    char* end = nullptr;
    const unsigned long long mb = std::strtoull(env, &end, 10);
    if (end != env && *end == '\0' && *env != '-' && mb <= (SIZE_MAX >> 20)) return static_cast<std::size_t>(mb) << 20;
    // (Once: the limit is read once per process.)
    std::fprintf(stderr,
                 "eventide: EVENTIDE_CPU_CACHE_MB='%.64s' is not a whole number of MiB (0 turns the "
                 "cache off); the default limit is used\n",
                 env);
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::size_t machine = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                                                    : std::size_t{4} << 30;
  return std::min({machine / 4, cgroup_limit() / 4, std::size_t{16} << 30});
}

// A mapping of `bytes` (a size class: a multiple of the page); from 2 MiB on, aligned to 2 MiB
// and advised as huge pages. Null if the kernel refuses.
void* map_block(std::size_t bytes) noexcept {
  if (bytes < kHugePage) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  const std::size_t span = bytes + kHugePage;
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > start) ::munmap(p, aligned - start);
  if (const std::size_t tail = start + span - (aligned + bytes); tail > 0) {
    ::munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  }
  // Advice: without transparent huge pages (or with them "never") it changes nothing.
  ::madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

class BlockCache {
 public:
  BlockCache() : limit_(read_limit()) {}

  // A block of class `bytes`: a free one, else a new mapping (the cache emptied and tried
  // again if the kernel refuses). Null if there is no memory.
  void* take(std::size_t bytes) noexcept {
    {
      std::lock_guard lock(mu_);
      if (auto it = free_.find(bytes); it != free_.end() && !it->second.empty()) {
        void* block = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= bytes;
        --cached_blocks_;
        ++reused_;
        return block;
      }
    }
    void* block = map_block(bytes);
    if (!block && empty() > 0) block = map_block(bytes);
    if (block) mapped_.fetch_add(1, std::memory_order_relaxed);
    return block;
  }

  // Keeps `block` (of class `bytes`) for reuse, or unmaps it if the cache is full.
  void give_back(void* block, std::size_t bytes) noexcept {
    {
      std::lock_guard lock(mu_);
      if (bytes <= limit_ && cached_bytes_ <= limit_ - bytes) {
        try {
          free_[bytes].push_back(block);
          cached_bytes_ += bytes;
          ++cached_blocks_;
          return;
        } catch (...) {
          // No room for the list's entry: the block goes back to the kernel instead.
        }
      }
    }
    ::munmap(block, bytes);
  }

  std::size_t empty() noexcept {
    std::map<std::size_t, std::vector<void*>> taken;
    {
      std::lock_guard lock(mu_);
      taken.swap(free_);
      cached_bytes_ = 0;
      cached_blocks_ = 0;
    }
    std::size_t released = 0;
    for (auto& [bytes, blocks] : taken) {
      for (void* block : blocks) ::munmap(block, bytes);
      released += bytes * blocks.size();
    }
    return released;
  }

  CacheStats stats() noexcept {
    std::lock_guard lock(mu_);
    return CacheStats{cached_bytes_, cached_blocks_, limit_, reused_, mapped_.load(std::memory_order_relaxed)};
  }

 private:
  const std::size_t limit_;
  std::mutex mu_;
  std::map<std::size_t, std::vector<void*>> free_;  // by size class (under mu_)
  std::size_t cached_bytes_ = 0;
  std::size_t cached_blocks_ = 0;
  std::size_t reused_ = 0;
  std::atomic<std::size_t> mapped_{0};
};

// Never destroyed: storages may go after statics. Replaced in a forked child (see below).
std::atomic<BlockCache*>& cache_slot() {
  static std::atomic<BlockCache*> slot{new BlockCache};
  return slot;
}
BlockCache& cache() { return *cache_slot().load(std::memory_order_acquire); }

// A large tensor's memory: a block of the cache, and a header of its own on the C heap.
class CachedStorage final : public detail::Storage {
 public:
  CachedStorage(void* block, std::size_t block_bytes, std::size_t bytes) noexcept
      : Storage(block, bytes, Device::cpu()), block_bytes_(block_bytes) {}
  ~CachedStorage() override { cache().give_back(data(), block_bytes_); }

 private:
  const std::size_t block_bytes_;
};

}  // namespace

Ref<detail::Storage> allocate_host_memory(std::size_t bytes) {
#if defined(EVENTIDE_CPU_HEAP_ONLY)
  return HeapStorage::make(bytes);
#else
  if (bytes < kCachedFrom) return HeapStorage::make(bytes);
  const std::size_t block_bytes = size_class(bytes);
  if (block_bytes == 0) out_of_memory(bytes, "mmap");
  void* block = cache().take(block_bytes);
  if (!block) out_of_memory(bytes, "mmap");
  try {
    return Ref<detail::Storage>(new CachedStorage(block, block_bytes, bytes));
  } catch (...) {
    cache().give_back(block, block_bytes);
    throw;
  }
#endif
}

CacheStats cache_stats() noexcept { return cache().stats(); }

bool caches_large_blocks() noexcept {
#if defined(EVENTIDE_CPU_HEAP_ONLY)
  return false;
#else
  return cache().stats().limit_bytes > 0;
#endif
}

std::size_t empty_cache() noexcept { return cache().empty(); }

void cache_after_fork_in_child() noexcept {
  // Another thread may have held the lock, or been changing the lists, when the process
  // forked: the child starts a cache of its own and leaves the copy alone (its free blocks
  // stay mapped, unused). Blocks of live storages go back to the new one.
  if (auto* fresh = new (std::nothrow) BlockCache) cache_slot().store(fresh, std::memory_order_release);
}

}  // namespace eventide::backends::cpu
