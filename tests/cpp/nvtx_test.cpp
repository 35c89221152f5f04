// eventide's NVTX ranges, as a tool sees them: this binary sets NVTX_INJECTION64_PATH (if
// not set already) to the stand-in tool of nvtx_injection.cpp, which NVTX loads at the first
// range and which records every range pushed, popped, started and ended in each
// domain. No GPU is needed: the ranges are the host's (an op's launch, host waits, callbacks,
// user ranges), and CPU ops have them as GPU ops do.
#include <dlfcn.h>

#include <algorithm>
#include <future>
#include <map>
#include <memory>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nvtx3/nvToolsExt.h>

#include "core/runtime_lock.hpp"
#include "test_util.hpp"

namespace {

using namespace eventide_test;

struct Call {
  std::string kind, domain, message;
  std::uint64_t id = 0;
  std::string thread;
  int locks_held = 0;
};

std::string this_thread_text() {
  std::ostringstream s;
  s << std::this_thread::get_id();
  return s.str();
}

// The tool's library, as NVTX loaded it (null if it did not).
void* tool() {
  const char* path = std::getenv("NVTX_INJECTION64_PATH");
  return path ? dlopen(path, RTLD_LAZY | RTLD_NOLOAD) : nullptr;
}

class NvtxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Before the process's first range, which loads the tool NVTX finds there.
    setenv("NVTX_INJECTION64_PATH", EVENTIDE_NVTX_TEST_TOOL, /*overwrite=*/0);
    { ev::Range warm_up("warm-up"); }
    void* lib = tool();
    ASSERT_NE(lib, nullptr) << "NVTX did not load the tool named by NVTX_INJECTION64_PATH";
    read_ = reinterpret_cast<void (*)(std::string*)>(dlsym(lib, "eventide_test_nvtx_calls"));
    auto set_probe = reinterpret_cast<void (*)(int (*)())>(dlsym(lib, "eventide_test_nvtx_set_probe"));
    ASSERT_NE(read_, nullptr);
    ASSERT_NE(set_probe, nullptr);
    set_probe([] { return ev::detail::runtime_locks_held(); });
    first_ = calls().size();
  }

  // The calls since SetUp.
  std::vector<Call> calls() const {
    std::string text;
    read_(&text);
    std::vector<Call> out;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      Call c;
      std::string id, locks;
      std::getline(f, c.kind, '\t');
      std::getline(f, c.domain, '\t');
      std::getline(f, c.message, '\t');
      std::getline(f, id, '\t');
      std::getline(f, c.thread, '\t');
      std::getline(f, locks, '\t');
      c.id = std::stoull(id);
      c.locks_held = std::stoi(locks);
      out.push_back(std::move(c));
    }
    out.erase(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(std::min(first_, out.size())));
    return out;
  }

  // The names of the ranges pushed on `thread` (in the eventide domain), in order.
  std::vector<std::string> pushed_on(const std::string& thread) const {
    std::vector<std::string> out;
    for (const Call& c : calls()) {
      if (c.kind == "push" && c.thread == thread) {
        EXPECT_EQ(c.domain, "eventide") << c.message;
        out.push_back(c.message);
      }
    }
    return out;
  }

  static bool has(const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  }

  void (*read_)(std::string*) = nullptr;
  std::size_t first_ = 0;
};

