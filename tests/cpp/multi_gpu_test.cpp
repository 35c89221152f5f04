// Several GPUs in one process (issue 14, part 1): what a first check on two H200s found
// working, kept as tested guarantees. Every test needs two CUDA devices and skips, saying so,
// where there are fewer (CI has none); scripts/gpu-check.sh runs them on a two-GPU machine.
//
// What users rely on (as PyTorch's test_cuda_multigpu.py checks for torch.cuda): ops on a
// device other than 0 run there; a stream of one device waits on the GPU for an event of
// another; copies between the two and back keep the values; synchronize() covers every
// device; mixing devices in one op is an error; an event belongs to one device (GUARANTEES.md,
// "Several devices"); failures cross devices; callbacks, wait_any and the profiler see both.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <eventide/eventide.hpp>

#include "backends/cuda/cuda_kernels.hpp"
#include "test_util.hpp"

namespace ev = eventide;
using namespace std::chrono_literals;
using eventide_test::run_with_deadline;
using eventide_test::wait_for_count;

namespace {

const ev::Device kGpu0 = ev::Device::cuda(0);
const ev::Device kGpu1 = ev::Device::cuda(1);

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

#define REQUIRE_TWO_GPUS()                                                                     \
  do {                                                                                         \
    const int n = cuda_device_count();                                                         \
    if (n < 2 || !ev::is_available(kGpu1)) {                                                   \
      GTEST_SKIP() << "needs two CUDA devices, this machine has " << n                         \
                   << ": run scripts/gpu-check.sh on a machine with two GPUs";                 \
    }                                                                                          \
  } while (0)

// Two words of device memory on `device` (a spin kernel's own start and end).
struct DeviceWords {
  ev::Device device;
  unsigned long long* p = nullptr;
  explicit DeviceWords(ev::Device d) : device(d) {
    int before = 0;
    cudaGetDevice(&before);
    cudaSetDevice(d.index());
    cudaMalloc(&p, 2 * sizeof(unsigned long long));
    cudaMemset(p, 0, 2 * sizeof(unsigned long long));
    cudaDeviceSynchronize();
    cudaSetDevice(before);
  }
  ~DeviceWords() { cudaFree(p); }
  DeviceWords(const DeviceWords&) = delete;
  DeviceWords& operator=(const DeviceWords&) = delete;
  std::vector<unsigned long long> read() const {
    std::vector<unsigned long long> h(2);
    cudaMemcpy(h.data(), p, 2 * sizeof(unsigned long long), cudaMemcpyDefault);
    return h;
  }
};

// A kernel spinning `ns` by its GPU's clock, in `s`'s order (Stream::enqueue makes the
// stream's device current before the launch).
ev::Event spin_on(ev::Stream& s, std::int64_t ns, unsigned long long* stamps,
                  std::vector<ev::Tensor> writes = {}) {
  cudaStream_t h = static_cast<cudaStream_t>(s.native_handle());
  return s.enqueue("spin", [=] { eventide::backends::cuda::kernels::spin(ns, stamps, h); }, {},
                   std::move(writes));
}

// Copies `from`'s two words into `to`'s on `s` (another device's memory: a peer copy, staged
// through the host if the GPUs have no peer access). Declares no tensors: only what `s`
// was told to wait for orders it.
ev::Event copy_words_on(ev::Stream& s, const DeviceWords& to, const DeviceWords& from) {
  cudaStream_t h = static_cast<cudaStream_t>(s.native_handle());
  const int dst = to.device.index(), src = from.device.index();
  unsigned long long *d = to.p, *f = from.p;
  return s.enqueue("copy words", [=] {
    if (cudaMemcpyPeerAsync(d, dst, f, src, 2 * sizeof(unsigned long long), h) != cudaSuccess) {
      throw std::runtime_error("cudaMemcpyPeerAsync failed");
    }
  });
}

std::vector<float> iota(int n, float start) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

}  // namespace

