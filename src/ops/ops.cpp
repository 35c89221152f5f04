// The ops: argument checks that hold on every device, output allocation, and dispatch to
// the device's kernels on the calling thread's current stream.
#include <limits>

#include "core/capture.hpp"
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
                         std::span<TensorState* const> writes, Body body, bool overwrites) {
  detail::LaunchOptions options;
  options.keep = std::move(body.keep);
  options.overwrites = overwrites;
  options.capture_epoch = body.capture_epoch;
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
  Target t{ctx, ops::kernels(ctx), rt.current_stream(device)};
  // Into other code's capture of the stream's native stream, if it has begun one (before the
  // op's allocation, which such a capture's graph owns).
  t.stream->sync_native_capture(true);
  return t;
}

std::shared_ptr<TensorState> new_tensor(Target& t, Shape shape, DType dtype) {
  detail::DeviceContext& ctx = t.ctx;
  std::size_t bytes = static_cast<std::size_t>(numel(shape)) * itemsize(dtype);
  auto storage = ctx.backend().allocate(bytes, *t.stream);
  auto state = std::make_shared<TensorState>(std::move(shape), dtype, ctx.device(), std::move(storage));
  if (t.stream->in_capture()) [[unlikely]] {
    if (auto c = t.stream->capture()) c->adopt(*state);  // made in a capture: the graph's own
  }
  return state;
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

// An _out form's `out`: defined, writable, of the result's shape, dtype and device.
TensorState& checked_out(std::string_view op, const Tensor& out, const Shape& shape, DType dtype,
                         Device device) {
  if (!out.defined()) throw InvalidArgument(std::string(op) + ": out is an undefined tensor");
  TensorState& o = *out.state();
  const std::string who = std::string(op) + "_out: ";
  if (o.shape != shape) {
    throw InvalidArgument(who + "out has shape " + to_string(o.shape) + ", the result has shape " +
                          to_string(shape) + ": give an out of the result's shape");
  }
  if (o.dtype != dtype) {
    throw InvalidArgument(who + "out is " + std::string(name(o.dtype)) + ", the result is " +
                          std::string(name(dtype)) + ": give an out of the result's dtype" +
                          (op == "cast" ? "" : " (or cast the inputs first)"));
  }
  if (o.device != device) {
    throw InvalidArgument(who + "out is on " + o.device.str() + ", the op runs on " + device.str() +
                          ": give an out on " + device.str() + ", or copy the result with out.copy_()");
  }
  if (o.storage->access() == Access::read_only) {
    throw InvalidArgument(who + "out is read-only memory (lent as read-only by another library)");
  }
  return o;
}

// Where an op writes: a new tensor of `shape` and `dtype` on t's device, or `out` (checked).
struct Output {
  std::shared_ptr<TensorState> made;  // null when writing `out`
  TensorState* state;
  bool overwrites;  // an existing tensor, written whole
};
Output output(const char* op, Target& t, const Tensor* out, Shape shape, DType dtype) {
  if (!out) {
    auto made = new_tensor(t, std::move(shape), dtype);
    TensorState* state = made.get();
    return Output{std::move(made), state, false};
  }
  return Output{nullptr, &checked_out(op, *out, shape, dtype, t.ctx.device()), true};
}
Tensor result_of(Output& o, const Tensor* out) { return out ? *out : Tensor(std::move(o.made)); }

template <class Enqueue>
Tensor create(const char* op, Shape shape, DType dtype, Device device, Enqueue&& enqueue) {
  check_shape(op, shape, dtype);
  Target t = target(device);
  auto out = new_tensor(t, std::move(shape), dtype);
  enqueue(t, *out);
  return Tensor(std::move(out));
}

void check_random_dtype(const char* op, DType dtype) {
  if (!is_floating(dtype)) {
    throw InvalidArgument(std::string(op) + ": needs a floating dtype, got " +
                          std::string(name(dtype)));
  }
}

// The cell of a graph's random numbers (detail::GraphDraws), made in the capture: the graph's
// own tensor, which each replay writes through the device's kernels.
detail::GraphDraws graph_draws(Target& t) {
  detail::GraphDraws draws;
  draws.cell = new_tensor(t, {2}, DType::i64);
  draws.write = [kernels = &t.kernels, cell = draws.cell](detail::StreamState& s, std::uint64_t seed, std::uint64_t base) {
    ops::Body body = kernels->write_words(s, *cell, seed, base);
    return std::pair<detail::Callback, detail::Ref<detail::Storage>>(std::move(body.run), std::move(body.keep));
  };
  return draws;
}

void launch_random(const char* op, Target& t, TensorState& out, ops::RandomKind kind, bool overwrites) {
  // In a capture, each replay draws afresh (GraphDraws): the op reads its seed and base from
  // the graph's cell. The op also reads the cell, so that one issued as the capture ends, too
  // late to be captured, fails with "no value until the graph is replayed" as the graph's
  // tensors do, instead of drawing from a cell no replay has written.
  std::shared_ptr<detail::CaptureState> capture = t.stream->in_capture() ? t.stream->capture() : nullptr;
  std::shared_ptr<TensorState> cell;
  ops::Body body = t.kernels.random(*t.stream, out, kind, [&](std::uint64_t blocks) -> ops::philox::Draw {
    if (!capture) {
      const auto [seed, first] = t.ctx.reserve_random(blocks);
      return {.seed = seed, .offset = first};
    }
    auto [graph_cell, offset] = capture->draw(blocks, [&] { return graph_draws(t); });
    cell = std::move(graph_cell);
    return {.offset = offset, .cell = static_cast<const std::uint64_t*>(cell->storage->data())};
  });
  TensorState* reads[] = {cell.get()};
  TensorState* writes[] = {&out};
  ops::launch(*t.stream, op, std::span<TensorState* const>(reads, cell ? 1 : 0), writes, std::move(body),
              overwrites);
}

Tensor random(const char* op, Shape shape, DType dtype, Device device, ops::RandomKind kind) {
  check_random_dtype(op, dtype);
  return create(op, std::move(shape), dtype, device,
                [&](Target& t, TensorState& out) { launch_random(op, t, out, kind, false); });
}

// A creation function into `out`: its shape, dtype and device.
template <class Enqueue>
Tensor create_into(const char* op, const Tensor& out, Enqueue&& enqueue) {
  TensorState& o = check_defined(out, op, "out");
  Target t = target(o.device);
  checked_out(op, out, o.shape, o.dtype, o.device);
  enqueue(t, o);
  return out;
}

}  // namespace

