// eventide on a GPU beside the raw CUDA calls it replaces (cuda_measure.hpp), one figure per
// function: each keeps its anchor's loop in the same function as eventide's, so that both are
// measured alike and a reader compares them side by side. (Graphs: cuda_graph_measure.cpp.)
#include "cuda_measure.hpp"

#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda_kernels.hpp"
#include "cuda_raw.hpp"
#include "measure.hpp"

namespace ev = eventide;
using namespace std::chrono_literals;

namespace eventide::bench::cuda {

namespace {

// A tensor on `gpu` whose producer has finished.
ev::Tensor finished_tensor(Device gpu) {
  ev::Tensor t = ev::ones({16}, ev::DType::f32, gpu);
  t.wait();
  return t;
}

constexpr int kPerBatch = 100;

// Long enough for the host side of a launch to settle, so the gate is set while the kernel
// is already spinning on the GPU.
void settle() { std::this_thread::sleep_for(50us); }

// Opens a gate (`open`) and blocks in `wait`; returns the ns from the opening to the return.
// With `busy` zero the gate opens just before the wait (the waiter spins: the best case);
// otherwise a helper thread opens it `busy` after the wait began, so the waiter has gone to
// sleep, as behind GPU work that runs for milliseconds.
template <class Open, class Wait>
double gate_to_return(std::chrono::nanoseconds busy, Open open, Wait wait) {
  if (busy.count() == 0) {
    const auto t0 = Clock::now();
    open();
    wait();
    return ns_between(t0, Clock::now());
  }
  std::atomic<Clock::rep> opened{0};
  std::thread opener([&] {
    std::this_thread::sleep_for(busy);
    opened.store(Clock::now().time_since_epoch().count());
    open();
  });
  wait();
  const auto t1 = Clock::now();
  opener.join();
  return ns_between(Clock::time_point(Clock::duration(opened.load())), t1);
}

}  // namespace


Compared add_chain(Device gpu, int batches) {
  use_device(gpu);
  constexpr int kElems = 256;
  Compared c;
  ev::Stream s(gpu);
  ev::StreamGuard guard(s);
  const ev::Tensor y = ev::full({kElems}, 1.0, ev::DType::f32, gpu);
  ev::Tensor x = ev::zeros({kElems}, ev::DType::f32, gpu);
  x.wait();
  c.ours.reserve(static_cast<std::size_t>(batches));
  for (int b = 0; b < batches; ++b) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kPerBatch; ++i) x = x + y;
    x.wait();
    c.ours.push_back(ns_between(t0, Clock::now()) / kPerBatch);
  }
  RawStream raw;
  DeviceMemory a(kElems * sizeof(float)), one(kElems * sizeof(float)), out(kElems * sizeof(float));
  EVENTIDE_BENCH_CHECK(cudaMemset(a.p, 0, kElems * sizeof(float)));
  EVENTIDE_BENCH_CHECK(cudaMemset(one.p, 0, kElems * sizeof(float)));
  auto* pa = static_cast<float*>(a.p);
  auto* po = static_cast<float*>(out.p);
  const auto* p1 = static_cast<const float*>(one.p);
  c.anchor.reserve(static_cast<std::size_t>(batches));
  for (int b = 0; b < batches; ++b) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kPerBatch; ++i) {
      kernels::add(pa, p1, po, kElems, raw.s);  // a chain: each reads the last one's output
      std::swap(pa, po);
    }
    EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(raw.s));
    c.anchor.push_back(ns_between(t0, Clock::now()) / kPerBatch);
  }
  return c;
}

Compared poll(Device gpu, int batches) {
  use_device(gpu);
  ev::Event e;
  e.record(finished_tensor(gpu));
  e.wait();
  Compared c;
  c.ours = per_call(batches, kPerBatch, [&] { (void)e.poll(); });
  RawStream raw;
  RawEvent ce(cudaEventDisableTiming);
  EVENTIDE_BENCH_CHECK(cudaEventRecord(ce.e, raw.s));
  EVENTIDE_BENCH_CHECK(cudaEventSynchronize(ce.e));
  c.anchor = per_call(batches, kPerBatch, [&] { (void)cudaEventQuery(ce.e); });
  return c;
}

