// The CUDA backend, on a real GPU. Every test skips, saying why, where there is no GPU (CI);
// scripts/gpu-check.sh runs them on the GPU machine.
// One binary for the CUDA backend (the GPU machine runs it by name), hence the length: one
// section per part of the backend.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <limits>
#include <thread>
#include <vector>

#include <unistd.h>

#include <eventide/eventide.hpp>

#include "backends/cuda/cuda_kernels.hpp"
#include "gpu_skip.hpp"
#include "test_util.hpp"

namespace ev = eventide;
using namespace std::chrono_literals;
using eventide_test::run_with_deadline;

namespace {

const ev::Device kGpu = ev::Device::cuda(0);

#define REQUIRE_GPU() EVENTIDE_REQUIRE_DEVICE(kGpu)

std::vector<float> cpu_matmul(const std::vector<float>& a, const std::vector<float>& b, int m, int k,
                              int n) {
  std::vector<float> c(static_cast<std::size_t>(m) * n, 0.0f);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p)
      for (int j = 0; j < n; ++j) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

// A kernel spinning `ns` on the GPU, launched in `s`'s order through Stream::enqueue; its own
// start and end (GPU clock) land in `stamps` (device memory, 2 words).
ev::Event spin_on(ev::Stream& s, std::int64_t ns, unsigned long long* stamps,
                  std::vector<ev::Tensor> writes = {}) {
  cudaStream_t h = static_cast<cudaStream_t>(s.native_handle());
  return s.enqueue("spin", [=] { eventide::backends::cuda::kernels::spin(ns, stamps, h); }, {},
                   std::move(writes));
}

struct DeviceWords {
  unsigned long long* p = nullptr;
  DeviceWords() { cudaMalloc(&p, 64 * sizeof(unsigned long long)); }
  ~DeviceWords() { cudaFree(p); }
  std::vector<unsigned long long> read(int n) {
    std::vector<unsigned long long> h(n);
    cudaMemcpy(h.data(), p, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
    return h;
  }
};

// Whether op times come from CUPTI (the kernels' own times) rather than the fallback of CUDA
// event pairs: EVENTIDE_CUDA_TIMING, or CUPTI being unavailable (under compute-sanitizer).
bool times_are_cupti() {
  // After an op has run: the device's timing has started then (before, device_info says what
  // it is starting as, and CUPTI may still fail to start).
  ev::Tensor t = ev::ones({1}, ev::DType::f32, kGpu);
  t.wait();
  return ev::device_info(kGpu).description.find("op times: CUPTI") != std::string::npos;
}

}  // namespace

TEST(CudaTest, TheGpuIsFoundAndDescribed) {
  REQUIRE_GPU();
  auto all = ev::devices();
  EXPECT_NE(std::find(all.begin(), all.end(), kGpu), all.end());
  if (!std::getenv("EVENTIDE_DEVICE")) EXPECT_EQ(ev::default_device(), kGpu);
  ev::DeviceInfo info = ev::device_info(kGpu);
  EXPECT_FALSE(info.name.empty());
  EXPECT_NE(info.description.find("SMs"), std::string::npos) << info.description;
  std::printf("%s: %s\n", info.name.c_str(), info.description.c_str());
}

TEST(CudaTest, CreationOpsAndCopiesBackToTheHost) {
  REQUIRE_GPU();
  run_with_deadline([] {
    EXPECT_EQ(ev::full({3, 4}, 2.5, ev::DType::f32, kGpu).to_vector<float>(), std::vector<float>(12, 2.5f));
    EXPECT_EQ(ev::zeros({5}, ev::DType::f64, kGpu).to_vector<double>(), std::vector<double>(5, 0.0));
    EXPECT_EQ(ev::ones({4}, ev::DType::i64, kGpu).to_vector<std::int64_t>(), std::vector<std::int64_t>(4, 1));
    std::vector<std::int32_t> v{1, -2, 3, -4, 5, -6};
    ev::Tensor t = ev::from_host(v.data(), {2, 3}, kGpu);
    EXPECT_EQ(t.device(), kGpu);
    EXPECT_EQ(t.to_vector<std::int32_t>(), v);
    EXPECT_TRUE(ev::empty({0}, ev::DType::f32, kGpu).to_vector<float>().empty());
  });
}

TEST(CudaTest, RandMatchesTheCpuForTheSameSeed) {
  REQUIRE_GPU();
  run_with_deadline([] {
    for (ev::DType dt : {ev::DType::f32, ev::DType::f64}) {
      ev::manual_seed(1234);
      auto gpu = ev::rand({1001}, dt, kGpu);
      auto gpu_n = ev::randn({1001}, dt, kGpu);
      ev::manual_seed(1234);
      auto cpu = ev::rand({1001}, dt, ev::Device::cpu());
      auto cpu_n = ev::randn({1001}, dt, ev::Device::cpu());
      if (dt == ev::DType::f32) {
        EXPECT_EQ(gpu.to_vector<float>(), cpu.to_vector<float>());  // uniform: bit for bit
        auto a = gpu_n.to_vector<float>(), b = cpu_n.to_vector<float>();
        for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4) << i;
      } else {
        EXPECT_EQ(gpu.to_vector<double>(), cpu.to_vector<double>());
        auto a = gpu_n.to_vector<double>(), b = cpu_n.to_vector<double>();
        for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-9) << i;
      }
    }
  });
}