// --- Shapes ------------------------------------------------------------------------------

void check_out(std::string_view op, const Tensor& out, const Shape& shape, DType dtype, Device device) {
  (void)checked_out(op, out, shape, dtype, device);
}

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

namespace {
Tensor filled_out(const char* op, const Tensor& out, double value) {
  return create_into(op, out, [value](Target& t, TensorState& o) {
    ops::launch(*t.stream, "fill", {}, {&o}, t.kernels.fill(*t.stream, o, value), true);
  });
}
Tensor random_out(const char* op, const Tensor& out, ops::RandomKind kind) {
  check_random_dtype(op, check_defined(out, op, "out").dtype);
  return create_into(op, out, [&](Target& t, TensorState& o) { launch_random(op, t, o, kind, true); });
}
}  // namespace

Tensor full_out(const Tensor& out, double value) { return filled_out("full", out, value); }
Tensor zeros_out(const Tensor& out) { return filled_out("zeros", out, 0.0); }
Tensor ones_out(const Tensor& out) { return filled_out("ones", out, 1.0); }
Tensor rand_out(const Tensor& out) { return random_out("rand", out, ops::RandomKind::uniform); }
Tensor randn_out(const Tensor& out) { return random_out("randn", out, ops::RandomKind::normal); }

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

namespace {
Tensor matmul_impl(const Tensor& a, const Tensor& b, const Tensor* out) {
  TensorState& x = check_defined(a, "matmul", "a");
  TensorState& y = check_defined(b, "matmul", "b");
  check_same("matmul", x, y);
  const Shape& sa = x.shape;
  const Shape& sb = y.shape;
  Shape shape;
  if (sa.size() == 2 && sb.size() == 2 && sa[1] == sb[0]) {
    shape = {sa[0], sb[1]};
  } else if (sa.size() == 3 && sb.size() == 3 && sa[0] == sb[0] && sa[2] == sb[1]) {
    shape = {sa[0], sa[1], sb[2]};
  } else {
    throw InvalidArgument("matmul: shapes " + to_string(sa) + " and " + to_string(sb) +
                          " do not multiply: expected (m, k) @ (k, n) or (b, m, k) @ (b, k, n)");
  }
  Target t = target(x.device);
  Output o = output("matmul", t, out, std::move(shape), x.dtype);
  if (out && (detail::overlaps(*o.state, x) || detail::overlaps(*o.state, y))) {
    throw InvalidArgument("matmul_out: out is (or shares memory with) one of the inputs; a product "
                          "reads its inputs while it writes its output: give an out of its own");
  }
  ops::launch(*t.stream, "matmul", {&x, &y}, {o.state}, t.kernels.matmul(*t.stream, x, y, *o.state),
              o.overwrites);
  return result_of(o, out);
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) { return matmul_impl(a, b, nullptr); }
Tensor matmul_out(const Tensor& out, const Tensor& a, const Tensor& b) { return matmul_impl(a, b, &out); }

namespace {
Tensor binary(ops::BinaryOp op, const Tensor& a, const Tensor& b, const Tensor* out) {
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
  // (out may be an input: each element is read before it is written, by the same thread; not
  // memory that overlaps an input only in part.)
  Output o = output(name, t, out, x.shape, x.dtype);
  for (const TensorState* in : {&x, &y}) {
    if (out && detail::overlaps(*o.state, *in) && !detail::same_memory(*o.state, *in)) {
      throw InvalidArgument(std::string(name) + "_out: out overlaps an input in part (they share memory at "
                            "different offsets): give an out of its own, or the input itself");
    }
  }
  ops::launch(*t.stream, name, {&x, &y}, {o.state}, t.kernels.binary(*t.stream, op, x, y, *o.state),
              o.overwrites);
  return result_of(o, out);
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(ops::BinaryOp::add, a, b, nullptr); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(ops::BinaryOp::sub, a, b, nullptr); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(ops::BinaryOp::mul, a, b, nullptr); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(ops::BinaryOp::div, a, b, nullptr); }
Tensor add_out(const Tensor& out, const Tensor& a, const Tensor& b) { return binary(ops::BinaryOp::add, a, b, &out); }
Tensor sub_out(const Tensor& out, const Tensor& a, const Tensor& b) { return binary(ops::BinaryOp::sub, a, b, &out); }
Tensor mul_out(const Tensor& out, const Tensor& a, const Tensor& b) { return binary(ops::BinaryOp::mul, a, b, &out); }
Tensor div_out(const Tensor& out, const Tensor& a, const Tensor& b) { return binary(ops::BinaryOp::div, a, b, &out); }

namespace {
Tensor cast_impl(const Tensor& t, DType dtype, const Tensor* out) {
  TensorState& x = check_defined(t, "cast", "the tensor");
  if (!is_floating(x.dtype) || !is_floating(dtype)) {
    throw InvalidArgument("cast: converts between floating dtypes (f32, f64, f16, bf16), got " +
                          std::string(name(x.dtype)) + " to " + std::string(name(dtype)));
  }
  Target target_ = target(x.device);
  Output o = output("cast", target_, out, x.shape, dtype);
  if (out && detail::overlaps(*o.state, x) && !(detail::same_memory(*o.state, x) && dtype == x.dtype)) {
    throw InvalidArgument("cast_out: out shares memory with the input (of another dtype, or at other "
                          "offsets): give an out of its own");
  }
  ops::launch(*target_.stream, "cast", {&x}, {o.state}, target_.kernels.cast(*target_.stream, x, *o.state),
              o.overwrites);
  return result_of(o, out);
}
}  // namespace

Tensor cast(const Tensor& t, DType dtype) { return cast_impl(t, dtype, nullptr); }
Tensor cast_out(const Tensor& out, const Tensor& t) {
  return cast_impl(t, check_defined(out, "cast", "out").dtype, &out);
}

}  // namespace eventide
