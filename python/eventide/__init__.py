"""eventide: asynchronous device work and its synchronization.

Device work runs asynchronously on streams; events tell the host, other streams and
callbacks when it is done and how long it took::

    import eventide as ev

    a = ev.randn(512, 512)
    b = ev.randn(512, 512)
    out = ev.matmul(a, b)         # returns at once; the work runs on the current stream
    e = ev.Event()                # empty: not completed
    e.record(out)                 # tied to the op that produced `out`
    e.wait()                      # blocks (releasing the GIL; Ctrl-C interrupts)
    print(e.time_elapsed(), "us") # the op's own device time, in microseconds

An event is *empty* (new, or after ``reset()``), *pending* (tied work outstanding) or
*finished* (all tied work done; *failed* if some of it raised). ``wait()`` on an empty event
raises :class:`EventStateError` instead of hanging. Events are awaitable (``await e``), and
callbacks (``e.add_callback(fn)``, ``tensor.add_completion_callback(fn)``) run on a thread the
runtime owns. See the README for the mapping from ``torch.mps`` / ``torch.cuda`` names.
"""

from __future__ import annotations

import asyncio as _asyncio
import contextlib as _contextlib
import os as _os
import sys as _sys
import threading as _threading
from typing import Any, Iterable, Optional, Sequence

from ._eventide import (  # noqa: F401  (re-exported)
    BenchmarkResult,
    Device,
    DeviceError,
    Event,
    EventideError,
    EventStateError,
    ExportedEvent,
    Graph,
    InvalidArgumentError,
    OpError,
    Profile,
    Profiler,
    Stream,
    Tensor,
    UserEvent,
    __version__,
    add,
    allow_tf32,
    bfloat16,
    capture,
    cast,
    current_stream,
    default_device,
    default_stream,
    device_info,
    devices,
    div,
    dtype,
    empty,
    empty_cache,
    export_event,
    float16,
    float32,
    float64,
    from_dlpack,
    from_numpy,
    full,
    import_event,
    int32,
    int64,
    is_available,
    manual_seed,
    matmul,
    mul,
    ones,
    process_label,
    rand,
    randn,
    set_allow_tf32,
    set_process_label,
    stream_priority_range,
    sub,
    synchronize,
    tensor,
    zeros,
)
from . import _eventide
from . import _interop
from . import distributed  # noqa: F401  (ev.distributed)

# fork() (os.fork, multiprocessing's fork start method) first lets running CPU ops finish, for
# up to 2 s, with the GIL released; the child then has a working CPU runtime (see
# docs/GUARANTEES.md, "fork").
_os.register_at_fork(before=_eventide._pause_for_fork, after_in_parent=_eventide._resume_after_fork)

__all__ = [
    "BenchmarkResult", "benchmark", "capture", "cast", "Device", "DeviceError", "Event", "EventideError", "EventStateError", "InvalidArgumentError",
    "OpError", "Profile", "Profiler", "Stream", "Tensor", "UserEvent", "add", "allow_tf32",
    "bfloat16", "current_stream", "default_device", "default_stream", "device_info", "devices",
    "distributed", "div", "dtype", "empty", "empty_cache", "export_event", "ExportedEvent", "float16", "Graph", "float32", "float64",
    "from_dlpack", "from_numpy", "full", "import_event", "int32",
    "int64", "is_available", "manual_seed", "matmul", "mul", "ones", "process_label", "profile",
    "rand", "randn", "range",
    "set_allow_tf32", "set_process_label", "stream", "stream_priority_range",
    "sub", "synchronize", "tensor",
    "wait_all", "wait_all_async", "wait_any", "wait_any_async", "zeros",
]


def _event_of(obj: Any) -> Optional[Event]:
    """An eventide Event for anything that stands for device work: an eventide event or
    tensor, another library's event (torch.cuda.Event, torch.Event, cupy.cuda.Event, a Numba
    event: see eventide._interop) or tensor; None for anything else (an object of your own with
    a host wait())."""
    if isinstance(obj, Event):
        return obj
    if isinstance(obj, Tensor):
        e = Event()
        e.record(obj)
        return e
    foreign = _interop.as_event(obj)
    if foreign is not None:
        return foreign
    if _interop.is_foreign_tensor(obj):
        return _interop.tensor_event(obj)
    return None