TEST(MultiGpuTest, BothGpusAreListedAndDescribed) {
  REQUIRE_TWO_GPUS();
  auto all = ev::devices();
  for (ev::Device d : {kGpu0, kGpu1}) {
    EXPECT_NE(std::find(all.begin(), all.end(), d), all.end()) << d.str();
    ev::DeviceInfo info = ev::device_info(d);
    EXPECT_FALSE(info.name.empty());
    std::printf("%s: %s\n", d.str().c_str(), info.name.c_str());
  }
  EXPECT_EQ(ev::Device("cuda:1"), kGpu1);
  EXPECT_EQ(ev::Stream(kGpu1).device(), kGpu1);
  EXPECT_EQ(ev::Stream::current(kGpu1).device(), kGpu1);
}

// PyTorch's test_cuda_multigpu checks that work "on cuda:1" lands on cuda:1, whatever device
// is current: here, the values and the device of every result.
TEST(MultiGpuTest, OpsOnTheSecondGpuRunThereWithTheRightValues) {
  REQUIRE_TWO_GPUS();
  run_with_deadline([] {
    std::vector<float> av = iota(64, 1.0f), bv(64, 2.0f);
    ev::Tensor a = ev::from_host(av.data(), {8, 8}, kGpu1);
    ev::Tensor b = ev::from_host(bv.data(), {8, 8}, kGpu1);
    ev::Tensor sum = ev::add(a, b), prod = ev::mul(a, b), mm = ev::matmul(a, b);
    for (const ev::Tensor* t : {&a, &sum, &prod, &mm}) EXPECT_EQ(t->device(), kGpu1);
    auto s = sum.to_vector<float>(), p = prod.to_vector<float>(), m = mm.to_vector<float>();
    for (int i = 0; i < 64; ++i) {
      EXPECT_EQ(s[i], av[i] + 2.0f);
      EXPECT_EQ(p[i], av[i] * 2.0f);
    }
    // Row r of a times a matrix of twos: every column is twice the row's sum.
    for (int r = 0; r < 8; ++r) {
      float row = 0;
      for (int k = 0; k < 8; ++k) row += av[r * 8 + k];
      for (int c = 0; c < 8; ++c) EXPECT_FLOAT_EQ(m[r * 8 + c], 2.0f * row);
    }
    // The op ran on a stream of cuda:1, and its event is cuda:1's.
    ev::Event e;
    e.record(sum);
    EXPECT_EQ(e.device(), kGpu1);
    ev::Profiler profiler;
    ev::Tensor again = ev::add(sum, b);
    again.wait();
    ev::Profile prof = profiler.stop();
    ASSERT_FALSE(prof.ops().empty());
    for (const ev::ProfiledOp& op : prof.ops()) {
      EXPECT_EQ(op.device, kGpu1) << op.name << " on " << op.stream;
      EXPECT_NE(op.stream.find("cuda:1"), std::string::npos) << op.stream;
    }
  });
}

