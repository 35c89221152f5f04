// TensorState: what a Tensor handle points to: shape, dtype, memory, and the hazards that
// order the ops using it.
//
// Hazards: `writer_` is the last op that wrote the tensor (its producer) and `readers_` the
// ops that read it since, at most one per timeline (the latest: a timeline finishes in
// order). An op that reads waits for the writer; an op that writes waits for the writer and
// for every reader, so using a tensor from any stream is never a data race.
//
// Memory: `storage` is reference-counted (core/storage.hpp), and the launch of every op that
// reads or writes the tensor keeps a reference until the op has run, so the memory outlives
// both the handles and the work. When the tensor goes while
// its ops still run, all on one timeline, the memory may go to the next op of that timeline
// at once (Storage::recycle_after): the timeline runs them in order.
//
// Thread-safety: shape, dtype, device and storage never change; the hazards are guarded by
// a spin lock (held for a few loads and stores, never while calling out).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/ref.hpp"
#include "core/spin_lock.hpp"
#include "core/storage.hpp"
#include "core/work.hpp"
#include "eventide/device.hpp"
#include "eventide/dtype.hpp"
#include "eventide/tensor.hpp"

namespace eventide::detail {

class TensorState : public std::enable_shared_from_this<TensorState> {
 public:
  TensorState(Shape shape_, DType dtype_, Device device_, Ref<Storage> storage_)
      : shape(std::move(shape_)),
        dtype(dtype_),
        device(device_),
        numel(eventide::numel(shape)),
        storage(std::move(storage_)) {}
  TensorState(const TensorState&) = delete;
  TensorState& operator=(const TensorState&) = delete;
  // Offers the memory for reuse in stream order where every op still using it is on one
  // timeline (Storage::recycle_after).
  ~TensorState();

  const Shape shape;
  const DType dtype;
  const Device device;
  const std::int64_t numel;
  const Ref<Storage> storage;

  std::size_t nbytes() const noexcept {
    return static_cast<std::size_t>(numel) * itemsize(dtype);
  }

  // The op that last wrote the tensor; null for a tensor no op has written (imported memory).
  Ref<Work> producer() const {
    std::lock_guard lock(mu_);
    return writer_;
  }

  // Work other than `own` that an op captured into another library's graph would have to
  // wait for, which that graph cannot (core/capture.hpp): the writer if it has not finished
  // or failed, and, for a write, a reader still running. Null if there is none.
  Ref<Work> unsettled_besides(const Work& own, bool writing) const;

  // --- For StreamState::launch, under the stream's submit lock. ---
  // Registers `work` as reading (writing) this tensor and appends to `deps` what it must
  // wait for. May throw std::bad_alloc; the launch then fails the work in order. A write
  // depends on the earlier writer as `after_writer` says: an input (its failure becomes the
  // write's) unless the op overwrites the tensor whole without reading it (LaunchOptions).
  void use_for_read(const Ref<Work>& work, Work::Deps& deps);
  void use_for_write(const Ref<Work>& work, Work::Deps& deps, DepKind after_writer = DepKind::input);

 private:
  mutable SpinLock mu_;
  Ref<Work> writer_;
  std::vector<Ref<Work>> readers_;
};

// Whether the memory of `a` and `b` overlaps (byte ranges on one device), and whether it is
// the very same memory: two tensors may be made over one buffer (from_numpy twice). For the
// checks of ops that write a tensor in place (an _out form, copy_).
inline bool overlaps(const TensorState& a, const TensorState& b) noexcept {
  if (a.device != b.device || a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto* x = static_cast<const char*>(a.storage->data());
  const auto* y = static_cast<const char*>(b.storage->data());
  return x < y + b.nbytes() && y < x + a.nbytes();
}
inline bool same_memory(const TensorState& a, const TensorState& b) noexcept {
  return a.device == b.device && a.storage->data() == b.storage->data() && a.nbytes() == b.nbytes();
}

}  // namespace eventide::detail