// The anchors of record() and of a marker: cudaEventRecord with timing on (anchor) and off
// (anchor2), on a stream of its own.
static void measure_raw_records(Compared& c, int batches) {
  RawStream raw;
  RawEvent timed, untimed(cudaEventDisableTiming);
  c.anchor = per_call(std::max(1, batches / 2), kPerBatch, [&] { (void)cudaEventRecord(timed.e, raw.s); });
  c.anchor2 = per_call(std::max(1, batches / 2), kPerBatch, [&] { (void)cudaEventRecord(untimed.e, raw.s); });
  EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(raw.s));
}

Compared record(Device gpu, int batches) {
  use_device(gpu);
  ev::Tensor t = finished_tensor(gpu);
  Compared c;
  c.ours = per_call(batches, kPerBatch, [&] {
    ev::Event x;
    x.record(t);
  });
  measure_raw_records(c, batches);
  return c;
}

Compared marker(Device gpu, int batches) {
  use_device(gpu);
  ev::Stream s(gpu);
  Compared c;
  c.ours = per_call(batches, kPerBatch, [&] {
    ev::Event x;
    x.record(s);
  });
  s.synchronize();
  measure_raw_records(c, batches);
  return c;
}

Compared marker_region(Device gpu, int rounds) {
  use_device(gpu);
  DeviceMemory stamps_mem(2 * sizeof(unsigned long long));
  auto* stamps = static_cast<unsigned long long*>(stamps_mem.p);
  ev::Stream s(gpu);
  auto h = static_cast<cudaStream_t>(s.native_handle());
  RawEvent c0, c1;
  Compared c;
  for (int i = 0; i < rounds; ++i) {
    ev::Event start, end;
    // The same order at both ends: neither reading holds the other's record calls.
    start.record(s);
    EVENTIDE_BENCH_CHECK(cudaEventRecord(c0.e, h));
    kernels::spin(100'000, stamps, h);
    end.record(s);
    EVENTIDE_BENCH_CHECK(cudaEventRecord(c1.e, h));
    end.wait();
    EVENTIDE_BENCH_CHECK(cudaEventSynchronize(c1.e));
    float ms = 0;
    EVENTIDE_BENCH_CHECK(cudaEventElapsedTime(&ms, c0.e, c1.e));
    unsigned long long own[2];
    EVENTIDE_BENCH_CHECK(cudaMemcpy(own, stamps, sizeof own, cudaMemcpyDeviceToHost));
    c.ours.push_back(start.elapsed_time(end).count() * 1e6);
    c.anchor.push_back(static_cast<double>(ms) * 1e6);
    c.anchor2.push_back(static_cast<double>(own[1] - own[0]));
  }
  return c;
}

Compared stream_wait(Device gpu, int batches) {
  use_device(gpu);
  ev::Event e;
  e.record(finished_tensor(gpu));
  e.wait();
  ev::Stream s(gpu);
  Compared c;
  c.ours = per_call(std::max(1, batches / 4), kPerBatch, [&] { s.wait(e); });
  s.synchronize();
  RawStream raw;
  RawEvent ce(cudaEventDisableTiming);
  EVENTIDE_BENCH_CHECK(cudaEventRecord(ce.e, raw.s));
  EVENTIDE_BENCH_CHECK(cudaEventSynchronize(ce.e));
  c.anchor = per_call(std::max(1, batches / 4), kPerBatch, [&] { (void)cudaStreamWaitEvent(raw.s, ce.e, 0); });
  EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(raw.s));
  return c;
}

