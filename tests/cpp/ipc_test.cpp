// Events across processes (eventide/ipc.hpp). The other process is this binary itself,
// started with posix_spawn and `--ipc-child <role> ...`: it talks over its stdin (commands,
// one per line) and stdout (the handle, results). Every test body runs under a deadline.
//
// The GPU tests skip where there is no CUDA device; on a GPU machine:
//   ctest --test-dir build -R ipc --output-on-failure
//
// Over 600 lines: one binary for both processes' roles and every path (host, GPU, death of the
// exporter, forged blocks), since the child is this binary itself.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <eventide/eventide.hpp>
#include <eventide/ipc.hpp>

#if EVENTIDE_IPC_TEST_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.hpp"
#endif
#include "gpu_skip.hpp"
#include "test_util.hpp"
#if EVENTIDE_TEST_ASAN
#include <sanitizer/lsan_interface.h>
#endif

extern char** environ;

namespace ev = eventide;
using namespace std::chrono_literals;
using eventide_test::run_with_deadline;

namespace {

const char* g_self = nullptr;  // argv[0]

// --- the child's side ------------------------------------------------------------------------

std::string read_command() {
  std::string line;
  if (!std::getline(std::cin, line)) return "eof";
  return line;
}

void say(const std::string& line) {
  std::cout << line << std::endl;  // flushed: the parent reads it at once
}

#if EVENTIDE_IPC_TEST_CUDA
// A kernel spinning `ns` on the GPU in `s`'s order.
ev::Event spin_on(ev::Stream& s, std::int64_t ns, unsigned long long* stamps) {
  cudaStream_t h = static_cast<cudaStream_t>(s.native_handle());
  return s.enqueue("spin", [=] { eventide::backends::cuda::kernels::spin(ns, stamps, h); });
}
#endif

// Exports an event whose work waits for a UserEvent gate; then obeys: "set", "fail", "die"
// (exits at once, no cleanup), "exit". `device` "cpu" or "cuda:0" (a spin kernel after the gate).
int child_export_gated(const std::string& device) {
  ev::Device d(device);
  ev::UserEvent gate;
  ev::Stream s(d);
  s.wait(gate);
  ev::Event work;
#if EVENTIDE_IPC_TEST_CUDA
  unsigned long long* stamps = nullptr;
  if (d.is_cuda()) {
    cudaMalloc(&stamps, 2 * sizeof(unsigned long long));
    work = spin_on(s, 300'000'000, stamps);  // 300 ms on the GPU, after the gate
  }
#endif
  if (d.is_cpu()) work = s.enqueue("work", [] { std::this_thread::sleep_for(20ms); });
  ev::ipc::ExportedEvent x = ev::ipc::export_event(work);
  say(x.handle());
  for (;;) {
    std::string cmd = read_command();
    if (cmd == "set") {
      gate.set();
    } else if (cmd == "fail") {
      gate.fail(std::make_exception_ptr(std::runtime_error("boom from the exporter")));
    } else if (cmd == "die") {
      _exit(3);
    } else if (cmd == "poll") {
      say(work.poll() ? "done" : "pending");  // the exporter's own view of its work
    } else if (cmd == "drop") {
      x = {};  // the user lets go of the export and of the work's event at once
      work = {};
      say("dropped");
    } else {
      break;  // "exit", or the parent went away
    }
  }
  return 0;
}

// Imports `handle` and waits for it on the host (or, for "stream", on a stream of `device`
// then the host); says "ok" or "error: <what>".
// `handle` "-": starts its device first (the runtime, CUDA), says "ready", then reads the handle
// from stdin, so that the parent can start timed work only once the child is quick to answer.
int child_import_wait(std::string handle, const std::string& device, const std::string& how) {
  try {
    if (handle == "-") {
      ev::Stream warm{ev::Device(device)};
      warm.record_event().wait();
      say("ready");
      handle = read_command();
    }
    ev::Event e = ev::ipc::import_event(handle, ev::Device(device));
    say(e.poll() ? "done-at-import" : "pending-at-import");
    if (how == "stream") {
      ev::Stream s{ev::Device(device)};
      s.wait(e);
      s.record_event().wait();
      say("stream-passed");
    }
    if (!e.wait_for(30s)) {
      say("timeout");
      return 1;
    }
    e.wait();  // rethrows
    say("ok");
  } catch (const std::exception& ex) {
    say(std::string("error: ") + ex.what());
  }
  return 0;
}

// Exports an event and exits normally without dropping the export (leaked on purpose): the
// exit handler removes the name.
int child_export_and_exit() {
  static ev::UserEvent gate;
  auto* x = new ev::ipc::ExportedEvent(ev::ipc::export_event(gate));
#if EVENTIDE_TEST_ASAN
  __lsan_ignore_object(x);  // kept on purpose (with what it owns): not a leak to report
#endif
  say(x->handle());
  read_command();
  std::exit(0);
}

// Exports a gated event, then forks a grandchild that outlives us (it sleeps; its pid goes to
// the parent), then obeys child_export_gated's commands: the exporter's liveness must not be
// kept up by a forked child that has a copy of its descriptors.
int child_export_fork(const std::string& device) {
  ev::UserEvent gate;
  ev::Stream s{ev::Device(device)};
  s.wait(gate);
  ev::Event work = s.record_event();
  ev::ipc::ExportedEvent x = ev::ipc::export_event(work);
  std::fflush(stdout);
  pid_t grandchild = fork();
  if (grandchild == 0) {
    for (int i = 0; i < 600; ++i) ::usleep(100'000);  // up to a minute; the parent kills it
    _exit(0);
  }
  say(x.handle());
  say(std::to_string(grandchild));
  for (;;) {
    std::string cmd = read_command();
    if (cmd == "die") _exit(3);
    if (cmd == "set") gate.set();
    else break;
  }
  return 0;
}

int child_main(int argc, char** argv) {
  std::string role = argc > 2 ? argv[2] : "";
  if (role == "export-fork" && argc > 3) return child_export_fork(argv[3]);
  if (role == "export-and-exit") return child_export_and_exit();
  if (role == "export-gated" && argc > 3) return child_export_gated(argv[3]);
  if (role == "import-wait" && argc > 5) return child_import_wait(argv[3], argv[4], argv[5]);
  std::fprintf(stderr, "ipc_test: unknown child role '%s'\n", role.c_str());
  return 2;
}

// --- the parent's side -----------------------------------------------------------------------

// A child process with pipes to its stdin and stdout.
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<std::string> all{g_self, "--ipc-child"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid_, g_self, &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    if (rc != 0) throw std::runtime_error(std::string("posix_spawn: ") + std::strerror(rc));
    to_ = fdopen(in[1], "w");
    from_ = fdopen(out[0], "r");
  }
  ~Child() {
    if (to_) fclose(to_);
    if (from_) fclose(from_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  void send(const std::string& line) {
    std::fputs((line + "\n").c_str(), to_);
    std::fflush(to_);
  }
  // The next line the child says ("" at its end).
  std::string line() {
    char buf[4096];
    if (!std::fgets(buf, sizeof buf, from_)) return "";
    std::string s(buf);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
  // Its exit status once it has exited (reaps it).
  int join() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

// Whether `e` finished (or failed: wait_for would rethrow) within `timeout`.
bool ends_within(const ev::Event& e, std::chrono::nanoseconds timeout) {
  return ev::wait_any({e}, timeout).has_value();
}

std::string error_text(const ev::Event& e) {
  try {
    if (auto err = e.error()) std::rethrow_exception(err);
  } catch (const std::exception& ex) {
    return ex.what();
  }
  return "";
}

const ev::Device kGpu = ev::Device::cuda(0);

#define REQUIRE_GPU() EVENTIDE_REQUIRE_DEVICE(kGpu)

// A read-only view of an exported event's shared block (by its handle), kept mapped after its
// name is removed: the state word (offset 16) and the users word (offset 76: importers using
// the exporter's CUDA event, and bit 31, the exporter's closing bit), as src/ipc/block.hpp lays
// them out (static_asserts there).
class BlockView {
 public:
  explicit BlockView(const std::string& handle) {
    std::string name = "/" + handle.substr(std::strlen("eventide-ipc:1:"));
    int fd = shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) throw std::runtime_error("shm_open " + name);
    p_ = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p_ == MAP_FAILED) throw std::runtime_error("mmap " + name);
  }
  ~BlockView() { munmap(p_, 4096); }
  std::uint32_t state() const { return load(16); }
  std::uint32_t users() const { return load(76); }
  static constexpr std::uint32_t kClosing = 1u << 31;

 private:
  std::uint32_t load(std::size_t offset) const {
    return __atomic_load_n(reinterpret_cast<const std::uint32_t*>(static_cast<const char*>(p_) + offset),
                           __ATOMIC_ACQUIRE);
  }
  void* p_;
};

// Whether `pred` holds within `timeout` (polled).
template <class Pred>
bool becomes(Pred pred, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// --- host path, within one process --------------------------------------------------------

TEST(ipc, SameProcessHostRoundTrip) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::ipc::ExportedEvent x = ev::ipc::export_event(gate);
    EXPECT_EQ(x.handle().rfind("eventide-ipc:1:", 0), 0u) << x.handle();
    EXPECT_FALSE(x.native());
    ev::Event e = ev::ipc::import_event(x.handle());
    EXPECT_EQ(e.device(), ev::Device::cpu());
    EXPECT_FALSE(e.poll());
    EXPECT_FALSE(e.wait_for(30ms));
    gate.set();
    EXPECT_TRUE(e.wait_for(10s));
    EXPECT_EQ(e.status(), ev::EventStatus::finished);
    // Timing does not cross processes.
    EXPECT_FALSE(e.timing_enabled());
    EXPECT_THROW(e.time_elapsed(), ev::StateError);
  });
}

TEST(ipc, FinishedEventImportsFinished) {
  run_with_deadline([] {
    ev::Stream s(ev::Device::cpu());
    ev::Event done = s.record_event();
    done.wait();
    auto x = ev::ipc::export_event(done);
    ev::Event e = ev::ipc::import_event(x.handle(), ev::Device::cpu());
    EXPECT_TRUE(e.wait_for(10s));
    EXPECT_FALSE(e.error());
  });
}

// An export that is over reads so right after the import, without waiting for the watcher.
TEST(ipc, AnImportOfFinishedWorkPollsFinishedAtOnce) {
  run_with_deadline([] {
    ev::UserEvent u;
    u.set();
    auto x = ev::ipc::export_event(u);
    for (int i = 0; i < 200; ++i) {
      ev::Event e = ev::ipc::import_event(x.handle());
      ASSERT_TRUE(e.poll()) << "import " << i;
    }
  });
}

TEST(ipc, FailureCrossesWithItsText) {
  run_with_deadline([] {
    ev::UserEvent gate;
    auto x = ev::ipc::export_event(gate);
    ev::Event e = ev::ipc::import_event(x.handle());
    gate.fail(std::make_exception_ptr(std::runtime_error("the exporter's own words")));
    EXPECT_TRUE(ends_within(e, 10s));
    EXPECT_EQ(e.status(), ev::EventStatus::failed);
    EXPECT_THROW_MSG(e.wait(), ev::OpError, "the exporter's own words", "failed there");
  });
}

// An event holds every record made on it: one that failed already and one still pending. The
// export covers both: the importer must see the failure once the pending part is over, not the
// pending part's success alone.
TEST(ipc, AnEarlierFailureOfTheEventCrossesWithItsPendingWork) {
  run_with_deadline([] {
    ev::UserEvent bad, gate;
    ev::Stream a(ev::Device::cpu()), b(ev::Device::cpu());
    a.wait(bad);
    b.wait(gate);
    bad.fail(std::make_exception_ptr(std::runtime_error("the first record's failure")));
    ev::Event e;
    e.record(a);  // failed
    e.record(b);  // pending behind `gate`
    EXPECT_TRUE(ends_within(a.record_event(), 10s));
    auto x = ev::ipc::export_event(e);
    ev::Event imported = ev::ipc::import_event(x.handle(), ev::Device::cpu());
    EXPECT_FALSE(ends_within(imported, 50ms)) << "the import finished before the pending record";
    gate.set();
    EXPECT_TRUE(ends_within(imported, 10s));
    EXPECT_EQ(imported.status(), ev::EventStatus::failed);
    EXPECT_NE(error_text(imported).find("the first record's failure"), std::string::npos)
        << error_text(imported);
    EXPECT_EQ(e.status(), ev::EventStatus::failed);
  });
}

// The same with nothing pending: the failure is published at once.
TEST(ipc, AnEventThatFailedAlreadyImportsFailed) {
  run_with_deadline([] {
    ev::UserEvent bad;
    ev::Stream a(ev::Device::cpu()), b(ev::Device::cpu());
    a.wait(bad);
    bad.fail(std::make_exception_ptr(std::runtime_error("failed before the export")));
    ev::Event e;
    e.record(a);
    e.record(b);
    EXPECT_TRUE(ends_within(e, 10s));
    auto x = ev::ipc::export_event(e);
    ev::Event imported = ev::ipc::import_event(x.handle(), ev::Device::cpu());
    EXPECT_TRUE(ends_within(imported, 10s));
    EXPECT_EQ(imported.status(), ev::EventStatus::failed);
    EXPECT_NE(error_text(imported).find("failed before the export"), std::string::npos)
        << error_text(imported);
  });
}

TEST(ipc, BadInputIsNamed) {
  run_with_deadline([] {
    EXPECT_THROW_MSG(ev::ipc::import_event("hello"), ev::InvalidArgument, "not an eventide event handle");
    EXPECT_THROW_MSG(ev::ipc::import_event("eventide-ipc:9:eventide.1.1.1"), ev::InvalidArgument,
                     "another version");
    EXPECT_THROW_MSG(ev::ipc::import_event("eventide-ipc:1:../etc/passwd"), ev::InvalidArgument,
                     "characters");
    EXPECT_THROW_MSG(ev::ipc::import_event("eventide-ipc:1:eventide.1.2.deadbeef"), ev::InvalidArgument,
                     "no exported event");
    // A block that is gone: the exporter dropped its ExportedEvent.
    ev::UserEvent gate;
    std::string handle;
    {
      auto x = ev::ipc::export_event(gate);
      handle = x.handle();
    }
    EXPECT_THROW_MSG(ev::ipc::import_event(handle), ev::InvalidArgument, "no exported event");
    auto x = ev::ipc::export_event(gate);
    x.close();
    EXPECT_THROW_MSG(ev::ipc::import_event(x.handle()), ev::InvalidArgument, "no exported event");
    // An EMPTY event would never finish.
    EXPECT_THROW_MSG(ev::ipc::export_event(ev::Event()), ev::StateError, "EMPTY");
    EXPECT_THROW(ev::ipc::ExportedEvent().handle(), ev::StateError);
    gate.set();
  });
}

// A copy of the block of `handle` under a new name, its bytes changed by `change`, with mode
// `mode`, created by user `uid` (-1: this process's; another only as root): the handle that
// names it. The caller unlinks it (forged_name).
std::string forge_block(const std::string& handle, const std::function<void(std::vector<char>&)>& change,
                        mode_t mode, int uid = -1) {
  static int count = 0;
  const std::string real = "/" + handle.substr(std::strlen("eventide-ipc:1:"));
  int fd = shm_open(real.c_str(), O_RDONLY, 0);
  if (fd < 0) throw std::runtime_error("shm_open " + real);
  struct stat st {};
  fstat(fd, &st);
  std::vector<char> bytes(static_cast<std::size_t>(st.st_size));
  if (pread(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) throw std::runtime_error("pread");
  close(fd);
  change(bytes);
  const std::string name = "eventide.forged." + std::to_string(getpid()) + "." + std::to_string(++count);
  const std::string path = "/" + name;  // (made before the fork: the child allocates nothing)
  auto write_it = [&] {
    int out = shm_open(path.c_str(), O_CREAT | O_EXCL | O_RDWR, mode);
    if (out < 0) return false;
    bool ok = fchmod(out, mode) == 0 &&
              write(out, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
    close(out);
    return ok;
  };
  if (uid < 0) {
    if (!write_it()) throw std::runtime_error("forging " + name);
  } else {
    pid_t child = fork();
    if (child == 0) _exit(setuid(static_cast<uid_t>(uid)) == 0 && write_it() ? 0 : 1);
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("forging " + name + " as uid " + std::to_string(uid));
  }
  return "eventide-ipc:1:" + name;
}

void unlink_forged(const std::string& handle) {
  shm_unlink(("/" + handle.substr(std::strlen("eventide-ipc:1:"))).c_str());
}

// Only a block made by this user, that nobody else may write, of its own size and with every
// field in bounds, decides an import's verdict (/dev/shm takes names from every user).
TEST(ipc, ForgedBlocksAreRefusedByName) {
  run_with_deadline([] {
    ev::UserEvent gate;
    auto x = ev::ipc::export_event(gate);
    auto same = [](std::vector<char>&) {};
    std::vector<std::string> forged;
    auto refused = [&](const std::string& h, const char* words) {
      forged.push_back(h);
      EXPECT_THROW_MSG(ev::ipc::import_event(h), ev::InvalidArgument, words);
    };
    // A faithful copy is accepted: the checks below refuse only what they name.
    forged.push_back(forge_block(x.handle(), same, 0600));
    EXPECT_NO_THROW(ev::ipc::import_event(forged.back()));
    refused(forge_block(x.handle(), same, 0666), "may be written by other users");
    refused(forge_block(x.handle(), same, 0620), "may be written by other users");
    for (std::int32_t pid : {0, -1}) {
      refused(forge_block(x.handle(), [&](std::vector<char>& b) { std::memcpy(b.data() + 20, &pid, 4); }, 0600),
              "malformed");
    }
    refused(forge_block(x.handle(), [](std::vector<char>& b) { b.resize(b.size() + 4096); }, 0600),
            "not an eventide event block");
    refused(forge_block(x.handle(), [](std::vector<char>& b) { b.resize(b.size() - 64); }, 0600),
            "not an eventide event block");
    if (geteuid() == 0) {
      refused(forge_block(x.handle(), same, 0600, 65534), "belongs to another user");  // nobody
    } else {
      std::printf("not root: the block of another user is not tried here\n");
    }
    for (const std::string& h : forged) unlink_forged(h);
    gate.set();
  });
}

std::size_t open_descriptors() {
  std::size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)entry;
    ++n;
  }
  return n;
}

// A dropped import is let go of (its descriptor, its mapping) while the exported work still
// runs: 1,018 of them used up the process's descriptors before, and every open failed after.
TEST(ipc, DroppedImportsGiveBackTheirDescriptors) {
  run_with_deadline([] {
    ev::UserEvent gate;  // never set until the end: the exported work is still running
    auto x = ev::ipc::export_event(gate);
    const std::size_t before = open_descriptors();
    for (int i = 0; i < 2000; ++i) {
      ev::Event e = ev::ipc::import_event(x.handle());
      EXPECT_FALSE(e.poll());
    }
    EXPECT_TRUE(becomes([&] { return open_descriptors() <= before + 8; }, 10s))
        << open_descriptors() - before << " descriptors more than before the imports";
    ev::Event kept = ev::ipc::import_event(x.handle());  // one still held is still watched
    gate.set();
    EXPECT_TRUE(kept.wait_for(10s));
  });
}

TEST(ipc, CallbacksAndWaitAnyWork) {
  run_with_deadline([] {
    ev::UserEvent gate;
    auto x = ev::ipc::export_event(gate);
    ev::Event e = ev::ipc::import_event(x.handle());
    std::atomic<int> calls{0};
    e.add_callback([&] { calls.fetch_add(1); });
    ev::UserEvent never;
    gate.set();
    auto which = ev::wait_any({never, e}, 10s);
    ASSERT_TRUE(which.has_value());
    EXPECT_EQ(*which, 1u);
    auto until = std::chrono::steady_clock::now() + 10s;
    while (calls.load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(calls.load(), 1);
    never.set();
  });
}

// How many descriptors of blocks this process has open.
int open_block_fds() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    char path[64], target[512];
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    if (std::strstr(target, "/dev/shm/eventide.")) ++n;
  }
  return n;
}

