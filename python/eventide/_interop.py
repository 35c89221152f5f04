"""Other libraries' events and tensors, taken for what they mean there.

eventide takes a PyTorch, CuPy or Numba event wherever it takes an event, and another
library's tensor wherever it takes a tensor. What each is:

* A CUDA event (``torch.cuda.Event``, ``torch.Event("cuda")``, ``cupy.cuda.Event``, a Numba
  event): ``Event.from_native`` of its ``cudaEvent_t``. The GPU itself waits for the event's
  most recent record (``cudaStreamWaitEvent`` on an internal stream), so a host wait blocks
  without a busy loop, a stream wait takes no host round trip, and the event may be recorded
  again afterwards. A torch event never recorded is complete, as its ``query()`` says.
* An event of a device eventide has no backend for (``torch.Event("mps")``, ``"xpu"``), or any
  object whose ``wait()`` makes a *stream* wait (a ``stream`` parameter, as torch's and Numba's
  have) and that has ``query()`` and ``synchronize()``: a :class:`UserEvent` set by a thread of
  this module once the object's own ``synchronize()`` returns (failed with its exception if it
  raises). Its ``wait()`` is never called: it would not block the host.
* Another library's tensor (``record(t)``, ``wait_all([t])``): a marker on that library's
  current stream for the tensor's device (``torch.cuda.current_stream(device)``, CuPy's current
  stream, a Numba array's own stream), which covers the op that produced the tensor when it was
  launched there; host memory (NumPy, a torch CPU tensor) was written when its op returned.
"""

from __future__ import annotations

import inspect
import queue
import threading
from typing import Any, Optional

from ._eventide import Device, Event, InvalidArgumentError, Stream, Tensor, UserEvent
from . import _eventide

_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_HOST = 1, 2, 3


def _module(obj: Any) -> str:
    return getattr(type(obj), "__module__", "") or ""


def _cuda_device(index: Optional[int]) -> Optional[Device]:
    """eventide's cuda:index, or None where this build or machine has no such device."""
    try:
        d = Device("cuda" if index is None else f"cuda:{index}")
    except Exception:
        return None
    return d if _eventide.is_available(d) else None


def _native_event(handle: int, device: Optional[Device]) -> Event:
    return Event.from_native(handle, device=device)


# --- The host path: events eventide cannot wait for on a device ------------------------------

