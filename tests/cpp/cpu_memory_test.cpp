// The CPU backend's memory (src/backends/cpu/cpu_memory.hpp): large blocks come back from a
// cache, never while an op still uses them, and every op writes its output whole, whatever
// the block held before.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/cpu_memory.hpp"
#include "eventide/eventide.hpp"
#include "test_util.hpp"

namespace {

namespace ev = eventide;
namespace cpu = eventide::backends::cpu;
using namespace eventide_test;
using namespace std::chrono_literals;

constexpr std::int64_t kLarge = 1 << 20;  // f32 elements: 4 MiB, a cached (and huge-page) block

#define REQUIRE_CACHE()                                                                      \
  if (!cpu::caches_large_blocks()) GTEST_SKIP() << "large blocks are not cached in this build " \
                                                   "(AddressSanitizer, or EVENTIDE_CPU_CACHE_MB=0)"

TEST(CpuMemoryTest, ALargeTensorsBlockGoesToTheNextTensorOfItsSize) {
  REQUIRE_CACHE();
  run_with_deadline([] {
    ev::Tensor a = ev::ones({kLarge}, ev::DType::f32, ev::Device::cpu());
    ASSERT_TRUE(a.wait_for(30s));
    void* first = a.data_ptr();
    a = ev::Tensor();  // its op has finished: the block goes back at once
    const auto before = cpu::cache_stats();
    EXPECT_GE(before.cached_bytes, static_cast<std::size_t>(kLarge) * 4);
    ev::Tensor b = ev::empty({kLarge}, ev::DType::f32, ev::Device::cpu());
    EXPECT_EQ(b.data_ptr(), first);
    EXPECT_EQ(cpu::cache_stats().reused, before.reused + 1);
    // A size within the same class (an eighth of a power of two) shares it; a small tensor
    // does not come from the cache.
    void* second = b.data_ptr();
    b = ev::Tensor();
    ev::Tensor c = ev::empty({kLarge - 1000}, ev::DType::f32, ev::Device::cpu());
    EXPECT_EQ(c.data_ptr(), second);
    const auto mid = cpu::cache_stats();
    ev::Tensor small = ev::empty({16}, ev::DType::f32, ev::Device::cpu());
    EXPECT_EQ(cpu::cache_stats().reused, mid.reused);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c.data_ptr()) % 64, 0u);
  });
}

TEST(CpuMemoryTest, ABlockIsNotReusedWhileAnOpStillUsesIt) {
  REQUIRE_CACHE();
  run_with_deadline([] {
    ev::Stream s(ev::Device::cpu());
    ev::UserEvent gate;
    s.wait(gate);
    ev::Tensor x = ev::full({kLarge}, 2.0, ev::DType::f32, ev::Device::cpu());
    ASSERT_TRUE(x.wait_for(30s));
    void* held = x.data_ptr();
    ev::Tensor y;
    {
      ev::StreamGuard guard(s);
      y = ev::add(x, x);  // held behind the gate: it reads x later
    }
    x = ev::Tensor();  // the user lets go; the op still holds x's memory
    std::vector<ev::Tensor> others;
    for (int i = 0; i < 8; ++i) {
      others.push_back(ev::full({kLarge}, -1.0, ev::DType::f32, ev::Device::cpu()));
      EXPECT_NE(others.back().data_ptr(), held) << "x's block was handed out while an op reads it";
    }
    for (auto& t : others) ASSERT_TRUE(t.wait_for(30s));
    gate.set();
    ASSERT_TRUE(y.wait_for(30s));
    for (float v : y.to_vector<float>()) ASSERT_EQ(v, 4.0f);
  });
}