// How many blocks this process has mapped.
int mapped_blocks() {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return -1;
  int n = 0;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    if (std::strstr(line, "/dev/shm/eventide.")) ++n;
  }
  std::fclose(f);
  return n;
}

TEST(ipc, ManyImportsAtOnceAndNothingLeftMapped) {
  run_with_deadline([] {
    {
      // More than one futex_waitv call takes (128 words): the rest are looked at in turns.
      constexpr int kCount = 300;
      std::vector<ev::UserEvent> gates(kCount);
      std::vector<ev::ipc::ExportedEvent> exports;
      std::vector<ev::Event> imports;
      for (auto& g : gates) exports.push_back(ev::ipc::export_event(g));
      for (auto& x : exports) imports.push_back(ev::ipc::import_event(x.handle()));
      EXPECT_FALSE(ev::wait_all_for(imports, 20ms));
      for (int i = kCount - 1; i >= 0; --i) gates[i].set();  // the last watched first
      EXPECT_TRUE(ev::wait_all_for(imports, 30s));
    }
    // Every export dropped, every import finished: the watcher and the callbacks let go of
    // their mappings (soon: on their own threads).
    auto until = std::chrono::steady_clock::now() + 10s;
    while ((mapped_blocks() != 0 || open_block_fds() != 0) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(5ms);
    }
    EXPECT_EQ(mapped_blocks(), 0);
    EXPECT_EQ(open_block_fds(), 0);
  });
}