TEST(MultiGpuTest, CopiesToTheOtherGpuAndBackKeepTheValues) {
  REQUIRE_TWO_GPUS();
  run_with_deadline([] {
    for (ev::DType dt : {ev::DType::f32, ev::DType::f64, ev::DType::i32, ev::DType::i64}) {
      ev::manual_seed(7);
      ev::Tensor src = ev::cast(ev::randn({1 << 16}, ev::DType::f32, kGpu0), dt);
      ev::Tensor on1 = src.to(kGpu1);
      ev::Tensor back = on1.to(kGpu0);
      EXPECT_EQ(on1.device(), kGpu1);
      EXPECT_EQ(back.device(), kGpu0);
      EXPECT_EQ(on1.dtype(), dt);
      const std::size_t n = src.nbytes();
      std::vector<unsigned char> h0(n), h1(n), hb(n);
      src.copy_to_host(h0.data(), dt);
      on1.copy_to_host(h1.data(), dt);
      back.copy_to_host(hb.data(), dt);
      EXPECT_EQ(h1, h0) << "cuda:0 -> cuda:1, " << ev::name(dt);
      EXPECT_EQ(hb, h0) << "cuda:0 -> cuda:1 -> cuda:0, " << ev::name(dt);
    }
    // A copy is ordered after its source's producer, even a slow one on the other GPU, and
    // work on cuda:1 reads it without being told to wait.
    ev::Stream s0(kGpu0);
    DeviceWords w(kGpu0);
    ev::Tensor x = ev::zeros({4096}, ev::DType::f32, kGpu0);
    x.wait();
    spin_on(s0, 30'000'000, w.p, {x});  // 30 ms, then x += 1 on s0
    {
      ev::StreamGuard g(s0);
      x = ev::add(x, ev::ones({4096}, ev::DType::f32, kGpu0));
    }
    ev::Tensor y = ev::add(x.to(kGpu1), ev::ones({4096}, ev::DType::f32, kGpu1));
    EXPECT_FALSE(y.ready()) << "behind a 30 ms spin on cuda:0";
    EXPECT_EQ(y.to_vector<float>(), std::vector<float>(4096, 2.0f));
  });
}

// The GPU orders a cuda:1 stream after a cuda:0 event: a copy on cuda:1 that nothing else
// orders (no tensors) reads what a 50 ms kernel on cuda:0 wrote at its very end.
TEST(MultiGpuTest, AStreamOfTheSecondGpuWaitsOnTheGpuForAnEventOfTheFirst) {
  REQUIRE_TWO_GPUS();
  run_with_deadline([] {
    ev::Stream s0(kGpu0), s1(kGpu1);
    DeviceWords produced(kGpu0), seen(kGpu1), control(kGpu1), after_words(kGpu1);
    ev::Profiler profiler;
    ev::Event e0 = spin_on(s0, 50'000'000, produced.p);  // launched: the GPU itself must wait
    EXPECT_EQ(e0.device(), kGpu0);
    s1.wait(e0);
    ev::Event copied = copy_words_on(s1, seen, produced);
    spin_on(s1, 1'000, after_words.p);  // a kernel on cuda:1, for the profile's times
    ev::Event after = s1.record_event();
    EXPECT_FALSE(after.poll()) << "cuda:1 waits for the 50 ms spin on cuda:0";
    EXPECT_FALSE(e0.poll());
    after.wait();
    EXPECT_TRUE(copied.poll());
    EXPECT_TRUE(e0.poll()) << "cuda:1 went on only after cuda:0's event finished";
    auto own = produced.read(), got = seen.read();
    EXPECT_NE(own[1], 0u) << "the spin wrote its end";
    EXPECT_EQ(got, own) << "the copy on cuda:1 read the words after the spin wrote them";
    ev::Profile p = profiler.stop();
    const ev::ProfiledOp *spin0 = nullptr, *spin1 = nullptr, *wait = nullptr;
    for (const ev::ProfiledOp& op : p.ops()) {
      if (op.name == "spin" && op.device == kGpu0) spin0 = &op;
      if (op.name == "spin" && op.device == kGpu1) spin1 = &op;
      if (op.is_wait && op.device == kGpu1) wait = &op;
    }
    ASSERT_TRUE(spin0 && spin1 && wait) << p.str();
    EXPECT_EQ(wait->waits_for, std::vector<std::uint64_t>{spin0->id});
    ASSERT_TRUE(spin0->end_us && spin1->start_us) << "kernels have times";
    std::printf("the kernel on cuda:1 starts %.2f us after the spin on cuda:0 ends\n",
                *spin1->start_us - *spin0->end_us);
    // Both devices' clocks are converted to the host's, each within its calibration error.
    EXPECT_GE(*spin1->start_us, *spin0->end_us - 50.0);

    // The same wait behind a gate: the cuda:0 work is held on the host (a UserEvent), and
    // cuda:1 waits for it too.
    ev::UserEvent gate;
    s0.wait(gate);
    ev::Event held = spin_on(s0, 1'000'000, produced.p);
    s1.wait(held);
    ev::Event copied_later = copy_words_on(s1, control, produced);
    std::this_thread::sleep_for(20ms);
    EXPECT_FALSE(copied_later.poll()) << "held behind the gate on cuda:0";
    EXPECT_EQ(control.read()[1], 0u);
    gate.set();
    copied_later.wait();
    EXPECT_EQ(control.read(), produced.read());
  });
}

// As PyTorch's multi-GPU event tests check: an event of one GPU is polled and waited for
// whatever device the calling thread has current (cudaSetDevice), and ops on cuda:1 land on
// cuda:1 while cuda:0 is current.
TEST(MultiGpuTest, EventsAndOpsDoNotDependOnTheThreadsCurrentDevice) {
  REQUIRE_TWO_GPUS();
  run_with_deadline([] {
    ev::Stream s1(kGpu1);
    DeviceWords w1(kGpu1);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ev::Event e1 = spin_on(s1, 50'000'000, w1.p);
    EXPECT_EQ(e1.device(), kGpu1);
    EXPECT_FALSE(e1.poll());
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // deliberately the other device
    e1.wait();
    EXPECT_TRUE(e1.poll());
    EXPECT_NE(w1.read()[1], 0u);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ev::Tensor t = ev::full({8}, 4.0, ev::DType::f32, kGpu1);
    EXPECT_EQ(t.device(), kGpu1);
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(8, 4.0f));
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ev::Tensor u = ev::full({8}, 5.0, ev::DType::f32, kGpu0);
    EXPECT_EQ(u.to_vector<float>(), std::vector<float>(8, 5.0f));
  });
}