Compared completion_wait(Device gpu, int rounds, std::chrono::nanoseconds busy) {
  use_device(gpu);
  Pinned p;
  std::uint64_t* gate = p.device_ptr(0);
  std::uint64_t* done = p.device_ptr(1);
  Compared c;
  std::uint64_t v = 0;
  {
    ev::Stream s(gpu);
    cudaStream_t sh = static_cast<cudaStream_t>(s.native_handle());
    for (int i = 0; i < rounds; ++i) {
      ++v;
      ev::Event e = s.enqueue("hold", [=] { kernels::hold(gate, v, nullptr, sh); });
      settle();
      c.ours.push_back(gate_to_return(busy, [&] { p.at(0) = v; }, [&] { e.wait(); }));
    }
  }
  RawStream raw;
  RawEvent ce(cudaEventDisableTiming);
  for (int i = 0; i < rounds; ++i) {  // cudaEventSynchronize
    ++v;
    kernels::hold(gate, v, nullptr, raw.s);
    EVENTIDE_BENCH_CHECK(cudaEventRecord(ce.e, raw.s));
    settle();
    c.anchor.push_back(gate_to_return(busy, [&] { p.at(0) = v; },
                                      [&] { EVENTIDE_BENCH_CHECK(cudaEventSynchronize(ce.e)); }));
  }
  for (int i = 0; i < rounds; ++i) {  // the floor: the host polls a word the kernel writes
    ++v;
    kernels::hold(gate, v, done, raw.s);
    settle();
    c.anchor2.push_back(gate_to_return(busy, [&] { p.at(0) = v; }, [&] {
      while (p.at(1) != v) {
      }
    }));
  }
  EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(raw.s));
  return c;
}

Compared completion_callback(Device gpu, int rounds) {
  use_device(gpu);
  Pinned p;
  std::uint64_t* gate = p.device_ptr(0);
  Compared c;
  std::uint64_t v = 0;
  // Stamped on the callback's thread; shared, so that a callback still returning after the
  // host has read the stamp touches nothing that is gone.
  struct Stamp {
    std::atomic<std::int64_t> at{0};
  };
  {
    ev::Stream s(gpu);
    cudaStream_t sh = static_cast<cudaStream_t>(s.native_handle());
    for (int i = 0; i < rounds; ++i) {
      ++v;
      ev::Event e = s.enqueue("hold", [=] { kernels::hold(gate, v, nullptr, sh); });
      auto stamp = std::make_shared<Stamp>();
      e.add_callback([stamp] { stamp->at.store(now_ns(), std::memory_order_release); });
      settle();
      const std::int64_t t0 = now_ns();
      p.at(0) = v;
      while (stamp->at.load(std::memory_order_acquire) == 0) std::this_thread::yield();
      c.ours.push_back(static_cast<double>(stamp->at.load() - t0));
    }
    s.synchronize();
  }
  RawStream raw;
  Stamp host_fn;
  // cudaLaunchHostFunc also stalls its stream while the function runs: fewer rounds.
  for (int i = 0; i < std::max(1, rounds / 3); ++i) {
    ++v;
    host_fn.at.store(0);
    kernels::hold(gate, v, nullptr, raw.s);
    EVENTIDE_BENCH_CHECK(cudaLaunchHostFunc(
        raw.s, [](void* d) { static_cast<Stamp*>(d)->at.store(now_ns(), std::memory_order_release); },
        &host_fn));
    settle();
    const std::int64_t t0 = now_ns();
    p.at(0) = v;
    while (host_fn.at.load(std::memory_order_acquire) == 0) std::this_thread::yield();
    c.anchor.push_back(static_cast<double>(host_fn.at.load() - t0));
  }
  EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(raw.s));
  return c;
}

// A gate the host opens, then a tiny op behind it, then its end noticed on the host: by
// Event::wait / cudaEventSynchronize, or with `callback` by a callback / cudaLaunchHostFunc. Ours:
// a UserEvent the stream waits for (the op is held on the host until it is set); the raw
// anchor: cuStreamWaitValue32 on a pinned word in the stream, the same kernel behind it.
// cuStreamWaitValue32, through the runtime (the driver library is not linked: the binaries run
// where there is none, and say so).
CUresult stream_wait_value32(cudaStream_t s, CUdeviceptr word, std::uint32_t value) {
  using Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  static const Fn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    EVENTIDE_BENCH_CHECK(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || !p) throw std::runtime_error("cuStreamWaitValue32 not found");
    return reinterpret_cast<Fn>(p);
  }();
  return fn(reinterpret_cast<CUstream>(s), word, value, CU_STREAM_WAIT_VALUE_GEQ);
}

