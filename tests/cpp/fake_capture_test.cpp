// Following other code's capture of a stream (core/capture.hpp), the core's part, on the fake
// device's native capture (tests/fake): what a GPU stream captured by torch.cuda.graph takes,
// on the CPU and so under CI's sanitizers. The GPU's own part: cuda_interop_test.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "core/tensor_state.hpp"
#include "fake/fake_backend.hpp"
#include "test_util.hpp"

namespace {

using namespace eventide_test;
namespace fake = eventide_fake;

const ev::Device kFake0("fake:0");

// x = 1 and acc = 0, four floats each, made and run on `s`.
std::pair<ev::Tensor, ev::Tensor> operands(const ev::Stream& s) {
  ev::StreamGuard g(s);
  ev::Tensor x = ev::full({4}, 1.0, ev::DType::f32, kFake0);
  ev::Tensor acc = ev::zeros({4}, ev::DType::f32, kFake0);
  fake::run(s);
  x.wait();
  acc.wait();
  return {x, acc};
}

// What `issue()` returns, issued with `s` current.
template <class F>
auto on(const ev::Stream& s, F&& issue) {
  ev::StreamGuard g(s);
  return issue();
}

TEST(FakeBackendTest, OpsOnAStreamOtherCodeCapturesGoIntoItsGraphAndRunAtEachOfItsReplays) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    auto [x, acc] = operands(s);
    fake::begin_native_capture(s);
    ev::Tensor y;
    {
      ev::StreamGuard g(s);
      y = ev::add(x, x);          // made in the capture: that graph's
      ev::add_out(acc, acc, y);   // from outside, written at each replay
    }
    EXPECT_EQ(fake::run(s), 0u) << "nothing was launched: the bodies went into the capture";
    fake::NativeGraph graph = fake::end_native_capture(s);
    EXPECT_EQ(graph.nodes(), 2u);
    graph.replay();
    graph.replay();
    y.wait();  // the end is seen here: the capture Work finishes without error
    EXPECT_EQ(y.error(), nullptr);
    EXPECT_EQ(y.to_vector<float>(), std::vector<float>(4, 2.0f));
    EXPECT_EQ(acc.to_vector<float>(), std::vector<float>(4, 4.0f));
    {
      ev::StreamGuard g(s);  // the stream works eagerly again
      ev::add_out(acc, acc, x);
    }
    fake::run(s);
    EXPECT_EQ(acc.to_vector<float>(), std::vector<float>(4, 5.0f));
  });
}

TEST(FakeBackendTest, AFollowedCaptureIsSeenOverAtAPollAndAPollLoopEnds) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    auto [x, acc] = operands(s);
    fake::begin_native_capture(s);
    ev::Tensor y = on(s, [&] { return ev::mul(x, x); });
    EXPECT_FALSE(y.ready()) << "captured work has not run";
    fake::NativeGraph graph = fake::end_native_capture(s);
    graph.replay();
    // A poll may come from under any lock: the end goes to the dispatcher, and the loop ends.
    EXPECT_TRUE(poll_until([&] { return y.ready(); }));
    EXPECT_EQ(y.error(), nullptr);
  });
}

TEST(FakeBackendTest, TheGraphKeepsWhatTheOpsUseUntilItGoes) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    auto [x, acc] = operands(s);
    std::weak_ptr<eventide::detail::TensorState> made;
    std::optional<fake::NativeGraph> graph;
    fake::begin_native_capture(s);
    {
      ev::StreamGuard g(s);
      ev::Tensor y = ev::add(x, x);
      made = y.state();
      ev::add_out(acc, acc, y);
    }  // y's handle goes
    graph.emplace(fake::end_native_capture(s));
    (void)on(s, [&] { return ev::add(x, x); });  // the stream sees the capture over
    fake::run(s);
    EXPECT_FALSE(made.expired()) << "the graph keeps the tensor it writes";
    graph->replay();
    EXPECT_EQ(acc.to_vector<float>(), std::vector<float>(4, 2.0f));
    graph.reset();  // as CUDA does when the graph goes: let go on the dispatcher
    EXPECT_TRUE(poll_until([&] { return made.expired(); })) << "the tensor the graph kept is let go";
  });
}

TEST(FakeBackendTest, WhatAFollowedCaptureCannotTakeIsRefusedBeforeItTouchesTheStream) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    auto [x, acc] = operands(s);
    // A marker before any op: refused by the stream, as a GPU stream refuses it.
    fake::begin_native_capture(s);
    ev::Event e;
    EXPECT_THROW_MSG(e.record(s), ev::StateError, "captured by other code");
    // eventide's work still held behind a gate: the graph could not wait for it.
    ev::UserEvent gate;
    ev::Stream held(kFake0);
    held.wait(gate);
    ev::Tensor busy = on(held, [&] { return ev::add(x, x); });
    {
      ev::StreamGuard g(s);
      EXPECT_THROW_MSG(ev::add(busy, x), ev::StateError, "begun by other code", "add#", "wait for it");
      // Abandoned: the stream's later calls there are refused until that capture ends.
      EXPECT_THROW(ev::add(x, x), ev::StateError);
    }
    EXPECT_EQ(fake::end_native_capture(s).nodes(), 0u);
    gate.set();
    fake::run(held);
    busy.wait();

    // A host wait on captured work, and an event recorded in it: refused, and abandoning.
    fake::begin_native_capture(s);
    ev::Tensor y;
    {
      ev::StreamGuard g(s);
      y = ev::add(x, x);
      EXPECT_THROW_MSG(y.wait(), ev::StateError, "begun by other code", "host wait");
    }
    EXPECT_THROW(e.record(s), ev::StateError);
    fake::NativeGraph graph = fake::end_native_capture(s);
    EXPECT_EQ(graph.nodes(), 1u);
    EXPECT_THROW(y.wait(), ev::StateError);  // abandoned: its tensors fail
    e.record(s);  // over: the stream works again
    fake::run(s);
    e.wait();
  });
}

TEST(FakeCaptureRaceTest, OpsRacingOtherCodesCaptureBeginAndEndAreCapturedRunOrRefused) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    auto [x, acc] = operands(s);
    std::atomic<bool> stop{false};
    std::atomic<int> refused{0};
    std::atomic<int> issued{0};
    std::vector<ev::Tensor> made;
    std::thread issuer([&] {
      ev::StreamGuard g(s);
      while (!stop.load()) {
        issued.fetch_add(1);
        try {
          made.push_back(ev::add(x, x));
        } catch (const ev::StateError&) {
          // The capture began or ended while the op was issued (its body, bound to where the
          // stream's work went, is then neither captured nor run).
          refused.fetch_add(1);
        }
      }
    });
    std::vector<fake::NativeGraph> graphs;
    // Until the other thread has issued 400 ops across the captures' begins and ends.
    for (int round = 0; issued.load() < 400 && round < 1'000'000; ++round) {
      fake::begin_native_capture(s);
      std::this_thread::yield();
      graphs.push_back(fake::end_native_capture(s));
      fake::run(s);
    }
    stop.store(true);
    issuer.join();
    for (const fake::NativeGraph& graph : graphs) graph.replay();
    fake::run(s);
    // Every op issued is finished (captured: its capture is over; eager: run), none hangs.
    for (const ev::Tensor& t : made) {
      if (t.error()) continue;
      while (!t.wait_for(10ms)) fake::run(s);
    }
    graphs.clear();  // what the graphs kept goes on the dispatcher
  });
}

}  // namespace
