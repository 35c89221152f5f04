// eventide/tensor.hpp: tensors and the ops that make them.
//
// A `Tensor` is a dense, row-major n-dimensional array on one device, and a cheap handle:
// copies share the same memory. Every op is asynchronous: it checks its arguments, enqueues
// the work on the current stream of the device and returns the output tensor at once. The
// tensor remembers the op that produced it (its *producer*): `Event::record(tensor)` ties an
// event to that op, `ready()` polls it, `wait()` / `to_vector()` block on it.
//
// Errors: argument errors (shape, dtype, device) throw InvalidArgument from the op call
// itself, and nothing is enqueued. Errors while the work runs make the producer fail: its
// events fail, and every op that reads the tensor fails with an OpError instead of running.
//
// Lifetime: a tensor's memory lives until the last handle is gone *and* every op that reads
// or writes it has finished; dropping a tensor never blocks.
// Thread-safety: all members and ops may be called from any thread. The contents are only
// defined once the producer has finished; read them through to_vector() or after a wait.
#pragma once

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "eventide/detail/callback.hpp"
#include "eventide/detail/duration.hpp"
#include "eventide/device.hpp"
#include "eventide/dtype.hpp"

namespace eventide {

using Shape = std::vector<std::int64_t>;

class Stream;
namespace detail {
class TensorState;
}

// Whether holders of a tensor's memory may write it. eventide's ops write only the new tensors
// they return and the `out` they are given, never their inputs, so read-only memory is an
// input like any other; what must not happen is that it is handed on as writable (DLPack
// export) or given as an `out` (of an op's _out form, of copy_, of a collective:
// eventide/distributed.hpp), which is refused.
enum class Access { read_write, read_only };

// @code
//   ev::Tensor a = ev::randn({512, 512}), b = ev::randn({512, 512});
//   ev::Tensor c = ev::matmul(a, b) + a;  // enqueued; returns at once
//   if (!c.ready()) c.wait();             // rethrows the producer's error
//   std::vector<float> host = c.to_vector<float>();
// @endcode
class Tensor {
 public:
  // An undefined tensor: defined() is false; any other use is an InvalidArgument.
  Tensor() noexcept = default;

  bool defined() const noexcept { return state_ != nullptr; }
  const Shape& shape() const;
  std::int64_t dim() const;
  std::int64_t numel() const;
  std::size_t nbytes() const;
  DType dtype() const;
  Device device() const;

  // Non-blocking: the producer has finished (also if it failed).
  [[nodiscard]] bool ready() const;
  // Blocks until the producer has finished; rethrows its error.
  void wait() const;
  // Like wait(), up to `timeout`: true if the producer has finished (rethrowing its error),
  // false on timeout.
  [[nodiscard]] bool wait_for(std::chrono::nanoseconds timeout) const;
  template <class Rep, class Period>
  [[nodiscard]] bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
    return wait_for(detail::saturating_ns(timeout));
  }
  // Like wait(), until `deadline` on the steady clock: false once it has passed.
  [[nodiscard]] bool wait_until(std::chrono::steady_clock::time_point deadline) const {
    return wait_until(std::optional<std::chrono::steady_clock::time_point>(deadline));
  }
  // The producer's error once it has failed, else null.
  std::exception_ptr error() const;

  // Waits for the producer, then copies the contents out. InvalidArgument unless T is the
  // tensor's dtype (dtype_of<T>); rethrows the producer's error.
  template <class T>
  std::vector<T> to_vector() const {
    std::vector<T> out(static_cast<std::size_t>(numel()));
    copy_to_host(out.data(), dtype_of<T>);
    return out;
  }

  // Waits for the producer, then copies the nbytes() bytes of the contents into host memory
  // at `out`. InvalidArgument unless `as` is the tensor's dtype; rethrows the producer's
  // error.
  void copy_to_host(void* out, DType as) const;

  // Whether holders of the memory may write it: eventide's own memory is read_write; memory
  // another library lent (from_external) is as that library said.
  Access access() const;

  // A copy on `device`, made asynchronously on the current stream of the source device.
  // The same tensor when it is already there.
  Tensor to(Device device) const;
  // Copies `src` (of this tensor's shape and dtype, on any device) into this tensor, in place,
  // asynchronously: ordered after what wrote `src` and after what used this tensor before, on
  // any stream, as to() orders its copy. Returns *this. InvalidArgument if the shapes or
  // dtypes differ or this tensor's memory is read-only; a tensor copied into itself is left
  // as it is.
  //
  // @code
  //   ev::Tensor x = ev::zeros({4});
  //   x.copy_(ev::from_host(std::vector<float>{1, 2, 3, 4}, {4}));  // new values, same memory
  // @endcode
  Tensor& copy_(const Tensor& src);

