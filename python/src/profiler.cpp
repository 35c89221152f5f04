// The profiler: Profiler.stop and the Profile's contents as Python lists of dicts.
#include <cxxabi.h>

#include <algorithm>
#include <limits>
#include <thread>

#include "bindings.hpp"

namespace eventide::python {

using namespace pybind11::literals;
using std::chrono::nanoseconds;

namespace {

py::object optional_float(const std::optional<double>& v) {
  return v ? py::object(py::float_(*v)) : py::object(py::none());
}

py::list ops_list(const Profile& p) {
  py::list out;
  for (const ProfiledOp& op : p.ops()) {
    py::dict d("id"_a = op.id, "name"_a = op.name, "stream"_a = op.stream, "device"_a = op.device,
               "seq"_a = op.seq, "detail"_a = op.detail, "is_wait"_a = op.is_wait,
               "is_marker"_a = op.is_marker,
               "finished"_a = op.finished, "start_us"_a = optional_float(op.start_us),
               "end_us"_a = optional_float(op.end_us));
    d["duration_us"] = op.start_us && op.end_us ? py::object(py::float_(*op.end_us - *op.start_us))
                                                : py::object(py::none());
    d["error"] = op.error.empty() ? py::object(py::none()) : py::object(py::str(op.error));
    d["waits_for"] = py::cast(op.waits_for);
    py::list parts;
    for (const ProfiledPart& part : op.parts) {
      parts.append(py::dict("name"_a = part.name, "start_us"_a = part.start_us, "end_us"_a = part.end_us));
    }
    d["parts"] = std::move(parts);
    out.append(std::move(d));
  }
  return out;
}

py::list records_list(const Profile& p) {
  py::list out;
  for (const ProfiledRecord& r : p.records()) {
    out.append(py::dict("event"_a = r.event, "event_name"_a = r.event_name,
                        "op"_a = r.op ? py::object(py::int_(r.op)) : py::object(py::none()),
                        "at_us"_a = r.at_us));
  }
  return out;
}

py::list host_waits_list(const Profile& p) {
  py::list out;
  for (const ProfiledHostWait& h : p.host_waits()) {
    out.append(py::dict("event"_a = h.event, "thread"_a = h.thread, "start_us"_a = h.start_us,
                        "end_us"_a = h.end_us, "finished"_a = h.finished, "ops"_a = h.ops));
  }
  return out;
}

py::list callbacks_list(const Profile& p) {
  py::list out;
  for (const ProfiledCallback& c : p.callbacks()) {
    out.append(py::dict("event"_a = c.event ? py::object(py::int_(c.event)) : py::object(py::none()),
                        "thread"_a = c.thread, "start_us"_a = c.start_us, "end_us"_a = c.end_us));
  }
  return out;
}

py::list ranges_list(const Profile& p) {
  py::list out;
  for (const ProfiledRange& r : p.ranges()) {
    out.append(py::dict("name"_a = r.name, "thread"_a = r.thread, "start_us"_a = r.start_us,
                        "end_us"_a = r.end_us));
  }
  return out;
}

// One open user range (ev.range's, python/eventide/__init__.py): opened when made, closed by
// close() (again: nothing) or when collected.
class OpenRange {
 public:
  explicit OpenRange(std::string name) { range_.emplace(std::move(name)); }
  void close() noexcept { range_.reset(); }

