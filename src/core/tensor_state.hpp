// TensorState: what a Tensor handle points to: shape, dtype, memory, and the hazards that
// order the ops using it.
//
// Hazards: `writer_` is the last op that wrote the tensor (its producer) and `readers_` the
// ops that read it since, at most one per timeline (the latest: a timeline finishes in
// order). An op that reads waits for the writer; an op that writes waits for the writer and
// for every reader, so using a tensor from any stream is never a data race.
//
// Memory: `storage` is reference-counted, and every op holds a reference until it has
// finished, so the memory outlives both the handles and the work. When the tensor goes while
// its ops still run, all on one timeline, the memory may go to the next op of that timeline
// at once (Storage::recycle_after): the timeline runs them in order.
//
// Thread-safety: shape, dtype, device and storage never change; the hazards are guarded by
// a spin lock (held for a few loads and stores, never while calling out).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/ref.hpp"
#include "core/spin_lock.hpp"
#include "core/work.hpp"
#include "eventide/device.hpp"
#include "eventide/dtype.hpp"
#include "eventide/tensor.hpp"

namespace eventide::detail {

// A block of device memory. Backends subclass it to free memory their way; memory another
// library lent is an ExternalStorage (ops/external.cpp).
class Storage : public RefCounted {
 public:
  Storage(void* data, std::size_t bytes, Device device, Access access = Access::read_write) noexcept
      : data_(data), bytes_(bytes), device_(device), access_(access) {}
  void* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }
  Device device() const noexcept { return device_; }
  Access access() const noexcept { return access_; }
  // Whether the address has been handed out of eventide (Tensor::data_ptr: to the user's
  // kernels, to another library through DLPack), whose work on it eventide does not see: such
  // memory may still be in use when the last reference goes, and must go back to the device's
  // pool in the order that pool keeps, not be reused at once.
  bool escaped() const noexcept { return escaped_.load(std::memory_order_relaxed); }
  void mark_escaped() const noexcept { escaped_.store(true, std::memory_order_relaxed); }
  // The tensor over this memory is gone while ops may still use it: `last_use` and work before
  // it on its timeline, which every op still using it is on. A backend whose timelines run in
  // order may hand the memory at once to the output of the next op of that timeline
  // (Backend::allocate), which runs after them; by default the memory waits for its last
  // reference. Called once, from ~TensorState, for memory that has not escaped.
  virtual void recycle_after(Ref<Work> last_use) noexcept { (void)last_use; }

 private:
  void* data_;
  std::size_t bytes_;
  Device device_;
  Access access_;
  mutable std::atomic<bool> escaped_{false};
};

class TensorState {
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

}  // namespace eventide::detail