TEST(CudaTest, ElementwiseOpsForEveryDtype) {
  REQUIRE_GPU();
  run_with_deadline([] {
    std::vector<std::int64_t> a{1, 2, 3, INT64_MAX}, b{10, 20, 30, 1};
    auto ta = ev::from_host(a.data(), {4}, kGpu), tb = ev::from_host(b.data(), {4}, kGpu);
    EXPECT_EQ(ev::add(ta, tb).to_vector<std::int64_t>(), (std::vector<std::int64_t>{11, 22, 33, INT64_MIN}));
    EXPECT_EQ(ev::mul(ta, tb).to_vector<std::int64_t>(), (std::vector<std::int64_t>{10, 40, 90, INT64_MAX}));
    std::vector<float> x{1.5f, -2.0f}, y{2.0f, 4.0f};
    auto tx = ev::from_host(x.data(), {2}, kGpu), ty = ev::from_host(y.data(), {2}, kGpu);
    EXPECT_EQ((tx + ty).to_vector<float>(), (std::vector<float>{3.5f, 2.0f}));
    EXPECT_EQ((tx * ty).to_vector<float>(), (std::vector<float>{3.0f, -8.0f}));
    EXPECT_EQ((tx - ty).to_vector<float>(), (std::vector<float>{-0.5f, -6.0f}));
    EXPECT_EQ((tx / ty).to_vector<float>(), (std::vector<float>{0.75f, -0.5f}));
    EXPECT_EQ(ev::sub(ta, tb).to_vector<std::int64_t>(), (std::vector<std::int64_t>{-9, -18, -27, INT64_MAX - 1}));
    EXPECT_THROW(ev::div(ta, tb), ev::InvalidArgument);  // integers: no true division
    // f16 and bf16 compute on the GPU; read back through the CPU as raw bits.
    for (ev::DType dt : {ev::DType::f16, ev::DType::bf16}) {
      auto h = ev::add(ev::full({8}, 1.5, dt, kGpu), ev::full({8}, 2.0, dt, kGpu)).to(ev::Device::cpu());
      auto q = ev::div(ev::full({8}, 1.5, dt, kGpu), ev::full({8}, 2.0, dt, kGpu)).to(ev::Device::cpu());
      h.wait();
      q.wait();
      const auto* bits = static_cast<const std::uint16_t*>(h.data_ptr());
      std::uint16_t want = dt == ev::DType::f16 ? 0x4300 : 0x4060;  // 3.5
      EXPECT_EQ(bits[0], want) << ev::name(dt);
      const auto* qbits = static_cast<const std::uint16_t*>(q.data_ptr());
      EXPECT_EQ(qbits[0], dt == ev::DType::f16 ? 0x3A00 : 0x3F40) << ev::name(dt);  // 0.75
    }
  });
}

TEST(CudaTest, MatmulAgreesWithTheCpuForEveryDtype) {
  REQUIRE_GPU();
  run_with_deadline([] {
    const int m = 67, k = 129, n = 33;
    ev::manual_seed(7);
    auto a = ev::randn({m, k}, ev::DType::f32, ev::Device::cpu());
    auto b = ev::randn({k, n}, ev::DType::f32, ev::Device::cpu());
    auto want = cpu_matmul(a.to_vector<float>(), b.to_vector<float>(), m, k, n);
    auto got = ev::matmul(a.to(kGpu), b.to(kGpu)).to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-3) << i;

    // f64.
    std::vector<double> ad(m * k), bd(k * n);
    auto av = a.to_vector<float>(), bv = b.to_vector<float>();
    std::copy(av.begin(), av.end(), ad.begin());
    std::copy(bv.begin(), bv.end(), bd.begin());
    auto gd = ev::matmul(ev::from_host(ad.data(), {m, k}, kGpu), ev::from_host(bd.data(), {k, n}, kGpu))
                  .to_vector<double>();
    for (std::size_t i = 0; i < gd.size(); ++i) EXPECT_NEAR(gd[i], want[i], 1e-3) << i;

    // Batched.
    auto ba = ev::rand({3, 8, 5}, ev::DType::f32, kGpu), bb = ev::rand({3, 5, 4}, ev::DType::f32, kGpu);
    auto bc = ev::matmul(ba, bb);
    EXPECT_EQ(bc.shape(), (ev::Shape{3, 8, 4}));
    auto bav = ba.to_vector<float>(), bbv = bb.to_vector<float>(), bcv = bc.to_vector<float>();
    for (int i = 0; i < 3; ++i) {
      auto w = cpu_matmul(std::vector<float>(bav.begin() + i * 40, bav.begin() + (i + 1) * 40),
                          std::vector<float>(bbv.begin() + i * 20, bbv.begin() + (i + 1) * 20), 8, 5, 4);
      for (int j = 0; j < 32; ++j) EXPECT_NEAR(bcv[i * 32 + j], w[j], 1e-4);
    }

    // f16 and bf16: inputs of ones, so the exact result is k.
    for (ev::DType dt : {ev::DType::f16, ev::DType::bf16}) {
      auto c = ev::matmul(ev::ones({16, 64}, dt, kGpu), ev::ones({64, 8}, dt, kGpu)).to(ev::Device::cpu());
      c.wait();
      const auto* bits = static_cast<const std::uint16_t*>(c.data_ptr());
      std::uint16_t want64 = dt == ev::DType::f16 ? 0x5400 : 0x4280;  // 64.0
      EXPECT_EQ(bits[0], want64) << ev::name(dt);
    }

    // TF32 only when allowed: the op says so in its name, and stays close.
    ev::set_allow_tf32(true);
    ev::Event e;
    auto t = ev::matmul(a.to(kGpu), b.to(kGpu));
    e.record(t);
    e.wait();
    ev::set_allow_tf32(false);
    auto tv = t.to_vector<float>();
    for (std::size_t i = 0; i < tv.size(); ++i) EXPECT_NEAR(tv[i], want[i], 0.1) << i;
  });
}

TEST(CudaTest, EventsTrackGpuWork) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s(kGpu);
    DeviceWords w;
    ev::Event e;
    {
      ev::StreamGuard g(s);
      e.record(ev::zeros({4}, ev::DType::f32, kGpu));
    }
    e.wait();
    ev::Event before = s.record_event();
    spin_on(s, 20'000'000, w.p);  // 20 ms
    ev::Event f(kGpu);
    f.record(s);
    EXPECT_FALSE(f.poll());
    EXPECT_FALSE(s.query());
    EXPECT_FALSE(f.wait_for(1ms));
    f.wait();
    EXPECT_TRUE(f.poll());
    EXPECT_TRUE(s.query());
    EXPECT_EQ(f.time_elapsed().count(), 0.0) << "a marker is a point";
    EXPECT_GE(before.elapsed_time(f).count(), 19.0);
    EXPECT_EQ(f.device(), kGpu);
  });
}

