// Random numbers in graphs (eventide/graph.hpp, core/capture.hpp's GraphDraws) on the CPU: as
// torch.cuda.graph's generator does, each replay draws afresh from the device's generator,
// the very numbers the captured ops would draw if they were issued eagerly at the replay's
// call, and replays queued on several streams each draw their own.
#include <thread>
#include <vector>

#include "graph_util.hpp"

namespace eventide_test {
namespace {

using ev::Graph;
using ev::Tensor;

// As torch.cuda.graph's generator does: each replay draws afresh from the device's generator,
// the very numbers the same ops would draw if they were issued eagerly then; a seed set before
// a replay makes it repeat; eager draws after a replay go on from where it left off.
TEST(GraphDrawsTest, EachReplayDrawsTheNumbersTheOpsWouldDrawEagerlyThen) {
  run_with_deadline([] {
    Tensor u = ev::empty({1001});
    Tensor n;
    Graph g = captured([&] {
      ev::rand_out(u);
      n = ev::randn({6, 7}, ev::DType::f64);  // the graph's own
    });
    ev::manual_seed(7);
    g.replay(ev::Stream()).wait();
    const std::vector<float> u1 = values(u);
    const std::vector<double> n1 = n.to_vector<double>();
    const std::vector<float> next = values(ev::rand({5}));

    ev::manual_seed(7);
    EXPECT_EQ(values(ev::rand({1001})), u1) << "the replay drew what eager rand draws";
    EXPECT_EQ(ev::randn({6, 7}, ev::DType::f64).to_vector<double>(), n1);
    EXPECT_EQ(values(ev::rand({5})), next) << "eager draws go on after the replay's";

    g.replay(ev::Stream()).wait();  // the generator moved on: new numbers
    EXPECT_NE(values(u), u1);
    EXPECT_NE(n.to_vector<double>(), n1);
    ev::manual_seed(7);
    g.replay(ev::Stream()).wait();
    EXPECT_EQ(values(u), u1) << "the same seed, the same replay";
    EXPECT_EQ(n.to_vector<double>(), n1);
  });
}

// Replays queued back to back on several streams each draw their own numbers: a replay's seed
// and base are written in stream order, after the previous replay's ops have read theirs.
TEST(GraphDrawsTest, ReplaysQueuedBehindAGateDrawTheirOwnNumbers) {
  run_with_deadline([] {
    Tensor u = ev::empty({64});
    Tensor sum = ev::zeros({64});
    Graph g = captured([&] {
      ev::rand_out(u);
      ev::add_out(sum, sum, u);
    });
    ev::manual_seed(11);
    std::vector<float> want(64, 0.0f);
    for (int r = 0; r < 6; ++r) {
      const std::vector<float> drawn = values(ev::rand({64}));
      for (std::size_t i = 0; i < want.size(); ++i) want[i] += drawn[i];
    }
    ev::UserEvent held;
    ev::Stream a = gated_stream(held), b = gated_stream(held);
    ev::manual_seed(11);
    std::vector<ev::Event> done;
    for (int r = 0; r < 6; ++r) done.push_back(g.replay(r % 2 ? b : a));
    held.set();
    for (ev::Event& e : done) e.wait();
    EXPECT_EQ(values(sum), want);
  });
}

// Replays of one graph from two threads at once, each of two stretches (an event recorded in
// the capture cuts it): a replay issues both before another issues either, so none adds
// another's numbers. The draws' order between the threads is free, so the sum is compared
// with its eager value within rounding.
TEST(GraphDrawsTest, ReplaysFromTwoThreadsEachDrawTheirOwnNumbers) {
  run_with_deadline([] {
    constexpr int kPerThread = 50;
    Tensor u = ev::empty({64});
    Tensor sum = ev::zeros({64});
    ev::Event cut;
    Graph g = captured([&](ev::Capture& capture) {
      ev::rand_out(u);
      cut.record(capture.stream());
      ev::add_out(sum, sum, u);
    });
    ev::manual_seed(21);
    std::vector<double> want(64, 0.0);
    for (int r = 0; r < 2 * kPerThread; ++r) {
      const std::vector<float> drawn = values(ev::rand({64}));
      for (std::size_t i = 0; i < want.size(); ++i) want[i] += drawn[i];
    }
    ev::manual_seed(21);
    auto replays = [&] {
      ev::Stream s;
      for (int r = 0; r < kPerThread; ++r) g.replay(s);
    };
    std::thread a(replays), b(replays);
    a.join();
    b.join();
    const std::vector<float> got = values(sum);
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-3) << i;
  });
}

}  // namespace
}  // namespace eventide_test