 private:
  std::optional<Range> range_;
};

// A str or os.PathLike.
std::string to_path(const py::object& path) {
  return py::str(py::module_::import("os").attr("fspath")(path)).cast<std::string>();
}

// The page's title and note: each a str, or None for none.
TimelineOptions timeline_options(const char* where, const py::object& title, const py::object& note) {
  auto text = [where](const char* name, const py::object& v) {
    if (v.is_none()) return std::string();
    if (!py::isinstance<py::str>(v)) {
      throw py::type_error(std::string(where) + ": " + name + " must be a str or None, got " +
                           py::repr(v).cast<std::string>());
    }
    return v.cast<std::string>();
  };
  return TimelineOptions{text("title", title), text("note", note)};
}

// A ProcessLabel as Python sees it: None for what is not known.
py::dict label_dict(const ProcessLabel& l) {
  return py::dict("rank"_a = l.rank >= 0 ? py::object(py::int_(l.rank)) : py::none(),
                  "size"_a = l.size > 0 ? py::object(py::int_(l.size)) : py::none(),
                  "host"_a = l.host.empty() ? py::object(py::none()) : py::object(py::str(l.host)),
                  "clock_offset_ns"_a = l.clock_offset_ns);
}

}  // namespace

void bind_profiler(py::module_& m) {
  m.def("set_process_label",
        [](const py::object& rank, const py::object& size, const py::object& host,
           std::int64_t clock_offset_ns) {
          ProcessLabel l;
          // (What a rank and a size may be, set_process_label says; here only what an int holds.)
          constexpr long long kLeast = std::numeric_limits<int>::min(), kMost = std::numeric_limits<int>::max();
          if (!rank.is_none()) l.rank = static_cast<int>(int_argument(rank, "set_process_label: rank", kLeast, kMost));
          if (!size.is_none()) l.size = static_cast<int>(int_argument(size, "set_process_label: size", kLeast, kMost));
          if (!host.is_none()) l.host = str_argument(host, "set_process_label: host");
          l.clock_offset_ns = clock_offset_ns;
          set_process_label(std::move(l));
        },
        py::kw_only(), "rank"_a = py::none(), "size"_a = py::none(), "host"_a = py::none(),
        "clock_offset_ns"_a = 0,
        "Say who this process is among the processes of one job, for its profiles' Chrome traces "
        "(from the next profile taken): its rank and the job's size (None: not part of a job / "
        "unknown), the host's name (None: the machine's own), and clock_offset_ns, what to add to "
        "this process's steady clock to read the job's reference clock (0: unknown, or processes "
        "of one machine). `eventide trace merge` puts the traces of all ranks on that clock. "
        "Replaces the whole label. InvalidArgumentError for a negative rank or size, or a rank "
        "not below the size.");
  m.def("process_label", []() { return label_dict(process_label()); },
        "The label set last by set_process_label, as a dict: rank, size, host, clock_offset_ns "
        "(None where not set).");

  py::class_<Profile>(m, "Profile",
                      "What a profiler recorded: ops, event records, host waits, callbacks. Times "
                      "are microseconds from the profile's start, on the host's clock.")
      .def_property_readonly("ops", &ops_list,
                             "One dict per op: id, name, stream, device, seq, detail, is_wait, is_marker, "
                             "finished, start_us, end_us, duration_us, error, waits_for, parts (a graph replay's "
                             "nodes or kernels: dicts of name, start_us, end_us).")
      .def_property_readonly("records", &records_list, "One dict per event record: event, event_name, op, at_us.")
      .def_property_readonly("host_waits", &host_waits_list,
                             "One dict per host wait: event, thread, start_us, end_us, finished, ops.")
      .def_property_readonly("callbacks", &callbacks_list, "One dict per callback run: event, thread, start_us, end_us.")
      .def_property_readonly("ranges", &ranges_list,
                             "One dict per user range (ev.range), in the order they began: name, thread, "
                             "start_us, end_us.")
      .def_property_readonly("duration_us", &Profile::duration_us,
                             "Microseconds from the profile's start to its end (float).")
      .def_property_readonly("start_ns", &Profile::start_ns,
                             "When the profile started, on this process's steady clock (ns since its "
                             "epoch, as time.monotonic_ns on Linux): the origin of its times.")
      .def_property_readonly("process_label",
                             [](const Profile& p) { return label_dict(p.process_label()); },
                             "The process's label when the profile was taken (ev.set_process_label), "
                             "as a dict: rank, size, host, clock_offset_ns.")
      .def("chrome_trace", &Profile::chrome_trace, py::call_guard<py::gil_scoped_release>(),
           "The Chrome trace (JSON text) that Perfetto and chrome://tracing load.")
      .def("export_chrome_trace",
           [](const Profile& p, const py::object& path) {
             std::string where = to_path(path);
             py::gil_scoped_release release;
             p.export_chrome_trace(where);
           },
           "path"_a, "Write the Chrome trace (JSON) to `path`.")
      .def("timeline_html",
           [](const Profile& p, const py::object& title, const py::object& note) {
             TimelineOptions options = timeline_options("timeline_html", title, note);
             py::gil_scoped_release release;
             return p.timeline_html(options);
           },
           "title"_a = py::none(), "note"_a = py::none(),
           "A self-contained HTML page with the timeline (a canvas drawn by its own script: zoom, pan, "
           "tooltips), headed by `title` and a `note` of what to look at (str, or None for none).")
      .def("export_timeline",
           [](const Profile& p, const py::object& path, const py::object& title, const py::object& note) {
             std::string where = to_path(path);
             TimelineOptions options = timeline_options("export_timeline", title, note);
             py::gil_scoped_release release;
             p.export_timeline(where, options);
           },
           "path"_a, "title"_a = py::none(), "note"_a = py::none(),
           "Write the timeline page (HTML) to `path`, headed by `title` and a `note` of what to look at.")
      .def("__repr__", [](const Profile& p) { return "<eventide." + p.str().substr(1); });

  py::class_<OpenRange>(m, "_OpenRange",
                        "An open eventide::Range: what ev.range opens on entry and closes on exit.")
      .def(py::init<std::string>(), "name"_a)
      .def("close", &OpenRange::close, "Close the range (once; later calls do nothing).");

  py::class_<Profiler>(m, "Profiler",
                       "Records device work from its creation until stop(). One at a time per "
                       "process. ev.profile() is the context manager over it.")
      .def(py::init<>())
      .def("stop",
           [](Profiler& profiler, const py::object& timeout) {
             auto seconds = parse_timeout(timeout);
             auto limit = seconds ? std::chrono::duration_cast<nanoseconds>(
                                        std::chrono::duration<double>(std::min(*seconds, kNoLimitSeconds)))
                                  : nanoseconds(Profiler::kDefaultStopTimeout);
             // The GIL is let go and taken back by hand, not by gil_scoped_release: at
             // interpreter exit, taking it back ends a daemon thread by unwinding its stack
             // (pthread_exit), and a guard's destructor taking it again during that unwind
             // would be std::terminate. Once Python is going away, the thread sleeps instead.
             struct Interrupted {};
             PyThreadState* thread = PyEval_SaveThread();
             auto take_gil = [&thread] {
               if (!python_alive()) {
                 for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
               }
               PyEval_RestoreThread(thread);
             };
             std::optional<Profile> profile;
             try {
               // Ctrl-C ends the wait: the signal handlers run between its slices.
               profile = profiler.stop(limit, [&] {
                 take_gil();
                 const bool signalled = PyErr_CheckSignals() != 0;  // the error stays set
                 thread = PyEval_SaveThread();
                 if (signalled) throw Interrupted{};
               });
             } catch (abi::__forced_unwind&) {
               throw;
             } catch (const Interrupted&) {
               take_gil();
               throw py::error_already_set();
             } catch (...) {
               take_gil();
               throw;
             }
             take_gil();
             return std::move(*profile);
           },
           "timeout"_a = py::none(),
           "Stop recording and return the Profile once the recorded work has finished and its "
           "times are known (at most `timeout` seconds, default 10; work unfinished then is marked "
           "so). Releases the GIL. EventStateError if already stopped.");

}

}  // namespace eventide::python