  // The tensor's memory: host memory on the CPU, a device pointer on a GPU (for kernels
  // launched through Stream::enqueue). No ordering is implied: use it in work ordered after
  // the producer (enqueue with the tensor in reads or writes), or after a wait.
  void* data_ptr() const;
  template <class T>
  T* data() const {
    check_element_type(dtype_of<T>);
    return static_cast<T*>(data_ptr());
  }

  // Calls `fn` once when the producer finishes (also if it failed), on a runtime thread.
  template <class F>
  void add_completion_callback(F&& fn) const {
    if constexpr (detail::is_nullable_callable<std::decay_t<F>>) {
      if (fn == nullptr) throw_null_callback();
    }
    add_completion_callback_impl(detail::Callback(std::forward<F>(fn)));
  }

  // "Tensor(f32[512, 512], cpu, ready)".
  std::string str() const;

  // For the runtime and bindings.
  explicit Tensor(std::shared_ptr<detail::TensorState> state) noexcept : state_(std::move(state)) {}
  const std::shared_ptr<detail::TensorState>& state() const noexcept { return state_; }

 private:
  [[nodiscard]] bool wait_until(const std::optional<std::chrono::steady_clock::time_point>& deadline) const;
  void check_element_type(DType as) const;
  void add_completion_callback_impl(detail::Callback fn) const;
  [[noreturn]] static void throw_null_callback();

  std::shared_ptr<detail::TensorState> state_;
};

// Creation. Shapes: every extent >= 0, at most 8 dimensions, else InvalidArgument.
// rand: uniform in [0, 1); randn: standard normal; both floating dtypes only, drawn from
// the device's generator (manual_seed), the same values on every device for the same seed.
//
// @code
//   ev::Tensor z = ev::zeros({2, 3});  // f32 on the default device
//   ev::Tensor r = ev::rand({2, 3}, ev::DType::f64, ev::Device::cpu());
// @endcode
Tensor empty(Shape shape, DType dtype = DType::f32, Device device = default_device());
Tensor zeros(Shape shape, DType dtype = DType::f32, Device device = default_device());
Tensor ones(Shape shape, DType dtype = DType::f32, Device device = default_device());
Tensor full(Shape shape, double value, DType dtype = DType::f32, Device device = default_device());
Tensor rand(Shape shape, DType dtype = DType::f32, Device device = default_device());
Tensor randn(Shape shape, DType dtype = DType::f32, Device device = default_device());

// InvalidArgument unless `count` elements fill `shape` exactly.
void check_host_size(std::size_t count, const Shape& shape);
// InvalidArgument, naming `op`, unless `shape` is one the ops accept: every extent >= 0, at
// most 8 dimensions, a size in bytes that fits an int64 (for tensors made over memory
// eventide did not allocate: NumPy arrays, DLPack).
void check_shape(std::string_view op, const Shape& shape, DType dtype);

// Copies `numel(shape)` elements from host memory at once (the caller may reuse `data` as
// soon as this returns); the tensor is ready when the device's stream reaches the op.
//
// @code
//   std::vector<float> v = {1, 2, 3, 4, 5, 6};
//   ev::Tensor t = ev::from_host(v, {2, 3});  // v may be reused at once
// @endcode
Tensor from_host(const void* data, Shape shape, DType dtype, Device device = default_device());
template <class T>
Tensor from_host(const T* data, Shape shape, Device device = default_device()) {
  return from_host(static_cast<const void*>(data), std::move(shape), dtype_of<T>, device);
}
// As above; InvalidArgument unless data.size() matches the shape.
template <class T>
Tensor from_host(const std::vector<T>& data, Shape shape, Device device = default_device()) {
  check_host_size(data.size(), shape);
  return from_host(static_cast<const void*>(data.data()), std::move(shape), dtype_of<T>, device);
}