// CuPy, raw CUDA and PyTorch's current_device() allocate and launch on the thread's current
// device: eventide's calls on the other GPU (a stream, ops, copies, events, a wait across
// devices, synchronize, a tensor freed) leave it as the program set it.
TEST(MultiGpuTest, TheCallersCurrentDeviceIsKeptAcrossWorkOnTheOtherGpu) {
  REQUIRE_TWO_GPUS();
  run_with_deadline([] {
    auto current = [] {
      int d = -1;
      EXPECT_EQ(cudaGetDevice(&d), cudaSuccess);
      return d;
    };
    for (int mine : {0, 1}) {
      const ev::Device other = ev::Device::cuda(1 - mine);
      ASSERT_EQ(cudaSetDevice(mine), cudaSuccess);
      {
        ev::Stream s(other);
        EXPECT_EQ(current(), mine) << "after a stream of " << other.str();
        ev::StreamGuard guard(s);
        std::vector<float> host(64, 1.0f);
        ev::Tensor a = ev::from_host(host.data(), {8, 8}, other);
        ev::Tensor b = ev::matmul(a, ev::add(a, a));
        EXPECT_EQ(current(), mine) << "after ops on " << other.str();
        ev::Event e;
        e.record(b);
        ev::Stream mine_stream(ev::Device::cuda(mine));
        ev::Event joined;
        {
          ev::StreamGuard g(mine_stream);
          mine_stream.wait(e);
          joined.record(ev::full({4}, 1.0, ev::DType::f32, ev::Device::cuda(mine)));
        }
        e.wait();
        joined.wait();
        EXPECT_EQ(b.to_vector<float>()[0], 16.0f);
        ev::Tensor copied = b.to(ev::Device::cuda(mine));
        EXPECT_EQ(copied.to_vector<float>()[0], 16.0f);
        EXPECT_EQ(current(), mine) << "after events, a wait across devices and copies";
        ev::synchronize();
        EXPECT_EQ(current(), mine) << "after synchronize()";
      }  // the tensors of `other` are freed here
      ev::synchronize();
      EXPECT_EQ(current(), mine) << "after the tensors of " << other.str() << " were freed";
    }
  });
}

