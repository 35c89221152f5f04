// eventide beside other CUDA code, on a real GPU: native events in both directions
// (Event::from_native, Event::native_handle), synchronize(device) over streams eventide never
// saw, stream priorities, and stream capture by other code (eventide's ops go into that
// code's graph and run at its replays; nothing eventide does may break that capture). Every test skips, saying why, where there is no GPU (CI);
// scripts/gpu-check.sh runs them on the GPU machine.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <eventide/eventide.hpp>

#include "backends/cuda/cuda_kernels.hpp"
#include "gpu_skip.hpp"
#include "test_util.hpp"

namespace ev = eventide;
namespace kernels = eventide::backends::cuda::kernels;
using namespace std::chrono_literals;
using eventide_test::poll_until;
using eventide_test::run_with_deadline;

namespace {

const ev::Device kGpu = ev::Device::cuda(0);

#define REQUIRE_GPU() EVENTIDE_REQUIRE_DEVICE(kGpu)

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// The user's own CUDA objects, as another library would hold them.
struct RawStream {
  cudaStream_t s = nullptr;
  explicit RawStream(int priority = 0) { cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority); }
  ~RawStream() { cudaStreamDestroy(s); }
};
struct RawEvent {
  cudaEvent_t e = nullptr;
  RawEvent() { cudaEventCreateWithFlags(&e, cudaEventDisableTiming); }
  ~RawEvent() { cudaEventDestroy(e); }
};
struct Stamps {
  unsigned long long* p = nullptr;  // device memory: [start, end] of each spin
  Stamps() { cudaMalloc(&p, 16 * sizeof(unsigned long long)); }
  ~Stamps() { cudaFree(p); }
  std::vector<unsigned long long> read() {
    std::vector<unsigned long long> h(16);
    cudaMemcpy(h.data(), p, h.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
    return h;
  }
};

constexpr std::int64_t kSpinNs = 30'000'000;  // 30 ms

TEST(CudaInteropTest, AnEventFromANativeOneFinishesOnlyOnceTheGpuHasPassedIt) {
  REQUIRE_GPU();
  run_with_deadline([] {
    RawStream user;
    RawEvent done;
    Stamps stamps;
    kernels::spin(kSpinNs, stamps.p, user.s);  // the user's work, 30 ms
    CUDA_OK(cudaEventRecord(done.e, user.s));
    ev::Event e = ev::Event::from_native(done.e, kGpu);
    EXPECT_EQ(e.device(), kGpu);
    // Recording the native event again afterwards does not change what e covers.
    CUDA_OK(cudaEventRecord(done.e, user.s));
    EXPECT_FALSE(e.poll());
    std::atomic<bool> called{false};
    e.add_callback([&] { called = true; });
    const auto start = std::chrono::steady_clock::now();
    e.wait();
    EXPECT_GE(std::chrono::steady_clock::now() - start, 10ms);
    EXPECT_EQ(cudaEventQuery(done.e), cudaSuccess);  // the GPU passed it before the host heard
    EXPECT_EQ(e.error(), nullptr);
    ev::synchronize(kGpu);
    for (int i = 0; i < 100 && !called; ++i) std::this_thread::sleep_for(1ms);
    EXPECT_TRUE(called);
    // Many at once, waited for together.
    std::vector<ev::Event> many;
    for (int i = 0; i < 32; ++i) many.push_back(ev::Event::from_native(done.e, kGpu));
    ev::wait_all(many);
  });
}

TEST(CudaInteropTest, AStreamWaitOnANativeEventIsDoneByTheGpu) {
  REQUIRE_GPU();
  run_with_deadline([] {
    RawStream user;
    RawEvent done;
    Stamps stamps;
    kernels::spin(kSpinNs, stamps.p, user.s);
    CUDA_OK(cudaEventRecord(done.e, user.s));
    ev::Stream s(kGpu);
    s.wait(ev::Event::from_native(done.e, kGpu));
    // Enqueued at once, without the host waiting: the call returns while the spin runs.
    const auto start = std::chrono::steady_clock::now();
    auto* second = stamps.p + 2;
    ev::Event after = s.enqueue("spin after", [h = static_cast<cudaStream_t>(s.native_handle()), second] {
      kernels::spin(1'000'000, second, h);
    });
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10ms);
    after.wait();
    auto v = stamps.read();
    EXPECT_GE(v[2], v[1]) << "the op after the wait started before the user's kernel ended";
  });
}

