// The core with a fake backend alone (tests/fake): this binary links eventide_core and no
// other backend, so what passes here is all the core needs of one. The fake device advances
// its streams only when the test says (run), and its times and errors arrive late, as a GPU's
// do: these are the core's GPU-shaped paths (device-written timelines, held work, deferred
// errors, late timings, sticky device errors) on a machine without a GPU.
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "core/device_stream.hpp"
#include "fake/fake_backend.hpp"
#include "test_util.hpp"

namespace {

using namespace eventide_test;
namespace fake = eventide_fake;

const ev::Device kFake0("fake:0");
const ev::Device kFake1("fake:1");

// Whether `f` is still running after `d`: what a call that must block (on the device) does.
template <class T>
bool still_blocked(std::future<T>& f, std::chrono::milliseconds d = 50ms) {
  return f.wait_for(d) == std::future_status::timeout;
}

TEST(FakeBackendTest, TheCoreRunsWithTheFakeBackendAlone) {
  EXPECT_EQ(ev::devices(), (std::vector<ev::Device>{kFake0, kFake1}));
  EXPECT_EQ(ev::default_device(), kFake0);  // the only kind, so the highest ranked
  EXPECT_FALSE(ev::is_available(ev::Device::cpu()));
  EXPECT_EQ(kFake1.str(), "fake:1");
  EXPECT_EQ(kFake1.kind_name(), "fake");
  EXPECT_EQ(ev::Device::of("fake", 1), kFake1);
  EXPECT_FALSE(kFake0.is_cpu());
  EXPECT_FALSE(kFake0.is_cuda());
  EXPECT_THROW_MSG(ev::Device("fake:x"), ev::InvalidArgument, "\"fake:N\"");
  EXPECT_THROW_MSG(ev::zeros({2}, ev::DType::f32, ev::Device::cpu()), ev::InvalidArgument,
                   "cpu is not available");
  EXPECT_THROW_MSG(ev::Stream(ev::Device("fake:2")), ev::InvalidArgument, "fake:0 to fake:1");
  // No backend of this build has a DLPack type: the mapping is the descriptors'.
  EXPECT_THROW(ev::dlpack_device_type(kFake0), ev::InvalidArgument);
  EXPECT_EQ(ev::from_dlpack_device(1, 0), std::nullopt);
  EXPECT_EQ(ev::device_info(kFake0).name, "fake");
}

// A device whose backend does not say its bodies can be replayed refuses a capture before
// anything is captured, naming the device, and the stream is left as it was.
TEST(FakeBackendTest, ADeviceWithoutGraphsRefusesACaptureClearly) {
  ev::Stream s(kFake0);
  EXPECT_THROW_MSG(ev::Capture{s}, ev::InvalidArgument, "graph capture", "fake:0");
  EXPECT_THROW_MSG(ev::Capture{kFake1}, ev::InvalidArgument, "graph capture", "fake:1");
  EXPECT_FALSE(s.state()->in_capture());
}

TEST(FakeBackendTest, AnEventFinishesOnlyWhenTheDeviceHasRunTheWork) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    ev::Event e = s.enqueue("op", [] {});
    EXPECT_FALSE(e.poll());
    EXPECT_FALSE(e.wait_for(20ms));
    EXPECT_FALSE(s.query());
    EXPECT_EQ(fake::run(s), 1u);
    EXPECT_TRUE(e.poll());
    EXPECT_TRUE(s.query());
    EXPECT_EQ(e.error(), nullptr);
  });
}

TEST(FakeBackendTest, AWaiterReadsTheDeviceWrittenCounterWithoutBeingWoken) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    ev::Event e = s.enqueue("op", [] {});
    auto waiter = std::async(std::launch::async, [&] { return e.wait_for(20s); });
    EXPECT_TRUE(still_blocked(waiter));
    // The device writes its progress and nobody fires a listener: the napping waiter sees it.
    EXPECT_EQ(fake::run(s, SIZE_MAX, fake::Progress::silent), 1u);
    EXPECT_TRUE(waiter.get());
    fake::notify(s);
  });
}

