// The CUDA device: one DeviceBackend per GPU. Streams are cudaStreams with GPU-written
// timelines (cuda_stream.hpp); memory comes from the stream-ordered pool (cuda_memory.hpp);
// the ops (cuda_ops.hpp) are cuBLASLt's matmul (cuda_matmul.hpp) and eventide's kernels
// (cuda_kernels.cu); op times come from CUPTI (cuda_timing.hpp).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "ops/kernels.hpp"

namespace eventide::backends::cuda {

// One backend per GPU found; none (and why_unavailable says why) on a machine without a GPU or
// a driver.
std::vector<std::unique_ptr<detail::DeviceBackend>> discover();
std::string why_unavailable(Device device);

// The words of why_unavailable, as pure functions of what CUDA said, so that a test on a
// machine of either kind can check each case. Why there is no device at all, from
// cudaGetDeviceCount's status (cudaSuccess: it counted 0), cudaDriverGetVersion's version (0:
// no driver) and CUDA_VISIBLE_DEVICES (null: unset). Without a driver, CUDA's own text is
// "CUDA driver version is insufficient for CUDA runtime version", which reads as "update the
// driver"; these say what is missing and what to use instead, CUDA's error name last, in
// parentheses.
std::string explain_no_device(cudaError_t status, int driver_version, int runtime_version,
                              const char* visible_devices);
// Why a cuda:N past the last of the `count` devices there are is not available, for the
// runtime's "device cuda:7 is not available: ..." (`visible_devices`: the value of
// CUDA_VISIBLE_DEVICES, or null where it is unset).
std::string explain_missing_device(int count, const char* visible_devices);

// The CUDA backend as the core sees it (core/backend.hpp): kind "cuda", one device per GPU,
// the default device where there is one.
extern const detail::BackendDescriptor kDescriptor;
// Its kernels, as the ops layer finds them (ops/kernels.hpp): `device` is a CUDA device's.
ops::Kernels& kernels_of(detail::DeviceBackend& device);

}  // namespace eventide::backends::cuda
