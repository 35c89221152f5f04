// The kernels a backend provides, as the ops layer calls them.
//
// The ops layer (src/ops) checks arguments that hold on every device (shapes, matching
// dtypes and devices), allocates outputs and picks the stream; a backend's Kernels checks
// what is particular to it (which dtypes it supports: InvalidArgument) and enqueues the op
// through StreamState::launch. Every method enqueues exactly one op or throws before
// enqueueing anything.
#pragma once

#include <cstdint>
#include <memory>
#include <functional>
#include <utility>

#include "core/stream_state.hpp"
#include "core/tensor_state.hpp"

namespace eventide::ops {

using detail::StreamState;
using detail::TensorState;

// Elementwise a op b; div is for floating dtypes only (the ops layer refuses integers: true
// division of integers has no integer result).
enum class BinaryOp { add, sub, mul, div };
enum class RandomKind { uniform, normal };

const char* name(BinaryOp op) noexcept;

using ReserveRandom = std::function<std::pair<std::uint64_t, std::uint64_t>(std::uint64_t blocks)>;

class Kernels {
 public:
  virtual ~Kernels() = default;

  // Every element of `out` = value (converted to out's dtype).
  virtual void fill(StreamState& s, TensorState& out, double value) = 0;
  // Philox-4x32-10 numbers (ops/philox.hpp). Once the op is accepted (dtype supported), the
  // kernel reserves its counter blocks with `reserve(blocks)`, which returns (seed, first
  // block): a refused call leaves the generator where it was.
  virtual void random(StreamState& s, TensorState& out, RandomKind kind,
                      const ReserveRandom& reserve) = 0;
  // out = a (op) b, elementwise; shapes and dtypes already match.
  virtual void binary(StreamState& s, BinaryOp op, TensorState& a, TensorState& b,
                      TensorState& out) = 0;
  // out = a @ b; shapes already checked (2-D, or 3-D with one batch size).
  virtual void matmul(StreamState& s, TensorState& a, TensorState& b, TensorState& out) = 0;
  // out = src converted to out's dtype, elementwise (same shape; both floating dtypes, checked
  // by the ops layer), rounded to nearest even. A backend without it refuses the op.
  virtual void cast(StreamState& s, TensorState& src, TensorState& out);
  // Copies out.nbytes() from `host` into `out`: from `host` before returning (the caller may
  // reuse it), into `out` when the stream reaches the op.
  virtual void upload(StreamState& s, TensorState& out, const void* host) = 0;
  // Copies `src`, whose producer has finished, into `host` (blocking).
  virtual void download(const TensorState& src, void* host) = 0;
  // dst = src, both on this device.
  virtual void copy(StreamState& s, TensorState& src, TensorState& dst) = 0;

  // The two halves of a copy between devices (ops/transfer.cpp puts them together). `host`
  // is a tensor in host memory (a Storage of Device::cpu(), from some device's
  // allocate_host); each enqueues one op on `s`, a stream of this device, that reads or
  // writes `host` through the hazards like any tensor, so it is ordered after the producer of
  // what it reads, whichever device that is on, and its failure propagates.
  //
  // host = src (src on this device), when the stream reaches the op.
  virtual void download_async(StreamState& s, TensorState& src, TensorState& host) = 0;
  // out = host (out on this device), when the stream reaches the op.
  virtual void upload_async(StreamState& s, TensorState& host, TensorState& out) = 0;
  // A copy of `src` (on this device) on `to`, made by this device alone where it has a direct
  // path there (CUDA: another GPU, peer to peer), asynchronously and ordered after src's
  // producer; null where it has none (the copy then goes through host memory). Never
  // enqueues work on a stream of another backend.
  virtual std::shared_ptr<TensorState> copy_direct(TensorState& src, Device to) {
    (void)src;
    (void)to;
    return nullptr;
  }
};

// A copy of `src` on `to` (another device), asynchronous and ordered after src's producer,
// made by the backends of the two devices (ops/transfer.cpp says how). InvalidArgument if
// `to` is not available.
std::shared_ptr<TensorState> transfer(TensorState& src, Device to);

}  // namespace eventide::ops