def _check_waitable(obj: Any, fn: str) -> None:
    if not callable(getattr(obj, "wait", None)):
        raise InvalidArgumentError(
            f"{fn}: {obj!r} is neither an event or tensor (eventide's, or torch's, CuPy's or "
            "Numba's) nor has a wait() method")


def wait_all(events: Iterable[Any], timeout: Optional[float] = None) -> bool:
    """Block until every event has finished; raise the first failure (in list order).

    ``events`` may hold eventide events and tensors, other libraries' events
    (``torch.cuda.Event``, ``torch.Event``, ``cupy.cuda.Event``, Numba's) and tensors (the op
    that produced them), waited for together without a busy loop; and objects of your own with
    a ``wait()`` method (custom event classes), waited on in turn after the others. Returns False
    if ``timeout`` seconds passed first (objects of your own are given the time that is left,
    when their ``wait`` takes a ``timeout``). An object whose ``wait()`` takes a stream (as
    torch's does: it makes a stream wait) is never taken for a host wait.
    """
    events = list(events)
    ours, theirs = [], []
    for obj in events:
        e = _event_of(obj)
        if e is not None:
            ours.append(e)
        else:
            _check_waitable(obj, "wait_all")
            theirs.append(obj)
    import time
    start = time.monotonic()
    if ours and not _eventide._wait_all_events(ours, timeout):
        return False
    for obj in theirs:
        if timeout is None:
            obj.wait()
            continue
        left = max(0.0, timeout - (time.monotonic() - start))
        try:
            result = obj.wait(timeout=left)
        except TypeError:
            result = obj.wait()
        if result is False:
            return False
    return True


def wait_any(events: Iterable[Any], timeout: Optional[float] = None) -> Optional[int]:
    """The index of a finished event (the lowest among those finished), or None once
    ``timeout`` seconds have passed. Takes eventide events and tensors and other libraries'
    events and tensors (as wait_all does); for objects of your own with only a ``wait()``
    method, use ``wait_any_async``."""
    events = list(events)
    converted = []
    for i, obj in enumerate(events):
        e = _event_of(obj)
        if e is None:
            raise InvalidArgumentError(
                f"wait_any: events[{i}] = {obj!r} is not an event or tensor (eventide's, or torch's, "
                "CuPy's or Numba's); an object with only a wait() method cannot be waited for "
                "beside others on the host: await ev.wait_any_async([...]) can")
        converted.append(e)
    return _eventide._wait_any_events(converted, timeout)


def _as_event(obj: Any) -> Event:
    """An eventide event, or an event tied to a tensor's producing op."""
    e = _event_of(obj)
    return obj if e is None else e


@_contextlib.contextmanager
def stream(s: Any):
    """``with ev.stream(s):`` makes ``s`` the current stream of its device in the block
    (``None``: no change), like ``torch.cuda.stream``. ``s`` may also be another library's
    CUDA stream (``torch.cuda.current_stream()``, a ``cupy.cuda.Stream``, any object with
    ``__cuda_stream__``): eventide's ops in the block then run in that stream's order."""
    if s is None:
        yield None
        return
    if not isinstance(s, Stream):
        s = Stream(s)
    with s:
        yield s


# --- Benchmarking --------------------------------------------------------------------------