// A timed marker's end is its own CUDA event (no progress write of its own): a stream that
// waits for it waits on the GPU for everything before it, a host wait and a poll loop see it
// finish only after the work before it, and soon after.
TEST(CudaTest, ATimedMarkerIsWaitedForOnTheGpuAndSeenSoonByAPollLoop) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s1(kGpu), s2(kGpu);
    DeviceWords w1, w2;
    ev::Event spun = spin_on(s1, 5'000'000, w1.p);  // 5 ms
    ev::Event m = s1.record_event();
    s2.wait(m);
    ev::Event after = spin_on(s2, 10'000, w2.p);
    ev::Event end_of_s2 = s2.record_event();
    EXPECT_FALSE(m.poll());
    end_of_s2.wait();
    EXPECT_TRUE(spun.poll()) << "s2's marker finished before s1's spin";
    EXPECT_TRUE(m.poll() && after.poll());
    const auto a = w1.read(2), b = w2.read(2);
    EXPECT_GE(b[0], a[1]) << "s2's kernel started before the spin that s1's marker follows ended";
    // A poll loop from the launch of a 20 ms spin: the watcher has backed off to sleeps of
    // milliseconds meanwhile, and looks when polled, so the loop sees the end soon after it.
    std::vector<double> late_us;
    for (int i = 0; i < 5; ++i) {
      ev::Event f(kGpu);
      const auto t0 = std::chrono::steady_clock::now();
      spin_on(s1, 20'000'000, w1.p);
      f.record(s1);
      while (!f.poll()) {
      }
      late_us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() - 20'000.0);
    }
    std::sort(late_us.begin(), late_us.end());
    std::printf("a poll loop on a marker after a 20 ms kernel: true %.1f us after it (median of 5)\n",
                late_us[2]);
    EXPECT_LT(late_us[2], 700.0) << "the watcher did not look when polled (it sleeps up to 2 ms)";
  });
}

// A body runs under its stream's launch lock. One that hands out its own stream's native
// handle for the first time (as the IPC export's record does) exposes the stream: what its
// launches left unpublished is published then, without the launch lock (issue 28, item 6).
TEST(CudaTest, ABodyMayHandOutItsOwnStreamsNativeHandle) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s(kGpu);
    ev::Event before = s.enqueue("before", [] {});  // its publication left for later
    void* seen = nullptr;
    ev::Event e = s.enqueue("asks", [&s, &seen] { seen = s.native_handle(); });
    EXPECT_TRUE(e.wait_for(10s));
    EXPECT_TRUE(before.poll());
    EXPECT_NE(seen, nullptr);
    // Exposed: from now on every op publishes at once (another library may capture it).
    ev::Event after = s.enqueue("after", [] {});
    EXPECT_TRUE(after.wait_for(10s));
  });
}

TEST(CudaTest, TimeElapsedIsTheKernelsOwnTimeWithinOneMicrosecond) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s(kGpu);
    DeviceWords w;
    double worst = 0;
    for (int i = 0; i < 20; ++i) {
      ev::Event e = spin_on(s, 10'000, w.p);  // ~10 µs by the GPU's own clock
      e.wait();
      auto stamps = w.read(2);
      double own_us = static_cast<double>(stamps[1] - stamps[0]) / 1e3;
      double ours = e.time_elapsed().count();
      worst = std::max(worst, std::abs(ours - own_us));
      if (i == 0) std::printf("kernel's own %.2f us, time_elapsed %.2f us\n", own_us, ours);
    }
    std::printf("largest difference over 20 kernels: %.3f us\n", worst);
    if (times_are_cupti()) EXPECT_LE(worst, 1.0);
  });
}

// The profiler puts GPU times (CUPTI's clock, or event pairs) on the host's clock: a kernel's
// bar is as long as the kernel's own time, a kernel that waits for another starts after it
// ends, and the host wait that saw it finish ends after it (within the calibration error).
TEST(CudaTest, TheProfilerPutsGpuOpsOnTheHostsClock) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s1(kGpu), s2(kGpu);
    DeviceWords w1, w2;
    ev::Profiler profiler;
    // s1 is held until s2 waits: otherwise, on a loaded machine (a dozen test processes on
    // one GPU), the first spin could end before s2.wait, which then has nothing to wait for.
    ev::UserEvent gate;
    s1.wait(gate);
    ev::Event first = spin_on(s1, 2'000'000, w1.p);  // 2 ms by the GPU's clock
    s2.wait(first);
    ev::Event second = spin_on(s2, 1'000'000, w2.p);
    gate.set();
    second.wait();
    const double second_elapsed = second.time_elapsed().count();
    ev::Profile p = profiler.stop();

    const ev::ProfiledOp *a = nullptr, *wait = nullptr, *b = nullptr;
    for (const ev::ProfiledOp& op : p.ops()) {
      if (op.stream == s1.str() && op.name == "spin") a = &op;
      if (op.stream == s2.str() && op.is_wait) wait = &op;
      if (op.stream == s2.str() && op.name == "spin") b = &op;
    }
    ASSERT_TRUE(a && wait && b) << p.str();
    ASSERT_TRUE(a->start_us && a->end_us && b->start_us && b->end_us) << "GPU ops have times";
    EXPECT_EQ(wait->waits_for, std::vector<std::uint64_t>{a->id});
    for (const ev::ProfiledOp* op : {a, b}) {
      EXPECT_TRUE(op->finished);
      EXPECT_GE(*op->start_us, 0.0);
      EXPECT_LE(*op->end_us, p.duration_us());
    }
    const auto stamps_a = w1.read(2), stamps_b = w2.read(2);
    const double own_a = static_cast<double>(stamps_a[1] - stamps_a[0]) / 1e3;
    const double own_b = static_cast<double>(stamps_b[1] - stamps_b[0]) / 1e3;
    std::printf("spin on s1 %.2f us (own %.2f), on s2 %.2f us (own %.2f), s2 starts %.2f us after "
                "s1 ends\n", *a->end_us - *a->start_us, own_a, *b->end_us - *b->start_us, own_b,
                *b->start_us - *a->end_us);
    EXPECT_NEAR(*b->end_us - *b->start_us, second_elapsed, 0.01) << "the times of time_elapsed";
    if (times_are_cupti()) {
      EXPECT_NEAR(*a->end_us - *a->start_us, own_a, 1.0);
      EXPECT_NEAR(*b->end_us - *b->start_us, own_b, 1.0);
    }
    // One clock for both streams: the GPU ran s2's spin after s1's.
    EXPECT_GE(*b->start_us, *a->end_us - 1.0);
    // The host wait on `second` ended after the GPU finished it, and soon after.
    const ev::ProfiledHostWait* host = nullptr;
    for (const ev::ProfiledHostWait& h : p.host_waits()) {
      if (std::find(h.ops.begin(), h.ops.end(), b->id) != h.ops.end()) host = &h;
    }
    ASSERT_TRUE(host) << "the host wait on the second spin is recorded";
    std::printf("host wait ends %.2f us after the GPU op's end\n", host->end_us - *b->end_us);
    EXPECT_GE(host->end_us, *b->end_us - 50.0) << "the clocks agree within 50 us";
    EXPECT_LE(host->end_us, *b->end_us + 5000.0);
  });
}

