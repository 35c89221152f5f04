// The CUDA device: one DeviceBackend per GPU. Streams are cudaStreams with GPU-written
// timelines (cuda_stream.hpp); memory comes from the stream-ordered pool (cuda_memory.hpp);
// the ops (cuda_ops.hpp) are cuBLASLt's matmul (cuda_matmul.hpp) and eventide's kernels
// (cuda_kernels.cu); op times come from CUPTI (cuda_timing.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"

namespace eventide::backends::cuda {

// One backend per GPU found; none (and why_unavailable says why) on a machine without a GPU or
// a driver.
std::vector<std::unique_ptr<detail::DeviceBackend>> discover();
std::string why_unavailable(Device device);

// The CUDA backend as the core sees it (core/backend.hpp): kind "cuda", one device per GPU,
// the default device where there is one.
extern const detail::BackendDescriptor kDescriptor;

}  // namespace eventide::backends::cuda
