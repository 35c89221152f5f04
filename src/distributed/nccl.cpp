// NCCL: the transport of a GPU's tensors (nccl.hpp).
#include "distributed/nccl.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "backends/cuda/device_scope.hpp"
#include "distributed/mpi.hpp"
#include "eventide/errors.hpp"

namespace eventide::distributed::detail {

namespace {

using backends::cuda::DeviceScope;

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "ncclUniqueId changed size");

void check(const char* call, ncclResult_t status, ncclComm_t comm = nullptr) {
  if (status == ncclSuccess || status == ncclInProgress) return;
  std::string text = ncclGetErrorString(status);
  if (comm) {
    if (const char* last = ncclGetLastError(comm); last && *last) text += std::string(" (") + last + ")";
  }
  throw DeviceError(std::string(call) + " failed: " + text, call, status);
}


ncclDataType_t nccl_type(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
  }
  return ncclInt8;
}

ncclRedOp_t nccl_op(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::prod: return ncclProd;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::avg: return ncclAvg;
  }
  return ncclSum;
}

cudaStream_t as_stream(void* stream) noexcept { return static_cast<cudaStream_t>(stream); }

class NcclTransport final : public Transport {
 public:
  NcclTransport(ncclComm_t comm, int device) : comm_(comm), device_(device) {}
  ~NcclTransport() override {
    // (Called once every collective issued has finished: finalize() drains them first.)
    // ncclCommDestroy alone, one communicator after the other, as for the communicators of
    // ncclCommInitAll; one that fails to destroy is aborted.
    DeviceScope scope(device_, std::nothrow);
    if (ncclCommDestroy(comm_) != ncclSuccess) ncclCommAbort(comm_);
  }
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  const char* name() const noexcept override { return "nccl"; }
  std::size_t max_count() const noexcept override { return std::numeric_limits<std::size_t>::max(); }

  std::string refuses(DType dtype, ReduceOp op) const override {
    if (op == ReduceOp::avg && !is_floating(dtype)) {
      return "avg needs a floating dtype, got " + std::string(eventide::name(dtype));
    }
    return {};
  }

  void all_reduce(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                  void* stream) override {
    check("ncclAllReduce", ncclAllReduce(in, out, count, nccl_type(dtype), nccl_op(op), comm_, as_stream(stream)), comm_);
  }
  void all_gather(const void* in, void* out, std::size_t count, DType dtype, void* stream) override {
    check("ncclAllGather", ncclAllGather(in, out, count, nccl_type(dtype), comm_, as_stream(stream)), comm_);
  }
  void reduce_scatter(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                      void* stream) override {
    check("ncclReduceScatter",
          ncclReduceScatter(in, out, count, nccl_type(dtype), nccl_op(op), comm_, as_stream(stream)), comm_);
  }
  void broadcast(const void* in, void* out, std::size_t count, DType dtype, int root,
                 void* stream) override {
    check("ncclBroadcast", ncclBroadcast(in, out, count, nccl_type(dtype), root, comm_, as_stream(stream)), comm_);
  }
  void send(const void* in, std::size_t count, DType dtype, int dst, void* stream) override {
    check("ncclSend", ncclSend(in, count, nccl_type(dtype), dst, comm_, as_stream(stream)), comm_);
  }
  void recv(void* out, std::size_t count, DType dtype, int src, void* stream) override {
    check("ncclRecv", ncclRecv(out, count, nccl_type(dtype), src, comm_, as_stream(stream)), comm_);
  }
  void barrier(void*) override {
    throw StateError("NCCL has no barrier: the communicator makes one of an all_reduce");
  }

 private:
  ncclComm_t comm_;
  int device_;
};

}  // namespace

std::unique_ptr<Transport> join_nccl(MpiWorld& world, Device device, int rank, int size) {
  // Rank 0's id, with whether it could make one: a failure there fails every rank.
  struct {
    std::int32_t status = ncclSuccess;
    ncclUniqueId id{};
  } start;
  if (rank == 0) start.status = ncclGetUniqueId(&start.id);
  world.broadcast_bytes(&start, sizeof start, 0);
  check(rank == 0 ? "ncclGetUniqueId" : "ncclGetUniqueId (on rank 0)", static_cast<ncclResult_t>(start.status));
  const ncclUniqueId& id = start.id;
  DeviceScope scope(device);
  ncclComm_t comm = nullptr;
  check("ncclCommInitRank", ncclCommInitRank(&comm, size, id, rank));
  return std::make_unique<NcclTransport>(comm, device.index());
}

std::vector<std::unique_ptr<Transport>> nccl_local(const std::vector<Device>& devices) {
  std::vector<int> indices;
  for (const Device& d : devices) indices.push_back(d.index());
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  check("ncclCommInitAll", ncclCommInitAll(comms.data(), static_cast<int>(comms.size()), indices.data()));
  std::vector<std::unique_ptr<Transport>> out;
  for (std::size_t i = 0; i < comms.size(); ++i) {
    out.push_back(std::make_unique<NcclTransport>(comms[i], indices[i]));
  }
  return out;
}

}  // namespace eventide::distributed::detail