TEST(CudaInteropTest, ANativeHandleCoversTheEventsWorkForOtherCode) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s(kGpu);
    Stamps stamps;
    ev::Event e = s.enqueue("spin", [h = static_cast<cudaStream_t>(s.native_handle()), p = stamps.p] {
      kernels::spin(kSpinNs, p, h);
    });
    cudaEvent_t native = e.native_handle();
    ASSERT_NE(native, nullptr);
    EXPECT_EQ(e.native_handle(), native);  // one per event, recorded again
    RawStream user;
    CUDA_OK(cudaStreamWaitEvent(user.s, native, 0));  // the user's code waits on the GPU
    kernels::spin(1'000'000, stamps.p + 2, user.s);
    EXPECT_EQ(cudaEventQuery(native), cudaErrorNotReady);
    CUDA_OK(cudaStreamSynchronize(user.s));
    auto v = stamps.read();
    EXPECT_GE(v[2], v[1]) << "the user's kernel started before eventide's work ended";
    EXPECT_TRUE(e.poll() || e.wait_for(1s));
    // Work held behind a UserEvent is not on the GPU: no native event can stand for it.
    ev::UserEvent gate;
    ev::Stream held(kGpu);
    held.wait(gate);
    ev::Event pending;
    pending.record(held);
    EXPECT_THROW((void)pending.native_handle(), ev::StateError);
    gate.set();
    pending.wait();
  });
}

TEST(CudaInteropTest, SynchronizeOfTheDeviceCoversStreamsEventideNeverSaw) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::synchronize(kGpu);  // the drain thread is up
    RawStream user;         // non-blocking, like PyTorch's pool streams
    Stamps stamps;
    kernels::spin(kSpinNs, stamps.p, user.s);
    const auto start = std::chrono::steady_clock::now();
    ev::synchronize(kGpu);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 10ms);
    EXPECT_EQ(cudaStreamQuery(user.s), cudaSuccess) << "synchronize returned while the user's kernel ran";
    kernels::spin(kSpinNs, stamps.p, user.s);
    ev::synchronize();  // every device
    EXPECT_EQ(cudaStreamQuery(user.s), cudaSuccess);
    // With a timeout: false while the user's kernel runs, then true.
    kernels::spin(kSpinNs, stamps.p, user.s);
    EXPECT_FALSE(ev::synchronize_for(kGpu, 1ms));
    EXPECT_TRUE(ev::synchronize_for(kGpu, 10s));
  });
}

TEST(CudaInteropTest, StreamPrioritiesAreCudasAndWrappedStreamsKeepTheirs) {
  REQUIRE_GPU();
  int least = 0, greatest = 0;
  CUDA_OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT_EQ(ev::stream_priority_range(kGpu), (std::pair<int, int>{least, greatest}));
  ev::Stream urgent(kGpu, {.priority = greatest});
  int native = 0;
  CUDA_OK(cudaStreamGetPriority(static_cast<cudaStream_t>(urgent.native_handle()), &native));
  EXPECT_EQ(native, greatest);
  EXPECT_EQ(urgent.priority(), greatest);
  EXPECT_EQ(ev::Stream(kGpu, {.priority = greatest - 10}).priority(), greatest);  // clamped
  EXPECT_EQ(ev::Stream(kGpu, {.priority = least + 10}).priority(), least);
  RawStream theirs(greatest);
  EXPECT_EQ(ev::Stream::from_native(kGpu, theirs.s).priority(), greatest);
  EXPECT_EQ(ev::Stream::from_native(kGpu, nullptr).priority(), 0);
}

// A graph of the user's, as another library holds it after its capture.
struct RawGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~RawGraph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