TEST(FakeBackendTest, TimeElapsedWaitsForTimesThatArriveLate) {
  run_with_deadline([] {
    fake::set_clock(kFake0, 5'000'000, 7'000);  // each op takes 7 µs
    ev::Stream s(kFake0);
    ev::Event e = s.enqueue("op", [] {});
    fake::run(s);
    ASSERT_TRUE(e.poll());  // finished, but its time is not known yet
    auto elapsed = std::async(std::launch::async, [&] { return e.time_elapsed().count(); });
    EXPECT_TRUE(still_blocked(elapsed));
    fake::deliver_timings(kFake0);
    EXPECT_DOUBLE_EQ(elapsed.get(), 7.0);
    EXPECT_DOUBLE_EQ(e.time_elapsed().count(), 7.0);
  });
}

TEST(FakeBackendTest, MarkersFollowEarlierWorkAndTimeThePointsBetweenThem) {
  run_with_deadline([] {
    fake::set_clock(kFake0, 0, 2'000);
    ev::Stream s(kFake0);
    ev::Event start, end;
    start.record(s);
    ev::Event op = s.enqueue("op", [] {});
    EXPECT_FALSE(start.poll());
    EXPECT_EQ(fake::run(s), 2u);  // the first marker and one op
    EXPECT_TRUE(start.poll());
    EXPECT_TRUE(op.poll());
    s.enqueue("op", [] {});
    end.record(s);
    EXPECT_EQ(fake::run(s, 1), 1u);
    EXPECT_FALSE(end.poll());  // the marker after the second op has not been reached
    EXPECT_EQ(fake::run(s), 1u);
    EXPECT_TRUE(end.poll());
    fake::deliver_timings(kFake0);
    EXPECT_DOUBLE_EQ(start.elapsed_time(end).count(), 0.004);  // two 2 µs ops, in ms
  });
}

TEST(FakeBackendTest, AStreamWaitsForAnotherOnTheDevice) {
  run_with_deadline([] {
    ev::Stream a(kFake0), b(kFake0);
    ev::Event first = a.enqueue("first", [] {});
    b.wait(first);
    ev::Event second = b.enqueue("second", [] {});
    EXPECT_EQ(fake::held(b), 0u);     // another device stream: launched, the device waits
    EXPECT_EQ(fake::run(b), 0u);      // ... for a's work, not run yet
    EXPECT_FALSE(second.poll());
    EXPECT_EQ(fake::run(a), 1u);
    EXPECT_EQ(fake::run(b), 2u);      // the wait, then the op
    EXPECT_TRUE(second.poll());
    EXPECT_EQ(second.error(), nullptr);
  });
}

TEST(FakeBackendTest, AFailureIsDecidedLateAndPropagatesAcrossStreams) {
  run_with_deadline([] {
    ev::Stream a(kFake0), b(kFake1);
    ev::Event first = a.enqueue("first", [] { throw std::runtime_error("boom"); });
    b.wait(first);
    ev::Event second = b.enqueue("second", [] {});
    fake::run(a);
    fake::run(b);
    ASSERT_TRUE(second.poll());
    ASSERT_NE(second.error(), nullptr);
    EXPECT_THROW_MSG(second.wait(), ev::OpError, "boom");
    EXPECT_THROW_MSG(first.wait(), ev::OpError, "boom");
  });
}

TEST(FakeBackendTest, WorkWaitingForTheHostIsHeldUntilItHasFinished) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    ev::UserEvent gate;
    s.wait(gate);
    ev::Event after = s.enqueue("after", [] {});
    EXPECT_EQ(fake::held(s), 2u);  // the wait and everything after it
    EXPECT_EQ(fake::run(s), 0u);
    EXPECT_FALSE(after.wait_for(20ms));
    gate.set();
    EXPECT_EQ(fake::run(s), 2u);
    EXPECT_EQ(fake::held(s), 0u);
    EXPECT_TRUE(after.poll());
  });
}

