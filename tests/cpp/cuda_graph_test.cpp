// Graphs on a GPU (eventide/graph.hpp, backends/cuda/cuda_graph.hpp): a capture records into
// CUDA graphs and a replay launches them, with every promise the CPU's graphs keep. The cases
// follow what users of torch.cuda.graph and CUDA stream capture rely on: a static input
// updated with copy_ between replays, the graph's own outputs read after each replay, events
// recorded inside the capture timing the latest replay, other code's kernels launched on the
// capture's native stream captured with eventide's ops, a capture broken by a forbidden call
// refused cleanly with the stream still usable, and graphs replayed on several streams.
// Every test skips, saying why, where there is no GPU (CI); scripts/gpu-check.sh runs them
// on the GPU machine, also under compute-sanitizer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include <eventide/eventide.hpp>
#include <eventide/graph.hpp>

#include "backends/cuda/cuda_kernels.hpp"
#include "gpu_skip.hpp"
#include "test_util.hpp"

namespace ev = eventide;
namespace kernels = eventide::backends::cuda::kernels;
using eventide_test::run_with_deadline;

namespace {

const ev::Device kGpu = ev::Device::cuda(0);

#define REQUIRE_GPU() EVENTIDE_REQUIRE_DEVICE(kGpu)

std::vector<float> values(const ev::Tensor& t) { return t.to_vector<float>(); }

// x = 0 and one = 1, 256 floats each, on the GPU.
struct Operands {
  ev::Tensor x = ev::zeros({256}, ev::DType::f32, kGpu);
  ev::Tensor one = ev::ones({256}, ev::DType::f32, kGpu);
};

// x += one, eagerly on `s` (the stream works as before a capture); x's values after it.
std::vector<float> add_eagerly(const ev::Stream& s, const Operands& o) {
  ev::StreamGuard on(s);
  ev::add_out(o.x, o.x, o.one);
  return values(o.x);
}

// x += one, `n` times, captured on `s`.
ev::Graph captured_adds(const ev::Stream& s, const ev::Tensor& x, const ev::Tensor& one, int n) {
  ev::Capture capture(s);
  for (int i = 0; i < n; ++i) ev::add_out(x, x, one);
  return capture.end();
}

TEST(CudaGraphTest, NothingRunsInTheCaptureAndEachReplayRunsTheWholeChain) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Tensor x = ev::zeros({256}, ev::DType::f32, kGpu);
    ev::Tensor one = ev::ones({256}, ev::DType::f32, kGpu);
    ev::Stream s(kGpu);
    ev::Graph g = captured_adds(s, x, one, 100);
    EXPECT_EQ(g.ops(), 100u);
    EXPECT_EQ(g.device(), kGpu);
    EXPECT_EQ(values(x), std::vector<float>(256, 0.0f)) << "a capture runs nothing";
    ev::Event done = g.replay(s);
    done.wait();
    EXPECT_EQ(values(x), std::vector<float>(256, 100.0f));
    EXPECT_GT(done.time_elapsed().count(), 0.0) << "a replay's device time";
    // Reading after replay() waits for that replay by itself; a replay on another stream is
    // ordered after the previous one (it reads and writes x).
    g.replay(ev::Stream(kGpu));
    g.replay(s);
    EXPECT_EQ(values(x), std::vector<float>(256, 300.0f));
  });
}

TEST(CudaGraphTest, TensorsMadeInTheCaptureAreTheGraphsAndAStaticInputIsUpdatedByCopy) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Tensor in = ev::full({1024}, 2.0, ev::DType::f32, kGpu);
    ev::Tensor out;
    ev::Stream s(kGpu);
    ev::Graph g;
    {
      ev::Capture capture(s);
      ev::Tensor doubled = ev::add(in, in);
      out = ev::mul(doubled, in);  // 2x * x
      g = capture.end();
    }
    EXPECT_THROW_MSG((void)out.to_vector<float>(), ev::Error, "replay");
    g.replay(s);
    EXPECT_EQ(values(out), std::vector<float>(1024, 8.0f));
    in.copy_(ev::full({1024}, 3.0, ev::DType::f32, kGpu));
    g.replay(s);
    EXPECT_EQ(values(out), std::vector<float>(1024, 18.0f));
  });
}