// --- across processes: the child exports ----------------------------------------------------

TEST(ipc_process, HostWaitForWorkFinishingLater) {
  run_with_deadline([] {
    Child c({"export-gated", "cpu"});
    std::string handle = c.line();
    ASSERT_EQ(handle.rfind("eventide-ipc:1:", 0), 0u) << handle;
    ev::Event e = ev::ipc::import_event(handle);
    EXPECT_FALSE(e.poll());
    EXPECT_FALSE(e.wait_for(100ms));  // held by the child's gate
    c.send("set");
    EXPECT_TRUE(e.wait_for(20s));
    EXPECT_NO_THROW(e.wait());
    c.send("exit");
    EXPECT_EQ(c.join(), 0);
  });
}

TEST(ipc_process, FailureCrossesProcesses) {
  run_with_deadline([] {
    Child c({"export-gated", "cpu"});
    ev::Event e = ev::ipc::import_event(c.line());
    c.send("fail");
    EXPECT_TRUE(ends_within(e, 20s));
    EXPECT_EQ(e.status(), ev::EventStatus::failed);
    std::string text = error_text(e);
    EXPECT_NE(text.find("boom from the exporter"), std::string::npos) << text;
    EXPECT_NE(text.find(std::to_string(c.pid())), std::string::npos) << text;
    c.send("exit");
    EXPECT_EQ(c.join(), 0);
  });
}