// A stream of the user's, wrapped, and x = 1 (256 floats), finished.
struct UserStream {
  RawStream user;
  ev::Stream wrapped = ev::Stream::from_native(kGpu, user.s);
  ev::Tensor x = ev::ones({256}, ev::DType::f32, kGpu);
  UserStream() { x.wait(); }
};

// What `issue()` returns, issued with `s` current.
template <class F>
auto on(const ev::Stream& s, F&& issue) {
  ev::StreamGuard g(s);
  return issue();
}

// Ends the capture of `s` into `g` and instantiates it (as torch.cuda.graph's exit does).
void end_capture(cudaStream_t s, RawGraph& g) {
  CUDA_OK(cudaStreamEndCapture(s, &g.graph));
  CUDA_OK(cudaGraphInstantiate(&g.exec, g.graph, 0));
}

TEST(CudaInteropTest, AMarkerOrAWaitInOtherCodesCaptureIsRefusedAndTheCaptureStaysValid) {
  REQUIRE_GPU();
  run_with_deadline([] {
    RawStream user;
    ev::Stream wrapped = ev::Stream::from_native(kGpu, user.s);
    ev::Tensor x = ev::ones({256}, ev::DType::f32, kGpu);
    x.wait();
    ev::Stream other(kGpu);
    Stamps stamps;
    CUDA_OK(cudaStreamBeginCapture(user.s, cudaStreamCaptureModeGlobal));
    kernels::spin(1000, stamps.p, user.s);  // the user's captured kernel
    ev::Event e;
    EXPECT_THROW(e.record(wrapped), ev::StateError);  // refused before it touches the stream
    ev::UserEvent gate;
    EXPECT_THROW(wrapped.wait(gate), ev::StateError);
    gate.set();
    EXPECT_FALSE(wrapped.query());  // not asked of CUDA (that would invalidate the capture)
    // Work on a stream outside the capture goes on, from this thread, meanwhile.
    ev::Tensor y;
    {
      ev::StreamGuard g(other);
      y = ev::add(x, x);
    }
    RawGraph graph;
    end_capture(user.s, graph);
    CUDA_OK(cudaGraphLaunch(graph.exec, user.s));
    CUDA_OK(cudaStreamSynchronize(user.s));
    EXPECT_EQ(y.to_vector<float>(), std::vector<float>(256, 2.0f));
    // After the capture the wrapped stream works again.
    e.record(wrapped);
    e.wait();
  });
}

TEST(CudaInteropTest, OpsOnAStreamOtherCodeCapturesGoIntoItsGraphAndRunAtEachOfItsReplays) {
  REQUIRE_GPU();
  run_with_deadline([] {
    RawStream user;
    ev::Stream wrapped = ev::Stream::from_native(kGpu, user.s);
    ev::Tensor x = ev::ones({256}, ev::DType::f32, kGpu);
    ev::Tensor acc = ev::zeros({256}, ev::DType::f32, kGpu);
    ev::synchronize(kGpu);
    Stamps stamps;
    CUDA_OK(cudaStreamBeginCapture(user.s, cudaStreamCaptureModeGlobal));
    kernels::spin(1000, stamps.p, user.s);  // the user's kernel, before eventide's
    {
      ev::StreamGuard g(wrapped);
      ev::Tensor y = ev::add(x, x);  // made in the capture: the graph's memory
      ev::add_out(acc, acc, y);      // a tensor from outside, written at each replay
    }  // y's handle goes: the graph keeps its memory
    // Memory let go now would be this tensor's (the cache gives blocks of a size back first).
    ev::Tensor elsewhere;
    ev::Stream side(kGpu);
    {
      ev::StreamGuard g(side);
      elsewhere = ev::full({256}, 100.0f, ev::DType::f32, kGpu);
    }
    RawGraph graph;
    end_capture(user.s, graph);
    std::size_t nodes = 0;
    CUDA_OK(cudaGraphGetNodes(graph.graph, nullptr, &nodes));
    EXPECT_EQ(nodes, 3u) << "the user's kernel and eventide's two";
    EXPECT_EQ(acc.to_vector<float>(), std::vector<float>(256, 0.0f)) << "nothing ran in the capture";
    CUDA_OK(cudaGraphLaunch(graph.exec, user.s));
    CUDA_OK(cudaGraphLaunch(graph.exec, user.s));
    CUDA_OK(cudaStreamSynchronize(user.s));
    EXPECT_EQ(acc.to_vector<float>(), std::vector<float>(256, 4.0f)) << "two replays of acc += x + x";
    // Read without a synchronize: reading memory that graph writes waits for the device's work.
    kernels::spin(20'000'000, stamps.p, user.s);  // 20 ms before the next replay
    CUDA_OK(cudaGraphLaunch(graph.exec, user.s));
    EXPECT_EQ(acc.to_vector<float>(), std::vector<float>(256, 6.0f));
    EXPECT_EQ(elsewhere.to_vector<float>(), std::vector<float>(256, 100.0f));
    // The stream works eagerly again, and the graph may go (what it kept is let go later).
    {
      ev::StreamGuard g(wrapped);
      ev::add_out(acc, acc, x);
    }
    EXPECT_EQ(acc.to_vector<float>(), std::vector<float>(256, 7.0f));
  });
}

