// Tensors over memory eventide did not allocate (from_external).

#include <memory>
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
  // The owner goes into a box of its own now, so that letting go of it later needs no memory.
  ExternalStorage(void* data, std::size_t bytes, Device device, Access access,
                  std::shared_ptr<void> owner)
      : Storage(data, bytes, device, access),
        owner_(std::make_unique<std::shared_ptr<void>>(std::move(owner))) {}
  ~ExternalStorage() override {
    // At once if this thread holds no runtime lock, else when it lets go of its last one (if
    // that cannot be noted, out of memory: leaked, never released under the lock).
    detail::run_when_unlocked([](void* box) { delete static_cast<std::shared_ptr<void>*>(box); },
                              owner_.release());
  }

 private:
  std::unique_ptr<std::shared_ptr<void>> owner_;
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