TEST(CudaTest, AnOpOnAnotherStreamWaitsForItsInputOnTheGpu) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s1(kGpu), s2(kGpu);
    DeviceWords w;
    ev::Tensor x = ev::zeros({1 << 16}, ev::DType::f32, kGpu);
    x.wait();
    // s1 writes x after a 30 ms spin; s2 reads it: the add must see the write.
    spin_on(s1, 30'000'000, w.p, {x});
    {
      ev::StreamGuard g(s1);
      x = ev::add(x, ev::ones({1 << 16}, ev::DType::f32, kGpu));
    }
    ev::Tensor y;
    {
      ev::StreamGuard g(s2);
      y = ev::add(x, x);
    }
    EXPECT_FALSE(y.ready());
    auto v = y.to_vector<float>();
    EXPECT_EQ(v.front(), 2.0f);
    EXPECT_EQ(v.back(), 2.0f);
  });
}

// Another stream, and the host, learn of an op's end from its stream's counter: neither may
// see an op finished before all of its blocks have written, whether the op is one of
// eventide's kernels or a library call (cuBLASLt), and each op keeps its own time.
TEST(CudaTest, AnOpIsFinishedOnlyOnceEveryBlockHasWrittenWhoeverReadsIt) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s1(kGpu), s2(kGpu);
    constexpr std::int64_t kBig = std::int64_t{1} << 24;  // far more blocks than one wave
    ev::Tensor one = ev::ones({kBig}, ev::DType::f32, kGpu);
    ev::Tensor x = ev::zeros({kBig}, ev::DType::f32, kGpu);
    ev::Tensor a = ev::full({64, 64}, 1.0, ev::DType::f32, kGpu);
    ev::Tensor y;
    for (int round = 0; round < 4; ++round) {
      {
        ev::StreamGuard g(s1);
        for (int i = 0; i < 8; ++i) x = x + one;  // many blocks each
        a = ev::matmul(a, ev::full({64, 64}, 1.0 / 64, ev::DType::f32, kGpu));  // cuBLASLt
        x = x + one;
      }
      {
        ev::StreamGuard g(s2);  // waits for s1's counter on the GPU
        y = x * ev::full({kBig}, 2.0, ev::DType::f32, kGpu);
      }
      ev::Event e;
      e.record(y);
      e.wait();
      EXPECT_TRUE(x.ready()) << "y read x: x's end was published before y's";
      const float want = 2.0f * static_cast<float>(9 * (round + 1));
      auto v = y.to_vector<float>();
      std::size_t wrong = 0;
      for (float f : v) wrong += f != want;
      EXPECT_EQ(wrong, 0u) << "round " << round << ": y = 2 * x read an x not fully written";
    }
    EXPECT_FLOAT_EQ(a.to_vector<float>()[0], 1.0f);
    // Small ops back to back, each waited for and timed at once: each has its kernel's time.
    ev::StreamGuard g(s1);
    ev::Tensor z = ev::zeros({256}, ev::DType::f32, kGpu);
    ev::Tensor o = ev::ones({256}, ev::DType::f32, kGpu);
    int untimed = 0;
    for (int i = 0; i < 200; ++i) {
      ev::Event e;
      z = z + o;
      e.record(z);
      e.wait();
      untimed += e.time_elapsed().count() <= 0.0;
    }
    if (times_are_cupti()) EXPECT_EQ(untimed, 0) << "ops whose time was lost";
    EXPECT_EQ(z.to_vector<float>()[255], 200.0f);
  });
}

// An op held behind a UserEvent is launched by the watcher; the waiting thread may see it
// finished before the watcher has ended the op's launch. Its time, asked at once, is its
// kernel's all the same (not missing; checked where times come from CUPTI).
TEST(CudaTest, AnOpLaunchedByTheWatcherHasItsTimeWhenAskedAtOnce) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s(kGpu);
    ev::StreamGuard g(s);
    ev::Tensor x = ev::zeros({256}, ev::DType::f32, kGpu);
    const ev::Tensor one = ev::ones({256}, ev::DType::f32, kGpu);
    int untimed = 0;
    for (int i = 0; i < 100; ++i) {
      ev::UserEvent gate;
      s.wait(gate);
      x = x + one;
      ev::Event e;
      e.record(x);
      gate.set();
      e.wait();
      untimed += e.time_elapsed().count() <= 0.0;
    }
    if (times_are_cupti()) EXPECT_EQ(untimed, 0) << "ops whose time was lost";
    EXPECT_EQ(x.to_vector<float>()[0], 100.0f);
  });
}

TEST(CudaTest, AUserEventGatesAGpuStreamWithoutTheHost) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::UserEvent go;
    ev::Stream s(kGpu);
    s.wait(go);
    ev::Tensor t;
    {
      ev::StreamGuard g(s);
      t = ev::full({256}, 3.0, ev::DType::f32, kGpu);
    }
    std::this_thread::sleep_for(20ms);
    EXPECT_FALSE(t.ready());
    EXPECT_FALSE(s.query());
    go.set();
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(256, 3.0f));

    // A failed gate fails the work behind it, and the stream stays broken.
    ev::UserEvent bad;
    ev::Stream s2(kGpu);
    s2.wait(bad);
    ev::Tensor u;
    {
      ev::StreamGuard g(s2);
      u = ev::ones({4}, ev::DType::f32, kGpu);
    }
    bad.fail(std::make_exception_ptr(std::runtime_error("loader failed")));
    EXPECT_THROW(u.wait(), ev::OpError);
    EXPECT_NE(s2.error(), nullptr);
  });
}