TEST_F(NvtxTest, AnOpLaunchIsARangeNamedLikeTheOpOnTheLaunchingThread) {
  run_with_deadline([&] {
    const std::string me = this_thread_text();
    ev::Tensor a = ev::full({64}, 1.0, ev::DType::f32, ev::Device::cpu());
    ev::Tensor b = ev::full({64}, 2.0, ev::DType::f32, ev::Device::cpu());
    ev::Tensor c = ev::matmul(ev::full({8, 8}, 1.0, ev::DType::f32, ev::Device::cpu()),
                              ev::full({8, 8}, 1.0, ev::DType::f32, ev::Device::cpu()));
    ev::Tensor d = a + b;
    ev::Stream s(ev::Device::cpu());
    ev::Event e = s.enqueue("user op", [] {});
    d.wait();
    c.wait();
    e.wait();
    const std::vector<std::string> names = pushed_on(me);
    EXPECT_TRUE(has(names, "fill")) << ::testing::PrintToString(names);
    EXPECT_TRUE(has(names, "matmul")) << ::testing::PrintToString(names);
    EXPECT_TRUE(has(names, "add")) << ::testing::PrintToString(names);
    EXPECT_TRUE(has(names, "user op")) << ::testing::PrintToString(names);
  });
}

// On a GPU too: the launch of a CUDA op (kernel, cuBLASLt) is a range on the launching thread,
// so Nsight Systems shows eventide's name above CUDA's own launch calls.
TEST_F(NvtxTest, AGpuOpLaunchIsARangeNamedLikeTheOp) {
  const ev::Device gpu = ev::Device::cuda(0);
  if (!ev::is_available(gpu)) GTEST_SKIP() << "no CUDA device: the GPU launch ranges are checked on a GPU machine";
  run_with_deadline([&] {
    const std::string me = this_thread_text();
    ev::Tensor a = ev::full({8, 8}, 1.0, ev::DType::f32, gpu);
    ev::Tensor c = ev::matmul(a, a) + a;
    c.wait();
    const std::vector<std::string> names = pushed_on(me);
    EXPECT_TRUE(has(names, "fill")) << ::testing::PrintToString(names);
    EXPECT_TRUE(has(names, "matmul")) << ::testing::PrintToString(names);
    EXPECT_TRUE(has(names, "add")) << ::testing::PrintToString(names);
  });
}

TEST_F(NvtxTest, ACpuOpsRunIsARangeOnTheThreadThatRunsIt) {
  run_with_deadline([&] {
    auto ran_on = std::make_shared<std::promise<std::string>>();
    ev::Stream s(ev::Device::cpu());
    ev::Event e = s.enqueue("user op", [ran_on] { ran_on->set_value(this_thread_text()); });
    const std::string worker = ran_on->get_future().get();
    e.wait();  // the range is popped before the op is marked finished
    ASSERT_NE(worker, this_thread_text());
    const std::vector<std::string> names = pushed_on(worker);
    EXPECT_TRUE(has(names, "user op")) << ::testing::PrintToString(names);
  });
}