class _Bridge:
    """Daemon threads that call foreign events' synchronize() and then set UserEvents.

    A thread per pending event would be unbounded; one thread would let a slow event hold up
    the others. ``_WORKERS`` threads share a queue: at most that many synchronize() calls run at
    once, and a host wait on an event whose call has not started yet waits for a free thread.
    The threads are daemons: at interpreter exit a synchronize() that never returns does not
    hold the process (its UserEvent then fails as abandoned)."""

    _WORKERS = 4

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: "queue.SimpleQueue[tuple[Any, UserEvent]]" = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._busy = 0

    def submit(self, obj: Any, done: UserEvent) -> None:
        with self._lock:
            self._busy += 1
            if len(self._threads) < min(self._WORKERS, self._busy):
                t = threading.Thread(target=self._run, name=f"eventide-foreign-{len(self._threads)}",
                                     daemon=True)
                self._threads.append(t)
                t.start()
        self._queue.put((obj, done))

    def _run(self) -> None:
        while True:
            obj, done = self._queue.get()
            try:
                obj.synchronize()
            except BaseException as exc:  # noqa: BLE001 - the event carries it
                done.fail(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            else:
                done.set()
            finally:
                del obj, done
                with self._lock:
                    self._busy -= 1


_bridge = _Bridge()


def host_event(obj: Any) -> Event:
    """A UserEvent set once ``obj.synchronize()`` returns (at once if ``obj.query()``)."""
    done = UserEvent()
    try:
        finished = bool(obj.query())
    except Exception as exc:  # noqa: BLE001 - a broken device: the event fails with it
        done.fail(exc)
        return done
    if finished:
        done.set()
    else:
        _bridge.submit(obj, done)
    return done


def _waits_on_a_stream(obj: Any) -> bool:
    """Whether obj.wait() takes a stream: PyTorch's and Numba's Event.wait(stream) make a
    stream wait, they do not block the host."""
    wait = getattr(obj, "wait", None)
    if not callable(wait):
        return False
    try:
        params = inspect.signature(wait).parameters
    except (TypeError, ValueError):
        return False
    return "stream" in params


# --- Recognising other libraries' events ----------------------------------------------------

def as_event(obj: Any) -> Optional[Event]:
    """An eventide Event standing for another library's event, or None if ``obj`` is not one
    (eventide's own events and tensors are left to the caller)."""
    module = _module(obj)
    if module.startswith("torch") and hasattr(obj, "event_id") and hasattr(obj, "query"):
        return _torch_event(obj)
    if module.startswith("cupy") and hasattr(obj, "ptr") and hasattr(obj, "synchronize") \
            and "Event" in type(obj).__name__:
        device = _cuda_device(None)
        if device is None:
            return host_event(obj)
        return _native_event(int(obj.ptr), _cupy_event_device())
    if module.startswith("numba") and hasattr(obj, "handle") and hasattr(obj, "query") \
            and "Event" in type(obj).__name__:
        handle = obj.handle
        handle = getattr(handle, "value", handle)  # ctypes' c_void_p; cuda.bindings' CUevent is int()-able
        if _cuda_device(None) is None:
            return host_event(obj)
        return _native_event(int(handle or 0), None) if handle else Event._of_nothing(None)
    if _waits_on_a_stream(obj):
        if callable(getattr(obj, "synchronize", None)) and callable(getattr(obj, "query", None)):
            return host_event(obj)
        raise InvalidArgumentError(
            f"{obj!r}: its wait() makes a stream wait (it takes a stream), so it cannot be waited "
            "for on the host; eventide needs a synchronize() and query() method on such an object")
    return None


def _cupy_event_device() -> Optional[Device]:
    try:
        import cupy  # noqa: F401 - only when a CuPy event is in hand
        return _cuda_device(cupy.cuda.runtime.getDevice())
    except Exception:
        return None


def _torch_event(obj: Any) -> Event:
    device = getattr(obj, "device", None)  # None until recorded (torch.cuda.Event)
    kind = getattr(device, "type", None)
    if kind is not None and kind != "cuda":
        return host_event(obj)  # MPS, XPU, ...: torch's own query() and synchronize()
    handle = int(getattr(obj, "event_id", 0) or 0)
    if handle == 0:
        # Never recorded: torch creates the CUDA event at the first record, and until then
        # query() is True and waits return at once.
        return Event._of_nothing(None)
    ev_device = _cuda_device(getattr(device, "index", None))
    if ev_device is None:
        return host_event(obj)  # a torch GPU this eventide build has no backend for
    return _native_event(handle, ev_device)


# --- Other libraries' tensors -----------------------------------------------------------------

def is_foreign_tensor(obj: Any) -> bool:
    return not isinstance(obj, Tensor) and (
        hasattr(obj, "__dlpack_device__") or hasattr(obj, "__cuda_array_interface__")
        or hasattr(obj, "__array_interface__"))


def tensor_marker_target(obj: Any):
    """Where a marker that covers the op which produced ``obj`` goes: an eventide Stream (that
    library's current stream for the tensor's device), or an eventide Device when the memory is
    the host's (nothing pending: its op ran when it returned)."""
    module = _module(obj)
    if module.startswith("torch") and hasattr(obj, "is_cuda"):
        if obj.is_cuda:
            import torch
            return Stream(torch.cuda.current_stream(obj.device))
        if obj.device.type == "cpu":
            return Device("cpu")
        raise InvalidArgumentError(
            f"record: a torch tensor on {obj.device} is on a device eventide has no backend for; "
            "record a torch.Event on its stream and pass that event instead")
    if module.startswith("cupy") and hasattr(obj, "device") and hasattr(obj, "data"):
        import cupy
        with cupy.cuda.Device(obj.device.id):
            return Stream(cupy.cuda.get_current_stream())
    if module.startswith("numba") and hasattr(obj, "stream") and hasattr(obj, "__cuda_array_interface__"):
        stream = obj.stream  # the array's own: a numba Stream, or 0 (the legacy default stream)
        if stream == 0 or stream is None:
            return Stream.from_native(0)
        return Stream(stream)
    if hasattr(obj, "__dlpack_device__"):
        kind, index = obj.__dlpack_device__()
        kind = int(kind)
        if kind in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
            return Device("cpu")
        if kind == _DLPACK_CUDA:
            device = _cuda_device(int(index))
            if device is None:
                raise InvalidArgumentError(f"record: {type(obj).__name__} is on cuda:{index}, which "
                                           "eventide has no device for here")
            # DLPack's stream handshake: the producer makes our stream wait for its work.
            s = Stream(device)
            obj.__dlpack__(stream=s.native_handle)
            return s
        raise InvalidArgumentError(f"record: {type(obj).__name__} lives on DLPack device type "
                                   f"{kind}, which eventide has no backend for")
    if hasattr(obj, "__array_interface__"):
        return Device("cpu")
    raise InvalidArgumentError(f"record: {obj!r} is not a tensor eventide can read")


def tensor_event(obj: Any) -> Event:
    """An event tied to the op that produced another library's tensor."""
    e = Event()
    e.record(obj)
    return e