// Memory eventide did not allocate (a NumPy array's, a DLPack producer's), for from_external.
struct ExternalMemory {
  // The first element: host memory on the CPU, device memory on a GPU. C-contiguous.
  void* data = nullptr;
  // Keeps the memory alive. Released (its deleter run) when the last tensor and the last op
  // that use the memory are done: on whatever thread that is, but never while the runtime
  // holds a lock (a deleter may take a lock of its own, as Python's GIL).
  std::shared_ptr<void> owner;
  Access access = Access::read_write;
};
// A tensor over `memory`, without a copy. The first form is ready at once: the memory's
// contents are final. The second is for memory another library's work is still producing on
// `produced_on` (its native stream, wrapped by Stream::from_native): the tensor's producer is
// a marker placed there now, so every op that uses it, on any stream, waits for that work.
// InvalidArgument for a shape check_shape refuses, a null pointer with a non-empty shape, or
// a device that is not available.
//
// @code
//   auto buf = std::make_shared<std::vector<float>>(1024);
//   ev::ExternalMemory m{.data = buf->data(), .owner = buf};  // buf lives while t or its ops do
//   ev::Tensor t = ev::from_external(m, {1024}, ev::DType::f32, ev::Device::cpu());  // no copy
// @endcode
Tensor from_external(ExternalMemory memory, Shape shape, DType dtype, Device device);
Tensor from_external(ExternalMemory memory, Shape shape, DType dtype, const Stream& produced_on);

// (m, k) @ (k, n) -> (m, n), or batched (b, m, k) @ (b, k, n) -> (b, m, n). Both on one
// device, one dtype (f32 or f64 on the CPU).
//
// @code
//   ev::Tensor c = ev::matmul(ev::randn({64, 32}), ev::randn({32, 16}));        // [64, 16]
//   ev::Tensor d = ev::matmul(ev::randn({8, 64, 32}), ev::randn({8, 32, 16}));  // [8, 64, 16]
// @endcode
Tensor matmul(const Tensor& a, const Tensor& b);
// Elementwise; same shape, dtype and device. div (true division) takes floating dtypes only:
// InvalidArgument for integers, whose quotient is not an integer.
//
// @code
//   ev::Tensor s = ev::add(a, b);  // the same as a + b
//   ev::Tensor q = a / b;          // div: floating dtypes only
// @endcode
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// A copy of `t` with elements converted to `dtype` (rounded to nearest even), on t's device,
// asynchronously on the current stream: to read bf16 results in NumPy, cast(t, DType::f32)
// first. Floating dtypes only (f32, f64, f16, bf16), else InvalidArgument; the same dtype
// gives a copy.
//
// @code
//   Tensor half = eventide::cast(eventide::randn({4, 4}), DType::bf16);
//   Tensor back = eventide::cast(half, DType::f32);
// @endcode
Tensor cast(const Tensor& t, DType dtype);

// The ops into a tensor that exists: each writes its result into `out` and returns it, with
// no allocation, asynchronously on the current stream of out's device, in stream order after
// what used `out` before (any stream). `out` has the result's shape, dtype and device, else
// InvalidArgument naming what differs. An elementwise op (and cast to the same dtype) may
// write one of its inputs (add_out(x, x, y): x += y); matmul may not (InvalidArgument: its
// inputs are read while its output is written). This is how a tensor is updated in place,
// between the replays of a graph among others (ATen's `_out` forms).
//
// @code
//   ev::Tensor x = ev::zeros({256}), one = ev::ones({256});
//   for (int i = 0; i < 10; ++i) ev::add_out(x, x, one);  // x += 1, in place
//   ev::zeros_out(x);                                     // x = 0 again, same memory
// @endcode
Tensor matmul_out(const Tensor& out, const Tensor& a, const Tensor& b);
Tensor add_out(const Tensor& out, const Tensor& a, const Tensor& b);
Tensor sub_out(const Tensor& out, const Tensor& a, const Tensor& b);
Tensor mul_out(const Tensor& out, const Tensor& a, const Tensor& b);
Tensor div_out(const Tensor& out, const Tensor& a, const Tensor& b);
// cast into out's dtype.
Tensor cast_out(const Tensor& out, const Tensor& t);
// InvalidArgument, naming `op`, unless `out` can take a result of `shape`, `dtype` and
// `device` (the _out forms' check, for bindings that must check before they make operands).
void check_out(std::string_view op, const Tensor& out, const Shape& shape, DType dtype, Device device);
// The creation functions into `out` (its shape, dtype and device).
Tensor full_out(const Tensor& out, double value);
Tensor zeros_out(const Tensor& out);
Tensor ones_out(const Tensor& out);
Tensor rand_out(const Tensor& out);
Tensor randn_out(const Tensor& out);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }

// Seeds the generator of `device` (every device if nullopt) for rand and randn.
//
// @code
//   ev::manual_seed(42);
//   ev::Tensor x = ev::randn({4});  // the same values on every run, on every device
// @endcode
void manual_seed(std::uint64_t seed);
void manual_seed(std::uint64_t seed, Device device);

// Number of elements of a shape. InvalidArgument for a negative extent or an overflow.
std::int64_t numel(const Shape& shape);
// "[512, 512]".
std::string to_string(const Shape& shape);

}  // namespace eventide
