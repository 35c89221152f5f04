// _eventide._cli_main(argv): the `eventide` program (tools/eventide, compiled into this module
// where CLI11 and nlohmann_json were found: EVENTIDE_PYTHON_CLI) for the package's `eventide`
// script and `python -m eventide` (eventide/__main__.py). The commands, their options, output
// and exit statuses are the program's own; they run on this module's copy of the library, the
// runtime that `import eventide` uses.
#include <cstdio>
#include <string>
#include <vector>

#include "bindings.hpp"
#if EVENTIDE_PYTHON_CLI
#include "cli.hpp"
#endif

namespace eventide::python {

using namespace pybind11::literals;

void bind_cli(py::module_& m) {
#if EVENTIDE_PYTHON_CLI
  m.def("_cli_main", [](std::vector<std::string> argv) {
    if (argv.empty()) throw InvalidArgument("_cli_main: argv must start with the program's name");
    std::vector<char*> pointers;
    for (std::string& arg : argv) pointers.push_back(arg.data());
    pointers.push_back(nullptr);  // as the C runtime passes main()'s argv
    // The GIL released: a command runs for seconds to minutes and calls no Python; another
    // thread of the interpreter may run meanwhile. stdout flushed before Python writes again.
    py::gil_scoped_release unlocked;
    const int status = cli::run_command_line(static_cast<int>(argv.size()), pointers.data());
    std::fflush(stdout);
    std::fflush(stderr);
    return status;
  }, "argv"_a,
  "Runs the eventide program with argv (argv[0] the program's name, then a command and its "
  "options, as typed after `eventide`) and returns its exit status: 0 success, 1 a check or "
  "the device failed, 2 bad usage. It prints to the process's stdout and stderr.");
#else
  (void)m;  // built without CLI11 or nlohmann_json: eventide/__main__.py says so
#endif
}

}  // namespace eventide::python
