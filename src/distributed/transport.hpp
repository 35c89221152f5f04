// Transport: how one kind of device's tensors cross between ranks (MPI for the CPU's, NCCL
// for a GPU's), as the communicator (communicator.cpp) calls it from inside an op's body.
//
// Each call does one collective (or one side of a point-to-point transfer) on raw memory:
//  * MPI's run on the CPU stream's worker thread and return when their part is done
//    (blocking MPI calls);
//  * NCCL's run on the thread that launches the op, with the GPU's device current, and
//    enqueue the work on `stream` (the op's cudaStream_t): they return at once, and the work
//    is done when the stream passes it.
// The communicator calls one transport's methods one at a time, in the order of its ops,
// never two at once (the ops are ordered after each other), so a transport needs no lock of
// its own and MPI needs no more than MPI_THREAD_SERIALIZED.
//
// Errors: every method throws DeviceError naming the call and the library's own message.
#pragma once

#include <cstddef>
#include <string>

#include "eventide/distributed.hpp"
#include "eventide/dtype.hpp"

namespace eventide::distributed::detail {

class Transport {
 public:
  virtual ~Transport() = default;
  // "mpi", "nccl".
  virtual const char* name() const noexcept = 0;
  // Whether `op` on `dtype` is supported; if not, why (for InvalidArgument at the call).
  virtual std::string refuses(DType dtype, ReduceOp op) const = 0;
  // The most elements one call carries (MPI's counts are ints).
  virtual std::size_t max_count() const noexcept = 0;

  // `count` elements of `in` reduced over the ranks into `out` (the same count).
  virtual void all_reduce(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                          void* stream) = 0;
  // `count` elements of `in` from each rank into `out` (size * count), in rank order.
  virtual void all_gather(const void* in, void* out, std::size_t count, DType dtype, void* stream) = 0;
  // `in` (size * count) reduced over the ranks; this rank's `count` of them into `out`.
  virtual void reduce_scatter(const void* in, void* out, std::size_t count, DType dtype,
                              ReduceOp op, void* stream) = 0;
  // `root`'s `in` into every rank's `out` (`in` is read on the root only).
  virtual void broadcast(const void* in, void* out, std::size_t count, DType dtype, int root,
                         void* stream) = 0;
  virtual void send(const void* in, std::size_t count, DType dtype, int dst, void* stream) = 0;
  virtual void recv(void* out, std::size_t count, DType dtype, int src, void* stream) = 0;
  // Returns when every rank has reached it (MPI); NCCL's barrier is an all_reduce, made by the
  // communicator.
  virtual void barrier(void* stream) = 0;
};

}  // namespace eventide::distributed::detail
