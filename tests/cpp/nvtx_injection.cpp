// A stand-in NVTX tool for nvtx_test: a shared library that NVTX3 loads through the
// injection mechanism Nsight Systems itself uses. A program whose environment names it in
// NVTX_INJECTION64_PATH loads it at its first NVTX call; NVTX then calls its
// InitializeInjectionNvtx2 with a way to reach the program's table of NVTX entry points
// (the export table of callbacks, NVTX_ETID_CALLBACKS), and it fills in the domain entry
// points (the CORE2 module: domain create, push/pop, start/end) with its own functions, which
// record each call.
//
// The test reads the calls back with eventide_test_nvtx_calls (found by opening the library
// again, RTLD_NOLOAD: NVTX opened it RTLD_LOCAL) and may set a probe, called at each call
// and recorded with it (the test's: how many eventide runtime locks the calling thread holds).
#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Domain {
  std::string name;
};

struct Call {
  std::string kind;    // push, pop, start, end
  std::string domain;  // the domain's name ("" for none)
  std::string message; // push and start
  std::uint64_t id = 0;  // start and end
  std::thread::id thread;
  int probe = 0;
};

std::mutex g_mu;
std::vector<Call> g_calls;
std::uint64_t g_next_id = 0;
std::atomic<int (*)()> g_probe{nullptr};

std::string domain_name(nvtxDomainHandle_t d) {
  return d ? reinterpret_cast<const Domain*>(d)->name : std::string();
}

std::string message_of(const nvtxEventAttributes_t* a) {
  if (!a || a->messageType != NVTX_MESSAGE_TYPE_ASCII || !a->message.ascii) return "?";
  return a->message.ascii;
}

// Called with g_mu not held: the probe may do anything.
std::uint64_t record(std::string kind, nvtxDomainHandle_t d, std::string message, std::uint64_t id) {
  int (*const p)() = g_probe.load();
  const int probe = p ? p() : 0;
  std::lock_guard lock(g_mu);
  if (kind == "start") id = ++g_next_id;
  g_calls.push_back(Call{std::move(kind), domain_name(d), std::move(message), id,
                         std::this_thread::get_id(), probe});
  return id;
}

nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  return reinterpret_cast<nvtxDomainHandle_t>(new Domain{name ? name : ""});  // lives on
}
int NVTX_API push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  record("push", d, message_of(a), 0);
  return 0;
}
int NVTX_API pop(nvtxDomainHandle_t d) {
  record("pop", d, {}, 0);
  return 0;
}
nvtxRangeId_t NVTX_API start(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return record("start", d, message_of(a), 0);
}
void NVTX_API end(nvtxDomainHandle_t d, nvtxRangeId_t id) { record("end", d, {}, id); }

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || !callbacks->GetModuleFunctionTable) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || !table ||
      size <= NVTX_CBID_CORE2_DomainCreateA) {
    return 0;  // NVTX then makes every call a no-op
  }
  *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&domain_create);
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  *table[NVTX_CBID_CORE2_DomainRangeStartEx] = reinterpret_cast<NvtxFunctionPointer>(&start);
  *table[NVTX_CBID_CORE2_DomainRangeEnd] = reinterpret_cast<NvtxFunctionPointer>(&end);
  return 1;
}

// The calls so far, a line each: kind, domain, message, id, thread, probe (tab-separated).
__attribute__((visibility("default"))) void eventide_test_nvtx_calls(std::string* out) {
  std::lock_guard lock(g_mu);
  std::ostringstream s;
  for (const Call& c : g_calls) {
    s << c.kind << '\t' << c.domain << '\t' << c.message << '\t' << c.id << '\t' << c.thread << '\t'
      << c.probe << '\n';
  }
  *out = s.str();
}

__attribute__((visibility("default"))) void eventide_test_nvtx_set_probe(int (*probe)()) {
  g_probe.store(probe);
}

}  // extern "C"