def benchmark(fn: Any, *args: Any, n_repeat: int = 100, n_warmup: int = 10,
              max_duration: Optional[float] = None, name: Optional[str] = None,
              device: Any = None, progress: Optional[bool] = None,
              kwargs: Optional[dict] = None, graph: bool = False) -> BenchmarkResult:
    """Time ``fn(*args, **kwargs)`` on the host and on the device::

        a, b = ev.randn(512, 512), ev.randn(512, 512)
        print(ev.benchmark(ev.matmul, a, b, n_repeat=100))
        # matmul : host:  25.1 us +/- 3.2 (min: 21.0 / max: 40.3) us    device (cpu):  812.4 us +/- ...

    ``n_warmup`` untimed calls first, then up to ``n_repeat`` timed ones. Each timed call is
    bracketed by markers recorded on the current stream of ``device`` (default: the default
    device); its host (CPU) time is what the call itself took, its device time the device's
    time from the first marker to the second (``Event.elapsed_time``), and each run waits for
    its work before the next starts. Like a CUDA event pair (and ``cupyx.profiler.benchmark``),
    that span includes the time the device waited for the host inside ``fn``: launch gaps, or
    a ``time.sleep`` between two launches. It never includes host time before the first
    marker (each run starts on an idle stream). For the ops' own device time alone, record an
    ``Event`` on their outputs and read ``time_elapsed()``. No timed run starts after ``max_duration`` seconds (at
    least one is made). A progress line is written to stderr once the benchmark has run for a
    second (``progress=None``), from the start (``True``) or never (``False``).

    The GIL is released between calls, and Ctrl-C ends the benchmark. An exception raised by
    ``fn`` (or by the work it enqueued) propagates, with no result. ValueError
    (InvalidArgumentError) for ``n_repeat < 1``, ``n_warmup < 0``, a negative
    ``max_duration``.

    ``graph=True`` captures ``fn`` once (``ev.capture``, on a stream of ``device``) and times
    replays of the graph instead of calls of ``fn``, as ``triton.testing.do_bench_cudagraph``
    does: the device time of work shorter than its launch, without the launch. ``fn`` must be
    capturable; the capture's EventStateError propagates.
    """
    if not callable(fn):
        raise TypeError(f"benchmark: fn must be callable, got {fn!r}")
    for arg, value in (("n_repeat", n_repeat), ("n_warmup", n_warmup)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"benchmark: {arg} must be an int, got {value!r}")
    if name is None:
        name = getattr(fn, "__name__", None) or type(fn).__name__
    call_kwargs = dict(kwargs or {})
    call = fn if not args and not call_kwargs else (lambda: fn(*args, **call_kwargs))
    if graph:
        on = Stream(device) if device is not None else None
        with capture(stream=on) as g:
            call()
        call = g.replay
    return _eventide._benchmark(call, n_repeat, n_warmup, max_duration, name, device, progress)


# --- Profiling -----------------------------------------------------------------------------

class profile:
    """Records the device work of a ``with`` block::

        with ev.profile() as prof:
            out = ev.matmul(a, b)
            out.wait()
        prof.export_chrome_trace("trace.json")   # Perfetto, chrome://tracing
        prof.export_timeline("timeline.html", title="One matmul")  # a page: zoom, pan, tooltips
        for op in prof.ops: ...                  # dicts: name, stream, start_us, end_us, ...

    Every op enqueued in the block is recorded (from any thread), with its stream, shapes and
    device times, and so are event records, waits and callbacks. The profile is taken when the
    block ends: that waits (releasing the GIL) until the recorded work has finished and its
    times are known, at most ``timeout`` seconds; work still unfinished then (held back by a
    UserEvent nobody sets) is marked ``finished: False``. One profile at a time per process:
    entering a second raises EventStateError.
    """

    def __init__(self, timeout: Optional[float] = 10.0) -> None:
        self._timeout = timeout
        self._profiler: Optional[Profiler] = None
        self._profile: Optional[Profile] = None

    def __enter__(self) -> "profile":
        if self._profiler is not None or self._profile is not None:
            raise EventStateError("ev.profile(): this profile has been entered already; make a new one")
        self._profiler = Profiler()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        profiler, self._profiler = self._profiler, None
        if profiler is not None:
            self._profile = profiler.stop(self._timeout)

    @property
    def profile(self) -> Profile:
        """The Profile, once the ``with`` block has ended."""
        if self._profile is None:
            where = "still recording" if self._profiler is not None else "not started"
            raise EventStateError(
                f"ev.profile(): the profile is taken when the with block ends ({where})")
        return self._profile

    @property
    def ops(self) -> list:
        """One dict per op (Profile.ops)."""
        return self.profile.ops

    @property
    def records(self) -> list:
        """One dict per event record (Profile.records)."""
        return self.profile.records

    @property
    def host_waits(self) -> list:
        """One dict per host wait (Profile.host_waits)."""
        return self.profile.host_waits

    @property
    def callbacks(self) -> list:
        """One dict per callback run (Profile.callbacks)."""
        return self.profile.callbacks

    @property
    def ranges(self) -> list:
        """One dict per user range (ev.range), in the order they began (Profile.ranges)."""
        return self.profile.ranges

    @property
    def duration_us(self) -> float:
        """Microseconds from the profile's start to its end."""
        return self.profile.duration_us

    def chrome_trace(self) -> str:
        return self.profile.chrome_trace()

    def export_chrome_trace(self, path: Any) -> None:
        self.profile.export_chrome_trace(path)

    def timeline_html(self, title: Optional[str] = None, note: Optional[str] = None) -> str:
        return self.profile.timeline_html(title=title, note=note)

    def export_timeline(self, path: Any, title: Optional[str] = None, note: Optional[str] = None) -> None:
        """Writes the timeline page to `path`, headed by `title` and a `note` of what to look at."""
        self.profile.export_timeline(path, title=title, note=note)

    def __repr__(self) -> str:
        if self._profile is not None:
            return f"<eventide.profile {repr(self._profile)[len('<eventide.Profile: '):-1]}>"
        return "<eventide.profile recording>" if self._profiler is not None else "<eventide.profile not started>"