TEST(MultiGpuTest, SynchronizeWaitsForEveryGpu) {
  REQUIRE_TWO_GPUS();
  run_with_deadline([] {
    ev::Stream s0(kGpu0), s1(kGpu1);
    DeviceWords w0(kGpu0), w1(kGpu1);
    ev::Event e0 = spin_on(s0, 40'000'000, w0.p);
    ev::Event e1 = spin_on(s1, 60'000'000, w1.p);
    ev::synchronize();
    EXPECT_TRUE(e0.poll());
    EXPECT_TRUE(e1.poll());
    // One device's synchronize waits for that device only.
    ev::Event slow1 = spin_on(s1, 200'000'000, w1.p);
    ev::Event fast0 = spin_on(s0, 1'000, w0.p);
    ev::synchronize(kGpu0);
    EXPECT_TRUE(fast0.poll());
    EXPECT_FALSE(slow1.poll()) << "synchronize(cuda:0) does not wait for cuda:1";
    ev::synchronize(kGpu1);
    EXPECT_TRUE(slow1.poll());
    // Each event's synchronize waits for its own device's work.
    ev::Event a = spin_on(s0, 20'000'000, w0.p), b = spin_on(s1, 20'000'000, w1.p);
    a.synchronize();
    b.synchronize();
    EXPECT_TRUE(a.poll() && b.poll());
  });
}

TEST(MultiGpuTest, MixingDevicesInOneOpIsAClearError) {
  REQUIRE_TWO_GPUS();
  run_with_deadline([] {
    ev::Tensor a = ev::ones({4}, ev::DType::f32, kGpu0);
    ev::Tensor b = ev::ones({4}, ev::DType::f32, kGpu1);
    ev::Tensor c = ev::ones({4}, ev::DType::f32, ev::Device::cpu());
    EXPECT_THROW_MSG(ev::add(a, b), ev::InvalidArgument, "different devices (cuda:0, cuda:1)", ".to()");
    EXPECT_THROW_MSG(ev::mul(b, a), ev::InvalidArgument, "different devices (cuda:1, cuda:0)");
    EXPECT_THROW_MSG(ev::matmul(ev::ones({2, 2}, ev::DType::f32, kGpu0),
                                ev::ones({2, 2}, ev::DType::f32, kGpu1)),
                     ev::InvalidArgument, "cuda:0", "cuda:1");
    EXPECT_THROW_MSG(ev::add(c, b), ev::InvalidArgument, "different devices (cpu, cuda:1)");
    // The operands themselves are untouched, and the right move makes the op work.
    EXPECT_EQ(ev::add(a.to(kGpu1), b).to_vector<float>(), std::vector<float>(4, 2.0f));
  });
}

// The rule (GUARANTEES.md, "Several devices"): an event belongs to one device. Tying work of
// a second device to it is an InvalidArgument naming both; events of different devices are
// combined with wait_all / wait_any, or a stream's waits on each.
TEST(MultiGpuTest, AnEventBelongsToOneDeviceAndTheErrorNamesBoth) {
  REQUIRE_TWO_GPUS();
  run_with_deadline([] {
    ev::Tensor t0 = ev::ones({4}, ev::DType::f32, kGpu0);
    ev::Tensor t1 = ev::ones({4}, ev::DType::f32, kGpu1);
    ev::Tensor tc = ev::ones({4}, ev::DType::f32, ev::Device::cpu());
    ev::Event e;
    e.record(t0);
    EXPECT_THROW_MSG(e.record(t1), ev::InvalidArgument, "of cuda:1 on an event of cuda:0",
                     "one event per device");
    EXPECT_THROW_MSG(e.record(ev::Stream(kGpu1)), ev::InvalidArgument, "cuda:1", "cuda:0");
    EXPECT_THROW_MSG(e.record(tc), ev::InvalidArgument, "of cpu on an event of cuda:0");
    // The failed records changed nothing: the event still covers cuda:0's work only.
    e.wait();
    EXPECT_EQ(e.device(), kGpu0);
    EXPECT_NE(e.str().find(", 1 op>"), std::string::npos) << e.str();
    ev::Event host;
    host.record(tc);
    EXPECT_THROW_MSG(host.record(t1), ev::InvalidArgument, "of cuda:1 on an event of cpu");
    ev::Event bound(kGpu1);
    EXPECT_THROW_MSG(bound.record(t0), ev::InvalidArgument, "of cuda:0 on an event of cuda:1");
    // After a reset, an event without a fixed device may be used on another one.
    e.reset();
    e.record(t1);
    e.wait();
    EXPECT_EQ(e.device(), kGpu1);

    // Timing: each device's own; between devices, an error rather than a comparison of two
    // clocks.
    ev::Stream s0(kGpu0), s1(kGpu1);
    ev::Event a0 = s0.record_event(), b0 = s0.record_event();
    ev::Event a1 = s1.record_event();
    ev::wait_all({a0, b0, a1});
    EXPECT_GE(a0.elapsed_time(b0).count(), 0.0);
    EXPECT_THROW_MSG(a0.elapsed_time(a1), ev::InvalidArgument, "different devices (cuda:0, cuda:1)",
                     "clocks");
    EXPECT_THROW_MSG(a1.elapsed_time(a0), ev::InvalidArgument, "cuda:1, cuda:0");
  });
}

// A failed op on cuda:0 fails what depends on it on cuda:1: through a copy, and through a
// stream's wait (the stream then stays broken, as on one device).
TEST(MultiGpuTest, AFailureOnTheFirstGpuFailsDependentWorkOnTheSecond) {
  REQUIRE_TWO_GPUS();
  run_with_deadline([] {
    ev::Stream s0(kGpu0), s1(kGpu1);
    ev::Tensor x = ev::zeros({16}, ev::DType::f32, kGpu0);
    ev::Event bad = s0.enqueue("loader", [] { throw std::runtime_error("bad batch"); }, {}, {x});
    ev::Tensor y = ev::add(x.to(kGpu1), ev::ones({16}, ev::DType::f32, kGpu1));
    EXPECT_THROW_MSG(y.wait(), ev::OpError, "bad batch");
    EXPECT_THROW_MSG(bad.wait(), ev::OpError, "bad batch");

    s1.wait(bad);
    ev::Tensor z;
    {
      ev::StreamGuard g(s1);
      z = ev::ones({16}, ev::DType::f32, kGpu1);
    }
    EXPECT_THROW_MSG(z.wait(), ev::OpError, "bad batch");
    EXPECT_NE(s1.error(), nullptr) << "the cuda:1 stream is broken by the wait";

    // Failed later, on the GPU's side of a gate: the same.
    ev::UserEvent gate;
    ev::Stream s0b(kGpu0), s1b(kGpu1);
    s0b.wait(gate);
    ev::Tensor held;
    {
      ev::StreamGuard g(s0b);
      held = ev::ones({16}, ev::DType::f32, kGpu0);
    }
    ev::Event held_event;
    held_event.record(held);
    s1b.wait(held_event);
    ev::Tensor after;
    {
      ev::StreamGuard g(s1b);
      after = ev::full({16}, 3.0, ev::DType::f32, kGpu1);
    }
    ev::Tensor copied = held.to(kGpu1);
    gate.fail(std::make_exception_ptr(std::runtime_error("gate failed")));
    EXPECT_THROW_MSG(after.wait(), ev::OpError, "gate failed");
    EXPECT_THROW_MSG(copied.wait(), ev::OpError, "gate failed");
    // The other streams of both devices go on.
    EXPECT_EQ(ev::add(ev::ones({4}, ev::DType::f32, kGpu0).to(kGpu1),
                      ev::ones({4}, ev::DType::f32, kGpu1)).to_vector<float>(),
              std::vector<float>(4, 2.0f));
  });
}

TEST(MultiGpuTest, CallbacksAndWaitAnyOverEventsOfBothGpus) {
  REQUIRE_TWO_GPUS();
  run_with_deadline([] {
    ev::Stream s0(kGpu0), s1(kGpu1);
    DeviceWords w0(kGpu0), w1(kGpu1);
    ev::Event slow0 = spin_on(s0, 100'000'000, w0.p);
    ev::Event fast1 = spin_on(s1, 1'000, w1.p);
    auto i = ev::wait_any({slow0, fast1}, 10s);
    ASSERT_TRUE(i.has_value());
    EXPECT_EQ(*i, 1u) << "the cuda:1 event finished first";
    EXPECT_FALSE(slow0.poll());
    ev::Event slow1 = spin_on(s1, 300'000'000, w1.p);  // well after slow0
    ev::Event fast0 = spin_on(s0, 1'000, w0.p);  // behind slow0 on s0
    EXPECT_EQ(ev::wait_any({slow1, fast0}, 10s), std::optional<std::size_t>(1));
    EXPECT_FALSE(slow1.poll());
    ev::wait_all({slow0, slow1, fast0, fast1});

    // A callback per event of each device, once each, after its device's work.
    auto count = std::make_shared<std::atomic<int>>(0);
    auto order_ok = std::make_shared<std::atomic<int>>(0);
    ev::Event e0 = spin_on(s0, 20'000'000, w0.p);
    ev::Event e1 = spin_on(s1, 10'000'000, w1.p);
    for (ev::Event e : {e0, e1}) {
      e.add_callback([e, count, order_ok] {
        if (e.poll() && e.error() == nullptr) order_ok->fetch_add(1);
        count->fetch_add(1);
      });
    }
    EXPECT_TRUE(wait_for_count(*count, 2));
    EXPECT_EQ(order_ok->load(), 2);
    std::this_thread::sleep_for(10ms);
    EXPECT_EQ(count->load(), 2) << "each callback runs once";
  });
}

// The profiler records both devices: a process per GPU in the Chrome trace, the cross-device
// wait as an arrow between them.
TEST(MultiGpuTest, TheProfilerShowsBothGpusAndTheArrowBetweenThem) {
  REQUIRE_TWO_GPUS();
  run_with_deadline([] {
    ev::Stream s0(kGpu0), s1(kGpu1);
    DeviceWords w0(kGpu0), w1(kGpu1);
    ev::Profiler profiler;
    ev::UserEvent gate;
    s0.wait(gate);
    ev::Event first = spin_on(s0, 2'000'000, w0.p);
    s1.wait(first);
    ev::Event second = spin_on(s1, 1'000'000, w1.p);
    gate.set();
    second.wait();
    ev::Profile p = profiler.stop();
    bool on0 = false, on1 = false;
    for (const ev::ProfiledOp& op : p.ops()) {
      on0 = on0 || (op.device == kGpu0 && op.name == "spin");
      on1 = on1 || (op.device == kGpu1 && op.name == "spin");
    }
    EXPECT_TRUE(on0 && on1) << p.str();
    const std::string trace = p.chrome_trace();
    EXPECT_NE(trace.find("\"name\":\"cuda:0\""), std::string::npos);
    EXPECT_NE(trace.find("\"name\":\"cuda:1\""), std::string::npos);
    EXPECT_NE(trace.find("\"name\":\"wait\""), std::string::npos) << "the arrow of the wait";
    const std::string page = p.timeline_html();
    EXPECT_NE(page.find("cuda:1"), std::string::npos);
  });
}