// fork() while a CPU op's body uses the IPC code (here: exports an event and drops it, which
// takes the IPC code's lock): the runtime's prepare step lets the body finish first. The IPC
// fork handler must not hold that lock yet, or the body blocks on it for the whole grace
// period and the child finds the op "interrupted by fork".
TEST(ipc_process, ForkWhileACpuOpExportsNeitherStallsNorFailsIt) {
  run_with_deadline([] {
    ev::UserEvent other;
    (void)ev::ipc::export_event(other);  // the IPC code's fork handlers are registered by now
    ev::Stream s(ev::Device::cpu());
    std::atomic<bool> started{false};
    ev::Event work = s.enqueue("work", [&] {
      started = true;
      std::this_thread::sleep_for(200ms);  // the fork comes meanwhile
      ev::ipc::ExportedEvent x = ev::ipc::export_event(other);
      x.close();
    });
    while (!started) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(20ms);
    auto t0 = std::chrono::steady_clock::now();
    pid_t pid = fork();
    if (pid == 0) {
      // The op finished before the fork: it must not have been failed here.
      _exit(work.poll() && work.status() == ev::EventStatus::finished ? 0 : 7);
    }
    auto forked_in = std::chrono::steady_clock::now() - t0;
    ASSERT_GT(pid, 0);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the child found the op failed (interrupted by fork)";
    EXPECT_LT(forked_in, 1500ms) << "fork() waited out the grace period";
    EXPECT_TRUE(ends_within(work, 10s));
    EXPECT_EQ(work.status(), ev::EventStatus::finished) << error_text(work);
    other.set();
  });
}