TEST_F(NvtxTest, HostWaitsAreRangesNamedLikeTheCall) {
  run_with_deadline([&] {
    const std::string me = this_thread_text();
    ev::Stream s(ev::Device::cpu());
    ev::Event e1 = s.enqueue("sleep", [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
    ev::Event e2 = s.enqueue("nothing", [] {});
    e1.wait();
    ev::wait_all({e1, e2});
    (void)ev::wait_any({e1, e2});
    s.synchronize();
    ev::synchronize();
    const std::vector<std::string> names = pushed_on(me);
    for (const char* n : {"wait", "wait_all", "wait_any", "synchronize"}) {
      EXPECT_TRUE(has(names, n)) << n << " missing from " << ::testing::PrintToString(names);
    }
  });
}

TEST_F(NvtxTest, ACallbackRunIsARangeOnTheCallbackThread) {
  run_with_deadline([&] {
    const std::string me = this_thread_text();
    auto ran_on = std::make_shared<std::promise<std::string>>();
    ev::Stream s(ev::Device::cpu());
    ev::Event e = s.enqueue("nothing", [] {});
    e.add_callback([ran_on] { ran_on->set_value(this_thread_text()); });
    const std::string cb_thread = ran_on->get_future().get();
    ASSERT_NE(cb_thread, me);
    // The pop comes after the callback has returned: wait for it.
    for (int i = 0; i < 2000; ++i) {
      bool popped = false, pushed = false;
      for (const Call& c : calls()) {
        if (c.thread != cb_thread) continue;
        pushed = pushed || (c.kind == "push" && c.message == "callback");
        popped = popped || (pushed && c.kind == "pop");
      }
      if (popped) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ADD_FAILURE() << "no range named \"callback\" pushed and popped on the callback thread";
  });
}

TEST_F(NvtxTest, PushesAndPopsBalanceOnEveryThread) {
  run_with_deadline([&] {
    ev::Stream s(ev::Device::cpu());
    for (int i = 0; i < 20; ++i) {
      ev::Tensor t = ev::full({16}, 1.0, ev::DType::f32, ev::Device::cpu());
      ev::Event e;
      e.record(t);
      e.wait();
    }
    s.synchronize();
    std::map<std::string, int> depth;
    for (const Call& c : calls()) {
      if (c.kind == "push") ++depth[c.thread];
      if (c.kind == "pop") {
        --depth[c.thread];
        EXPECT_GE(depth[c.thread], 0) << "a pop without its push on thread " << c.thread;
      }
    }
    // The callback thread may be between a push and its pop of another test's callback: the
    // test's own thread is balanced.
    EXPECT_EQ(depth[this_thread_text()], 0);
  });
}

TEST_F(NvtxTest, AUserRangeIsAStartEndRangeThatMayEndOnAnotherThread) {
  run_with_deadline([&] {
    {
      ev::Range outer("outer region");
      ev::Range inner("inner region");
    }
    auto moved = std::make_unique<ev::Range>("handed over");
    std::thread([&] { moved.reset(); }).join();
    std::map<std::string, std::uint64_t> started;
    std::vector<std::uint64_t> ended;
    for (const Call& c : calls()) {
      if (c.kind == "start") {
        EXPECT_EQ(c.domain, "eventide");
        started[c.message] = c.id;
      }
      if (c.kind == "end") ended.push_back(c.id);
    }
    for (const char* n : {"outer region", "inner region", "handed over"}) {
      ASSERT_TRUE(started.count(n)) << n;
      EXPECT_NE(std::find(ended.begin(), ended.end(), started[n]), ended.end()) << n << " never ended";
    }
  });
}

TEST_F(NvtxTest, NoRangeCallsTheToolWhileARuntimeLockIsHeld) {
  run_with_deadline([&] {
    // Ops, records, waits and callbacks from several threads; the tool's probe saw how many
    // runtime locks each calling thread held.
    run_threads(3, [](int) {
      for (int i = 0; i < 30; ++i) {
        ev::Tensor t = ev::full({16}, 1.0, ev::DType::f32, ev::Device::cpu());
        ev::Event e;
        e.record(t);
        e.add_callback([] {});
        e.wait();
      }
    });
    ev::synchronize();
    std::size_t n = 0;
    for (const Call& c : calls()) {
      ++n;
      EXPECT_EQ(c.locks_held, 0) << c.kind << " " << c.message << " called the tool under a runtime lock";
    }
    EXPECT_GT(n, 90u);
  });
}

// The check above can fail: the probe sees a lock that the calling thread holds (this test
// calls NVTX itself, under a runtime lock, as eventide must not).
TEST_F(NvtxTest, TheToolsProbeSeesARuntimeLockHeldByTheCaller) {
  nvtxDomainHandle_t d = nvtxDomainCreateA("eventide-test");
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = "under a lock";
  {
    ev::detail::RuntimeMutex mu;
    std::lock_guard lock(mu);
    nvtxDomainRangePushEx(d, &a);
    nvtxDomainRangePop(d);
  }
  bool seen = false;
  for (const Call& c : calls()) {
    if (c.kind == "push" && c.message == "under a lock") {
      seen = true;
      EXPECT_EQ(c.domain, "eventide-test");
      EXPECT_EQ(c.locks_held, 1);
    }
  }
  EXPECT_TRUE(seen) << "the tool did not see the test's own range";
}

}  // namespace