TEST(CudaInteropTest, AFollowedCaptureEndsAtAWaitOrAPollAndItsTensorsAreThenFinished) {
  REQUIRE_GPU();
  run_with_deadline([] {
    UserStream u;
    for (const bool by_poll : {false, true}) {
      CUDA_OK(cudaStreamBeginCapture(u.user.s, cudaStreamCaptureModeGlobal));
      ev::Tensor y = on(u.wrapped, [&] { return ev::mul(u.x, u.x); });
      EXPECT_FALSE(y.ready()) << "captured work has not run";
      RawGraph graph;
      end_capture(u.user.s, graph);
      CUDA_OK(cudaGraphLaunch(graph.exec, u.user.s));
      if (by_poll) {
        // Seen at a poll (the end goes to the dispatcher): a poll loop ends.
        EXPECT_TRUE(poll_until([&] { return y.ready(); }));
      } else {
        y.wait();  // seen at the wait: the capture is over
      }
      EXPECT_EQ(y.to_vector<float>(), std::vector<float>(256, 1.0f));
    }
  });
}

TEST(CudaInteropTest, WhatAFollowedCaptureCannotTakeIsRefusedAndThatCaptureStaysValid) {
  REQUIRE_GPU();
  run_with_deadline([] {
    UserStream u;
    ev::Stream& wrapped = u.wrapped;
    const ev::Tensor& x = u.x;
    cudaStream_t user = u.user.s;
    // Eventide's work still running (held behind a gate) cannot be waited for by the graph.
    ev::UserEvent gate;
    ev::Stream held(kGpu);
    held.wait(gate);
    ev::Tensor busy = on(held, [&] { return ev::add(x, x); });
    CUDA_OK(cudaStreamBeginCapture(user, cudaStreamCaptureModeGlobal));
    EXPECT_THROW(on(wrapped, [&] { return ev::add(busy, x); }), ev::StateError);
    gate.set();
    RawGraph first;
    end_capture(user, first);  // valid: nothing was done to the stream
    busy.wait();

    CUDA_OK(cudaStreamBeginCapture(user, cudaStreamCaptureModeGlobal));
    ev::Tensor y;
    {
      ev::StreamGuard g(wrapped);
      y = ev::add(x, x);
      // A host wait on captured work, random numbers, an event record: refused, and what
      // eventide captured is abandoned (its tensors fail); that capture goes on.
      EXPECT_THROW(y.wait(), ev::StateError);
      EXPECT_THROW(ev::rand({4}, ev::DType::f32, kGpu), ev::StateError);
      ev::Event e;
      EXPECT_THROW(e.record(wrapped), ev::StateError);
    }
    RawGraph second;
    end_capture(user, second);
    CUDA_OK(cudaGraphLaunch(second.exec, user));
    CUDA_OK(cudaStreamSynchronize(user));
    EXPECT_THROW(y.wait(), ev::StateError);
    {
      ev::StreamGuard g(wrapped);
      EXPECT_EQ(ev::add(x, x).to_vector<float>(), std::vector<float>(256, 2.0f));
    }
  });
}

}  // namespace