static Compared gate_op(Device gpu, int rounds, bool callback) {
  use_device(gpu);
  constexpr int kElems = 256;
  struct Stamp {
    std::atomic<std::int64_t> at{0};
  };
  Compared c;
  {
    ev::Stream s(gpu);
    ev::StreamGuard guard(s);
    const ev::Tensor y = ev::ones({kElems}, ev::DType::f32, gpu);
    const ev::Tensor x = ev::zeros({kElems}, ev::DType::f32, gpu);
    x.wait();
    for (int i = 0; i < rounds; ++i) {
      ev::UserEvent gate;
      s.wait(gate);
      ev::Event e;
      e.record(x + y);
      auto stamp = std::make_shared<Stamp>();
      if (callback) e.add_callback([stamp] { stamp->at.store(now_ns(), std::memory_order_release); });
      settle();
      const std::int64_t t0 = now_ns();
      gate.set();
      if (callback) {
        while (stamp->at.load(std::memory_order_acquire) == 0) std::this_thread::yield();
        c.ours.push_back(static_cast<double>(stamp->at.load() - t0));
      } else {
        e.wait();
        c.ours.push_back(static_cast<double>(now_ns() - t0));
      }
    }
    s.synchronize();
  }
  Pinned p;
  const auto word = reinterpret_cast<CUdeviceptr>(p.device_ptr(0));
  RawStream raw;
  RawEvent done(cudaEventDisableTiming);
  DeviceMemory a(kElems * sizeof(float)), one(kElems * sizeof(float)), out(kElems * sizeof(float));
  EVENTIDE_BENCH_CHECK(cudaMemset(a.p, 0, kElems * sizeof(float)));
  EVENTIDE_BENCH_CHECK(cudaMemset(one.p, 0, kElems * sizeof(float)));
  Stamp host_fn;
  std::uint32_t v = 0;
  // Whatever fails from here, the gate opens before the stream is synchronized and the memory
  // freed: a stream left waiting on the word would hang them.
  struct OpenAtExit {
    Pinned& p;
    ~OpenAtExit() { p.at(0) = ~std::uint64_t{0} >> 32; }  // above every value waited for
  } open_at_exit{p};
  for (int i = 0; i < rounds; ++i) {
    ++v;
    host_fn.at.store(0);
    if (stream_wait_value32(raw.s, word, v) != CUDA_SUCCESS) throw std::runtime_error("cuStreamWaitValue32 failed");
    kernels::add(static_cast<const float*>(a.p), static_cast<const float*>(one.p), static_cast<float*>(out.p),
                 kElems, raw.s);
    if (callback) {
      EVENTIDE_BENCH_CHECK(cudaLaunchHostFunc(
          raw.s, [](void* d) { static_cast<Stamp*>(d)->at.store(now_ns(), std::memory_order_release); },
          &host_fn));
    } else {
      EVENTIDE_BENCH_CHECK(cudaEventRecord(done.e, raw.s));
    }
    settle();
    const std::int64_t t0 = now_ns();
    p.at(0) = v;
    if (callback) {
      while (host_fn.at.load(std::memory_order_acquire) == 0) std::this_thread::yield();
      c.anchor.push_back(static_cast<double>(host_fn.at.load() - t0));
    } else {
      EVENTIDE_BENCH_CHECK(cudaEventSynchronize(done.e));
      c.anchor.push_back(static_cast<double>(now_ns() - t0));
    }
  }
  EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(raw.s));
  return c;
}

Compared gate_op_wait(Device gpu, int rounds) { return gate_op(gpu, rounds, false); }
Compared gate_op_callback(Device gpu, int rounds) { return gate_op(gpu, rounds, true); }