TEST(ipc_process, ExporterDeathFailsTheImportInsteadOfHanging) {
  run_with_deadline([] {
    Child c({"export-gated", "cpu"});
    ev::Event e = ev::ipc::import_event(c.line());
    ev::Stream s(ev::Device::cpu());
    s.wait(e);
    ev::Event after = s.record_event();
    c.send("die");
    // Not reaped yet: a zombie counts as dead.
    auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(ends_within(e, 20s));
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_EQ(e.status(), ev::EventStatus::failed);
    std::string text = error_text(e);
    EXPECT_NE(text.find("process " + std::to_string(c.pid())), std::string::npos) << text;
    EXPECT_NE(text.find("exited or was killed"), std::string::npos) << text;
    // What waited on it fails too.
    EXPECT_TRUE(ends_within(after, 20s));
    EXPECT_EQ(after.status(), ev::EventStatus::failed);
    EXPECT_EQ(c.join(), 3);
  });
}

TEST(ipc_process, ImportOfADeadExporterFails) {
  run_with_deadline([] {
    Child c({"export-gated", "cpu"});
    std::string handle = c.line();
    kill(c.pid(), SIGKILL);  // no cleanup: the name stays behind
    c.join();
    ev::Event e = ev::ipc::import_event(handle);
    EXPECT_TRUE(ends_within(e, 20s));
    EXPECT_EQ(e.status(), ev::EventStatus::failed);
    // The importer removed the dead exporter's name.
    EXPECT_THROW_MSG(ev::ipc::import_event(handle), ev::InvalidArgument, "no exported event");
  });
}

// The same once the exported work has finished: the block left behind is no export any more
// (it imported as finished for good before, and stayed in /dev/shm), while a live exporter's
// finished export still imports, finished.
TEST(ipc_process, AFinishedExportOfAKilledExporterIsGoneWithIt) {
  run_with_deadline([] {
    Child c({"export-gated", "cpu"});
    std::string handle = c.line();
    c.send("set");
    c.send("poll");
    while (c.line() != "done") c.send("poll");
    ev::Event live = ev::ipc::import_event(handle);
    EXPECT_TRUE(ends_within(live, 20s));
    EXPECT_EQ(live.status(), ev::EventStatus::finished);
    kill(c.pid(), SIGKILL);  // no cleanup: the name stays behind
    c.join();
    const std::string path = "/dev/shm/" + handle.substr(std::strlen("eventide-ipc:1:"));
    EXPECT_EQ(access(path.c_str(), F_OK), 0) << "the killed exporter's block is still there";
    EXPECT_THROW_MSG(ev::ipc::import_event(handle), ev::InvalidArgument, "has exited");
    EXPECT_NE(access(path.c_str(), F_OK), 0) << "the importer removes the block left behind";
    EXPECT_THROW_MSG(ev::ipc::import_event(handle), ev::InvalidArgument, "no exported event");
  });
}