TEST(FakeBackendTest, CallbacksRunOnceTheDeviceReachesTheWork) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    ev::Event e = s.enqueue("op", [] {});
    auto count = std::make_shared<std::atomic<int>>(0);
    e.add_callback([count] { count->fetch_add(1); });
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(count->load(), 0);
    fake::run(s);
    EXPECT_TRUE(wait_for_count(*count, 1));
  });
}

TEST(FakeBackendTest, WaitAnyAndWaitAllHonourTheirTimeouts) {
  run_with_deadline([] {
    ev::Stream a(kFake0), b(kFake1);
    ev::Event ea = a.enqueue("a", [] {});
    ev::Event eb = b.enqueue("b", [] {});
    EXPECT_EQ(ev::wait_any({ea, eb}, 20ms), std::nullopt);
    EXPECT_FALSE(ev::wait_all_for({ea, eb}, 20ms));
    auto any = std::async(std::launch::async, [&] { return ev::wait_any({ea, eb}, 20s); });
    EXPECT_TRUE(still_blocked(any));
    fake::run(b);  // wait_any sleeps until woken: the watcher's turn wakes it
    EXPECT_EQ(any.get(), std::optional<std::size_t>(1));
    EXPECT_FALSE(ev::wait_all_for({ea, eb}, 20ms));
    fake::run(a);
    EXPECT_TRUE(ev::wait_all_for({ea, eb}, 20s));
  });
}

TEST(FakeBackendTest, CopiesBetweenDevicesGoThroughHostMemoryInOrder) {
  run_with_deadline([] {
    ev::Stream s0 = ev::Stream::current(kFake0), s1 = ev::Stream::current(kFake1);
    ev::Tensor src = ev::from_host(std::vector<float>{1, 2, 3}, {3}, kFake0);
    ev::Tensor dst = src.to(kFake1);  // fake:0 downloads, fake:1 uploads
    EXPECT_EQ(dst.device(), kFake1);
    EXPECT_EQ(fake::run(s1), 0u);  // the upload waits for the download, on the device
    EXPECT_FALSE(dst.ready());
    fake::run(s0);
    fake::run(s1);
    EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{1, 2, 3}));
    // A failed producer fails the copy, naming the cause.
    s0.enqueue("spoil", [] { throw std::runtime_error("spoiled"); }, {}, {src});
    ev::Tensor spoiled = src.to(kFake1);
    fake::run(s0);
    fake::run(s1);
    EXPECT_THROW_MSG(spoiled.wait(), ev::OpError, "spoiled");
    // The host is no device of this build.
    EXPECT_THROW_MSG(src.to(ev::Device::cpu()), ev::InvalidArgument, "cpu is not available");
  });
}

// An event belongs to one device (GUARANTEES.md, "Several devices"): tying work of a second
// device is an InvalidArgument naming both, and changes nothing; elapsed_time between two
// devices' events is refused rather than comparing two clocks. What spans devices is a list
// of events (wait_all, wait_any) or a stream's waits on each. (multi_gpu_test checks the same
// on two GPUs.)
TEST(FakeBackendTest, AnEventBelongsToOneDeviceAndTheErrorNamesBoth) {
  run_with_deadline([] {
    ev::Stream a(kFake0), b(kFake1);
    ev::Event on0 = a.enqueue("on 0", [] {});
    ev::Event on1 = b.enqueue("on 1", [] {});
    ev::Tensor t1 = ev::from_host(std::vector<float>{1, 2}, {2}, kFake1);
    ev::Event e;
    e.record(a);
    EXPECT_THROW_MSG(e.record(b), ev::InvalidArgument, "of fake:1 on an event of fake:0",
                     "one event per device");
    EXPECT_THROW_MSG(e.record(t1), ev::InvalidArgument, "of fake:1 on an event of fake:0");
    EXPECT_EQ(e.device(), kFake0);
    EXPECT_NE(e.str().find(", 1 op>"), std::string::npos) << e.str();
    ev::Event bound(kFake1);
    EXPECT_THROW_MSG(bound.record(a), ev::InvalidArgument, "of fake:0 on an event of fake:1");
    // Together: a list of events, or a stream that waits on each.
    ev::Stream c(kFake1);
    c.wait(on0);
    c.wait(on1);
    ev::Event both = c.enqueue("after both", [] {});
    fake::run(b);
    fake::run(c);
    EXPECT_FALSE(both.poll()) << "still waits for fake:0";
    EXPECT_EQ(ev::wait_any({on0, on1}, 5s), std::optional<std::size_t>(1));
    fake::run(a);
    fake::run(c);
    EXPECT_TRUE(ev::wait_all_for({on0, on1, both, e}, 5s));
    EXPECT_THROW_MSG(on0.elapsed_time(on1), ev::InvalidArgument,
                     "different devices (fake:0, fake:1)", "clocks");
    fake::run(ev::Stream::current(kFake1));  // t1's upload
  });
}

