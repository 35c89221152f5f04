#include "backends/cuda/cuda_api.hpp"

#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>

#include "eventide/errors.hpp"

namespace eventide::backends::cuda {

std::string short_kernel_name(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                   std::free);
  std::string name = status == 0 && demangled ? demangled.get() : mangled;
  static constexpr std::string_view kAnonymous = "(anonymous namespace)::";
  for (std::size_t at = name.find(kAnonymous); at != std::string::npos; at = name.find(kAnonymous)) {
    name.erase(at, kAnonymous.size());
  }
  // Cut at the parameter list (the first '(' outside angle brackets), then keep what follows
  // the last "::" or space outside them.
  int depth = 0;
  std::size_t cut = name.size(), begin = 0;
  for (std::size_t i = 0; i < name.size() && cut == name.size(); ++i) {
    const char c = name[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (depth != 0) continue;
    if (c == '(') cut = i;
    if (c == ' ') begin = i + 1;
    if (c == ':' && i + 1 < name.size() && name[i + 1] == ':') begin = i + 2;
  }
  return begin < cut ? name.substr(begin, cut - begin) : name;
}

std::string describe(cudaError_t status) {
  return std::string(cudaGetErrorString(status)) + " (" + cudaGetErrorName(status) + " = " +
         std::to_string(static_cast<int>(status)) + ")";
}

void fail(cudaError_t status, const char* call, std::string_view what) {
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so later calls do not report it again
    throw DeviceError(std::string("out of memory: ") + call + " failed " + std::string(what) + ": " +
                          describe(status),
                      call, status);
  }
  throw DeviceError(std::string(call) + " failed " + std::string(what) + ": " + describe(status), call, status);
}

void fail_driver(CUresult status, const char* call, std::string_view what) {
  const char* name = "?";
  const char* text = "?";
  if (const Driver* d = driver()) {
    d->get_error_name(status, &name);
    d->get_error_string(status, &text);
  }
  throw DeviceError(std::string(call) + " failed " + std::string(what) + ": CUresult " +
                        std::to_string(static_cast<int>(status)) + " (" + name + ": " + text + ")",
                    call, status);
}

bool check_nothrow(cudaError_t status, const char* call, const char* what) noexcept {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "eventide: %s failed %s: %s (%s = %d)\n", call, what,
               cudaGetErrorString(status), cudaGetErrorName(status), static_cast<int>(status));
  return false;
}

bool capturing(cudaStream_t stream) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t st = cudaStreamIsCapturing(stream, &status);
  if (st == cudaErrorStreamCaptureImplicit) {
    (void)cudaGetLastError();  // not sticky: the blocking stream's capture is not invalidated
    return true;
  }
  return st == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

void refuse_if_capturing(cudaStream_t stream, const std::string& what) {
  if (!capturing(stream)) return;
  throw StateError(what + " is being captured into a CUDA graph by other code (torch.cuda.graph, "
                   "CuPy's Stream.begin_capture, cudaStreamBeginCapture): eventide's ops issued "
                   "there go into that graph, but a marker, an event record, a stream wait or a "
                   "replay cannot (its event would finish once, not at each of that code's "
                   "replays), and an invalidated capture takes nothing; issue it before or after "
                   "the capture, or record that library's own event there "
                   "(torch.cuda.Event(external=True))");
}

DeviceScope::DeviceScope(int index, std::nothrow_t) noexcept {
  capture_mode_set_ = cudaThreadExchangeStreamCaptureMode(&capture_mode_) == cudaSuccess;
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == index) return;
  CUcontext before = nullptr;
  if (const Driver* d = driver()) d->ctx_get_current(&before);
  status_ = cudaSetDevice(index);
  if (status_ == cudaSuccess) restore_ = before;
}

DeviceScope::DeviceScope(Device device) : DeviceScope(device.index(), std::nothrow) {
  check(status_, "cudaSetDevice", [&] { return "for " + device.str(); });
}

DeviceScope::~DeviceScope() {
  // (restore_ is set only where driver() gave it.)
  if (restore_) driver()->ctx_set_current(restore_);
  if (capture_mode_set_) (void)cudaThreadExchangeStreamCaptureMode(&capture_mode_);
}

namespace {
// The driver API version whose entry points are asked for (CUDA 12.0): the versions of the
// calls whose signatures Driver declares.
constexpr int kDriverApiVersion = 12000;
}  // namespace

const Driver* driver() noexcept {
  static const Driver* d = [] () -> const Driver* {
    static Driver drv;
    cudaDriverEntryPointQueryResult found;
    auto get = [&](const char* name, void** fn) {
      return cudaGetDriverEntryPointByVersion(name, fn, kDriverApiVersion, cudaEnableDefault, &found) == cudaSuccess &&
             found == cudaDriverEntryPointSuccess && *fn != nullptr;
    };
    bool ok = get("cuStreamWriteValue64", reinterpret_cast<void**>(&drv.write_value64)) &&
              get("cuStreamWaitValue64", reinterpret_cast<void**>(&drv.wait_value64)) &&
              get("cuDeviceGetAttribute", reinterpret_cast<void**>(&drv.device_get_attribute)) &&
              get("cuGetErrorName", reinterpret_cast<void**>(&drv.get_error_name)) &&
              get("cuGetErrorString", reinterpret_cast<void**>(&drv.get_error_string)) &&
              get("cuCtxGetCurrent", reinterpret_cast<void**>(&drv.ctx_get_current)) &&
              get("cuCtxSetCurrent", reinterpret_cast<void**>(&drv.ctx_set_current));
    return ok ? &drv : nullptr;
  }();
  return d;
}

}  // namespace eventide::backends::cuda