Compared timing_error(Device gpu, int rounds) {
  use_device(gpu);
  constexpr long long kKernelNs = 10'000;
  DeviceMemory stamps_mem(2 * sizeof(unsigned long long));
  auto* stamps = static_cast<unsigned long long*>(stamps_mem.p);
  Compared c;
  {
    ev::Stream s(gpu);
    cudaStream_t sh = static_cast<cudaStream_t>(s.native_handle());
    for (int i = 0; i < rounds; ++i) {
      ev::Event e = s.enqueue("spin", [=] { kernels::spin(kKernelNs, stamps, sh); });
      e.wait();
      unsigned long long h[2];
      EVENTIDE_BENCH_CHECK(cudaMemcpy(h, stamps, sizeof h, cudaMemcpyDeviceToHost));
      const double own_ns = static_cast<double>(h[1] - h[0]);
      c.anchor2.push_back(own_ns);
      c.ours.push_back(std::abs(e.time_elapsed().count() * 1e3 - own_ns));
    }
  }
  RawStream raw;
  RawEvent a, b;
  for (int i = 0; i < rounds; ++i) {
    EVENTIDE_BENCH_CHECK(cudaEventRecord(a.e, raw.s));
    kernels::spin(kKernelNs, stamps, raw.s);
    EVENTIDE_BENCH_CHECK(cudaEventRecord(b.e, raw.s));
    EVENTIDE_BENCH_CHECK(cudaEventSynchronize(b.e));
    float ms = 0;
    EVENTIDE_BENCH_CHECK(cudaEventElapsedTime(&ms, a.e, b.e));
    unsigned long long h[2];
    EVENTIDE_BENCH_CHECK(cudaMemcpy(h, stamps, sizeof h, cudaMemcpyDeviceToHost));
    c.anchor.push_back(std::abs(static_cast<double>(ms) * 1e6 - static_cast<double>(h[1] - h[0])));
  }
  return c;
}


MatmulResult matmul(Device gpu, DType dtype, bool tf32, int n, int trials) {
  use_device(gpu);
  Tf32Setting tf32_setting(tf32);
  ev::Stream s(gpu);
  ev::StreamGuard guard(s);
  ev::Tensor a = ev::randn({n, n}, dtype, gpu), b = ev::randn({n, n}, dtype, gpu);
  ev::Tensor out = ev::empty({n, n}, dtype, gpu);
  ev::synchronize(gpu);
  DirectLt direct(n, dtype, tf32);
  RawStream raw;
  const double flops = 2.0 * n * n * static_cast<double>(n);
  const int reps = n <= 1024 ? 200 : (n <= 4096 ? 30 : 8);
  std::vector<double> ours, theirs;
  for (int trial = 0; trial < trials; ++trial) {
    ev::Event e;
    e.record(ev::matmul(a, b));  // warm (allocation, plan)
    e.wait();
    auto t0 = Clock::now();
    ev::Tensor last;
    for (int r = 0; r < reps; ++r) last = ev::matmul(a, b);
    e.record(last);
    e.wait();
    ours.push_back(flops * reps / ns_between(t0, Clock::now()) / 1e3);  // TFLOP/s
    direct.run(a.data_ptr(), b.data_ptr(), out.data_ptr(), raw.s);
    EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(raw.s));
    t0 = Clock::now();
    for (int r = 0; r < reps; ++r) direct.run(a.data_ptr(), b.data_ptr(), out.data_ptr(), raw.s);
    EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(raw.s));
    theirs.push_back(flops * reps / ns_between(t0, Clock::now()) / 1e3);
  }
  // Best of the alternating trials: the GPU's clock moves with its power draw, and the best
  // trial of each is the one least slowed by that.
  return {*std::max_element(ours.begin(), ours.end()), *std::max_element(theirs.begin(), theirs.end())};
}