// Last: the failure of fake:1 is sticky for the rest of the process.
TEST(FakeBackendTest, AStickyDeviceErrorFailsEverythingAndSynchronizeRaisesIt) {
  run_with_deadline([] {
    ev::Stream s(kFake1);
    ev::UserEvent gate;
    ev::Event ran = s.enqueue("ran", [] {});
    fake::run(s);
    // Run by the device, its end not published yet (issue 28, item 6): whether it finished
    // was never seen, so it is not reported finished (nor are its results readable on a
    // failed device).
    ev::Event unseen = s.enqueue("unseen", [] {});
    EXPECT_EQ(fake::run(s, SIZE_MAX, fake::Progress::device_only), 1u);
    ev::Event queued = s.enqueue("queued", [] {});
    s.wait(gate);
    ev::Event held = s.enqueue("held", [] {});
    auto sync = std::async(std::launch::async, [] { ev::synchronize(kFake1); });
    EXPECT_TRUE(still_blocked(sync));
    fake::fail_device(kFake1, "a kernel trapped");
    EXPECT_THROW_MSG(sync.get(), ev::DeviceError, "a kernel trapped");
    EXPECT_EQ(ran.error(), nullptr);
    EXPECT_THROW_MSG(unseen.wait(), ev::DeviceError, "a kernel trapped");
    EXPECT_THROW_MSG(queued.wait(), ev::DeviceError, "a kernel trapped");
    EXPECT_THROW_MSG(held.wait(), ev::DeviceError, "a kernel trapped");
    // Sticky: later work fails, and synchronize keeps raising, never hangs.
    EXPECT_THROW_MSG(ev::zeros({4}, ev::DType::f32, kFake1), ev::DeviceError, "a kernel trapped");
    ev::Event later = s.enqueue("later", [] {});
    EXPECT_THROW_MSG(later.wait(), ev::DeviceError, "a kernel trapped");
    EXPECT_THROW_MSG(ev::synchronize(kFake1), ev::DeviceError, "a kernel trapped");
    gate.set();
  });
}

}  // namespace

namespace {

TEST(FakeBackendTest, StreamPrioritiesAreClampedToTheDevicesRangeAsPyTorchDoes) {
  EXPECT_EQ(ev::stream_priority_range(kFake0), (std::pair<int, int>{0, -3}));
  EXPECT_EQ(ev::Stream(kFake0).priority(), 0);
  EXPECT_EQ(ev::Stream(kFake0, {.priority = -2}).priority(), -2);
  EXPECT_EQ(ev::Stream(kFake0, {.priority = -100}).priority(), -3);  // the greatest
  EXPECT_EQ(ev::Stream(kFake0, {.priority = 7}).priority(), 0);      // the least
}

TEST(FakeBackendTest, ADeviceWithoutNativeEventsRefusesThemByName) {
  int not_an_event = 0;
  EXPECT_THROW_MSG(ev::Event::from_native(reinterpret_cast<CUevent_st*>(&not_an_event), kFake0),
                   ev::InvalidArgument, "fake:0 has no native events");
  run_with_deadline([] {
    ev::Stream s(kFake0);
    ev::Event e;
    e.record(s);
    EXPECT_THROW_MSG((void)e.native_handle(), ev::StateError, "no cudaEvent_t");
    fake::run(s);
  });
}

}  // namespace