// What stands behind a failed gate never runs, on the host or on the GPU: the wait fails at its
// launch, and the ops launched right after it (before the GPU has passed the wait) must not
// take it for still running. The same for an op of another stream waiting for them.
TEST(CudaTest, NothingBehindAFailedGateRunsOnTheHostOrTheGpu) {
  REQUIRE_GPU();
  run_with_deadline([] {
    for (int round = 0; round < 20; ++round) {
      DeviceWords w;
      cudaMemset(w.p, 0, 2 * sizeof(unsigned long long));
      std::atomic<int> ran{0};
      ev::UserEvent gate;
      ev::Stream s(kGpu), other(kGpu);
      s.wait(gate);
      ev::Event body = s.enqueue("host body", [&ran] { ran.fetch_add(1); });
      ev::Event kernel = spin_on(s, 1000, w.p);
      other.wait(kernel);
      ev::Event later = other.enqueue("later host body", [&ran] { ran.fetch_add(1); });
      gate.fail(std::make_exception_ptr(std::runtime_error("input not ready")));
      EXPECT_THROW(later.wait(), ev::OpError);
      EXPECT_THROW(kernel.wait(), ev::OpError);
      EXPECT_EQ(body.status(), ev::EventStatus::failed);
      EXPECT_EQ(kernel.status(), ev::EventStatus::failed);
      EXPECT_EQ(later.status(), ev::EventStatus::failed);
      EXPECT_EQ(ran.load(), 0) << "a host body behind the failed gate ran (round " << round << ")";
      EXPECT_EQ(w.read(2), (std::vector<unsigned long long>{0, 0}))
          << "the kernel behind the failed gate ran on the GPU (round " << round << ")";
    }
  });
}

TEST(CudaTest, ACpuOpWaitsForGpuWorkItReads) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s(kGpu);
    DeviceWords w;
    ev::Tensor g = ev::zeros({1024}, ev::DType::f32, kGpu);
    spin_on(s, 20'000'000, w.p, {g});
    {
      ev::StreamGuard guard(s);
      g = ev::add(g, ev::full({1024}, 5.0, ev::DType::f32, kGpu));
    }
    ev::Tensor host = g.to(ev::Device::cpu());  // asynchronous: pinned memory, a CUDA op
    EXPECT_EQ(host.device(), ev::Device::cpu());
    ev::Tensor doubled = ev::add(host, host);  // a CPU op waiting for the GPU
    EXPECT_EQ(doubled.to_vector<float>(), std::vector<float>(1024, 10.0f));
    // And back: a CPU op's output feeding a GPU op.
    auto back = ev::add(doubled.to(kGpu), ev::ones({1024}, ev::DType::f32, kGpu));
    EXPECT_EQ(back.to_vector<float>(), std::vector<float>(1024, 11.0f));
  });
}

TEST(CudaTest, CallbacksRunOnceAndASlowOneDoesNotDelayTheStream) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s(kGpu);
    DeviceWords w;
    std::atomic<int> calls{0};
    std::atomic<bool> slow_done{false};
    ev::Event first = spin_on(s, 1'000'000, w.p);
    first.add_callback([&] {
      std::this_thread::sleep_for(10ms);
      slow_done = true;
      ++calls;
    });
    ev::Event second = spin_on(s, 1'000, w.p + 8);
    second.wait();
    // The next op finished while the 10 ms callback was still sleeping.
    EXPECT_FALSE(slow_done.load());
    first.wait();
    for (int i = 0; i < 200 && calls.load() == 0; ++i) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(calls.load(), 1);
  });
}

TEST(CudaTest, MemoryLivesUntilTheOpsUsingItHaveFinished) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s(kGpu);
    DeviceWords w;
    ev::Tensor out;
    {
      ev::Tensor a = ev::full({1 << 20}, 2.0, ev::DType::f32, kGpu);
      ev::Tensor b = ev::full({1 << 20}, 3.0, ev::DType::f32, kGpu);
      a.wait();
      b.wait();
      spin_on(s, 20'000'000, w.p, {a});
      ev::StreamGuard g(s);
      out = ev::mul(a, b);
      // a and b are dropped here while the op is queued behind the spin.
    }
    // Allocations meanwhile must not reuse their memory.
    std::vector<ev::Tensor> churn;
    for (int i = 0; i < 8; ++i) churn.push_back(ev::full({1 << 20}, 9.0, ev::DType::f32, kGpu));
    auto v = out.to_vector<float>();
    EXPECT_EQ(v.front(), 6.0f);
    EXPECT_EQ(v.back(), 6.0f);
  });
}

TEST(CudaTest, OutOfMemoryIsADeviceErrorAndTheDeviceGoesOn) {
  REQUIRE_GPU();
  run_with_deadline([] {
    try {
      ev::empty({std::int64_t{1} << 50}, ev::DType::f32, kGpu);
      FAIL() << "a 4 PiB allocation succeeded";
    } catch (const ev::DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
    }
    EXPECT_EQ(ev::ones({3}, ev::DType::f32, kGpu).to_vector<float>(), std::vector<float>(3, 1.0f));
  });
}

