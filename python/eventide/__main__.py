"""The ``eventide`` command: ``python -m eventide <command>``, and the ``eventide`` script that
``pip install`` puts beside the interpreter, are the C++ program ``eventide`` (tools/eventide,
compiled into the extension): the same commands (``info``, ``demo``, ``bench``,
``trace merge``, ``version``, ``help``), options, output and exit statuses (0 success, 1 a
check or the device failed, 2 bad usage). ``python -m eventide --help`` lists them.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Optional, Sequence

from . import _eventide

# Where the package was built without CLI11 or nlohmann_json (CMake's EVENTIDE_PYTHON_CLI).
_NO_COMMAND = (
    "eventide: this build of the Python package has no eventide command: CLI11 or nlohmann_json "
    "was not found when it was built (Debian: libcli11-dev nlohmann-json3-dev); install them "
    "and install the package again")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the eventide program with ``argv`` (default: this process's arguments after the
    program's name) and returns its exit status."""
    run = getattr(_eventide, "_cli_main", None)
    if run is None:
        print(_NO_COMMAND, file=sys.stderr)
        return 1
    if threading.current_thread() is threading.main_thread():
        # As for the C++ program: Ctrl-C ends the command, and a closed pipe
        # (`eventide bench --list | head`) ends it quietly. The interpreter's own handlers
        # would only note the signal for Python code, which does not run until the command
        # returns. (A SIGINT ignored by whoever started the process, as for a background job,
        # stays ignored: the interpreter installs its handler only where it was not.)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        if hasattr(signal, "SIGPIPE"):
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = sys.argv[1:] if argv is None else list(argv)
    return run(["eventide", *args])


if __name__ == "__main__":
    sys.exit(main())
