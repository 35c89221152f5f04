// NCCL: the transport of a GPU's tensors (transport.hpp). Its calls enqueue the collective
// on the op's native stream and return; the thread that calls them has the GPU current (the
// CUDA backend's launch sets it).
//
// Thread-safety: as transport.hpp says. Lifetime: the NCCL communicator is destroyed with
// the transport (after NCCL has flushed what was issued), with its device current.
#pragma once

#include <memory>
#include <vector>

#include "distributed/transport.hpp"
#include "eventide/device.hpp"

namespace eventide::distributed::detail {

class MpiWorld;

// The size of ncclUniqueId, for the bytes rank 0 broadcasts at init.
constexpr std::size_t kNcclIdBytes = 128;

// A transport over one NCCL communicator of `device` (a CUDA GPU), rank `rank` of `size`,
// joined through `world` (rank 0 makes the unique id, MPI broadcasts it). Blocks until every
// rank has joined. DeviceError if NCCL fails.
std::unique_ptr<Transport> join_nccl(MpiWorld& world, Device device, int rank, int size);
// One NCCL communicator per device of this process (ncclCommInitAll), rank i on devices[i].
std::vector<std::unique_ptr<Transport>> nccl_local(const std::vector<Device>& devices);

}  // namespace eventide::distributed::detail
