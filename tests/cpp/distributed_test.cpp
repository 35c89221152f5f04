// Collectives as stream ops (eventide/distributed.hpp), run by ctest under `mpirun -np 2`:
// every rank runs every test, in the same order, so each test issues the same collectives on
// every rank. EVENTIDE_DEVICE says which device's tensors to use (cpu: MPI; cuda: NCCL, on
// the GPU machine). Each blocking call is bounded: a lost rank fails the test, never hangs it
// (and ctest's timeout bounds the whole run).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "eventide/eventide.hpp"
#include "test_util.hpp"

namespace ev = eventide;
namespace dist = eventide::distributed;
using namespace std::chrono_literals;

namespace {

// EVENTIDE_DEVICE=cpu: CPU tensors (MPI); anything else: each rank's own GPU (NCCL), as
// init() picks it (cuda:(local rank % GPUs)).
bool on_cpu() {
  const char* d = std::getenv("EVENTIDE_DEVICE");
  return !d || !*d || std::string(d) == "cpu";
}

dist::Communicator comm() {
  dist::InitOptions options;
  if (on_cpu()) options.device = ev::Device::cpu();
  return dist::init(options);
}

ev::Device test_device() { return on_cpu() ? ev::Device::cpu() : comm().device(); }

// A tensor of `n` elements, all `value`, on the test device.
ev::Tensor filled(std::int64_t n, double value, ev::DType dtype = ev::DType::f32) {
  return ev::full({n}, value, dtype, test_device());
}

// The contents as doubles (exact for the values the tests use), read on the host.
std::vector<double> read(const ev::Tensor& t) {
  const bool half = t.dtype() == ev::DType::f16 || t.dtype() == ev::DType::bf16;
  ev::Tensor host = (half ? ev::cast(t, ev::DType::f32) : t).to(ev::Device::cpu());
  EXPECT_TRUE(host.wait_for(30s)) << "the collective did not finish in 30 s";
  auto widen = [](const auto& v) { return std::vector<double>(v.begin(), v.end()); };
  switch (host.dtype()) {
    case ev::DType::f32: return widen(host.to_vector<float>());
    case ev::DType::f64: return host.to_vector<double>();
    case ev::DType::i32: return widen(host.to_vector<std::int32_t>());
    case ev::DType::i64: return widen(host.to_vector<std::int64_t>());
    default: ADD_FAILURE() << "unexpected dtype"; return {};
  }
}

}  // namespace

