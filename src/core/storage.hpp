// Storage: a block of device memory, reference-counted. Tensors hold their storage, and so
// does every op that uses it until the op has run (the launch keeps it: StreamState::launch),
// so memory outlives both the handles and the work.
//
// Thread-safety: data, size, device and access never change; the flags are atomic.
#pragma once

#include <atomic>
#include <cstddef>

#include "core/ref.hpp"
#include "eventide/device.hpp"
#include "eventide/tensor.hpp"

namespace eventide::detail {

class Work;

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
  // Whether a graph that other code replays writes this memory (eventide's ops captured into
  // torch.cuda.graph: core/capture.hpp): its values change at replays eventide does not see,
  // so a read of them on the host first waits for all work on the device. Escaped too.
  bool in_other_graph() const noexcept { return in_other_graph_.load(std::memory_order_relaxed); }
  void mark_in_other_graph() const noexcept {
    escaped_.store(true, std::memory_order_relaxed);
    in_other_graph_.store(true, std::memory_order_relaxed);
  }
  // The tensor over this memory is gone while ops may still use it: `last_use` and work before
  // it on its timeline, which every op still using it is on. A backend whose timelines run in
  // order may hand the memory at once to the output of the next op of that timeline
  // (Backend::allocate), which runs after them; by default the memory waits for its last
  // reference. Called once, from ~TensorState, for memory that has not escaped.
  virtual void recycle_after(Ref<Work> last_use) noexcept;

 private:
  void* data_;
  std::size_t bytes_;
  Device device_;
  Access access_;
  mutable std::atomic<bool> escaped_{false};
  mutable std::atomic<bool> in_other_graph_{false};
};

}  // namespace eventide::detail
