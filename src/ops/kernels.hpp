// The kernels a backend provides, as the ops layer calls them.
//
// The ops layer (src/ops) checks arguments that hold on every device (shapes, matching
// dtypes and devices), allocates outputs, picks the stream, and launches each op with what
// it reads and writes, declared once there (ops.cpp, transfer.cpp): the launch orders the op
// by those tensors' hazards and keeps their memory alive until the op has run
// (StreamState::launch). A backend's Kernels checks what is particular to it (which dtypes it
// supports: InvalidArgument) and makes the op's body, which uses the tensors' memory by
// address alone. Every method either returns a body or throws before anything is enqueued.
//
// A backend gives the ops layer its Kernels for each device through a function
// Kernels& eventide::backends::<name>::kernels_of(detail::DeviceBackend&), which the registry
// the build generates lists beside the backend's descriptor (compiled_kernels()); the core's
// backend interface knows nothing of them.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>

#include "core/backend.hpp"
#include "core/stream_state.hpp"
#include "core/tensor_state.hpp"
#include "ops/philox.hpp"

namespace eventide::detail {
class DeviceContext;
}

namespace eventide::ops {

using detail::Ref;
using detail::StreamState;
using detail::TensorState;

// Elementwise a op b; div is for floating dtypes only (the ops layer refuses integers: true
// division of integers has no integer result).
enum class BinaryOp { add, sub, mul, div };
enum class RandomKind { uniform, normal };

const char* name(BinaryOp op) noexcept;

// Reserves a draw's counter blocks (philox::Draw: where they start, at the call or, in a graph
// capture, at each replay).
using ReserveRandom = std::function<philox::Draw(std::uint64_t blocks)>;

// What a kernel gives the ops layer for one op.
struct Body {
  // What the stream runs when it reaches the op (empty: nothing to run, the op only orders).
  detail::Callback run{};
  // Memory the body uses besides the op's tensors (a GPU upload's pinned staging, a matmul's
  // workspace), kept like theirs until the op has run.
  Ref<detail::Storage> keep{};
  // The op's name where the kernel's choice shows in it ("matmul[tf32]"); null: the ops
  // layer's.
  const char* name = nullptr;
  // A body bound to where the stream's work went when it was made (a GPU's: the native stream
  // of a capture, or the stream's own) names that moment, StreamState::capture_epoch(); 0:
  // a body that runs the same anywhere.
  std::uint64_t capture_epoch = 0;
};

class Kernels {
 public:
  virtual ~Kernels() = default;

  // Every element of `out` = value (converted to out's dtype).
  virtual Body fill(StreamState& s, const TensorState& out, double value) = 0;
  // Philox-4x32-10 numbers (ops/philox.hpp). Once the op is accepted (dtype supported), the
  // kernel reserves its counter blocks with `reserve(blocks)`, which says where they start
  // (philox::Draw, resolved when the body runs): a refused call leaves the generator where it
  // was.
  virtual Body random(StreamState& s, const TensorState& out, RandomKind kind,
                      const ReserveRandom& reserve) = 0;
  // out = a (op) b, elementwise; shapes and dtypes already match.
  virtual Body binary(StreamState& s, BinaryOp op, const TensorState& a, const TensorState& b,
                      const TensorState& out) = 0;
  // out = a @ b; shapes already checked (2-D, or 3-D with one batch size).
  virtual Body matmul(StreamState& s, const TensorState& a, const TensorState& b,
                      const TensorState& out) = 0;
  // out = src converted to out's dtype, elementwise (same shape; both floating dtypes, checked
  // by the ops layer), rounded to nearest even. A backend without it refuses the op.
  virtual Body cast(StreamState& s, const TensorState& src, const TensorState& out);
  // Copies out.nbytes() from `host` into `out`, a tensor no op has used yet: from `host`
  // before returning (the caller may reuse it), into `out` when the stream reaches the op.
  virtual Body upload(StreamState& s, const TensorState& out, const void* host) = 0;
  // Writes two 64-bit words into `out` (16 bytes, which ops before this one may still read)
  // when the stream reaches the op: a graph replay's seed and base for its random numbers.
  virtual Body write_words(StreamState& s, const TensorState& out, std::uint64_t first, std::uint64_t second) = 0;
  // Copies `src`, whose producer has finished, into `host` (blocking).
  virtual void download(const TensorState& src, void* host) = 0;

  // The two halves of a copy between devices (ops/transfer.cpp puts them together). `host`
  // is a tensor in host memory (a Storage of Device::cpu(), from some device's
  // allocate_host); each is the body of one op on `s`, a stream of this device, ordered
  // through the hazards like any op (after the producer of what it reads, whichever device
  // that is on, and failing if that failed).
  //
  // host = src (src on this device).
  virtual Body download_async(StreamState& s, const TensorState& src, const TensorState& host) = 0;
  // out = host (out on this device).
  virtual Body upload_async(StreamState& s, const TensorState& host, const TensorState& out) = 0;
  // Whether this device has a path of its own to `to` (CUDA: another GPU, peer to peer), by
  // which copy_direct copies without going through host memory.
  virtual bool copies_directly_to(Device to) const {
    (void)to;
    return false;
  }
  // dst = src, `src` on this device and `dst` on a device copies_directly_to() names, run on
  // `s`, a stream of this device. Never enqueues work on a stream of another backend.
  virtual Body copy_direct(StreamState& s, const TensorState& src, const TensorState& dst);
};

// One backend's kernels, as the generated registry lists them (compiled_kernels()).
struct KernelsEntry {
  const detail::BackendDescriptor* backend;
  Kernels& (*of)(detail::DeviceBackend& device);
};

// The kernels of this build's backends, in the order of detail::compiled_backends().
// Defined by the generated registry (src/backends/registry.cpp.in); a program that links
// the core alone defines its own (the fake backend's test).
std::span<const KernelsEntry> compiled_kernels() noexcept;

// The kernels of the device of `ctx`.
Kernels& kernels(detail::DeviceContext& ctx);

// Launches op `name` on `s`: it reads `reads`, writes `writes` (their hazards order it, and
// their memory is kept until it has run) and runs `body`. Returns its Work. `overwrites`: the
// op writes its `writes` whole over what was there (an _out form, copy_), so their earlier
// writer orders it without its failure becoming the op's (LaunchOptions::overwrites).
Ref<detail::Work> launch(StreamState& s, const char* name, std::span<TensorState* const> reads,
                         std::span<TensorState* const> writes, Body body, bool overwrites = false);
inline Ref<detail::Work> launch(StreamState& s, const char* name,
                                std::initializer_list<TensorState*> reads,
                                std::initializer_list<TensorState*> writes, Body body,
                                bool overwrites = false) {
  return launch(s, name, std::span<TensorState* const>(reads.begin(), reads.size()),
                std::span<TensorState* const>(writes.begin(), writes.size()), std::move(body),
                overwrites);
}

// A copy of `src` on `to` (another device), asynchronous and ordered after src's producer,
// made by the backends of the two devices (ops/transfer.cpp says how). InvalidArgument if
// `to` is not available.
std::shared_ptr<TensorState> transfer(TensorState& src, Device to);
// The same copy into `dst`, a tensor of src's shape and dtype that exists (on any device, src's
// too): Tensor::copy_.
void transfer_into(TensorState& src, TensorState& dst);

}  // namespace eventide::ops