TEST(CudaTest, AForeignStreamCanBeWrappedAndIsNotDestroyed) {
  REQUIRE_GPU();
  run_with_deadline([] {
    cudaSetDevice(0);
    // The op timing starts with the first GPU op (CUPTI), which may wait for the device once:
    // started here, before the kernel the marker must not pass.
    ev::ones({1}, ev::DType::f32, kGpu).wait();
    cudaStream_t mine;
    ASSERT_EQ(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking), cudaSuccess);
    DeviceWords w;
    {
      ev::Stream s = ev::Stream::from_native(kGpu, mine);
      EXPECT_EQ(s.native_handle(), static_cast<void*>(mine));
      EXPECT_TRUE(ev::Stream::from_native(mine) == s) << "one wrapper per native stream";
      // Work launched directly on the native stream, then a marker through eventide: it
      // covers that work.
      eventide::backends::cuda::kernels::spin(20'000'000, w.p, mine);
      ev::Event e(kGpu);
      e.record(s);
      EXPECT_FALSE(e.poll()) << "the marker finished before the kernel it follows";
      EXPECT_FALSE(s.query()) << "query() sees the other code's kernel";
      e.wait();
      EXPECT_EQ(cudaStreamQuery(mine), cudaSuccess);
      ev::StreamGuard g(s);
      ev::Tensor t = ev::full({16}, 1.0, ev::DType::f32, kGpu);
      ev::Event after;
      after.record(t);
      after.wait();
    }
    EXPECT_EQ(cudaStreamSynchronize(mine), cudaSuccess);  // still a valid stream
    cudaStreamDestroy(mine);
    EXPECT_THROW(ev::Stream::from_native(ev::Device::cpu(), mine), ev::InvalidArgument);
  });
}

// --- Markers on the GPU ----------------------------------------------------------------------

// Kernels of the user's own on an eventide stream's native handle are covered by a record
// of that stream.
TEST(CudaTest, AMarkerCoversKernelsTheUserLaunchedOnTheNativeHandle) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s(kGpu);
    DeviceWords w;
    auto h = static_cast<cudaStream_t>(s.native_handle());
    ev::Event start = s.record_event();
    eventide::backends::cuda::kernels::spin(5'000'000, w.p, h);  // 5 ms, not through eventide
    ev::Event end = s.record_event();
    EXPECT_FALSE(end.poll());
    end.wait();
    auto stamps = w.read(2);
    EXPECT_NE(stamps[1], 0u) << "the kernel had not run when the marker finished";
    const double ms = start.elapsed_time(end).count();
    const double own_ms = static_cast<double>(stamps[1] - stamps[0]) / 1e6;
    std::printf("user kernel %.3f ms by its own clock; between the markers %.3f ms\n", own_ms, ms);
    EXPECT_GE(ms, own_ms - 0.002) << "the markers do not bracket the kernel";
    EXPECT_LE(ms, own_ms + 50.0);
  });
}

// The timing idiom reads the device time between two markers, as a CUDA event pair does,
// on a new stream, a drained one, and PyTorch's default stream (the legacy one).
TEST(CudaTest, ElapsedTimeBetweenMarkersAgreesWithACudaEventPair) {
  REQUIRE_GPU();
  run_with_deadline([] {
    for (void* native : {static_cast<void*>(nullptr), static_cast<void*>(cudaStreamLegacy)}) {
      SCOPED_TRACE(native ? "cudaStreamLegacy" : "null (legacy)");
      ev::Stream s = ev::Stream::from_native(kGpu, native);
      EXPECT_EQ(s.native_handle(), static_cast<void*>(cudaStreamLegacy));
      auto h = static_cast<cudaStream_t>(s.native_handle());
      DeviceWords w;
      cudaEvent_t c0, c1;
      cudaEventCreate(&c0);
      cudaEventCreate(&c1);
      std::vector<double> diffs, pairs;
      for (int i = 0; i < 5; ++i) {
        std::this_thread::sleep_for(20ms);  // the stream drains; the host idles
        ev::Event start, end;
        // The same order at both ends (ours, then the CUDA event), so that neither reading
        // contains the other's record calls; the stream busy at the start, so that both start
        // records wait in it and only the device's reading is compared (on an idle stream the
        // host's call between the two first records would be: ADrainedGpuStream... covers it).
        // 2 ms, not less: a marker's record has taken 20-50 µs of host time on a busy H200
        // (the watcher's locks), and a spin that ended before cudaEventRecord(c0) let the
        // CUDA pair start late, after the stream idled (2 of 60 runs with 50 µs).
        eventide::backends::cuda::kernels::spin(2'000'000, w.p, h);
        start.record(s);
        cudaEventRecord(c0, h);
        eventide::backends::cuda::kernels::spin(200'000 * (i + 1), w.p, h);
        end.record(s);
        cudaEventRecord(c1, h);
        end.synchronize();
        cudaEventSynchronize(c1);
        float cuda_ms = 0;
        ASSERT_EQ(cudaEventElapsedTime(&cuda_ms, c0, c1), cudaSuccess);
        const double ours = start.elapsed_time(end).count();
        std::printf("markers %.4f ms, CUDA event pair %.4f ms\n", ours, cuda_ms);
        diffs.push_back(std::abs(ours - cuda_ms));
        pairs.push_back(cuda_ms);
        EXPECT_GE(ours, 0.2 * (i + 1) - 0.002) << "shorter than the kernel between the markers";
        EXPECT_EQ(start.time_elapsed().count(), 0.0);
      }
      // The typical reading (a loaded machine can delay any one record call).
      std::sort(diffs.begin(), diffs.end());
      std::sort(pairs.begin(), pairs.end());
      EXPECT_LE(diffs[diffs.size() / 2], std::max(0.01, 0.05 * pairs[pairs.size() / 2]));
      cudaEventDestroy(c0);
      cudaEventDestroy(c1);
    }
  });
}

// A marker costs the host a few microseconds and the device nothing measurable: two CUDA
// events recorded just before and just after one read about what they read with nothing
// between them.
TEST(CudaTest, AMarkerAddsNoGapToTheStream) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s(kGpu);
    auto h = static_cast<cudaStream_t>(s.native_handle());
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    DeviceWords w;
    auto p50 = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    for (bool busy : {true, false}) {
      std::vector<double> with, without, host;
      for (int i = 0; i < 200; ++i) {
        const bool marker = i % 2 == 0;
        if (busy) {
          eventide::backends::cuda::kernels::spin(20'000, w.p, h);  // both records queue up
        } else {
          std::this_thread::sleep_for(200us);  // the stream has drained
        }
        cudaEventRecord(a, h);
        const auto t0 = std::chrono::steady_clock::now();
        if (marker) (void)s.record_event();
        const auto t1 = std::chrono::steady_clock::now();
        cudaEventRecord(b, h);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        (marker ? with : without).push_back(ms * 1e3);
        if (marker) host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      std::printf("%s stream: device gap between two events %.2f us with a marker between, %.2f us "
                  "without; record_event() on the host %.2f us p50, %.2f us max\n",
                  busy ? "busy" : "idle", p50(with), p50(without), p50(host),
                  *std::max_element(host.begin(), host.end()));
      if (busy) EXPECT_LT(p50(with) - p50(without), 5.0);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  });
}

TEST(CudaTest, ADrainedGpuStreamDoesNotCountTheHostsIdleTime) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s(kGpu);
    ev::StreamGuard g(s);
    ev::Tensor a = ev::rand({1024}, ev::DType::f32, kGpu);
    s.synchronize();
    std::this_thread::sleep_for(300ms);
    ev::Event start, end;
    start.record();
    ev::Tensor b = a + a;
    end.record();
    end.wait();
    const double ms = start.elapsed_time(end).count();
    std::printf("tiny op between two markers after 300 ms idle: %.4f ms\n", ms);
    EXPECT_GT(ms, 0.0) << "real work lies between the markers";
    EXPECT_LT(ms, 5.0) << "the host's idle time was counted";
    // An op and a marker: the op's end (CUPTI's kernel record) is before the marker after it,
    // on one clock.
    ev::Event op;
    op.record(b);
    EXPECT_GE(op.elapsed_time(end).count(), -0.002);
    EXPECT_LE(op.elapsed_time(end).count(), 1.0);
  });
}