// Issue 26, item 4: temporaries issued far ahead of the stream reuse one block, not one each.
TEST(CpuMemoryTest, ATemporaryDroppedAheadOfItsStreamGoesToTheStreamsNextOutput) {
  REQUIRE_CACHE();
  run_with_deadline([] {
    const ev::Device c = ev::Device::cpu();
    ev::Stream s(c);
    ev::UserEvent gate;
    s.wait(gate);  // nothing below runs before the checks
    ev::Tensor x, y, last;
    const auto before = cpu::cache_stats();
    {
      ev::StreamGuard guard(s);
      x = ev::full({kLarge}, 2.0, ev::DType::f32, c);
      y = ev::add(x, x);  // reads x later
      x = ev::Tensor();   // let go of while the add still has to read it
      for (int i = 0; i < 64; ++i) {
        ev::Tensor t = ev::ones({kLarge}, ev::DType::f32, c);  // overwrites x's block: after the add
      }
      last = ev::full({kLarge}, -1.0, ev::DType::f32, c);
    }
    const auto issued = cpu::cache_stats();
    EXPECT_FALSE(y.ready());
    // x's block went to the first `ones`, and on from each to the next: one block for 66.
    EXPECT_GE(issued.recycled, before.recycled + 65);
    EXPECT_LE(issued.mapped, before.mapped + 2);  // y's block, and at most one more
    gate.set();
    ASSERT_TRUE(last.wait_for(30s));
    for (float v : y.to_vector<float>()) ASSERT_EQ(v, 4.0f) << "the add read x after it was overwritten";
    for (float v : last.to_vector<float>()) ASSERT_EQ(v, -1.0f);
  });
}

TEST(CpuMemoryTest, AHeldBlockGoesToNoOtherStreamBeforeItsOpsFinish) {
  REQUIRE_CACHE();
  run_with_deadline([] {
    const ev::Device c = ev::Device::cpu();
    ev::Stream s(c);
    ev::UserEvent gate;
    s.wait(gate);
    ev::Tensor x = ev::full({kLarge}, 2.0, ev::DType::f32, c);
    ASSERT_TRUE(x.wait_for(30s));
    ev::Tensor y;
    {
      ev::StreamGuard guard(s);
      y = ev::add(x, x);
    }
    x = ev::Tensor();
    const auto before = cpu::cache_stats();
    EXPECT_GE(before.held_bytes, static_cast<std::size_t>(kLarge) * 4);
    std::vector<ev::Tensor> others;  // on the default stream, which runs now
    for (int i = 0; i < 4; ++i) others.push_back(ev::full({kLarge}, -1.0, ev::DType::f32, c));
    for (auto& t : others) ASSERT_TRUE(t.wait_for(30s));
    EXPECT_EQ(cpu::cache_stats().recycled, before.recycled);
    gate.set();
    ASSERT_TRUE(y.wait_for(30s));
    for (float v : y.to_vector<float>()) ASSERT_EQ(v, 4.0f);
    // Finished, the held block is an ordinary free one: any stream may have it.
    others.clear();
    ev::Tensor z = ev::full({kLarge}, 5.0, ev::DType::f32, c);
    for (float v : z.to_vector<float>()) ASSERT_EQ(v, 5.0f);
  });
}

TEST(CpuMemoryTest, MemoryUsedByTwoStreamsOrEscapedIsNotHeld) {
  REQUIRE_CACHE();
  run_with_deadline([] {
    const ev::Device c = ev::Device::cpu();
    ev::Stream s1(c), s2(c);
    ev::UserEvent gate;
    s1.wait(gate);
    s2.wait(gate);
    ev::Tensor x = ev::full({kLarge}, 2.0, ev::DType::f32, c);
    ev::Tensor e = ev::full({kLarge}, 3.0, ev::DType::f32, c);
    ASSERT_TRUE(x.wait_for(30s) && e.wait_for(30s));
    (void)e.data_ptr();  // handed out: uses of it may be anybody's
    ev::Tensor y1, y2, y3;
    {
      ev::StreamGuard guard(s1);
      y1 = ev::add(x, x);
      y3 = ev::add(e, e);
    }
    {
      ev::StreamGuard guard(s2);
      y2 = ev::mul(x, x);
    }
    const auto before = cpu::cache_stats();
    x = ev::Tensor();
    e = ev::Tensor();
    EXPECT_EQ(cpu::cache_stats().held_bytes, before.held_bytes);
    gate.set();
    for (float v : y1.to_vector<float>()) ASSERT_EQ(v, 4.0f);
    for (float v : y2.to_vector<float>()) ASSERT_EQ(v, 4.0f);
    for (float v : y3.to_vector<float>()) ASSERT_EQ(v, 6.0f);
  });
}

