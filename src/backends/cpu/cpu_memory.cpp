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
using detail::Work;

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

class BlockCache;
BlockCache& cache();

// A mapped block of a size class, shared by the storages over it: the tensor it was taken for,
// and those it went to in stream order while ops of an earlier one still ran. Back to the cache
// when the last of them, and the cache's hold on it, are gone.
class Block final : public detail::RefCounted {
 public:
  Block(void* data, std::size_t bytes) noexcept : data(data), bytes(bytes) {}
  ~Block() override;

  void* const data;
  const std::size_t bytes;  // its size class
};

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
      if (bytes <= limit_ && cached_bytes_ + held_bytes_ <= limit_ - bytes) {
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

  // Holds `block`, whose tensor is gone while `last_use` (and earlier work of its timeline)
  // may still use it, for the next output of that timeline; lets go of it instead if that
  // would go over the limit.
  void hold(Ref<Block> block, Ref<Work> last_use) noexcept {
    // Whatever is not kept goes after the lock: a Block's end takes it, and a Work may hold
    // the user's error.
    Held entry{std::move(block), std::move(last_use)};
    std::vector<Held> finished;
    std::lock_guard lock(mu_);
    const std::size_t bytes = entry.block->bytes;
    if (bytes > limit_) return;
    if (cached_bytes_ + held_bytes_ > limit_ - bytes) {
      for (auto& [class_bytes, list] : held_) take_finished_locked(list, class_bytes, finished);
    }
    if (cached_bytes_ + held_bytes_ > limit_ - bytes) return;
    try {
      std::vector<Held>& list = held_[bytes];
      // Those of its class whose ops have finished are only free blocks now.
      take_finished_locked(list, bytes, finished);
      list.push_back(std::move(entry));  // (strong guarantee: `entry` is intact if it throws)
      held_bytes_ += bytes;
    } catch (...) {
      // No room for an entry: the block goes back when its last reference does.
    }
  }

  // A held block of class `bytes` that `timeline`'s next op may use: one whose last use is on
  // `timeline` (the newest first: its pages are the likeliest in the CPU's caches), or has
  // finished. Null if none.
  Ref<Block> take_held(std::size_t bytes, const detail::Timeline& timeline) noexcept {
    Held found;
    {
      std::lock_guard lock(mu_);
      auto it = held_.find(bytes);
      if (it == held_.end()) return nullptr;
      std::vector<Held>& list = it->second;
      for (std::size_t i = list.size(); i-- > 0;) {
        const Work& last = *list[i].last_use;
        if (&last.timeline() == &timeline || last.done()) {
          found = std::move(list[i]);
          list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
          held_bytes_ -= bytes;
          ++recycled_;
          break;
        }
      }
    }
    return std::move(found.block);
  }

  std::size_t empty() noexcept {
    // The held blocks first, let go of after the lock: those whose ops have finished come
    // back as free blocks, given back below.
    std::map<std::size_t, std::vector<Held>> held;
    {
      std::lock_guard lock(mu_);
      held.swap(held_);
      held_bytes_ = 0;
    }
    held.clear();
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
    return CacheStats{cached_bytes_, cached_blocks_, held_bytes_, limit_, reused_, recycled_,
                      mapped_.load(std::memory_order_relaxed)};
  }

 private:
  struct Held {
    Ref<Block> block;
    Ref<Work> last_use;
  };

  // Moves the blocks of `list` (class `bytes`) whose ops have finished to `out`.
  void take_finished_locked(std::vector<Held>& list, std::size_t bytes, std::vector<Held>& out) noexcept {
    for (std::size_t i = 0; i < list.size();) {
      if (!list[i].last_use->done()) {
        ++i;
        continue;
      }
      try {
        out.push_back(std::move(list[i]));
      } catch (...) {
        return;  // no room to let go of it later: it stays held
      }
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
      held_bytes_ -= bytes;
    }
  }

  const std::size_t limit_;
  std::mutex mu_;
  std::map<std::size_t, std::vector<void*>> free_;  // by size class (under mu_)
  std::map<std::size_t, std::vector<Held>> held_;   // by size class, oldest first (under mu_)
  std::size_t cached_bytes_ = 0;
  std::size_t cached_blocks_ = 0;
  std::size_t held_bytes_ = 0;
  std::size_t reused_ = 0;
  std::size_t recycled_ = 0;
  std::atomic<std::size_t> mapped_{0};
};

// Never destroyed: storages may go after statics. Replaced in a forked child (see below).
std::atomic<BlockCache*>& cache_slot() {
  static std::atomic<BlockCache*> slot{new BlockCache};
  return slot;
}
BlockCache& cache() { return *cache_slot().load(std::memory_order_acquire); }

Block::~Block() { cache().give_back(data, bytes); }

// A large tensor's memory: a block of the cache, and a header of its own on the C heap.
class CachedStorage final : public detail::Storage {
 public:
  CachedStorage(Ref<Block> block, std::size_t bytes) noexcept
      : Storage(block->data, bytes, Device::cpu()), block_(std::move(block)) {}
  void recycle_after(Ref<Work> last_use) noexcept override { cache().hold(block_, std::move(last_use)); }

 private:
  const Ref<Block> block_;
};

}  // namespace

Ref<detail::Storage> allocate_host_memory(std::size_t bytes, const detail::Timeline* stream_order) {
#if defined(EVENTIDE_CPU_HEAP_ONLY)
  (void)stream_order;
  return HeapStorage::make(bytes);
#else
  if (bytes < kCachedFrom) return HeapStorage::make(bytes);
  const std::size_t block_bytes = size_class(bytes);
  if (block_bytes == 0) out_of_memory(bytes, "mmap");
  Ref<Block> block = stream_order ? cache().take_held(block_bytes, *stream_order) : nullptr;
  if (!block) {
    void* data = cache().take(block_bytes);
    if (!data) out_of_memory(bytes, "mmap");
    Block* fresh = new (std::nothrow) Block(data, block_bytes);
    if (!fresh) {
      cache().give_back(data, block_bytes);
      out_of_memory(bytes, "operator new");
    }
    block = Ref<Block>(fresh);
  }
  // (If the header cannot be had, the block goes back as `block` goes.)
  return Ref<detail::Storage>(new CachedStorage(std::move(block), bytes));
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