TEST(CudaTest, MarkersHeldBehindAUserEventFinishAfterItAndCountNoWaitBeforeThem) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::UserEvent u;
    ev::Stream s(kGpu);
    DeviceWords w;
    ev::Event before = s.record_event();
    s.wait(u);
    ev::Event start = s.record_event();
    spin_on(s, 2'000'000, w.p);
    ev::Event end = s.record_event();
    std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(start.poll()) << "held behind the UserEvent";
    u.set();
    end.wait();
    const double region = start.elapsed_time(end).count();
    EXPECT_GE(region, 1.9);
    EXPECT_LT(region, 20.0);
    EXPECT_GE(before.elapsed_time(start).count(), 49.0);
  });
}

TEST(CudaTest, ManyMarkersInFlightEachGetTheirOwnTime) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s(kGpu);
    DeviceWords w;
    std::vector<ev::Event> marks;
    for (int i = 0; i < 200; ++i) {
      if (i % 10 == 0) spin_on(s, 100'000, w.p);  // 0.1 ms every ten markers
      marks.push_back(s.record_event());
    }
    ev::wait_all(marks);
    double total = 0;
    for (std::size_t i = 1; i < marks.size(); ++i) {
      const double d = marks[i - 1].elapsed_time(marks[i]).count();
      EXPECT_GE(d, -0.001) << i;
      total += d;
    }
    EXPECT_GE(total, 1.9) << "19 spins of 0.1 ms lie between the first and the last marker";
  });
}

TEST(CudaTest, WaitStreamOrdersAfterOtherCodesKernelsOnTheOtherStream) {
  REQUIRE_GPU();
  run_with_deadline([] {
    cudaStream_t theirs;
    ASSERT_EQ(cudaStreamCreateWithFlags(&theirs, cudaStreamNonBlocking), cudaSuccess);
    DeviceWords w1, w2;
    {
      ev::Stream foreign = ev::Stream::from_native(kGpu, theirs);
      ev::Stream mine(kGpu);
      eventide::backends::cuda::kernels::spin(5'000'000, w1.p, theirs);  // not through eventide
      mine.wait_stream(foreign);
      spin_on(mine, 10'000, w2.p);
      mine.synchronize();
      auto a = w1.read(2), b = w2.read(2);
      EXPECT_GE(b[0], a[1]) << "the wait did not cover the other code's kernel";
    }
    cudaStreamSynchronize(theirs);
    cudaStreamDestroy(theirs);
  });
}

TEST(CudaTest, ThePerThreadDefaultStreamBelongsToTheThreadThatWrappedIt) {
  REQUIRE_GPU();
  run_with_deadline([] {
    cudaSetDevice(0);
    ev::Stream ptds = ev::Stream::from_native(kGpu, cudaStreamPerThread);
    DeviceWords w;
    ev::Event start = ptds.record_event();
    eventide::backends::cuda::kernels::spin(1'000'000, w.p, cudaStreamPerThread);
    ev::Event end = ptds.record_event();
    end.wait();
    EXPECT_GE(start.elapsed_time(end).count(), 0.99);
    std::thread other([&] {
      EXPECT_THROW_MSG((void)ptds.record_event(), ev::InvalidArgument, "per-thread",
                       "another thread");
      ev::Stream own = ev::Stream::from_native(kGpu, cudaStreamPerThread);
      EXPECT_FALSE(own == ptds) << "each thread has its own per-thread stream";
    });
    other.join();
    // Work it would have to hold for host-side work fails instead, with a clear error.
    ev::UserEvent u;
    ptds.wait(u);
    ev::Event held = ptds.record_event();
    u.set();
    EXPECT_THROW_MSG(held.wait(), ev::OpError, "per-thread");
  });
}

TEST(CudaTest, WaitAnyAndSynchronizeAcrossStreams) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream slow(kGpu), fast(kGpu);
    DeviceWords w;
    ev::Event e_slow = spin_on(slow, 50'000'000, w.p);
    ev::Event e_fast = spin_on(fast, 1'000, w.p + 8);
    auto i = ev::wait_any({e_slow, e_fast}, 10s);
    ASSERT_TRUE(i.has_value());
    EXPECT_EQ(*i, 1u);
    EXPECT_FALSE(e_slow.poll());
    ev::synchronize(kGpu);
    EXPECT_TRUE(e_slow.poll());
  });
}

