// The ops: argument checks that hold on every device, output allocation, and dispatch to
// the device's kernels on the calling thread's current stream.
#include <limits>

#include "core/runtime.hpp"
#include "core/tensor_state.hpp"
#include "eventide/errors.hpp"
#include "eventide/tensor.hpp"
#include "ops/kernels.hpp"

namespace eventide {

namespace ops {
const char* name(BinaryOp op) noexcept {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
  }
  return "?";
}

Body Kernels::cast(StreamState& s, const TensorState& src, const TensorState& out) {
  (void)out;
  throw InvalidArgument("cast is not supported on " + src.device.str() + " (stream " +
                        std::to_string(s.id()) + ")");
}

Body Kernels::copy_direct(StreamState& s, const TensorState& src, const TensorState& dst) {
  (void)s;
  throw InvalidArgument("no direct path from " + src.device.str() + " to " + dst.device.str());
}

Kernels& kernels(detail::DeviceContext& ctx) {
  const detail::BackendDescriptor* backend = detail::find_backend(ctx.device().kind());
  for (const KernelsEntry& k : compiled_kernels()) {
    if (k.backend == backend) return k.of(ctx.backend());
  }
  // A build whose registry lists every backend's kernels never gets here.
  throw InvalidArgument("this build has no kernels for " + ctx.device().str());
}

Ref<detail::Work> launch(StreamState& s, const char* name, std::span<TensorState* const> reads,
                         std::span<TensorState* const> writes, Body body) {
  detail::LaunchOptions options;
  options.keep = std::move(body.keep);
  return s.launch(body.name ? body.name : name, reads, writes, std::move(body.run), options);
}

}  // namespace ops

namespace {

using detail::TensorState;

constexpr std::size_t kMaxDims = 8;

}  // namespace

void check_shape(std::string_view op_name, const Shape& shape, DType dtype) {
  const std::string op(op_name);
  if (shape.size() > kMaxDims) {
    throw InvalidArgument(op + ": shape " + to_string(shape) + " has " +
                          std::to_string(shape.size()) + " dimensions; at most " +
                          std::to_string(kMaxDims) + " are supported");
  }
  for (std::int64_t d : shape) {
    if (d < 0) {
      throw InvalidArgument(op + ": shape " + to_string(shape) +
                            " has a negative extent");
    }
  }
  std::int64_t count = 0;
  try {
    count = numel(shape);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(op + ": " + e.what());
  }
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<std::int64_t>(itemsize(dtype)), &bytes)) {
    throw InvalidArgument(op + ": shape " + to_string(shape) +
                          " is too large to address");
  }
}

namespace {

// Where an op runs: its device, that device's kernels, and the calling thread's current
// stream there.
struct Target {
  detail::DeviceContext& ctx;
  ops::Kernels& kernels;
  std::shared_ptr<detail::StreamState> stream;
};

Target target(Device device) {
  auto& rt = detail::Runtime::get();
  rt.check_running();
  detail::DeviceContext& ctx = rt.context(device);
  return Target{ctx, ops::kernels(ctx), rt.current_stream(device)};
}

std::shared_ptr<TensorState> new_tensor(Target& t, Shape shape, DType dtype) {
  detail::DeviceContext& ctx = t.ctx;
  std::size_t bytes = static_cast<std::size_t>(numel(shape)) * itemsize(dtype);
  auto storage = ctx.backend().allocate(bytes, *t.stream);
  return std::make_shared<TensorState>(std::move(shape), dtype, ctx.device(), std::move(storage));
}

TensorState& check_defined(const Tensor& t, const char* op, const char* which) {
  if (!t.defined()) throw InvalidArgument(std::string(op) + ": " + which + " is an undefined tensor");
  return *t.state();
}

void check_same(const char* op, const TensorState& a, const TensorState& b) {
  if (a.device != b.device) {
    throw InvalidArgument(std::string(op) + ": the tensors are on different devices (" +
                          a.device.str() + ", " + b.device.str() + "); move one with .to()");
  }
  if (a.dtype != b.dtype) {
    throw InvalidArgument(std::string(op) + ": the dtypes differ (" + std::string(name(a.dtype)) +
                          ", " + std::string(name(b.dtype)) + ")");
  }
}

template <class Enqueue>
Tensor create(const char* op, Shape shape, DType dtype, Device device, Enqueue&& enqueue) {
  check_shape(op, shape, dtype);
  Target t = target(device);
  auto out = new_tensor(t, std::move(shape), dtype);
  enqueue(t, *out);
  return Tensor(std::move(out));
}

Tensor random(const char* op, Shape shape, DType dtype, Device device, ops::RandomKind kind) {
  if (!is_floating(dtype)) {
    throw InvalidArgument(std::string(op) + ": needs a floating dtype, got " +
                          std::string(name(dtype)));
  }
  return create(op, std::move(shape), dtype, device, [&](Target& t, TensorState& out) {
    ops::launch(*t.stream, op, {}, {&out},
                t.kernels.random(*t.stream, out, kind, [&t](std::uint64_t blocks) {
                  return t.ctx.reserve_random(blocks);
                }));
  });
}

}  // namespace

// --- Shapes ------------------------------------------------------------------------------

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  bool overflow = false;
  bool zero = false;
  for (std::int64_t d : shape) {
    if (d < 0) throw InvalidArgument("shape " + to_string(shape) + " has a negative extent");
    zero = zero || d == 0;
    if (__builtin_mul_overflow(n, d, &n)) overflow = true;
  }
  if (zero) return 0;  // whatever the other extents are
  if (overflow) {
    throw InvalidArgument("shape " + to_string(shape) + " is too large: its element count overflows");
  }
  return n;
}

