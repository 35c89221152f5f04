// Fast paths: pybind11's argument dispatch costs ~200 ns a call on a slow core, more than the
// whole of poll() in C++. The calls made in tight loops (poll, query, completed, record of a
// tensor, wait on a finished event) get plain CPython entry points; anything unusual falls back
// to the pybind11 overloads (kept as _record and _wait).
#include <cxxabi.h>

#include "bindings.hpp"

namespace eventide::python {

namespace {

template <class T>
T* self_as(PyObject* self) {
  return &py::handle(self).cast<T&>();
}

PyObject* fail_to_python() {
  try {
    throw;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (...) {
    py::object exc = to_python_exception(std::current_exception());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  }
  return nullptr;
}

// Calls the pybind11 overload `name` of `self`. The bound method is a raw reference, not a
// py::object: if the interpreter ends this thread inside the call (exit; the forced unwind of
// pthread_exit), no destructor may release it, since the thread no longer holds the GIL (the
// method object, its last reference gone, would be freed without it: a crash at exit).
PyObject* call_slow_path(PyObject* self, const char* name, PyObject* const* args, Py_ssize_t nargs,
                         PyObject* kwnames) {
  PyObject* method = PyObject_GetAttrString(self, name);
  if (!method) return nullptr;
  PyObject* result = PyObject_Vectorcall(method, args, static_cast<size_t>(nargs), kwnames);
  Py_DECREF(method);
  return result;
}

PyObject* fast_poll(PyObject* self, PyObject*) {
  try {
    return PyBool_FromLong(self_as<Event>(self)->poll());
  } catch (abi::__forced_unwind&) {
    throw;  // the interpreter ends this thread (exit): let it
  } catch (...) {
    return fail_to_python();
  }
}

PyObject* fast_completed(PyObject* self, void*) { return fast_poll(self, nullptr); }

PyObject* fast_record(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  try {
    if (nargs == 0 && !kwnames) {  // record(): the current stream
      sync_current_streams();
      self_as<Event>(self)->record();
      Py_RETURN_NONE;
    }
    if (nargs == 1 && !kwnames) {
      py::detail::make_caster<Tensor> tensor;
      if (tensor.load(args[0], /*convert=*/false)) {
        self_as<Event>(self)->record(py::detail::cast_op<const Tensor&>(tensor));
        Py_RETURN_NONE;
      }
      if (auto s = known_torch_stream(args[0])) {  // record(torch.cuda.current_stream())
        self_as<Event>(self)->record(*s);
        Py_RETURN_NONE;
      }
    }
    return call_slow_path(self, "_record", args, nargs, kwnames);
  } catch (abi::__forced_unwind&) {
    throw;  // the interpreter ends this thread (exit): let it
  } catch (...) {
    return fail_to_python();
  }
}

PyObject* fast_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  try {
    if (nargs == 0 && !kwnames) {
      Event* e = self_as<Event>(self);
      if (e->status() == EventStatus::finished) Py_RETURN_TRUE;  // the common "already done"
    }
    return call_slow_path(self, "_wait", args, nargs, kwnames);
  } catch (abi::__forced_unwind&) {
    throw;  // the interpreter ends this thread (exit): let it
  } catch (...) {
    return fail_to_python();
  }
}

PyObject* fast_synchronize(PyObject* self, PyObject*) {
  try {
    Event* e = self_as<Event>(self);
    if (e->status() != EventStatus::finished) wait_event(*e, py::none());
    Py_RETURN_NONE;
  } catch (abi::__forced_unwind&) {
    throw;  // the interpreter ends this thread (exit): let it
  } catch (...) {
    return fail_to_python();
  }
}

}  // namespace

void install_fast_paths(py::handle cls) {
  // The docstrings open with a text signature ("name($self, ...)\n--\n\n"), which CPython
  // gives to inspect.signature; the keyword names are the slow paths' ("obj", "timeout").
  static PyMethodDef poll_def{"poll", &fast_poll, METH_NOARGS,
                              "poll($self, /)\n--\n\nTrue once all tied work has finished (never blocks)."};
  static PyMethodDef query_def{"query", &fast_poll, METH_NOARGS,
                               "query($self, /)\n--\n\nPyTorch's spelling of poll()."};
  static PyMethodDef record_def{"record", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast_record)),
                                METH_FASTCALL | METH_KEYWORDS,
                                "record($self, /, obj=None, *, stream=None)\n--\n\nTie the event to the op that produced a "
                                "tensor (eventide's or another library's), or to all work so far on a stream "
                                "(default: the current stream); stream= is PyTorch's keyword."};
  static PyMethodDef wait_def{"wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast_wait)),
                              METH_FASTCALL | METH_KEYWORDS,
                              "wait($self, /, timeout=None)\n--\n\nBlock until finished (True) or timeout "
                              "seconds pass (False); raises the error of failed work."};
  static PyMethodDef synchronize_def{"synchronize", &fast_synchronize, METH_NOARGS,
                                     "synchronize($self, /)\n--\n\nPyTorch's spelling of wait()."};
  static PyGetSetDef completed_def{"completed", &fast_completed, nullptr,
                                   "True once all tied work has finished.", nullptr};
  // The pybind11 overloads stay reachable for the cases the fast paths hand on (their error
  // messages keep the public names).
  cls.attr("_record") = cls.attr("record");
  cls.attr("_wait") = cls.attr("wait");
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  for (PyMethodDef* def : {&poll_def, &query_def, &record_def, &wait_def, &synchronize_def}) {
    py::object descr = py::reinterpret_steal<py::object>(PyDescr_NewMethod(type, def));
    if (!descr || PyObject_SetAttrString(cls.ptr(), def->ml_name, descr.ptr()) != 0) {
      throw py::error_already_set();
    }
  }
  py::object getset = py::reinterpret_steal<py::object>(PyDescr_NewGetSet(type, &completed_def));
  if (!getset || PyObject_SetAttrString(cls.ptr(), "completed", getset.ptr()) != 0) {
    throw py::error_already_set();
  }
}


}  // namespace eventide::python