TEST(ipc_process, AForkedChildOfTheExporterDoesNotKeepItAlive) {
  run_with_deadline([] {
    Child c({"export-fork", "cpu"});
    std::string handle = c.line();
    pid_t grandchild = static_cast<pid_t>(std::stol(c.line()));
    ev::Event e = ev::ipc::import_event(handle);
    EXPECT_FALSE(e.wait_for(50ms));
    c.send("die");
    EXPECT_TRUE(ends_within(e, 20s));
    EXPECT_EQ(e.status(), ev::EventStatus::failed);
    EXPECT_NE(error_text(e).find("exited or was killed"), std::string::npos) << error_text(e);
    EXPECT_EQ(c.join(), 3);
    ::kill(grandchild, SIGKILL);  // reparented: init reaps it
  });
}

TEST(ipc_process, ExitRemovesTheExportersNames) {
  run_with_deadline([] {
    Child c({"export-and-exit"});
    std::string handle = c.line();
    ev::Event e = ev::ipc::import_event(handle);  // while it lives
    c.send("exit");
    EXPECT_EQ(c.join(), 0);
    EXPECT_THROW_MSG(ev::ipc::import_event(handle), ev::InvalidArgument, "no exported event");
    // The import made before fails (its exporter is gone without finishing it).
    EXPECT_TRUE(ends_within(e, 20s));
    EXPECT_EQ(e.status(), ev::EventStatus::failed);
  });
}

TEST(ipc_process, CpuStreamWaitsForImportedEvent) {
  run_with_deadline([] {
    Child c({"export-gated", "cpu"});
    ev::Event e = ev::ipc::import_event(c.line(), ev::Device::cpu());
    ev::Stream s(ev::Device::cpu());
    s.wait(e);
    std::atomic<bool> ran{false};
    ev::Event after = s.enqueue("after", [&] { ran.store(true); });
    EXPECT_FALSE(after.wait_for(100ms));
    EXPECT_FALSE(ran.load());
    c.send("set");
    EXPECT_TRUE(after.wait_for(20s));
    EXPECT_TRUE(ran.load());
    EXPECT_TRUE(e.poll());
    c.send("exit");
    EXPECT_EQ(c.join(), 0);
  });
}

TEST(ipc_process, TimeoutWaitsReturnFalse) {
  run_with_deadline([] {
    Child c({"export-gated", "cpu"});
    ev::Event e = ev::ipc::import_event(c.line());
    auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(e.wait_for(50ms));
    EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
    EXPECT_FALSE(ev::wait_all_for({e}, 20ms));
    EXPECT_FALSE(ev::wait_any({e}, 20ms).has_value());
    c.send("set");
    EXPECT_TRUE(e.wait_for(20s));
    c.send("exit");
    EXPECT_EQ(c.join(), 0);
  });
}

// --- across processes: the child imports ----------------------------------------------------

TEST(ipc_process, ChildWaitsForOurEvent) {
  run_with_deadline([] {
    ev::UserEvent gate;
    ev::Stream s(ev::Device::cpu());
    s.wait(gate);
    ev::Event work = s.record_event();
    auto x = ev::ipc::export_event(work);
    Child c({"import-wait", x.handle(), "cpu", "stream"});
    EXPECT_EQ(c.line(), "pending-at-import");
    gate.set();
    EXPECT_EQ(c.line(), "stream-passed");
    EXPECT_EQ(c.line(), "ok");
    EXPECT_EQ(c.join(), 0);
  });
}

TEST(ipc_process, ChildSeesOurFailure) {
  run_with_deadline([] {
    ev::UserEvent gate;
    auto x = ev::ipc::export_event(gate);
    Child c({"import-wait", x.handle(), "cpu", "host"});
    EXPECT_EQ(c.line(), "pending-at-import");
    gate.fail(std::make_exception_ptr(std::runtime_error("parent says no")));
    std::string said = c.line();
    EXPECT_EQ(said.rfind("error: ", 0), 0u) << said;
    EXPECT_NE(said.find("parent says no"), std::string::npos) << said;
    EXPECT_EQ(c.join(), 0);
  });
}

// --- the GPU path (skipped without a GPU) ------------------------------------------------------

TEST(ipc_gpu, SameProcessGpuImportIsRefused) {
  REQUIRE_GPU();
  run_with_deadline([] {
    ev::Stream s(kGpu);
    ev::Event e = s.record_event();
    auto x = ev::ipc::export_event(e);
    EXPECT_TRUE(x.native());
    EXPECT_THROW_MSG(ev::ipc::import_event(x.handle(), kGpu), ev::InvalidArgument, "this process");
    // On the CPU, the host path serves it.
    ev::Event h = ev::ipc::import_event(x.handle(), ev::Device::cpu());
    EXPECT_TRUE(h.wait_for(20s));
    EXPECT_FALSE(h.error());
  });
}

// The child spins 300 ms on its GPU after its gate; our stream waits for it on the GPU. When our
// marker after the wait has passed, the child's own event must read done (checked by asking it).
void gpu_stream_waits(bool set_before_import) {
  Child c({"export-gated", "cuda:0"});
  std::string handle = c.line();
  if (set_before_import) c.send("set");
  if (set_before_import) {
    // Let the child launch its spin, so that the record is on the GPU (the direct path).
    std::this_thread::sleep_for(50ms);
  }
  ev::Event e = ev::ipc::import_event(handle, kGpu);
  EXPECT_EQ(e.device(), kGpu);
  ev::Stream s(kGpu);
  auto t0 = std::chrono::steady_clock::now();
  s.wait(e);  // never blocks the host
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);
  ev::Event after = s.record_event();
  EXPECT_FALSE(after.poll());
  if (!set_before_import) {
    EXPECT_FALSE(after.wait_for(100ms));
    c.send("set");
  }
  EXPECT_TRUE(after.wait_for(30s));
  EXPECT_FALSE(after.error());
  c.send("poll");
  EXPECT_EQ(c.line(), "done") << "our stream went on before the exporter's spin had finished";
  EXPECT_TRUE(e.wait_for(30s));
  EXPECT_FALSE(e.error());
  c.send("exit");
  EXPECT_EQ(c.join(), 0);
}