std::string to_string(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

void check_host_size(std::size_t count, const Shape& shape) {
  if (static_cast<std::int64_t>(count) != numel(shape)) {
    throw InvalidArgument("from_host: " + std::to_string(count) + " elements given, shape " +
                          to_string(shape) + " needs " + std::to_string(numel(shape)));
  }
}

// --- Creation ----------------------------------------------------------------------------

Tensor empty(Shape shape, DType dtype, Device device) {
  return create("empty", std::move(shape), dtype, device,
                [](Target& t, TensorState& out) {
                  // No work, but an op all the same: the memory is the stream's from here on,
                  // and a consumer on another stream orders itself after it.
                  ops::launch(*t.stream, "empty", {}, {&out}, ops::Body{});
                });
}

namespace {
Tensor filled(const char* op, Shape shape, double value, DType dtype, Device device) {
  return create(op, std::move(shape), dtype, device, [value](Target& t, TensorState& out) {
    ops::launch(*t.stream, "fill", {}, {&out}, t.kernels.fill(*t.stream, out, value));
  });
}
}  // namespace

Tensor full(Shape shape, double value, DType dtype, Device device) {
  return filled("full", std::move(shape), value, dtype, device);
}

Tensor zeros(Shape shape, DType dtype, Device device) {
  return filled("zeros", std::move(shape), 0.0, dtype, device);
}

Tensor ones(Shape shape, DType dtype, Device device) {
  return filled("ones", std::move(shape), 1.0, dtype, device);
}

Tensor rand(Shape shape, DType dtype, Device device) {
  return random("rand", std::move(shape), dtype, device, ops::RandomKind::uniform);
}

Tensor randn(Shape shape, DType dtype, Device device) {
  return random("randn", std::move(shape), dtype, device, ops::RandomKind::normal);
}

Tensor from_host(const void* data, Shape shape, DType dtype, Device device) {
  check_shape("from_host", shape, dtype);
  if (!data && numel(shape) > 0) throw InvalidArgument("from_host: the data pointer is null");
  return create("from_host", std::move(shape), dtype, device,
                [data](Target& t, TensorState& out) {
                  ops::launch(*t.stream, "from_host", {}, {&out}, t.kernels.upload(*t.stream, out, data));
                });
}

// --- Math --------------------------------------------------------------------------------

Tensor matmul(const Tensor& a, const Tensor& b) {
  TensorState& x = check_defined(a, "matmul", "a");
  TensorState& y = check_defined(b, "matmul", "b");
  check_same("matmul", x, y);
  const Shape& sa = x.shape;
  const Shape& sb = y.shape;
  Shape out;
  if (sa.size() == 2 && sb.size() == 2 && sa[1] == sb[0]) {
    out = {sa[0], sb[1]};
  } else if (sa.size() == 3 && sb.size() == 3 && sa[0] == sb[0] && sa[2] == sb[1]) {
    out = {sa[0], sa[1], sb[2]};
  } else {
    throw InvalidArgument("matmul: shapes " + to_string(sa) + " and " + to_string(sb) +
                          " do not multiply: expected (m, k) @ (k, n) or (b, m, k) @ (b, k, n)");
  }
  Target t = target(x.device);
  auto result = new_tensor(t, std::move(out), x.dtype);
  ops::launch(*t.stream, "matmul", {&x, &y}, {result.get()}, t.kernels.matmul(*t.stream, x, y, *result));
  return Tensor(std::move(result));
}

namespace {
Tensor binary(ops::BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = ops::name(op);
  TensorState& x = check_defined(a, name, "a");
  TensorState& y = check_defined(b, name, "b");
  check_same(name, x, y);
  if (x.shape != y.shape) {
    throw InvalidArgument(std::string(name) + ": shapes " + to_string(x.shape) + " and " +
                          to_string(y.shape) + " differ");
  }
  if (op == ops::BinaryOp::div && !is_floating(x.dtype)) {
    throw InvalidArgument(std::string("div: true division of ") + std::string(eventide::name(x.dtype)) +
                          " tensors has no " + std::string(eventide::name(x.dtype)) +
                          " result, and eventide does not promote dtypes; make the tensors floating "
                          "(e.g. from data of dtype f32)");
  }
  Target t = target(x.device);
  auto result = new_tensor(t, x.shape, x.dtype);
  ops::launch(*t.stream, name, {&x, &y}, {result.get()}, t.kernels.binary(*t.stream, op, x, y, *result));
  return Tensor(std::move(result));
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(ops::BinaryOp::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(ops::BinaryOp::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(ops::BinaryOp::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(ops::BinaryOp::div, a, b); }

Tensor cast(const Tensor& t, DType dtype) {
  TensorState& x = check_defined(t, "cast", "the tensor");
  if (!is_floating(x.dtype) || !is_floating(dtype)) {
    throw InvalidArgument("cast: converts between floating dtypes (f32, f64, f16, bf16), got " +
                          std::string(name(x.dtype)) + " to " + std::string(name(dtype)));
  }
  Target target_ = target(x.device);
  auto result = new_tensor(target_, x.shape, dtype);
  ops::launch(*target_.stream, "cast", {&x}, {result.get()}, target_.kernels.cast(*target_.stream, x, *result));
  return Tensor(std::move(result));
}

}  // namespace eventide