// A kernel that traps leaves the context with a sticky error: every later wait and
// synchronize must raise promptly, and no call may hang. Run in a child process (the error
// poisons the whole process's context).
[[noreturn]] void sticky_error_child() {
  alarm(60);  // a hang fails the test
  ev::Stream s(kGpu);
  cudaStream_t h = static_cast<cudaStream_t>(s.native_handle());
  ev::Event trapped = s.enqueue("trap", [h] { eventide::backends::cuda::kernels::trap(h); });
  ev::Tensor later;
  {
    ev::StreamGuard g(s);
    later = ev::ones({4}, ev::DType::f32, kGpu);
  }
  bool wait_raised = false, sync_raised = false, op_raised = false;
  try {
    trapped.wait();
  } catch (const ev::Error&) {
    wait_raised = true;
  }
  try {
    ev::synchronize(kGpu);
  } catch (const ev::DeviceError&) {
    sync_raised = true;
  }
  try {
    ev::ones({4}, ev::DType::f32, kGpu);
  } catch (const ev::DeviceError&) {
    op_raised = true;
  }
  bool later_failed = later.ready() && later.error() != nullptr;
  std::fprintf(stderr, "wait %d sync %d op %d later %d\n", wait_raised, sync_raised, op_raised,
               later_failed);
  std::_Exit(wait_raised && sync_raised && op_raised && later_failed ? 0 : 1);
}

TEST(CudaDeathTest, AStickyErrorFailsEverythingPromptlyAndNothingHangs) {
  REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(sticky_error_child(), ::testing::ExitedWithCode(0), "");
}

// The fallback without stream memory operations (CUDA events, host functions for host-side
// waits), forced by EVENTIDE_CUDA_MEMOPS=0, in a child process.
[[noreturn]] void event_fallback_child() {
  alarm(60);
  bool ok = ev::device_info(kGpu).description.find("CUDA events") != std::string::npos;
  ev::UserEvent go;
  ev::Stream s1(kGpu), s2(kGpu);
  s1.wait(go);
  ev::Tensor a, b;
  {
    ev::StreamGuard g(s1);
    a = ev::full({1024}, 2.0, ev::DType::f32, kGpu);
  }
  {
    ev::StreamGuard g(s2);
    b = ev::add(a, a);  // waits on s1's event, on the GPU
  }
  std::this_thread::sleep_for(20ms);
  ok = ok && !a.ready() && !b.ready();
  go.set();
  ok = ok && b.to_vector<float>() == std::vector<float>(1024, 4.0f);
  ev::Event e;
  e.record(b);
  ok = ok && e.wait_for(10s) && e.time_elapsed().count() >= 0;
  std::fprintf(stderr, "fallback ok %d\n", ok);
  std::_Exit(ok ? 0 : 1);
}

TEST(CudaDeathTest, TheEventFallbackOrdersAndCompletesWork) {
  REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("EVENTIDE_CUDA_MEMOPS", "0", 1);
  EXPECT_EXIT(event_fallback_child(), ::testing::ExitedWithCode(0), "");
  unsetenv("EVENTIDE_CUDA_MEMOPS");
}

// Markers with the other timing modes, in child processes: event pairs (the fallback when
// CUPTI is unavailable) and no stream memory operations (progress by CUDA events).
[[noreturn]] void marker_timing_child() {
  alarm(60);
  ev::Stream s(kGpu);
  DeviceWords w;
  // The first timed op of a process sets the timing up (event pairs: the reference event, on
  // the legacy stream, which waits for other processes' work on a shared GPU): done first.
  spin_on(s, 1'000, w.p).wait();
  ev::Event start = s.record_event();
  spin_on(s, 2'000'000, w.p);
  ev::Event end = s.record_event();
  bool ok = end.wait_for(10s);
  const double ms = ok ? start.elapsed_time(end).count() : -1;
  std::fprintf(stderr, "%s: markers read %.4f ms around a 2 ms kernel\n",
               ev::device_info(kGpu).description.c_str(), ms);
  ok = ok && ms >= 1.99 && ms < 50.0 && start.time_elapsed().count() == 0.0;
  std::_Exit(ok ? 0 : 1);
}

// A marker recorded behind an op of another stream reads no earlier than that op's end: the
// markers' times (CUDA events, put on CUPTI's clock by a calibration that each process makes
// once) and the ops' (CUPTI's records) are one clock. In child processes, each with its own
// calibration: a wrong one (the host's launch split as if it were the GPU's latency) put
// markers up to 13 µs early in most processes.
[[noreturn]] void marker_behind_op_child() {
  alarm(60);
  ev::Stream s1(kGpu), s2(kGpu);
  DeviceWords w;
  double earliest_us = std::numeric_limits<double>::infinity();
  bool ok = true;
  for (int i = 0; ok && i < 40; ++i) {
    ev::Event op = spin_on(s1, 5'000, w.p);  // 5 µs by the GPU's clock
    s2.wait(op);
    ev::Event marker = s2.record_event();
    ok = marker.wait_for(10s) && op.wait_for(10s);
    if (ok) earliest_us = std::min(earliest_us, op.elapsed_time(marker).count() * 1e3);
  }
  std::fprintf(stderr, "a marker behind an op read at the earliest %.2f us after the op's end\n", earliest_us);
  // The calibration places its event within half the gap of the two kernels around it (2.4-2.7
  // µs in this test's process on an H200).
  std::_Exit(ok && earliest_us >= -2.0 ? 0 : 1);
}

TEST(CudaDeathTest, AMarkerBehindAnOpOfAnotherStreamReadsAfterItsEnd) {
  REQUIRE_GPU();
  if (const char* mode = std::getenv("EVENTIDE_CUDA_TIMING"); mode && std::string(mode) == "off") {
    GTEST_SKIP() << "EVENTIDE_CUDA_TIMING=off: markers and ops have no times to compare";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (int process = 0; process < 4; ++process) {
    EXPECT_EXIT(marker_behind_op_child(), ::testing::ExitedWithCode(0), "");
  }
}

TEST(CudaDeathTest, MarkersAreTimedWithEventPairsAndWithoutStreamMemoryOperations) {
  REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("EVENTIDE_CUDA_TIMING", "events", 1);
  EXPECT_EXIT(marker_timing_child(), ::testing::ExitedWithCode(0), "");
  unsetenv("EVENTIDE_CUDA_TIMING");
  setenv("EVENTIDE_CUDA_MEMOPS", "0", 1);
  EXPECT_EXIT(marker_timing_child(), ::testing::ExitedWithCode(0), "");
  unsetenv("EVENTIDE_CUDA_MEMOPS");
}
