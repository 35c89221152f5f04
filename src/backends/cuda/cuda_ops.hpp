// The CUDA device's ops (ops::Kernels): eventide's kernels (cuda_kernels.cu), cuBLASLt's
// matmul (cuda_matmul.hpp) and copies, each enqueued on its stream as a Work whose body
// launches on the native stream; download copies on the device's transfer stream
// (cuda_device.hpp) and waits for it.
//
// Thread-safety: as ops::Kernels (any thread; the stream serializes its launches).
#pragma once

#include <memory>

#include "ops/kernels.hpp"

namespace eventide::backends::cuda {

class CudaDevice;

// The kernels of `device`, which must outlive them.
std::unique_ptr<ops::Kernels> make_kernels(CudaDevice& device);

}  // namespace eventide::backends::cuda
