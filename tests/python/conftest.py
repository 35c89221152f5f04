"""Shared fixtures and helpers for the eventide Python tests.

Hangs must fail the run, never stall it: Debian's pytest has no pytest-timeout, so every
test runs under ``faulthandler.dump_traceback_later(..., exit=True)`` (the whole process dumps
every thread's stack and exits non-zero if one test takes longer than its limit; the default
is 60 s, ``@pytest.mark.time_limit(seconds)`` changes it), and blocking calls whose
return we want to check go through :func:`call_with_timeout`, which fails the test cleanly
after a few seconds instead.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

# The suite checks the CPU backend: pin the default device before eventide reads it (once, at
# its first use), so that a CUDA build runs the same tests; child processes inherit it.
os.environ["EVENTIDE_DEVICE"] = "cpu"

import eventide as ev  # noqa: E402

DEFAULT_TIME_LIMIT_S = 60.0
# Generous: the suite also runs under ctest next to the C++ tests on small machines.
BLOCK_TIMEOUT_S = 20.0


_hang_report_file = None


def pytest_configure(config: pytest.Config) -> None:
    global _hang_report_file
    config.addinivalue_line(
        "markers", "time_limit(seconds): kill the run (with every thread's stack) after this long")
    # Output capture is suspended while plugins configure: fd 2 is the real stderr here. The
    # stacks of a hang must go there, not into a test's capture buffer that dies with _exit.
    _hang_report_file = open(os.dup(2), "w")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _hang_report_file is not None:
        _hang_report_file.close()


@pytest.fixture(autouse=True)
def _hang_guard(request: pytest.FixtureRequest):
    marker = request.node.get_closest_marker("time_limit")
    limit = float(marker.args[0]) if marker else DEFAULT_TIME_LIMIT_S
    out = _hang_report_file if _hang_report_file is not None else sys.stderr

    def announce() -> None:
        print(f"\n*** {request.node.nodeid} is still running after {limit - 1:.0f} s: a hang? "
              f"Every thread's stack follows, then the run stops. ***", file=out, flush=True)

    herald = threading.Timer(max(limit - 1.0, 0.1), announce)
    herald.daemon = True
    herald.start()
    faulthandler.dump_traceback_later(limit, exit=True, file=out)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        herald.cancel()


class _Result:
    def __init__(self) -> None:
        self.value: Any = None
        self.error: Optional[BaseException] = None


def call_with_timeout(fn: Callable[[], Any], timeout: float = BLOCK_TIMEOUT_S) -> Any:
    """Runs ``fn()`` in a daemon thread; returns its result or re-raises its exception, and
    fails the test if it has not returned after ``timeout`` seconds (a hang)."""
    result = _Result()

    def body() -> None:
        try:
            result.value = fn()
        except BaseException as exc:  # noqa: BLE001  (handed back to the caller)
            result.error = exc

    t = threading.Thread(target=body, daemon=True, name="call_with_timeout")
    t.start()
    t.join(timeout)
    if t.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)!r} did not return within {timeout} s (hang)")
    if result.error is not None:
        raise result.error
    return result.value


def wait_until(predicate: Callable[[], bool], timeout: float = BLOCK_TIMEOUT_S,
               what: str = "condition") -> None:
    """Polls ``predicate`` (for things with no blocking wait, e.g. a callback's side effect)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.002)


class Gate:
    """A stream held back by a UserEvent: work enqueued on ``stream`` (inside ``with gate:``)
    stays pending, deterministically, until ``open()`` (or ``fail(exc)``)."""

    def __init__(self) -> None:
        self.user = ev.UserEvent()
        self.stream = ev.Stream("cpu")
        self.stream.wait(self.user)

    def __enter__(self) -> ev.Stream:
        return self.stream.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.stream.__exit__(*exc)

    def open(self) -> None:
        self.user.set()

    def fail(self, exc: BaseException) -> None:
        self.user.fail(exc)


@pytest.fixture
def gate():
    g = Gate()
    yield g
    # Never leave a stream waiting forever (a pending UserEvent fails when dropped anyway).
    if g.user.status == "pending":
        g.user.set()


@contextlib.contextmanager
def capture_unraisable():
    """Collects what goes to sys.unraisablehook (exceptions raised by callbacks).

    Set inside the test body: pytest's own unraisableexception plugin installs its hook around
    the call phase, so a fixture's hook (set during setup) would be shadowed."""
    seen: list = []
    lock = threading.Lock()

    def hook(info: Any) -> None:
        with lock:
            seen.append((info.exc_type, info.exc_value, info.err_msg, info.object))

    previous = sys.unraisablehook
    sys.unraisablehook = hook
    try:
        yield seen
    finally:
        sys.unraisablehook = previous


# --- child processes ---------------------------------------------------------------------

PACKAGE_DIR = str(Path(ev.__file__).resolve().parent.parent)


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGE_DIR + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PYTHONFAULTHANDLER", None)
    return env


def start_child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


CRASH_MARKERS = ("Fatal Python error", "terminate called", "Segmentation", "Aborted")


def run_child_ok(code: str, timeout: float = 60.0, what: str = "hung") -> str:
    """Runs ``code`` in a fresh interpreter, which must finish within ``timeout`` seconds with
    status 0 and no crash message; returns its standard output."""
    p = start_child(code)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"{what}: {out}\n{err}")
    for bad in CRASH_MARKERS:
        assert bad not in err, err
    assert p.returncode == 0, (p.returncode, out, err)
    return out
