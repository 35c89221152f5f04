// eventide beside other CUDA code, on a real GPU: native events in both directions
// (Event::from_native, Event::native_handle), synchronize(device) over streams eventide never
// saw, stream priorities, and stream capture (nothing eventide does may break another
// library's capture). Every test skips, saying why, where there is no GPU (CI);
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

TEST(CudaInteropTest, NothingIsIssuedIntoACaptureAndTheCaptureStaysValid) {
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
    {
      ev::StreamGuard g(wrapped);
      EXPECT_THROW(ev::add(x, x), ev::StateError);  // refused before it touches the stream
    }
    ev::Event e;
    EXPECT_THROW(e.record(wrapped), ev::StateError);
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
    cudaGraph_t graph = nullptr;
    CUDA_OK(cudaStreamEndCapture(user.s, &graph));
    cudaGraphExec_t exec = nullptr;
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, user.s));
    CUDA_OK(cudaStreamSynchronize(user.s));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    EXPECT_EQ(y.to_vector<float>(), std::vector<float>(256, 2.0f));
    // After the capture the wrapped stream works again.
    e.record(wrapped);
    e.wait();
  });
}

}  // namespace