namespace {

// Issue 28: the fake runs on the core's device-stream engine; these are its retire and
// held-behind-held paths, which the CUDA backend shares.

TEST(FakeBackendTest, WhatAWorkHoldsIsLetGoOfWhenItRetiresNotBefore) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    auto kept = std::make_shared<int>(7);
    ev::Event e = s.enqueue("op", [kept] {});
    EXPECT_EQ(kept.use_count(), 2);  // the body holds it in flight
    EXPECT_EQ(fake::run(s, SIZE_MAX, fake::Progress::silent), 1u);
    EXPECT_TRUE(e.poll());           // the device has written the counter...
    EXPECT_EQ(kept.use_count(), 2);  // ...but the work has not retired yet
    fake::notify(s);                 // the watcher's turn
    EXPECT_EQ(kept.use_count(), 1);
  });
}

// Issue 28, item 2: a kernel's body holds its tensors' memory by address alone; the launch
// keeps the memory (the tensors' reads and writes, declared once in the ops layer) until the
// op has run, whoever drops the tensors first.
TEST(FakeBackendTest, TheLaunchKeepsAnOpsMemoryUntilItHasRunThoughItsTensorsAreGone) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    std::vector<float> host{1, 2, 3, 4};
    auto owner = std::make_shared<int>(0);
    {
      ev::Tensor x = ev::from_external(ev::ExternalMemory{.data = host.data(), .owner = owner},
                                       {4}, ev::DType::f32, kFake0);
      ev::StreamGuard guard(s);
      ev::Tensor y = ev::add(x, x);
      ev::Tensor z = ev::mul(y, x);
      EXPECT_EQ(fake::run(s, 1), 1u);  // the add has run; the mul has not
    }
    EXPECT_EQ(owner.use_count(), 2);  // the tensors are gone: the mul's launch holds x's memory
    EXPECT_EQ(fake::run(s), 1u);
    fake::notify(s);  // retires the mul
    EXPECT_EQ(owner.use_count(), 1);
    EXPECT_EQ(host, (std::vector<float>{1, 2, 3, 4}));  // x was only read
  });
}

TEST(FakeBackendTest, WorkBehindHeldWorkOfAnotherStreamIsHeldUntilThatHasRun) {
  run_with_deadline([] {
    ev::Stream a(kFake0), b(kFake0);
    ev::UserEvent gate;
    a.wait(gate);
    ev::Event first = a.enqueue("first", [] {});  // held: behind the gate
    b.wait(first);                                 // on work that is itself held
    ev::Event second = b.enqueue("second", [] {});
    EXPECT_EQ(fake::held(a), 2u);
    EXPECT_EQ(fake::held(b), 2u);  // a GPU never waits for work its host still holds
    gate.set();
    EXPECT_EQ(fake::run(a), 2u);   // released and run
    EXPECT_TRUE(first.poll());
    EXPECT_EQ(fake::run(b), 2u);   // released once `first` has finished
    EXPECT_TRUE(second.poll());
    EXPECT_EQ(second.error(), nullptr);
  });
}

// Issue 28, item 6: a device stream publishes a burst of work once, after its last Work,
// instead of writing its counter after each (DeviceStream's "Published"); whoever looks for
// one of the Works has it published, and nothing is ever shown finished before it has run.
using eventide::detail::DeviceStream;