TEST(CudaGraphTest, AMatmulIsCapturedWithAWorkspaceOfItsOwn) {
  REQUIRE_GPU();
  run_with_deadline([] {
    constexpr int n = 256;
    ev::Tensor a = ev::full({n, n}, 1.0, ev::DType::bf16, kGpu);
    ev::Tensor b = ev::full({n, n}, 2.0, ev::DType::bf16, kGpu);
    ev::Tensor c = ev::empty({n, n}, ev::DType::bf16, kGpu);
    ev::Stream s(kGpu);
    ev::Graph g;
    {
      ev::Capture capture(s);
      ev::matmul_out(c, a, b);
      g = capture.end();
    }
    // Replays on another stream while eager matmuls run on the capture's stream (which use
    // that stream's workspace): neither disturbs the other.
    ev::Stream other(kGpu);
    ev::Tensor eager;
    for (int i = 0; i < 10; ++i) {
      g.replay(other);
      ev::StreamGuard on(s);
      eager = ev::matmul(b, a);
    }
    std::vector<float> got = ev::cast(c, ev::DType::f32).to_vector<float>();
    std::vector<float> want(static_cast<std::size_t>(n) * n, 2.0f * n);
    EXPECT_EQ(got, want);
    EXPECT_EQ(ev::cast(eager, ev::DType::f32).to_vector<float>(), want);
  });
}

// A model's graph holds hundreds of matmuls: they share the graph's one workspace (32 MiB),
// where one each would take 32 MiB apiece (1.25 GiB for these 40), and still compute right,
// each after the last, at every replay.
TEST(CudaGraphTest, TheMatmulsOfAGraphShareOneWorkspace) {
  REQUIRE_GPU();
  run_with_deadline([] {
    constexpr int n = 64, count = 40;
    ev::Tensor a = ev::full({n, n}, 1.0, ev::DType::f32, kGpu);
    ev::Tensor scale = ev::full({n, n}, 1.0 / n, ev::DType::f32, kGpu);
    ev::Tensor x = ev::empty({n, n}, ev::DType::f32, kGpu);
    ev::Tensor y = ev::empty({n, n}, ev::DType::f32, kGpu);
    ev::Stream s(kGpu);
    ev::synchronize(kGpu);
    (void)ev::empty_cache();  // memory the pool holds could hide the capture's allocations
    std::size_t free_before = 0, free_after = 0, total = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
    ev::Graph g;
    {
      ev::Capture capture(s);
      x.copy_(a);
      for (int i = 0; i < count / 2; ++i) {  // each reads the last: the values stay 1
        ev::matmul_out(y, x, scale);
        ev::matmul_out(x, y, scale);
      }
      g = capture.end();
    }
    ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
    const std::size_t grown = free_before > free_after ? free_before - free_after : 0;
    EXPECT_LT(grown, std::size_t{256} << 20) << "the capture took " << (grown >> 20) << " MiB";
    for (int r = 0; r < 3; ++r) {
      ev::add_out(x, x, a);  // disturbed between replays: each replay starts from a again
      g.replay(s);
      EXPECT_EQ(values(x), std::vector<float>(static_cast<std::size_t>(n) * n, 1.0f)) << "replay " << r;
    }
  });
}

// The kernels of a captured rand and randn read their seed and base from the graph's cell,
// which each replay writes first in stream order: a replay draws what the ops would draw
// eagerly then, bit for bit, also when replays queue on two streams.
TEST(CudaGraphTest, EachReplayDrawsAfreshAsTheEagerOpsWould) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Tensor u = ev::empty({4099}, ev::DType::f32, kGpu);
    ev::Tensor n = ev::empty({1000}, ev::DType::bf16, kGpu);
    ev::Tensor sum = ev::zeros({4099}, ev::DType::f32, kGpu);
    ev::Stream s(kGpu);
    ev::Graph g;
    {
      ev::Capture capture(s);
      ev::rand_out(u);
      ev::randn_out(n);
      ev::add_out(sum, sum, u);
      g = capture.end();
    }
    ev::manual_seed(5, kGpu);
    g.replay(s).wait();
    const std::vector<float> u1 = values(u);
    const std::vector<float> n1 = values(ev::cast(n, ev::DType::f32));
    ev::manual_seed(5, kGpu);
    EXPECT_EQ(values(ev::rand({4099}, ev::DType::f32, kGpu)), u1);
    EXPECT_EQ(values(ev::cast(ev::randn({1000}, ev::DType::bf16, kGpu), ev::DType::f32)), n1);

    // Eight replays back to back on two streams: each adds its own draw.
    ev::manual_seed(9, kGpu);
    std::vector<float> want(4099, 0.0f);
    for (int r = 0; r < 8; ++r) {
      const std::vector<float> drawn = values(ev::rand({4099}, ev::DType::f32, kGpu));
      (void)ev::randn({1000}, ev::DType::bf16, kGpu);
      for (std::size_t i = 0; i < want.size(); ++i) want[i] += drawn[i];
    }
    sum.copy_(ev::zeros({4099}, ev::DType::f32, kGpu));
    ev::Stream other(kGpu);
    ev::manual_seed(9, kGpu);
    std::vector<ev::Event> done;
    for (int r = 0; r < 8; ++r) done.push_back(g.replay(r % 2 ? other : s));
    for (ev::Event& e : done) e.wait();
    EXPECT_EQ(values(sum), want);
  });
}