# (This module's own name ``range`` hides the builtin in the code below: none of it counts.)
class range(_contextlib.ContextDecorator):
    """Marks a region of your code by name::

        with ev.range("step"):
            out = ev.matmul(a, b)
            out.wait()

        @ev.range("load")          # each call of the function is a range
        def load(): ...

    The region is in eventide's profile (``prof.ranges``: name, thread, start_us, end_us; a
    track of its thread in the Chrome trace, a row in the timeline page) when a profile
    records both its start and its end, and, on builds with NVTX, an NVTX range in the
    ``eventide`` domain that Nsight Systems shows beside eventide's own (each op's launch,
    host waits, callbacks). Ranges nest; an exception leaving the block still closes it. One
    ``range`` object may be entered on several threads at once, again inside itself
    (recursion), and in generators that interleave or resume on another thread: each entry is
    its own region, closed by the exit of the same ``with`` statement (the same frame), on
    whichever thread that runs. On an ``async def`` the decorator would close the range when
    the coroutine object is made; in a coroutine, use a ``with`` block.
    """

    def __init__(self, name: str) -> None:
        self.name = str(name)
        # The regions this object has open, by the frame of the ``with`` that opened them (a
        # generator's frame stays one across threads and resumptions; a per-thread stack lost
        # a region resumed elsewhere and swapped the ends of two interleaved generators).
        self._open: dict = {}
        self._lock = _threading.Lock()

    def __enter__(self) -> "range":
        frame = _sys._getframe(1)
        opened = _eventide._OpenRange(self.name)
        with self._lock:
            self._open.setdefault(id(frame), (frame, []))[1].append(opened)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        frame = _sys._getframe(1)
        with self._lock:
            entry = self._open.get(id(frame))
            if entry is None or entry[0] is not frame:
                return  # not opened by this frame's with: nothing of ours to close
            opened = entry[1].pop()
            if not entry[1]:
                del self._open[id(frame)]
        opened.close()

    def __repr__(self) -> str:
        return f"<eventide.range {self.name!r}>"


# --- asyncio -------------------------------------------------------------------------------

def _settle(future: "_asyncio.Future[None]", event: Event) -> None:
    # Runs in the event loop's thread. A cancelled await leaves the future done: nothing to do,
    # and the event itself is untouched and still usable.
    if future.done():
        return
    error = event.error
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(None)


