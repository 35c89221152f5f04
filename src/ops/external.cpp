// Tensors over memory eventide did not allocate (from_external).

#include <memory>
#include <new>
#include <string>
#include <utility>

#include "core/runtime.hpp"
#include "core/runtime_lock.hpp"
#include "core/tensor_state.hpp"
#include "eventide/errors.hpp"
#include "eventide/stream.hpp"
#include "eventide/tensor.hpp"

namespace eventide {

namespace {

// Lent memory: its owner is let go with no runtime lock held (core/runtime_lock.hpp), since
// letting go runs the lender's code. The last reference may go anywhere: under a stream's
// submit lock when a finished op drops its inputs, say.
class ExternalStorage final : public detail::Storage {
 public:
  ExternalStorage(void* data, std::size_t bytes, Device device, Access access,
                  std::shared_ptr<void> owner) noexcept
      : Storage(data, bytes, device, access) {
    new (&owner_) std::shared_ptr<void>(std::move(owner));
  }
  ~ExternalStorage() override {
    if (detail::runtime_locks_held() == 0) {
      owner_.~shared_ptr();
      return;
    }
    // Later, when this thread lets go of its last lock. Out of memory: leaked, never released
    // under the lock (the box is not made, owner_ is not moved from).
    auto* box = new (std::nothrow) std::shared_ptr<void>(std::move(owner_));
    if (box) {
      owner_.~shared_ptr();  // moved from: empty
      detail::run_when_unlocked([](void* p) { delete static_cast<std::shared_ptr<void>*>(p); }, box);
    }
  }

 private:
  // Destroyed by hand (above), so that the out-of-memory path can leave it alone.
  union {
    std::shared_ptr<void> owner_;
  };
};

std::shared_ptr<detail::TensorState> external_state(ExternalMemory& memory, Shape shape, DType dtype,
                                                    Device device) {
  check_shape("from_external", shape, dtype);
  if (!memory.data && numel(shape) > 0) {
    throw InvalidArgument("from_external: a null data pointer for a tensor of shape " + to_string(shape));
  }
  if (!is_available(device)) {
    throw InvalidArgument("from_external: the device " + device.str() + " is not available");
  }
  const std::size_t bytes = static_cast<std::size_t>(numel(shape)) * itemsize(dtype);
  detail::Ref<detail::Storage> storage(
      new ExternalStorage(memory.data, bytes, device, memory.access, std::move(memory.owner)));
  return std::make_shared<detail::TensorState>(std::move(shape), dtype, device, std::move(storage));
}

}  // namespace

Tensor from_external(ExternalMemory memory, Shape shape, DType dtype, Device device) {
  return Tensor(external_state(memory, std::move(shape), dtype, device));
}

Tensor from_external(ExternalMemory memory, Shape shape, DType dtype, const Stream& produced_on) {
  auto state = external_state(memory, std::move(shape), dtype, produced_on.device());
  // A marker-like op with no body: it finishes when the stream reaches it, after the work
  // enqueued there so far, and it is the tensor's producer.
  produced_on.state()->launch("from_external", {}, {state.get()}, detail::Callback());
  return Tensor(std::move(state));
}

Access Tensor::access() const {
  if (!state_) throw InvalidArgument("Tensor::access: the tensor is undefined");
  return state_->storage->access();
}

}  // namespace eventide