TEST(CudaGraphTest, EventsRecordedInTheCaptureTimeTheLatestReplay) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Tensor x = ev::zeros({1 << 20}, ev::DType::f32, kGpu);
    ev::Tensor one = ev::ones({1 << 20}, ev::DType::f32, kGpu);
    ev::Event start, middle, end;
    ev::Stream s(kGpu);
    ev::Graph g;
    {
      ev::Capture capture(s);
      start.record(s);
      for (int i = 0; i < 20; ++i) ev::add_out(x, x, one);
      middle.record(s);
      for (int i = 0; i < 20; ++i) ev::add_out(x, x, one);
      end.record(s);
      g = capture.end();
    }
    for (int round = 1; round <= 3; ++round) {
      ev::Event before = s.record_event();  // eagerly, just before this replay
      ev::Event done = g.replay(s);
      done.wait();
      EXPECT_TRUE(start.poll());
      EXPECT_TRUE(middle.poll());
      EXPECT_TRUE(end.poll()) << "a replay's event covers the points after its last op";
      const double first = start.elapsed_time(middle).count();
      const double second = middle.elapsed_time(end).count();
      EXPECT_GT(first, 0.0);
      EXPECT_GT(second, 0.0);
      EXPECT_NEAR(start.elapsed_time(end).count(), first + second, 1e-2);
      // The latest replay's points, not an earlier one's: start comes after a marker placed just
      // before this replay (the host sleeps 50 ms between replays).
      EXPECT_GE(before.elapsed_time(start).count(), 0.0);
      EXPECT_LT(before.elapsed_time(start).count(), 40.0);
      EXPECT_EQ(values(x)[0], 40.0f * static_cast<float>(round));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
}

TEST(CudaGraphTest, OtherCodesKernelsOnTheCapturesNativeStreamAreCapturedInOrder) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Tensor x = ev::zeros({256}, ev::DType::f32, kGpu);
    ev::Tensor one = ev::ones({256}, ev::DType::f32, kGpu);
    ev::Stream s(kGpu);
    void* outside = s.native_handle();
    ev::Graph g;
    {
      ev::Capture capture(s);
      void* inside = s.native_handle();
      EXPECT_NE(inside, outside) << "in a capture, the native handle is the capture's stream";
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      ASSERT_EQ(cudaStreamIsCapturing(static_cast<cudaStream_t>(inside), &status), cudaSuccess);
      EXPECT_EQ(status, cudaStreamCaptureStatusActive);
      ev::add_out(x, x, one);  // x = 1
      // The user's own kernel, between two of eventide's: x = 5, then x = 6.
      kernels::fill(x.data_ptr(), 256, ev::DType::f32, 5.0, static_cast<cudaStream_t>(inside));
      ev::add_out(x, x, one);
      g = capture.end();
    }
    EXPECT_EQ(s.native_handle(), outside) << "its own handle again once the capture has ended";
    EXPECT_EQ(values(x), std::vector<float>(256, 0.0f)) << "the user's kernel did not run either";
    g.replay(s).wait();
    EXPECT_EQ(values(x), std::vector<float>(256, 6.0f));
  });
}

TEST(CudaGraphTest, ACallStreamCaptureForbidsFailsTheEndAndLeavesTheStreamUsable) {
  REQUIRE_GPU();
  run_with_deadline([] {
    Operands o;
    ev::Stream s(kGpu);
    {
      ev::Capture capture(s);
      ev::add_out(o.x, o.x, o.one);
      // Other code synchronizes the capture's stream: CUDA invalidates the capture.
      (void)cudaStreamSynchronize(static_cast<cudaStream_t>(s.native_handle()));
      (void)cudaGetLastError();
      EXPECT_THROW_MSG((void)capture.end(), ev::StateError, "graph", "stream capture", "synchronize");
    }
    EXPECT_EQ(values(o.x), std::vector<float>(256, 0.0f));
    EXPECT_EQ(add_eagerly(s, o), std::vector<float>(256, 1.0f));
  });
}