Compared cross_device_wait(Device a, Device b, int rounds, int pingpongs) {
  if (a == b) throw std::invalid_argument("cross_device_wait: needs two different GPUs");
  Pinned p;  // the gate: host-written, read by a kernel on `a`
  use_device(a);
  std::uint64_t* gate = p.device_ptr(0);
  DeviceMemory stamps_a(2 * sizeof(unsigned long long));
  use_device(b);
  DeviceMemory stamps_b(2 * sizeof(unsigned long long));
  auto* st_a = static_cast<unsigned long long*>(stamps_a.p);
  auto* st_b = static_cast<unsigned long long*>(stamps_b.p);
  const double waits = 2.0 * pingpongs;
  std::uint64_t v = p.at(0);
  Compared c;

  // eventide: ops on a stream of each GPU, each stream waiting for the other's last event.
  {
    ev::Stream s_a(a), s_b(b);
    auto h_a = static_cast<cudaStream_t>(s_a.native_handle());
    auto h_b = static_cast<cudaStream_t>(s_b.native_handle());
    // Every kernel once on each device first (`hold` runs on `a` only), its gate open: with CUDA's lazy loading, a
    // kernel's first launch loads it, which must not happen while `hold` spins.
    s_a.enqueue("warm up", [=] {
      kernels::hold(gate, v, nullptr, h_a);
      kernels::spin(0, st_a, h_a);
    });
    s_b.enqueue("warm up", [=] { kernels::spin(0, st_b, h_b); });
    s_a.synchronize();
    s_b.synchronize();
    for (int r = 0; r < rounds; ++r) {
      ++v;
      s_a.enqueue("hold", [=] { kernels::hold(gate, v, nullptr, h_a); });
      settle();
      ev::Event start = s_a.record_event();
      for (int i = 0; i < pingpongs; ++i) {
        ev::Event ping = s_a.enqueue("ping", [=] { kernels::spin(0, st_a, h_a); });
        s_b.wait(ping);
        ev::Event pong = s_b.enqueue("pong", [=] { kernels::spin(0, st_b, h_b); });
        s_a.wait(pong);
      }
      ev::Event end = s_a.record_event();
      p.at(0) = v;  // open the gate: the whole chain runs on the GPUs now
      end.wait();
      c.ours.push_back(start.elapsed_time(end).count() * 1e6 / waits);
    }
  }

  // Raw CUDA: the same chain with cudaEventRecord + cudaStreamWaitEvent, timed by a CUDA event
  // pair on `a`.
  {
    use_device(a);
    RawStream r_a;
    RawEvent t0, t1;
    std::vector<std::unique_ptr<RawEvent>> pings, pongs;
    for (int i = 0; i < pingpongs; ++i) pings.push_back(std::make_unique<RawEvent>(cudaEventDisableTiming));
    use_device(b);
    RawStream r_b;
    for (int i = 0; i < pingpongs; ++i) pongs.push_back(std::make_unique<RawEvent>(cudaEventDisableTiming));
    for (int r = 0; r < rounds; ++r) {
      ++v;
      use_device(a);
      kernels::hold(gate, v, nullptr, r_a.s);
      settle();
      EVENTIDE_BENCH_CHECK(cudaEventRecord(t0.e, r_a.s));
      for (int i = 0; i < pingpongs; ++i) {
        use_device(a);
        kernels::spin(0, st_a, r_a.s);
        EVENTIDE_BENCH_CHECK(cudaEventRecord(pings[i]->e, r_a.s));
        use_device(b);
        EVENTIDE_BENCH_CHECK(cudaStreamWaitEvent(r_b.s, pings[i]->e, 0));
        kernels::spin(0, st_b, r_b.s);
        EVENTIDE_BENCH_CHECK(cudaEventRecord(pongs[i]->e, r_b.s));
        use_device(a);
        EVENTIDE_BENCH_CHECK(cudaStreamWaitEvent(r_a.s, pongs[i]->e, 0));
      }
      EVENTIDE_BENCH_CHECK(cudaEventRecord(t1.e, r_a.s));
      p.at(0) = v;
      EVENTIDE_BENCH_CHECK(cudaEventSynchronize(t1.e));
      float ms = 0;
      EVENTIDE_BENCH_CHECK(cudaEventElapsedTime(&ms, t0.e, t1.e));
      c.anchor.push_back(static_cast<double>(ms) * 1e6 / waits);
    }
    use_device(b);
    EVENTIDE_BENCH_CHECK(cudaStreamSynchronize(r_b.s));
    use_device(a);
  }
  return c;
}

}  // namespace eventide::bench::cuda
