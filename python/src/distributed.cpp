// eventide.distributed: the communicator (eventide/distributed.hpp), bound as the extension's
// `_distributed` submodule; python/eventide/distributed.py is the module users import.
//
// The calls that may block on the other ranks (init, a GPU collective's launch, which NCCL
// may hold while it connects to its peers, finalize) run with the GIL released.
#include "bindings.hpp"
#include "eventide/distributed.hpp"

namespace eventide::python {

namespace dist = eventide::distributed;
using namespace pybind11::literals;

namespace {

dist::ReduceOp to_op(const std::string& op, const char* where) {
  for (dist::ReduceOp o : {dist::ReduceOp::sum, dist::ReduceOp::prod, dist::ReduceOp::max,
                           dist::ReduceOp::min, dist::ReduceOp::avg}) {
    if (op == dist::name(o)) return o;
  }
  throw InvalidArgument(std::string(where) + ": op must be one of 'sum', 'prod', 'max', 'min', 'avg', got '" +
                        op + "'");
}

// Runs `call` on the calling thread's current streams, with the GIL released.
template <class Call>
auto issue(Call&& call) {
  sync_current_streams();
  py::gil_scoped_release unlocked;
  return call();
}

}  // namespace

void bind_distributed(py::module_& parent) {
  py::module_ m = parent.def_submodule("_distributed", "The communicator: see eventide.distributed.");

  py::class_<dist::Communicator>(m, "Communicator", R"doc(
The ranks of a job (from ``init()``), or the GPUs of this process (from ``init_local()``).

Each collective is an eventide op on the current stream of its tensor's device: it returns
at once, events recorded on its output are tied to it, streams wait on it, ``time_elapsed``
times it, callbacks and ``await`` work, and the profiler draws it. CPU tensors go through
MPI, GPU tensors through NCCL. Every rank must issue the collectives in the same order.)doc")
      .def_property_readonly("rank", &dist::Communicator::rank, "This process's rank, 0 to size - 1.")
      .def_property_readonly("size", &dist::Communicator::size, "The number of ranks.")
      .def_property_readonly("device", &dist::Communicator::device,
                             "This rank's GPU, or cpu where it has none (barrier() runs there).")
      .def_property_readonly("clock_offset_ns", &dist::Communicator::clock_offset_ns,
                             "Nanoseconds to add to this process's steady clock to read rank 0's "
                             "(measured at init; profiles of all ranks on one clock).")
      .def("transport",
           [](const dist::Communicator& c, const py::object& device) {
             return c.transport(device_or_default(device));
           },
           "device"_a, "'nccl' or 'mpi': what carries tensors of `device`; '' for none.")
      .def("all_reduce",
           [](const dist::Communicator& c, const Tensor& t, const std::string& op,
              const std::optional<Tensor>& out) {
             const dist::ReduceOp o = to_op(op, "all_reduce");
             return issue([&] { return out ? c.all_reduce(t, o, *out) : c.all_reduce(t, o); });
           },
           "tensor"_a, "op"_a = "sum", py::kw_only(), "out"_a = py::none(),
           "`tensor` reduced over the ranks ('sum', 'prod', 'max', 'min', 'avg'): a new tensor, or "
           "`out` (which may be `tensor` itself: in place) written by the op (the result is a tensor of out's memory).")
      .def("all_gather",
           [](const dist::Communicator& c, const Tensor& t, const std::optional<Tensor>& out) {
             return issue([&] { return out ? c.all_gather(t, *out) : c.all_gather(t); });
           },
           "tensor"_a, py::kw_only(), "out"_a = py::none(),
           "The ranks' tensors concatenated along the first dimension, in rank order: a new tensor, "
           "or `out` (apart from `tensor`'s memory) written by the op (the result is a tensor of out's memory).")
      .def("reduce_scatter",
           [](const dist::Communicator& c, const Tensor& t, const std::string& op,
              const std::optional<Tensor>& out) {
             const dist::ReduceOp o = to_op(op, "reduce_scatter");
             return issue([&] { return out ? c.reduce_scatter(t, o, *out) : c.reduce_scatter(t, o); });
           },
           "tensor"_a, "op"_a = "sum", py::kw_only(), "out"_a = py::none(),
           "This rank's part (along the first dimension) of `tensor` reduced over the ranks: a new "
           "tensor, or `out` (apart from `tensor`'s memory) written by the op (the result is a tensor of out's memory).")
      .def("broadcast",
           [](const dist::Communicator& c, const Tensor& t, int root, const std::optional<Tensor>& out) {
             return issue([&] { return out ? c.broadcast(t, root, *out) : c.broadcast(t, root); });
           },
           "tensor"_a, "root"_a = 0, py::kw_only(), "out"_a = py::none(),
           "Rank `root`'s `tensor` on every rank: a new tensor, or `out` (which may be `tensor` "
           "itself: in place) written by the op (the result is a tensor of out's memory).")
      .def("send",
           [](const dist::Communicator& c, const Tensor& t, int dst) { return issue([&] { return c.send(t, dst); }); },
           "tensor"_a, "dst"_a,
           "Sends `tensor` to rank `dst`; returns an Event that finishes once the data has left.")
      .def("recv",
           [](const dist::Communicator& c, const py::object& shape, int src, const py::object& dtype,
              const py::object& device) {
             Shape s = py::isinstance<py::int_>(shape) ? Shape{shape.cast<std::int64_t>()}
                                                       : to_shape(py::tuple(shape), "recv");
             const DType d = to_dtype(dtype);
             std::optional<Device> on = to_device(device);
             return issue([&] { return c.recv(std::move(s), src, d, on); });
           },
           "shape"_a, "src"_a, "dtype"_a = py::none(), "device"_a = py::none(),
           "A new tensor of `shape` and `dtype` (default float32) received from rank `src`'s send(); "
           "on `device` (default: the communicator's).")
      .def("barrier", [](const dist::Communicator& c) { return issue([&] { return c.barrier(); }); },
           "An Event that finishes once every rank has reached its barrier; ``.wait()`` for a host barrier.")
      .def("__eq__", [](const dist::Communicator& a, const dist::Communicator& b) { return a == b; })
      .def("__hash__", [](const dist::Communicator& c) { return std::hash<const void*>()(c.state().get()); })
      .def("__repr__", &dist::Communicator::str);

  m.def("init",
        [](const py::object& device) {
          dist::InitOptions options;
          options.device = to_device(device);
          py::gil_scoped_release unlocked;
          return dist::init(options);
        },
        "device"_a = py::none(), "See eventide.distributed.init.");
  m.def("init_local",
        [](const std::vector<py::object>& devices) {
          std::vector<Device> ds;
          for (const py::object& d : devices) ds.push_back(device_or_default(d));
          py::gil_scoped_release unlocked;
          return dist::init_local(ds);
        },
        "devices"_a, "See eventide.distributed.init_local.");
  m.def("is_initialized", &dist::is_initialized, "See eventide.distributed.is_initialized.");
  m.def("finalize",
        [](const py::object& timeout) {
          // None, inf or anything past kNoLimitSeconds: no limit (a conversion of inf to
          // nanoseconds overflowed into the past: finalize gave up at once).
          const std::optional<double> t = parse_timeout(timeout, "finalize: timeout");
          auto ns = !t || *t >= kNoLimitSeconds
                        ? std::chrono::nanoseconds::max()
                        : std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(*t));
          py::gil_scoped_release unlocked;
          return dist::finalize(ns);
        },
        "timeout"_a = 10.0, "See eventide.distributed.finalize.");
  m.def("_abort_job_on_error",
        [](int code, const std::string& reason) {
          py::gil_scoped_release unlocked;
          return dist::abort_job_on_error(code, reason);
        },
        "code"_a, "reason"_a, "See eventide.distributed (the hook on unhandled exceptions).");
  m.def("capabilities",
        [] {
          const dist::Capabilities c = dist::capabilities();
          return py::dict("mpi"_a = c.mpi, "nccl"_a = c.nccl, "launched"_a = c.launched);
        },
        "See eventide.distributed.capabilities.");
}

}  // namespace eventide::python
