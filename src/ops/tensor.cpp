// The Tensor handle's members.

#include "core/nvtx.hpp"
#include "core/runtime.hpp"
#include "core/storage.hpp"
#include "core/tensor_state.hpp"
#include "eventide/errors.hpp"
#include "eventide/event.hpp"
#include "eventide/runtime.hpp"
#include "eventide/stream.hpp"
#include "eventide/tensor.hpp"
#include "ops/kernels.hpp"

namespace eventide {

namespace {
const detail::TensorState& checked(const std::shared_ptr<detail::TensorState>& s, const char* what) {
  if (!s) throw InvalidArgument(std::string("Tensor::") + what + ": the tensor is undefined");
  return *s;
}
}  // namespace

const Shape& Tensor::shape() const { return checked(state_, "shape").shape; }
std::int64_t Tensor::dim() const { return static_cast<std::int64_t>(checked(state_, "dim").shape.size()); }
std::int64_t Tensor::numel() const { return checked(state_, "numel").numel; }
std::size_t Tensor::nbytes() const { return checked(state_, "nbytes").nbytes(); }
DType Tensor::dtype() const { return checked(state_, "dtype").dtype; }
Device Tensor::device() const { return checked(state_, "device").device; }

bool Tensor::ready() const {
  auto producer = checked(state_, "ready").producer();
  if (!producer || producer->done()) return true;
  producer->timeline().demand(producer->seq(), detail::Demand::soon);  // someone looks
  return false;
}

void Tensor::wait() const { (void)wait_until(std::nullopt); }

bool Tensor::wait_for(std::chrono::nanoseconds timeout) const {
  return wait_until(detail::deadline_after(timeout));
}

bool Tensor::wait_until(const std::optional<std::chrono::steady_clock::time_point>& deadline) const {
  detail::nvtx::Scope range("wait");
  auto producer = checked(state_, "wait").producer();
  if (!producer) return true;
  if (!detail::wait_for_fence(producer->timeline(), producer->seq(), deadline)) return false;
  if (producer->error()) std::rethrow_exception(producer->error());
  return true;
}

std::exception_ptr Tensor::error() const {
  auto producer = checked(state_, "error").producer();
  return producer && producer->done() ? producer->error() : nullptr;
}

void Tensor::check_element_type(DType as) const {
  const auto& s = checked(state_, "data");
  if (s.dtype != as) {
    throw InvalidArgument("the tensor holds " + std::string(name(s.dtype)) + ", not " +
                          std::string(name(as)));
  }
}

void Tensor::copy_to_host(void* out, DType as) const {
  const auto& s = checked(state_, "to_vector");
  check_element_type(as);
  wait();
  // Memory that other code's graph writes at its replays (eventide's ops captured into
  // torch.cuda.graph): the latest replay queued on the device comes first.
  if (s.storage->in_other_graph()) [[unlikely]] synchronize(s.device);
  ops::kernels(detail::Runtime::get().context(s.device)).download(s, out);
}

Tensor Tensor::to(Device device) const {
  const auto& s = checked(state_, "to");
  if (device == s.device) return *this;
  detail::Runtime::get().check_running();
  return Tensor(ops::transfer(const_cast<detail::TensorState&>(s), device));
}

Tensor& Tensor::copy_(const Tensor& src) {
  auto& dst = const_cast<detail::TensorState&>(checked(state_, "copy_"));
  if (!src.defined()) throw InvalidArgument("copy_: the source is an undefined tensor");
  auto& from = const_cast<detail::TensorState&>(*src.state());
  if (from.shape != dst.shape) {
    throw InvalidArgument("copy_: the source has shape " + to_string(from.shape) + ", this tensor " +
                          to_string(dst.shape) + ": copy_ writes a tensor of one shape over another");
  }
  if (from.dtype != dst.dtype) {
    throw InvalidArgument("copy_: the source is " + std::string(name(from.dtype)) + ", this tensor " +
                          std::string(name(dst.dtype)) + ": convert it first (cast_out(dst, src))");
  }
  if (dst.storage->access() == Access::read_only) {
    throw InvalidArgument("copy_: this tensor is read-only memory (lent as read-only by another library)");
  }
  // Itself, or the same memory (two tensors over one buffer): nothing to copy.
  if (&from == &dst || detail::same_memory(from, dst)) return *this;
  if (detail::overlaps(from, dst)) {
    throw InvalidArgument("copy_: the source and this tensor share memory at different offsets: copy "
                          "through a tensor of its own (src.to(device), then copy_)");
  }
  detail::Runtime::get().check_running();
  ops::transfer_into(from, dst);
  return *this;
}

void* Tensor::data_ptr() const {
  const detail::Storage& storage = *checked(state_, "data_ptr").storage;
  storage.mark_escaped();  // (a relaxed store: read when the last reference goes)
  return storage.data();
}

void Tensor::add_completion_callback_impl(detail::Callback fn) const {
  const auto& s = checked(state_, "add_completion_callback");
  Event e(s.device);
  e.record(*this);
  e.add_callback(std::move(fn));
}

void Tensor::throw_null_callback() {
  throw InvalidArgument("add_completion_callback: the callback is null");
}

std::string Tensor::str() const {
  if (!state_) return "Tensor(undefined)";
  auto producer = state_->producer();
  const char* status = !producer || producer->done() ? (producer && producer->error() ? "failed" : "ready")
                                                     : "pending";
  return "Tensor(" + std::string(name(state_->dtype)) + to_string(state_->shape) + ", " +
         state_->device.str() + ", " + status + ")";
}

}  // namespace eventide