TEST(DistributedTest, InitGivesRankAndSizeAndIsTheSameCommunicatorTwice) {
  dist::Communicator c = comm();
  ASSERT_GE(c.size(), 1);  // ctest runs it with 2 ranks; on a machine of one GPU, NCCL takes 1
  EXPECT_GE(c.rank(), 0);
  EXPECT_LT(c.rank(), c.size());
  EXPECT_TRUE(c == comm());
  EXPECT_TRUE(dist::is_initialized());
  EXPECT_EQ(c.transport(ev::Device::cpu()), "mpi");
  EXPECT_EQ(c.transport(test_device()), on_cpu() ? "mpi" : "nccl");
  EXPECT_NE(c.str().find("rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size())),
            std::string::npos);
  if (c.rank() == 0) EXPECT_EQ(c.clock_offset_ns(), 0);
  // Ranks of one machine share its steady clock: the measured offset is small.
  EXPECT_LT(std::llabs(c.clock_offset_ns()), 5'000'000) << c.clock_offset_ns();
}

TEST(DistributedTest, AllReduceSumsEveryDtype) {
  dist::Communicator c = comm();
  const double expected = c.size() * (c.size() + 1) / 2.0;
  for (ev::DType dtype : {ev::DType::f32, ev::DType::f64, ev::DType::i32, ev::DType::i64,
                          ev::DType::f16, ev::DType::bf16}) {
    ev::Tensor out = c.all_reduce(filled(7, c.rank() + 1, dtype));
    EXPECT_EQ(out.dtype(), dtype);
    EXPECT_EQ(out.shape(), ev::Shape{7});
    for (double v : read(out)) EXPECT_EQ(v, expected) << ev::name(dtype);
  }
}

TEST(DistributedTest, AllReduceOpsCombineAsNamed) {
  dist::Communicator c = comm();
  const int n = c.size();
  const double r = c.rank() + 1;  // 1..n
  auto one = [&](dist::ReduceOp op, ev::DType dtype) {
    return read(c.all_reduce(filled(3, r, dtype), op)).at(0);
  };
  double prod = 1;
  for (int i = 1; i <= n; ++i) prod *= i;
  for (ev::DType dtype : {ev::DType::f32, ev::DType::bf16, ev::DType::i64}) {
    EXPECT_EQ(one(dist::ReduceOp::prod, dtype), prod) << ev::name(dtype);
    EXPECT_EQ(one(dist::ReduceOp::max, dtype), n) << ev::name(dtype);
    EXPECT_EQ(one(dist::ReduceOp::min, dtype), 1) << ev::name(dtype);
  }
  EXPECT_DOUBLE_EQ(one(dist::ReduceOp::avg, ev::DType::f64), (n + 1) / 2.0);
  EXPECT_EQ(one(dist::ReduceOp::avg, ev::DType::f16), (n + 1) / 2.0);
  EXPECT_THROW(c.all_reduce(filled(3, 1, ev::DType::i32), dist::ReduceOp::avg), ev::InvalidArgument);
}

TEST(DistributedTest, AllGatherConcatenatesInRankOrder) {
  dist::Communicator c = comm();
  ev::Tensor mine = ev::full({2, 3}, c.rank() * 10.0, ev::DType::f32, test_device());
  ev::Tensor all = c.all_gather(mine);
  EXPECT_EQ(all.shape(), (ev::Shape{2 * c.size(), 3}));
  std::vector<double> v = read(all);
  for (int r = 0; r < c.size(); ++r) {
    for (int i = 0; i < 6; ++i) EXPECT_EQ(v[static_cast<std::size_t>(r * 6 + i)], r * 10.0);
  }
  // A 0-d tensor gathers to one element per rank.
  ev::Tensor scalar = c.all_gather(ev::full({}, c.rank() + 0.5, ev::DType::f64, test_device()));
  EXPECT_EQ(scalar.shape(), ev::Shape{c.size()});
  EXPECT_EQ(read(scalar).back(), c.size() - 0.5);
}

TEST(DistributedTest, ReduceScatterKeepsThisRanksPart) {
  dist::Communicator c = comm();
  // Element i of every rank's input is i: rank r's part of the sum is size * i over its rows.
  std::vector<float> in(static_cast<std::size_t>(c.size() * 4));
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  ev::Tensor t = ev::from_host(in, {c.size() * 2, 2}, test_device());
  ev::Tensor part = c.reduce_scatter(t);
  EXPECT_EQ(part.shape(), (ev::Shape{2, 2}));
  std::vector<double> v = read(part);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(v[i], c.size() * (c.rank() * 4.0 + i));
  if (c.size() > 1) {
    EXPECT_THROW(c.reduce_scatter(ev::zeros({c.size() * 2 + 1}, ev::DType::f32, test_device())),
                 ev::InvalidArgument);
  }
  EXPECT_THROW(c.reduce_scatter(ev::zeros({}, ev::DType::f32, test_device())), ev::InvalidArgument);
}

TEST(DistributedTest, BroadcastGivesTheRootsContentsToEveryRank) {
  dist::Communicator c = comm();
  const int root = c.size() - 1;
  ev::Tensor in = filled(5, c.rank() == root ? 42.0 : -1.0);
  ev::Tensor out = c.broadcast(in, root);
  for (double v : read(out)) EXPECT_EQ(v, 42.0);
  for (double v : read(in)) EXPECT_EQ(v, c.rank() == root ? 42.0 : -1.0) << "the input is not written";
  EXPECT_THROW(c.broadcast(in, c.size()), ev::InvalidArgument);
  EXPECT_THROW(c.broadcast(in, -1), ev::InvalidArgument);
}

TEST(DistributedTest, SendAndRecvAroundARing) {
  dist::Communicator c = comm();
  if (c.size() < 2) GTEST_SKIP() << "one rank: nothing to send to";
  const int next = (c.rank() + 1) % c.size();
  const int prev = (c.rank() + c.size() - 1) % c.size();
  // Even ranks send first, odd ones receive first: no two ranks wait on each other's send.
  ev::Event sent;
  ev::Tensor got;
  if (c.rank() % 2 == 0) {
    sent = c.send(filled(4, 100 + c.rank()), next);
    got = c.recv({4}, prev);
  } else {
    got = c.recv({4}, prev);
    sent = c.send(filled(4, 100 + c.rank()), next);
  }
  ASSERT_TRUE(sent.wait_for(30s));
  for (double v : read(got)) EXPECT_EQ(v, 100 + prev);
  EXPECT_THROW(c.send(filled(1, 0), c.rank()), ev::InvalidArgument);
  EXPECT_THROW(c.recv({1}, c.size()), ev::InvalidArgument);
}

// A recv of more elements than the peer sent would leave the rest of its tensor unwritten:
// MPI does not call that an error, eventide does (the op fails, naming both counts).
TEST(DistributedTest, ARecvOfAnotherSizeThanWasSentFails) {
  dist::Communicator c = comm();
  if (c.size() < 2) GTEST_SKIP() << "one rank: nothing to send to";
  if (!on_cpu()) GTEST_SKIP() << "NCCL cannot tell a receiver how much was sent (MPI's check)";
  if (c.rank() == 0) {
    ASSERT_TRUE(c.send(filled(4, 5), 1).wait_for(30s));
  } else if (c.rank() == 1) {
    ev::Tensor got = c.recv({8}, 0);
    ev::Event done;
    done.record(got);
    bool finished = false;
    const std::exception_ptr error = eventide_test::capture([&] { finished = done.wait_for(30s); });
    ASSERT_TRUE(error || finished) << "recv did not finish";
    ASSERT_TRUE(error) << "a recv of 8 elements from a send of 4 finished without error";
    EXPECT_NE(eventide_test::what(error).find("sent 4 elements, recv expected 8"), std::string::npos)
        << eventide_test::what(error);
  }
  ASSERT_TRUE(c.barrier().wait_for(30s));
}

TEST(DistributedTest, BarrierIsAnEventThatNoRankPassesAlone) {
  dist::Communicator c = comm();
  const auto before = std::chrono::steady_clock::now();
  if (c.rank() == 0) std::this_thread::sleep_for(200ms);  // the others' barriers wait for rank 0's
  ev::Event b = c.barrier();
  ASSERT_TRUE(b.wait_for(30s));
  EXPECT_GE(std::chrono::steady_clock::now() - before, 150ms);
}

TEST(DistributedTest, ACollectiveIsAnOpEventsTimeAndStreamsWaitFor) {
  dist::Communicator c = comm();
  ev::UserEvent gate;
  ev::Stream s(test_device());
  ev::Tensor out;
  {
    ev::StreamGuard guard(s);
    s.wait(gate);
    out = c.all_reduce(filled(1024, 1.0));
  }
  ev::Event e;
  e.record(out);
  std::atomic<bool> called{false};
  e.add_callback([&] { called = true; });
  // Gated on this rank, so unfinished on every rank.
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(e.poll());
  gate.set();
  ASSERT_TRUE(e.wait_for(30s));
  EXPECT_GE(e.time_elapsed().count(), 0.0);
  for (double v : read(out)) EXPECT_EQ(v, c.size());
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!called && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(called);
  // Another stream's op that reads the output waits for the collective.
  ev::Tensor doubled = ev::add(out, out);
  for (double v : read(doubled)) EXPECT_EQ(v, 2.0 * c.size());
}

TEST(DistributedTest, CollectivesKeepTheirCallOrderAcrossStreams) {
  dist::Communicator c = comm();
  // The first collective is held behind a gate on one stream; the second, on another stream,
  // is ready at once. Were it issued first, the ranks' calls would pair up wrongly.
  ev::UserEvent gate;
  ev::Stream a(test_device()), b(test_device());
  ev::Tensor first, second;
  {
    ev::StreamGuard guard(a);
    a.wait(gate);
    first = c.all_reduce(filled(8, c.rank() + 1.0));
  }
  {
    ev::StreamGuard guard(b);
    second = c.all_reduce(filled(8, 1000.0 * (c.rank() + 1)));
  }
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(second.ready()) << "the second collective ran before the first";
  gate.set();
  const double n = c.size();
  for (double v : read(first)) EXPECT_EQ(v, n * (n + 1) / 2);
  for (double v : read(second)) EXPECT_EQ(v, 1000.0 * n * (n + 1) / 2);
}

TEST(DistributedTest, AFailedInputFailsThisRanksCollectiveWithoutHangingThePeers) {
  dist::Communicator c = comm();
  ev::Tensor in = filled(4, 1.0);
  if (c.rank() == 0) {
    // A user's op that throws writes `in`: the all_reduce that reads it has a failed input.
    ev::Stream::current(test_device()).enqueue("broken", [] { throw std::runtime_error("broken input"); },
                                               {}, {in});
  }
  ev::Tensor out = c.all_reduce(in);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!out.ready() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(out.ready()) << "the collective did not finish: a rank did not issue it";
  if (c.rank() == 0) {
    ASSERT_TRUE(out.error());
    try {
      std::rethrow_exception(out.error());
    } catch (const ev::OpError& e) {
      EXPECT_NE(std::string(e.what()).find("broken input"), std::string::npos) << e.what();
    }
  } else {
    EXPECT_FALSE(out.error());
  }
  // The communicator goes on.
  for (double v : read(c.all_reduce(filled(2, 1.0)))) EXPECT_EQ(v, c.size());
}

TEST(DistributedTest, TheProfilerDrawsCollectives) {
  dist::Communicator c = comm();
  ev::Profiler profiler;
  ev::Tensor out = c.all_gather(filled(16, 1.0));
  ASSERT_TRUE(out.wait_for(30s));
  ev::Profile p = profiler.stop();
  bool found = false;
  for (const ev::ProfiledOp& op : p.ops()) found = found || op.name == "all_gather";
  EXPECT_TRUE(found);
}

TEST(DistributedTest, BadArgumentsAreRefusedBeforeAnythingIsIssued) {
  dist::Communicator c = comm();
  EXPECT_THROW(c.all_reduce(ev::Tensor()), ev::InvalidArgument);
  EXPECT_THROW(dist::Communicator(nullptr).rank(), ev::InvalidArgument);
  if (test_device().is_cpu()) {
    // This communicator has no GPU: a tensor on one is refused by name.
    EXPECT_EQ(c.transport(ev::Device::cuda(0)), "");
  }
  // Every rank still agrees on what comes next.
  for (double v : read(c.all_reduce(filled(1, 2.0)))) EXPECT_EQ(v, 2.0 * c.size());
}

TEST(DistributedTest, APerThreadDefaultStreamIsRefusedForCollectives) {
  if (on_cpu()) GTEST_SKIP() << "CUDA's per-thread default stream: run with EVENTIDE_DEVICE=cuda";
  dist::Communicator c = comm();
  // cudaStreamPerThread is the handle 0x2: another stream on each thread, so a collective
  // eventide would have to launch from its own thread could not be issued there.
  ev::Stream per_thread = ev::Stream::from_native(test_device(), reinterpret_cast<void*>(2));
  ev::StreamGuard guard(per_thread);
  EXPECT_THROW(c.all_reduce(filled(2, 1.0)), ev::InvalidArgument);
}

// Collectives into a tensor the caller gives: written by the op as by any op, returned, and
// (all_reduce, broadcast) in place; what cannot work is refused by name on every rank alike.
TEST(DistributedTest, CollectivesWriteIntoAGivenOutputAndAllReduceRunsInPlace) {
  dist::Communicator c = comm();
  const double n = c.size();
  const ev::Device dev = test_device();
  ev::Tensor in = filled(6, c.rank() + 1.0);
  ev::Tensor out = filled(6, -7.0);
  ev::Tensor got = c.all_reduce(in, dist::ReduceOp::sum, out);
  EXPECT_EQ(got.data_ptr(), out.data_ptr());
  for (double v : read(out)) EXPECT_EQ(v, n * (n + 1) / 2);
  for (double v : read(in)) EXPECT_EQ(v, c.rank() + 1.0) << "the input is not written";
  // In place, back to back: each reads what the one before wrote.
  ev::Tensor acc = filled(6, 1.0);
  for (int i = 0; i < 5; ++i) c.all_reduce(acc, dist::ReduceOp::sum, acc);
  for (double v : read(acc)) EXPECT_EQ(v, std::pow(n, 5));
  // An op issued before the collective that reads `out` sees the old contents.
  ev::Tensor reused = filled(4, 3.0);
  ev::Tensor before = ev::add(reused, reused);
  c.all_reduce(filled(4, 1.0), dist::ReduceOp::sum, reused);
  for (double v : read(before)) EXPECT_EQ(v, 6.0);
  for (double v : read(reused)) EXPECT_EQ(v, n);

  ev::Tensor b = filled(3, c.rank() == 0 ? 5.0 : 0.0);
  EXPECT_EQ(c.broadcast(b, 0, b).data_ptr(), b.data_ptr());
  for (double v : read(b)) EXPECT_EQ(v, 5.0);
  ev::Tensor gathered = ev::zeros({2 * c.size()}, ev::DType::f32, dev);
  c.all_gather(filled(2, c.rank()), gathered);
  std::vector<double> g = read(gathered);
  for (int r = 0; r < c.size(); ++r) EXPECT_EQ(g[static_cast<std::size_t>(2 * r + 1)], r);
  ev::Tensor part = ev::zeros({2}, ev::DType::f32, dev);
  c.reduce_scatter(filled(2 * c.size(), 1.0), dist::ReduceOp::sum, part);
  for (double v : read(part)) EXPECT_EQ(v, n);

  auto refused = [](auto&& call, const std::string& why) {
    try {
      call();
      ADD_FAILURE() << "not refused: " << why;
    } catch (const ev::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused([&] { c.all_reduce(in, dist::ReduceOp::sum, filled(5, 0.0)); }, "out has shape [5], the result [6]");
  refused([&] { c.all_reduce(in, dist::ReduceOp::sum, filled(6, 0.0, ev::DType::f64)); }, "out has dtype f64");
  refused([&] { c.all_reduce(in, dist::ReduceOp::sum, ev::Tensor()); }, "out is undefined");
  if (!dev.is_cpu()) {
    refused([&] { c.broadcast(in, 0, ev::zeros({6}, ev::DType::f32, ev::Device::cpu())); }, "out is on cpu");
  }
  // Tensors over the memory of another: all_gather and reduce_scatter cannot run in place.
  ev::Tensor wide = filled(2 * c.size(), 1.0);
  auto over_wide = [&](ev::Shape shape) {
    return ev::from_external({wide.data_ptr(), std::make_shared<ev::Tensor>(wide)}, std::move(shape),
                             ev::DType::f32, dev);
  };
  refused([&] { c.all_gather(over_wide({2}), wide); }, "out overlaps the input's memory through another tensor");
  refused([&] { c.reduce_scatter(wide, dist::ReduceOp::sum, over_wide({2})); }, "out overlaps the input's memory");
  if (c.size() == 1) refused([&] { c.all_gather(wide, wide); }, "all_gather cannot run in place");
  // In place is the input tensor itself, not another tensor over its memory (whose users the
  // collective would not be ordered against).
  refused([&] { c.all_reduce(wide, dist::ReduceOp::sum, over_wide({2 * c.size()})); },
          "to run in place, pass the input itself as out");
  ev::Tensor ro = ev::from_external({out.data_ptr(), std::make_shared<ev::Tensor>(out), ev::Access::read_only}, {6},
                                    ev::DType::f32, dev);
  refused([&] { c.all_reduce(in, dist::ReduceOp::sum, ro); }, "out is read-only memory");
  // Every rank still agrees on what comes next.
  for (double v : read(c.all_reduce(filled(1, 2.0)))) EXPECT_EQ(v, 2.0 * c.size());
  // A failure of out's earlier writer is not the next collective's: it overwrites out whole.
  // (In place, out is also the input, and a failed input fails the collective as usual.)
  ev::Tensor buf = filled(2, 0.0);
  if (c.rank() == 0) {
    ev::Stream::current(dev).enqueue("broken", [] { throw std::runtime_error("broken buffer"); }, {}, {buf});
  }
  ev::Tensor fresh = c.all_reduce(filled(2, 1.0), dist::ReduceOp::sum, buf);
  for (double v : read(fresh)) EXPECT_EQ(v, n);
  EXPECT_FALSE(fresh.error());
}