TEST(CpuMemoryTest, EveryOpWritesItsOutputWholeOverAReusedBlock) {
  run_with_deadline([] {
    const ev::Device c = ev::Device::cpu();
    auto dirty = [&] {
      // A block of every size used below, full of NaN, let go: the next outputs reuse them.
      for (std::int64_t n : {kLarge, std::int64_t{512 * 512}, std::int64_t{2 * kLarge}}) {
        ev::Tensor t = ev::full({n}, std::nan(""), ev::DType::f32, c);
        ASSERT_TRUE(t.wait_for(30s));
      }
    };
    auto all_equal = [](const ev::Tensor& t, float want) {
      for (float v : t.to_vector<float>()) {
        if (v != want) return false;
      }
      return true;
    };
    dirty();
    EXPECT_TRUE(all_equal(ev::zeros({kLarge}, ev::DType::f32, c), 0.0f));
    dirty();
    EXPECT_TRUE(all_equal(ev::full({kLarge}, 3.0, ev::DType::f32, c), 3.0f));
    ev::Tensor ones = ev::ones({kLarge}, ev::DType::f32, c);
    dirty();
    EXPECT_TRUE(all_equal(ev::add(ones, ones), 2.0f));
    dirty();
    EXPECT_TRUE(all_equal(ev::mul(ones, ones), 1.0f));
    ev::Tensor m = ev::ones({512, 512}, ev::DType::f32, c);
    dirty();
    EXPECT_TRUE(all_equal(ev::matmul(m, m), 512.0f));
    dirty();
    EXPECT_TRUE(all_equal(ev::cast(ev::cast(ones, ev::DType::f64), ev::DType::f32), 1.0f));
    // Random numbers: the same seed gives the same tensor over a dirty block as over any other.
    ev::manual_seed(7);
    std::vector<float> first = ev::rand({kLarge}, ev::DType::f32, c).to_vector<float>();
    dirty();
    ev::manual_seed(7);
    EXPECT_EQ(ev::rand({kLarge}, ev::DType::f32, c).to_vector<float>(), first);
  });
}

TEST(CpuMemoryTest, EmptyCacheGivesTheFreeBlocksBack) {
  REQUIRE_CACHE();
  run_with_deadline([] {
    {
      ev::Tensor t = ev::ones({kLarge}, ev::DType::f32, ev::Device::cpu());
      ASSERT_TRUE(t.wait_for(30s));
    }
    ASSERT_GT(cpu::cache_stats().cached_bytes, 0u);
    EXPECT_GE(ev::empty_cache(), static_cast<std::size_t>(kLarge) * 4);
    EXPECT_EQ(cpu::cache_stats().cached_bytes, 0u);
    EXPECT_EQ(cpu::cache_stats().cached_blocks, 0u);
    // A held block too, once its ops have finished (its stream synchronized).
    {
      ev::Stream s(ev::Device::cpu());
      ev::StreamGuard guard(s);
      ev::Tensor x = ev::ones({kLarge}, ev::DType::f32, ev::Device::cpu());
      ev::Tensor y = ev::add(x, x);
      x = ev::Tensor();
      y = ev::Tensor();
      s.synchronize();
    }
    ev::empty_cache();
    EXPECT_EQ(cpu::cache_stats().cached_bytes, 0u);
    EXPECT_EQ(cpu::cache_stats().held_bytes, 0u);
    // Tensors made afterwards are mapped anew and work as before.
    ev::Tensor again = ev::full({kLarge}, 5.0, ev::DType::f32, ev::Device::cpu());
    for (float v : again.to_vector<float>()) ASSERT_EQ(v, 5.0f);
  });
}

}  // namespace
