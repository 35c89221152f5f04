// bench/calls_bench.cpp: what one call of eventide costs the host, beside the standard call
// it replaces, measured in the same run (Google Benchmark).
//
// Every benchmark uses real (wall-clock) time: several of them hand work to a stream worker,
// whose time the calling thread's CPU clock would not see.
//
// Naming: `BM_<what>` is eventide, `BM_Anchor<what>` the reference it is read against.
// scripts/bench.sh runs this binary and bench/report.py pairs the names into a table; a
// benchmark renamed here must be renamed there too.
//
// Throughput benchmarks (`.../ops:N`) enqueue N ops and wait for the last, once per
// iteration; their counter `per_op` is seconds per op (an inverted rate). scripts/bench.sh
// asks for repetitions and reads their medians. matmul is in matmul_bench.cpp.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <future>

#include <eventide/eventide.hpp>

namespace ev = eventide;

namespace {

// A 1-element tensor whose producer has finished.
ev::Tensor finished_scalar() {
  ev::Tensor t = ev::full({1}, 1.0, ev::DType::f32, ev::Device::cpu());
  t.wait();
  return t;
}

benchmark::Counter per_op(std::int64_t ops_per_iteration) {
  return benchmark::Counter(static_cast<double>(ops_per_iteration),
                            benchmark::Counter::kIsIterationInvariantRate |
                                benchmark::Counter::kInvert);
}

// --- Events ------------------------------------------------------------------------------

void BM_EventPollFinished(benchmark::State& state) {
  ev::Event e;
  e.record(finished_scalar());
  for (auto _ : state) benchmark::DoNotOptimize(e.poll());
}
BENCHMARK(BM_EventPollFinished)->UseRealTime();

void BM_EventWaitFinished(benchmark::State& state) {
  ev::Event e;
  e.record(finished_scalar());
  for (auto _ : state) e.wait();
}
BENCHMARK(BM_EventWaitFinished)->UseRealTime();

// A new event per iteration, tied to a tensor whose producer has finished.
void BM_EventCreateRecordPoll(benchmark::State& state) {
  ev::Tensor t = finished_scalar();
  for (auto _ : state) {
    ev::Event e;
    e.record(t);
    benchmark::DoNotOptimize(e.poll());
  }
}
BENCHMARK(BM_EventCreateRecordPoll)->UseRealTime();

// The same with the producer still pending: the stream is held back by an unset UserEvent,
// so poll() takes the locked path that looks at the tied work.
void BM_EventCreateRecordPollPending(benchmark::State& state) {
  ev::Stream s(ev::Device::cpu());
  ev::UserEvent gate;
  s.wait(gate);
  ev::Tensor t;
  {
    ev::StreamGuard guard(s);
    t = ev::full({1}, 1.0, ev::DType::f32, ev::Device::cpu());
  }
  for (auto _ : state) {
    ev::Event e;
    e.record(t);
    benchmark::DoNotOptimize(e.poll());
  }
  gate.set();
  s.synchronize();
}
BENCHMARK(BM_EventCreateRecordPollPending)->UseRealTime();

// record(stream) on one event, again and again: the stream's last op has finished, so each
// record folds it into the event at once and nothing accumulates.
void BM_EventRecordStream(benchmark::State& state) {
  ev::Stream s(ev::Device::cpu());
  {
    ev::StreamGuard guard(s);
    finished_scalar();
  }
  ev::Event e(ev::Device::cpu());
  for (auto _ : state) e.record(s);
}
BENCHMARK(BM_EventRecordStream)->UseRealTime();

// The host cost of Stream::wait(event) on a finished event. The stream's worker runs the
// waits meanwhile, as it would in a program.
void BM_StreamWaitEnqueue(benchmark::State& state) {
  ev::Stream s(ev::Device::cpu());
  ev::Event e;
  e.record(finished_scalar());
  for (auto _ : state) s.wait(e);
  s.synchronize();
}
BENCHMARK(BM_StreamWaitEnqueue)->UseRealTime();

// --- Tiny ops: enqueue N, wait for the last ------------------------------------------------

void BM_StreamEnqueueEmpty(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  ev::Stream s(ev::Device::cpu());
  for (auto _ : state) {
    ev::Event last;
    for (std::int64_t i = 0; i < n; ++i) last = s.enqueue("empty", [] {});
    last.wait();
  }
  state.counters["per_op"] = per_op(n);
}
BENCHMARK(BM_StreamEnqueueEmpty)->ArgName("ops")->Arg(1)->Arg(1000)->UseRealTime();

void BM_AddTiny(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  ev::Tensor a = finished_scalar();
  ev::Tensor b = finished_scalar();
  for (auto _ : state) {
    ev::Tensor out;
    for (std::int64_t i = 0; i < n; ++i) out = ev::add(a, b);
    ev::Event e;
    e.record(out);
    e.wait();
  }
  state.counters["per_op"] = per_op(n);
}
BENCHMARK(BM_AddTiny)->ArgName("ops")->Arg(1)->Arg(1000)->UseRealTime();

// The anchor: one task launched on its own thread and waited for.
void BM_AnchorStdAsyncLaunchGet(benchmark::State& state) {
  for (auto _ : state) {
    auto f = std::async(std::launch::async, [] { return 1; });
    benchmark::DoNotOptimize(f.get());
  }
  state.counters["per_op"] = per_op(1);
}
BENCHMARK(BM_AnchorStdAsyncLaunchGet)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
