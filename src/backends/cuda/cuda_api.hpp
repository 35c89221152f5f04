// The CUDA calls the backend makes, checked: every failure becomes a DeviceError naming the
// call, its status and the objects involved ("cudaMallocAsync failed for 4096 bytes on
// cuda:0: out of memory (cudaErrorMemoryAllocation = 2)"). Each check has a throwing form
// for the call paths and a logging form for destructors and threads, which must not throw.
//
// The driver calls (stream memory operations) are fetched through the runtime's entry-point
// query, so that nothing links libcuda: a machine without a GPU driver (CI) loads eventide
// and finds no CUDA device.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <concepts>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "backends/cuda/device_scope.hpp"
#include "eventide/device.hpp"

namespace eventide::backends::cuda {

// "out of memory (cudaErrorMemoryAllocation = 2)".
std::string describe(cudaError_t status);

// A kernel's name as a profile shows it: demangled, without its parameters, namespaces or
// return type ("binary_kernel<float>"); the name as given where it does not demangle.
std::string short_kernel_name(const char* mangled);

// Throws DeviceError("<call> failed <what>: <status>").
[[noreturn]] void fail(cudaError_t status, const char* call, std::string_view what);
[[noreturn]] void fail_driver(CUresult status, const char* call, std::string_view what);

// The same unless status is success. `what` is text, or a callable that makes it, called only
// on failure: a launch's calls (every op makes several) build no text when they succeed.
inline void check(cudaError_t status, const char* call, std::string_view what) {
  if (status != cudaSuccess) [[unlikely]] fail(status, call, what);
}
template <std::invocable What>
inline void check(cudaError_t status, const char* call, What&& what) {
  if (status != cudaSuccess) [[unlikely]] fail(status, call, std::forward<What>(what)());
}
inline void check_driver(CUresult status, const char* call, std::string_view what) {
  if (status != CUDA_SUCCESS) [[unlikely]] fail_driver(status, call, what);
}
template <std::invocable What>
inline void check_driver(CUresult status, const char* call, What&& what) {
  if (status != CUDA_SUCCESS) [[unlikely]] fail_driver(status, call, std::forward<What>(what)());
}
// Logs instead (stderr) and returns whether the call succeeded. Allocates nothing (it runs in
// destructors and threads): `what` is ready-made text ("for cuda:0 stream 3").
bool check_nothrow(cudaError_t status, const char* call, const char* what) noexcept;

// Stream capture (CUDA graphs: torch.cuda.graph, CuPy's, cudaStreamBeginCapture). Whether
// `stream` is being captured, or its capture was invalidated, or it is the legacy default
// stream while a blocking stream of the device captures (using it would join that capture).
// What eventide issues on such a stream is refused before it touches the stream, so that the
// capture stays valid (cudaStreamQuery or a host wait there would invalidate it), but for the
// ops of a stream that follows the capture (core/capture.hpp), which go into that graph.
bool capturing(cudaStream_t stream) noexcept;
// StateError naming `what` (a stream's description) if `stream` is capturing().
void refuse_if_capturing(cudaStream_t stream, const std::string& what);

// DeviceScope: backends/cuda/device_scope.hpp.


// Driver entry points, resolved once.
struct Driver {
  CUresult (*write_value64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int) = nullptr;
  CUresult (*wait_value64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int) = nullptr;
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
};
// Null when the driver lacks them.
const Driver* driver() noexcept;

}  // namespace eventide::backends::cuda