TEST(CudaGraphTest, RefusalsAbandonTheCaptureAndTheDeviceGoesOn) {
  REQUIRE_GPU();
  run_with_deadline([] {
    Operands o;
    ev::Stream s(kGpu);
    {
      ev::Capture capture(s);
      ev::add_out(o.x, o.x, o.one);
      const ev::Tensor made = ev::add(o.x, o.one);  // the graph's own: no value before a replay
      EXPECT_THROW_MSG((void)values(made), ev::StateError, "the capture of graph", "host wait");
      EXPECT_THROW_MSG(ev::add_out(o.x, o.x, o.one), ev::StateError, "the capture of graph");
      EXPECT_THROW_MSG((void)ev::rand({4}, ev::DType::f32, kGpu), ev::StateError, "the capture of graph");
      EXPECT_THROW_MSG((void)capture.end(), ev::StateError, "the capture of graph");
    }
    {
      ev::Capture capture(s);
      ev::add_out(o.x, o.x, o.one);
      // Left without end(): nothing runs, the stream is its own again.
    }
    EXPECT_EQ(add_eagerly(s, o), std::vector<float>(256, 1.0f));
  });
}

TEST(CudaGraphTest, AJoinedStreamIsCapturedAndItsWorkReplaysInOrder) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Tensor a = ev::zeros({256}, ev::DType::f32, kGpu);
    ev::Tensor b = ev::zeros({256}, ev::DType::f32, kGpu);
    ev::Tensor one = ev::ones({256}, ev::DType::f32, kGpu);
    ev::Stream s(kGpu), side(kGpu);
    ev::Graph g;
    {
      ev::Capture capture(s);
      ev::add_out(a, a, one);  // a = 1
      side.wait(s.record_event());
      {
        ev::StreamGuard on(side);
        ev::add_out(b, a, one);  // b = a + 1
      }
      s.wait(side.record_event());
      ev::add_out(a, a, b);  // a = a + b
      g = capture.end();
    }
    EXPECT_EQ(g.ops(), 3u);
    g.replay(s).wait();
    EXPECT_EQ(values(a), std::vector<float>(256, 3.0f));
    EXPECT_EQ(values(b), std::vector<float>(256, 2.0f));
    g.replay(s).wait();
    EXPECT_EQ(values(a), std::vector<float>(256, 9.0f));  // a = 4, b = 5, a = 4 + 5
    EXPECT_EQ(values(b), std::vector<float>(256, 5.0f));
  });
}

TEST(CudaGraphTest, AReplaysEventTakesCallbacksAndWaitAnyAndAGraphMayGoWhileItsReplayRuns) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Tensor x = ev::zeros({1 << 22}, ev::DType::f32, kGpu);
    ev::Tensor one = ev::ones({1 << 22}, ev::DType::f32, kGpu);
    ev::Stream s(kGpu);
    std::atomic<int> called{0};
    ev::Event done;
    {
      ev::Graph g = captured_adds(s, x, one, 200);
      done = g.replay(s);
      done.add_callback([&called] { called.fetch_add(1); });
    }  // the graph goes while its replay may still run on the GPU
    EXPECT_EQ(ev::wait_any({done}), std::optional<std::size_t>(0));
    EXPECT_TRUE(done.poll());
    for (int i = 0; i < 2000 && called.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(called.load(), 1);
    EXPECT_EQ(values(x)[0], 200.0f);
  });
}

TEST(CudaGraphTest, TheProfilerDrawsAReplayWithTheKernelsCuptiReportsInside) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Tensor x = ev::zeros({1 << 20}, ev::DType::f32, kGpu);
    ev::Tensor one = ev::ones({1 << 20}, ev::DType::f32, kGpu);
    ev::Stream s(kGpu);
    ev::Graph g = captured_adds(s, x, one, 5);
    ev::Profiler profiler;
    g.replay(s).wait();
    ev::Profile p = profiler.stop();
    const ev::ProfiledOp* replay = nullptr;
    for (const ev::ProfiledOp& op : p.ops()) {
      if (op.name.rfind("replay of graph", 0) == 0) replay = &op;
    }
    ASSERT_NE(replay, nullptr);
    ASSERT_TRUE(replay->start_us.has_value());
    if (ev::device_info(kGpu).description.find("CUPTI activity records") == std::string::npos) {
      GTEST_SKIP() << "op times here are not CUPTI's (" << ev::device_info(kGpu).description
                   << "): a replay's kernels have no times of their own";
    }
    ASSERT_EQ(replay->parts.size(), 5u) << "a part per kernel of the graph";
    for (const ev::ProfiledPart& part : replay->parts) {
      EXPECT_NE(part.name.find("kernel"), std::string::npos) << part.name;
      EXPECT_GE(part.start_us, *replay->start_us - 1e-3);
      EXPECT_LE(part.end_us, *replay->end_us + 1e-3);
    }
    EXPECT_NE(p.chrome_trace().find("graph nodes"), std::string::npos);
  });
}

}  // namespace
