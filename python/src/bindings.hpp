// What the files of the `eventide._eventide` extension share. Each file binds one concern:
//
//   convert.cpp       dtypes, devices and shapes from Python objects; the dtype and Device classes
//   events.cpp        Event, UserEvent (and its cycle collection), callbacks, wait_all / wait_any
//   streams.cpp       Stream, other libraries' streams, `with stream:` blocks, synchronize
//   tensors.cpp       Tensor, creation, ops, ev.tensor(data)
//   numpy_dlpack.cpp  NumPy arrays and DLPack capsules in and out, without copies where possible
//   fast_paths.cpp    plain CPython entry points for the calls made in tight loops
//   profiler.cpp      Profiler and Profile
//   benchmark.cpp     ev.benchmark and BenchmarkResult
//   graphs.cpp        ev.capture and Graph
//   distributed.cpp   the communicator (eventide.distributed's _distributed submodule)
//   ipc.cpp           events across processes: export_event, import_event, ExportedEvent
//   cli.cpp           _cli_main: the `eventide` program, for eventide/__main__.py
//   module.cpp        the module: the classes above, device and runtime functions, exit
//
// The extension uses eventide's public API only (include/eventide): behaviour that exists in
// C++ is called, not copied. py_support.hpp has what every file needs of Python itself.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>

#include "eventide/eventide.hpp"
#include "py_support.hpp"

namespace eventide::python {

// --- convert.cpp ---
// "float32", ... (NumPy's and PyTorch's names).
const char* py_name(DType d);
// None (-> fallback), an eventide dtype, a name ("float32", "f32"), a NumPy dtype or type, or
// a torch dtype.
DType to_dtype(const py::handle& obj, DType fallback = DType::f32);
// None (-> nullopt), a Device, a string, or a torch.device.
std::optional<Device> to_device(const py::handle& obj);
Device device_or_default(const py::handle& obj);
// Shapes: ints, or one sequence of ints: rand(2, 3) == rand((2, 3)).
Shape to_shape(const py::tuple& args, const char* fn);
py::tuple to_tuple(const Shape& shape);
void bind_types(py::module_& m);

// --- events.cpp ---
// A Python callable as a runtime callback; InvalidArgument if it is not callable.
detail::Callback to_callback(const py::object& fn, const char* where);
// Event.wait(timeout): true once finished (raising its error), false on timeout.
bool wait_event(const Event& e, const py::object& timeout);
std::string event_repr(const Event& e);
// Event.record(obj=None, *, stream=None).
void record_event(Event& e, const py::object& obj, const py::object& stream);
// Event.from_native(handle, device=None, enable_timing=True).
Event event_from_native(const py::object& handle, const py::object& device, bool enable_timing);
// The device a native CUDA object goes to when none is named: the default device if it is a
// GPU, else cuda:0; InvalidArgument where there is none.
Device default_native_device(const char* where);
// Event.cuda_event: its native CUDA event as an int.
py::int_ native_event_of(const Event& e);
void bind_events(py::module_& m);

// --- streams.cpp ---
// A native stream from a number (a cudaStream_t; DLPack's 1 and 2 are CUDA's legacy and
// per-thread default streams).
void* native_from_number(std::intptr_t n);
// An eventide Stream, or another library's CUDA stream; TypeError otherwise.
Stream as_stream(const py::handle& obj, const char* where);
// Another library's CUDA stream as an eventide Stream; nullopt if `obj` is none.
std::optional<Stream> try_foreign_stream(const py::handle& obj);
// A torch.cuda.Stream seen before, from its native handle alone (the fast path of
// record(torch_stream)); nullopt for anything else. With the GIL.
std::optional<Stream> known_torch_stream(PyObject* obj);
// Another library's event as an eventide Event (eventide._interop.as_event); TypeError if it
// is none.
Event foreign_event(const py::handle& obj, const char* where);
// Brings the calling thread's current streams up to date with the `with stream:` blocks of the
// running context: every entry point that uses the current stream calls it first.
void sync_current_streams();
void bind_streams(py::module_& m);

// --- tensors.cpp ---
// Tensor.wait(timeout): true once the producer has finished (raising its error), false on
// timeout.
bool wait_tensor_for(const Tensor& t, std::optional<double> timeout);
void wait_tensor(const Tensor& t);
void bind_tensors(py::module_& m);

// --- numpy_dlpack.cpp ---
// A read-only NumPy view of a CPU tensor's memory (kept alive by the array), or a copy of a
// device tensor's. Waits for the producer.
py::array to_numpy(const Tensor& t);
Tensor from_numpy(const py::array& given, const py::object& device_obj);
// `arr` in the machine's byte order (a copy where it is not).
py::array native_order(const py::array& arr);
// The eventide dtype of a NumPy dtype; nullopt for one eventide lacks.
std::optional<DType> from_numpy_dtype(const py::dtype& dt);
py::capsule dlpack_method(const Tensor& t, const py::object& stream, const py::object& max_version,
                          const py::object& dl_device_obj, const py::object& copy);
py::tuple dlpack_device(const Tensor& t);
Tensor from_dlpack(const py::object& obj);

// --- fast_paths.cpp ---
// Replaces poll, query, record, wait, synchronize and completed of the Event class `cls` by
// plain CPython entry points (the pybind11 overloads stay reachable as _record and _wait).
void install_fast_paths(py::handle cls);

// --- profiler.cpp ---
void bind_profiler(py::module_& m);

// --- benchmark.cpp ---
void bind_benchmark(py::module_& m);

// --- graphs.cpp ---
void bind_graphs(py::module_& m);

// --- distributed.cpp ---
void bind_distributed(py::module_& m);
// --- ipc.cpp ---
void bind_ipc(py::module_& m);

// --- cli.cpp ---
void bind_cli(py::module_& m);

}  // namespace eventide::python