TEST(ipc_gpu, StreamWaitsOnTheGpuForAnotherProcessesKernel) {
  REQUIRE_GPU();
  run_with_deadline([] { gpu_stream_waits(true); });
}

TEST(ipc_gpu, StreamWaitsForWorkStillHeldOnTheExportersHost) {
  REQUIRE_GPU();
  run_with_deadline([] { gpu_stream_waits(false); });
}

TEST(ipc_gpu, ExporterFailureReachesHostWaitsOnTheGpuPath) {
  REQUIRE_GPU();
  run_with_deadline([] {
    Child c({"export-gated", "cuda:0"});
    ev::Event e = ev::ipc::import_event(c.line(), kGpu);
    ev::Stream s(kGpu);
    s.wait(e);
    ev::Event after = s.record_event();
    c.send("fail");
    EXPECT_TRUE(ends_within(e, 30s));
    EXPECT_EQ(e.status(), ev::EventStatus::failed);
    EXPECT_NE(error_text(e).find("boom from the exporter"), std::string::npos) << error_text(e);
    // The gate was never passed: the stream's wait fails too.
    EXPECT_TRUE(ends_within(after, 30s));
    EXPECT_EQ(after.status(), ev::EventStatus::failed);
    c.send("exit");
    EXPECT_EQ(c.join(), 0);
  });
}

TEST(ipc_gpu, ExporterDeathOnTheGpuPathFails) {
  REQUIRE_GPU();
  run_with_deadline([] {
    Child c({"export-gated", "cuda:0"});
    ev::Event e = ev::ipc::import_event(c.line(), kGpu);
    c.send("die");
    EXPECT_TRUE(ends_within(e, 30s));
    EXPECT_EQ(e.status(), ev::EventStatus::failed);
    EXPECT_NE(error_text(e).find(std::to_string(c.pid())), std::string::npos) << error_text(e);
    EXPECT_EQ(c.join(), 3);
  });
}

