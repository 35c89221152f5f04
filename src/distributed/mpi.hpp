// The process's MPI: started once by the communicator's init() (or found started by the
// program, or by mpi4py), its world duplicated for eventide's own traffic, and ended at
// finalize() where eventide started it.
//
// Thread-safety: start() and finish() from one thread (init and finalize); the transport as
// transport.hpp says (one call at a time); broadcast_bytes() and measure_clock_offset() only
// at init, before any collective is issued.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "distributed/transport.hpp"

namespace eventide::distributed::detail {

class MpiWorld {
 public:
  virtual ~MpiWorld() = default;
  // Starts MPI where nothing has (asking for MPI_THREAD_MULTIPLE, needing SERIALIZED), and
  // duplicates MPI_COMM_WORLD. DeviceError if MPI fails or gives less than SERIALIZED.
  static std::unique_ptr<MpiWorld> start();

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  // The rank among the job's processes on this machine, and how many there are.
  virtual int local_rank() const noexcept = 0;
  virtual int local_size() const noexcept = 0;
  // `bytes` at `data` from `root` to every rank (blocking).
  virtual void broadcast_bytes(void* data, std::size_t bytes, int root) = 0;
  // Whether every rank says `ok` (blocking, collective): a step of init that fails on one
  // rank fails on all, instead of leaving the others waiting in the next collective step.
  virtual bool all_agree(bool ok) = 0;
  // Nanoseconds to add to this process's steady clock to read rank 0's: the offset of the
  // round trip (of several) that took least time, half of which bounds its error. Blocking,
  // collective.
  virtual std::int64_t measure_clock_offset() = 0;
  // The transport for CPU tensors, over eventide's duplicate of the world.
  virtual Transport& transport() noexcept = 0;
  // Frees the duplicate and ends MPI if start() began it. Called once, with no collective
  // running.
  virtual void finish() noexcept = 0;
  // Ends every process of the job now (MPI_Abort on the world, with `code`). Returns only if
  // MPI could not (it has been finalized).
  virtual void abort_job(int code) noexcept = 0;
};

// Whether an MPI launcher started this process with more than one rank (its environment:
// OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK with a size...).
bool launched_by_mpi_launcher() noexcept;

}  // namespace eventide::distributed::detail