def _event_future(event: Event) -> "_asyncio.Future[None]":
    """A future of the running loop, completed (from the callback thread, through
    ``loop.call_soon_threadsafe``: never by polling) when ``event`` finishes. Cancelling it
    (``asyncio.wait_for`` timing out) takes the callback back from the event, so that an
    await given up leaves nothing behind."""
    loop = _asyncio.get_running_loop()
    future = loop.create_future()

    def on_finish() -> None:
        try:
            loop.call_soon_threadsafe(_settle, future, event)
        except RuntimeError:
            pass  # the loop has been closed: nobody is awaiting any more

    if event.status == "empty":
        raise EventStateError(
            f"await: {event!r} is empty (never recorded): it would never finish; record work "
            "on it first (e.record(tensor), e.record() for a marker)")
    callback_id = event._add_callback(on_finish)

    def on_done(f: "_asyncio.Future[None]") -> None:
        if f.cancelled():
            # False if on_finish has been handed over to run: it then finds the future done.
            event._remove_callback(callback_id)

    future.add_done_callback(on_done)
    return future


def _event_await(self: Event):
    return _event_future(self).__await__()


def _tensor_await(self: Tensor):
    """``await tensor``: until the op that produced it has finished; raises its error."""
    return _event_future(_as_event(self)).__await__()


Event.__await__ = _event_await  # type: ignore[attr-defined]
Tensor.__await__ = _tensor_await  # type: ignore[attr-defined]


def _future_of(obj: Any, fn: str) -> "_asyncio.Future[Any]":
    """A future of the running loop for anything wait_all accepts: an event or a tensor
    (eventide's or another library's: through a callback, never by polling), an awaitable, or
    an object with a ``wait()`` method (called on the loop's default executor, since it
    blocks)."""
    if isinstance(obj, (Event, Tensor)):
        return _event_future(_as_event(obj))
    if hasattr(obj, "__await__"):
        return _asyncio.ensure_future(obj)
    e = _event_of(obj)
    if e is not None:
        return _event_future(e)
    _check_waitable(obj, fn)
    return _asyncio.get_running_loop().run_in_executor(None, obj.wait)


def _futures_of(events: list, fn: str) -> list:
    """_future_of each; if one cannot be made (not an event), those made are cancelled, so that
    no callback is left on an event."""
    futures: list = []
    try:
        for e in events:
            futures.append(_future_of(e, fn))
    except BaseException:
        for f in futures:
            f.cancel()
        raise
    return futures


async def wait_all_async(events: Iterable[Any], timeout: Optional[float] = None) -> bool:
    """``await ev.wait_all_async([e1, e2])``: True once every event has finished; raises a
    failure as soon as one is seen (the first in list order among those seen together). Takes
    what ``wait_all`` takes (events, tensors, objects with ``wait()``) and awaitables. False if
    ``timeout`` seconds passed first."""
    events = list(events)
    futures = _futures_of(events, "wait_all_async")
    try:
        if futures:
            # A failure ends the wait at once, as with asyncio.gather.
            done, pending = await _asyncio.wait(futures, timeout=timeout,
                                                return_when=_asyncio.FIRST_EXCEPTION)
            for f in futures:
                if f in done and f.exception() is not None:
                    raise f.exception()
            if pending:
                return False
        return True
    finally:
        for f in futures:
            f.cancel()


async def wait_any_async(events: Iterable[Any], timeout: Optional[float] = None) -> Optional[int]:
    """``await ev.wait_any_async([e1, e2])``: the index of the first event to finish (the
    lowest among those already finished), or None after ``timeout`` seconds. Takes what
    ``wait_all`` takes (events, tensors, objects with ``wait()``) and awaitables."""
    events = list(events)
    if not events:
        raise InvalidArgumentError("wait_any_async: the list of events is empty")
    for i, e in enumerate(events):
        if isinstance(e, Event) and e.poll():
            return i
        if isinstance(e, Tensor) and e.ready:
            return i
    futures = _futures_of(events, "wait_any_async")
    try:
        done, _ = await _asyncio.wait(futures, timeout=timeout,
                                      return_when=_asyncio.FIRST_COMPLETED)
        if not done:
            return None
        return min(futures.index(f) for f in done)
    finally:
        for f in futures:
            f.cancel()