TEST(ipc_gpu, ChildGpuStreamWaitsForOurKernel) {
  REQUIRE_GPU();
  run_with_deadline([] {
#if EVENTIDE_IPC_TEST_CUDA
    Child c({"import-wait", "-", "cuda:0", "stream"});
    ASSERT_EQ(c.line(), "ready");  // its CUDA context is up: it answers quickly from now on
    ev::Stream s(kGpu);
    unsigned long long* stamps = nullptr;
    cudaMalloc(&stamps, 2 * sizeof(unsigned long long));
    ev::Event spin = spin_on(s, 2'000'000'000, stamps);  // 2 s on the GPU
    auto x = ev::ipc::export_event(spin);  // recorded on the GPU before it returns
    EXPECT_TRUE(x.native());
    c.send(x.handle());
    EXPECT_EQ(c.line(), "pending-at-import");
    // The child's stream waited for our spin on the GPU: it is over when the child says so.
    EXPECT_EQ(c.line(), "stream-passed");
    EXPECT_TRUE(spin.poll()) << "the child's stream went on before our kernel had finished";
    EXPECT_EQ(c.line(), "ok");
    EXPECT_EQ(c.join(), 0);
    spin.wait();
    cudaFree(stamps);
#endif
  });
}

TEST(ipc_gpu, ChildGpuStreamWaitsForOurKernelHeldBehindAUserEvent) {
  REQUIRE_GPU();
  run_with_deadline([] {
#if EVENTIDE_IPC_TEST_CUDA
    ev::UserEvent gate;
    ev::Stream s(kGpu);
    s.wait(gate);
    unsigned long long* stamps = nullptr;
    cudaMalloc(&stamps, 2 * sizeof(unsigned long long));
    ev::Event spin = spin_on(s, 300'000'000, stamps);  // held until the gate is set
    auto x = ev::ipc::export_event(spin);  // the record is made when the spin is launched
    Child c({"import-wait", x.handle(), "cuda:0", "stream"});
    EXPECT_EQ(c.line(), "pending-at-import");
    gate.set();
    EXPECT_EQ(c.line(), "stream-passed");
    EXPECT_TRUE(spin.poll()) << "the child's stream went on before our kernel had finished";
    EXPECT_EQ(c.line(), "ok");
    EXPECT_EQ(c.join(), 0);
    cudaFree(stamps);
#endif
  });
}

// The exporter (us) lets go of its export while a child's stream still waits on the GPU for our
// kernel: our CUDA event must outlive that wait (CUDA leaves an imported event undefined once
// its exporter destroyed it). The child counts itself in the block's users word while it uses
// the event; we destroy ours (the closing bit) only once the count is back to 0.
TEST(ipc_gpu, ExporterKeepsItsGpuEventWhileAnImporterWaitsOnIt) {
  REQUIRE_GPU();
  run_with_deadline([] {
#if EVENTIDE_IPC_TEST_CUDA
    Child c({"import-wait", "-", "cuda:0", "stream"});
    ASSERT_EQ(c.line(), "ready");
    ev::Stream s(kGpu);
    unsigned long long* stamps = nullptr;
    cudaMalloc(&stamps, 2 * sizeof(unsigned long long));
    ev::Event spin = spin_on(s, 1'500'000'000, stamps);  // 1.5 s on the GPU
    std::optional<ev::ipc::ExportedEvent> x = ev::ipc::export_event(spin);
    ASSERT_TRUE(x->native());
    BlockView view(x->handle());
    c.send(x->handle());
    EXPECT_EQ(c.line(), "pending-at-import");
    // The child opened our event (in import_event or its stream's wait op): it is counted.
    EXPECT_TRUE(becomes([&] { return view.users() == 1u; }, 1000ms)) << view.users();
    EXPECT_FALSE(spin.poll());
    x.reset();  // the user lets go; our completion callback still holds the export
    EXPECT_EQ(view.users() & BlockView::kClosing, 0u);
    EXPECT_EQ(c.line(), "stream-passed");
    EXPECT_TRUE(spin.poll()) << "the child's stream went on before our kernel had finished";
    EXPECT_EQ(c.line(), "ok");
    EXPECT_EQ(c.join(), 0);
    // The child let go (its wait passed, it closed its handle): our event is destroyed now.
    EXPECT_TRUE(becomes([&] { return view.users() == BlockView::kClosing; }, 10000ms)) << view.users();
    cudaFree(stamps);
#endif
  });
}

// The exporter's work is held on its host when we import; it is released, finishes, and the
// exporter drops everything at once. Our stream's wait must still come after that work on the
// GPU, the exporter's event must not be destroyed while we may use it, and we open it only if
// the work was not over yet (a final word: nothing to wait for).
TEST(ipc_gpu, ExporterDroppingItsExportRightAfterTheWorkIsSafeForImporters) {
  REQUIRE_GPU();
  run_with_deadline([] {
    for (int round = 0; round < 5; ++round) {
      Child c({"export-gated", "cuda:0"});
      std::string handle = c.line();
      BlockView view(handle);
      ev::Event e = ev::ipc::import_event(handle, kGpu);
      ev::Stream s(kGpu);
      s.wait(e);
      ev::Event after = s.record_event();
      c.send("set");
      c.send("drop");
      EXPECT_EQ(c.line(), "dropped");
      EXPECT_TRUE(after.wait_for(30s)) << "round " << round;
      EXPECT_FALSE(after.error()) << error_text(after);
      EXPECT_TRUE(e.wait_for(30s));
      EXPECT_FALSE(e.error()) << error_text(e);
      EXPECT_NE(view.state() & 2u, 0u) << "the imported event finished before the word said done";
      // Once we have let go, the exporter destroys its event (while it lives to do so).
      EXPECT_TRUE(becomes([&] { return view.users() == BlockView::kClosing; }, 10000ms))
          << "round " << round << ": users word " << view.users();
      c.send("exit");
      EXPECT_EQ(c.join(), 0);
    }
  });
}

}  // namespace

namespace {

// The fault suite's ledger (issue 26): every test leaves /dev/shm and this process's
// descriptors as it found them, after up to 10 s for the watcher and callbacks to let go.
// A block counts if no live process but this one could still remove it: this process's, or
// one of an exporter that has died (the pid is in its name). Forged names are not blocks.
class NothingLeftBehind : public ::testing::EmptyTestEventListener {
  static std::vector<std::string> blocks() {
    std::vector<std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
      const std::string name = entry.path().filename().string();
      int pid = 0;
      if (std::sscanf(name.c_str(), "eventide.%d.", &pid) != 1 || pid <= 0) continue;
      if (pid == ::getpid() || (::kill(pid, 0) != 0 && errno == ESRCH)) out.push_back(name);
    }
    return out;
  }
  static std::size_t descriptors() {
    std::size_t n = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      (void)entry;
      ++n;
    }
    return n;
  }
  std::vector<std::string> left(const std::vector<std::string>& now) const {
    std::vector<std::string> out;
    for (const std::string& b : now) {
      if (std::find(before_.begin(), before_.end(), b) == before_.end()) out.push_back(b);
    }
    return out;
  }

  void OnTestStart(const ::testing::TestInfo&) override {
    before_ = blocks();
    fds_ = descriptors();
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Skipped()) return;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while ((!left(blocks()).empty() || descriptors() > fds_ + 2) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    const std::vector<std::string> stay = left(blocks());
    EXPECT_TRUE(stay.empty()) << stay.size() << " block(s) left in /dev/shm, the first " << stay.front();
    EXPECT_LE(descriptors(), fds_ + 2) << descriptors() - fds_ << " descriptors more than before the test";
  }

  std::vector<std::string> before_;
  std::size_t fds_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  g_self = "/proc/self/exe";
  if (argc > 1 && std::strcmp(argv[1], "--ipc-child") == 0) return child_main(argc, argv);
  static std::string self;
  {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) {
      self.assign(buf, static_cast<std::size_t>(n));
      g_self = self.c_str();
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  // Every device started first, an export of its own made and dropped: what the runtime and
  // the driver open once per process (CUDA's descriptors: about 30 at its first use, 3 more at
  // the first IPC event) is not counted against the first test that touches them.
  for (ev::Device d : ::testing::GTEST_FLAG(list_tests) ? std::vector<ev::Device>{} : ev::devices()) {
    try {
      ev::Stream s(d);
      ev::Event e = s.record_event();
      e.wait();
      (void)ev::ipc::export_event(e);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ipc_test: warming up %s: %s\n", d.str().c_str(), e.what());
    }
  }
  ::testing::UnitTest::GetInstance()->listeners().Append(new NothingLeftBehind);
  return RUN_ALL_TESTS();
}