TEST(FakeBackendTest, ABurstOfWorkIsPublishedOnceWhenTheStreamIsQuiet) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    std::vector<ev::Event> ops;
    for (int i = 0; i < 5; ++i) ops.push_back(s.enqueue("op", [] {}));
    EXPECT_EQ(fake::run(s, SIZE_MAX, fake::Progress::device_only), 5u);
    EXPECT_EQ(fake::writes(s), 0u);
    EXPECT_FALSE(ops.back().poll());  // run, but not published: not finished
    EXPECT_FALSE(ops.front().poll());
    fake::look(s);  // (one look does not see the stream quiet, but the polls demanded it)
    EXPECT_EQ(fake::run(s, SIZE_MAX, fake::Progress::device_only), 0u);  // the write alone
    EXPECT_EQ(fake::writes(s), 1u);
    for (const ev::Event& e : ops) EXPECT_TRUE(e.poll());
    // Undemanded, the watcher publishes once the stream has been quiet (run's two looks).
    ev::Event later = s.enqueue("later", [] {});
    fake::look(s);
    EXPECT_EQ(fake::run(s, SIZE_MAX, fake::Progress::device_only), 1u);
    EXPECT_EQ(fake::writes(s), 1u);
    EXPECT_EQ(fake::run(s), 0u);
    EXPECT_EQ(fake::writes(s), 2u);
    EXPECT_TRUE(later.poll());
  });
}

TEST(FakeBackendTest, ALaunchPublishesAtLeastEveryFewWorks) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    const std::size_t n = 2 * DeviceStream::kPublishEvery + 1;
    std::vector<ev::Event> ops;
    for (std::size_t i = 0; i < n; ++i) ops.push_back(s.enqueue("op", [] {}));
    EXPECT_EQ(fake::run(s, SIZE_MAX, fake::Progress::device_only), n);
    EXPECT_EQ(fake::writes(s), 2u);  // after the 16th and the 32nd
    EXPECT_TRUE(ops[n - 2].poll());
    EXPECT_FALSE(ops[n - 1].poll());
    fake::run(s);
    EXPECT_TRUE(ops[n - 1].poll());
  });
}

TEST(FakeBackendTest, AHostWaitPublishesOnItsOwnThreadBeforeItWaits) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    ev::Event e = s.enqueue("op", [] {});
    EXPECT_EQ(fake::run(s, SIZE_MAX, fake::Progress::device_only), 1u);
    auto waiter = std::async(std::launch::async, [&] { return e.wait_for(20s); });
    EXPECT_TRUE(still_blocked(waiter));  // the write is queued behind the op, not run yet
    // No watcher's look: the waiter itself put the publication into the device's queue.
    EXPECT_EQ(fake::run(s, SIZE_MAX, fake::Progress::device_only), 0u);
    EXPECT_EQ(fake::writes(s), 1u);
    EXPECT_TRUE(waiter.get());
    fake::notify(s);
  });
}

TEST(FakeBackendTest, AWaitOnTheDevicePublishesTheOtherStreamsWorkBeforeItWaits) {
  run_with_deadline([] {
    ev::Stream a(kFake0), b(kFake0);
    ev::Event first = a.enqueue("first", [] {});
    b.wait(first);
    ev::Event second = b.enqueue("second", [] {});
    // b's launch put a's publication into a's queue: the device needs no host to go on.
    EXPECT_EQ(fake::run(a, SIZE_MAX, fake::Progress::device_only), 1u);
    EXPECT_EQ(fake::writes(a), 1u);
    EXPECT_EQ(fake::run(b, SIZE_MAX, fake::Progress::device_only), 2u);  // the wait, the op
    EXPECT_FALSE(second.poll());  // b's own end is left for later
    fake::run(b);
    EXPECT_TRUE(second.poll());
    EXPECT_EQ(second.error(), nullptr);
  });
}

TEST(FakeBackendTest, AListenerHasTheWatcherPublishAtItsNextLook) {
  run_with_deadline([] {
    ev::Stream s(kFake0);
    ev::Event e = s.enqueue("op", [] {});
    fake::look(s);
    EXPECT_EQ(fake::run(s, SIZE_MAX, fake::Progress::device_only), 1u);
    EXPECT_EQ(fake::writes(s), 0u);  // nobody looked for it, and the stream is not quiet yet
    std::promise<void> called;
    e.add_callback([&] { called.set_value(); });
    fake::look(s);
    EXPECT_EQ(fake::run(s, SIZE_MAX, fake::Progress::device_only), 0u);
    EXPECT_EQ(fake::writes(s), 1u);
    fake::notify(s);
    EXPECT_EQ(called.get_future().wait_for(20s), std::future_status::ready);
  });
}

}  // namespace
