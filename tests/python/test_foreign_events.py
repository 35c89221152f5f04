"""Other libraries' events and tensors, on the CPU: stand-ins with the meaning of torch's.

``torch.cuda.Event.wait()`` and Numba's ``Event.wait(stream)`` make a *stream* wait; they never
block the host. An object like that must never be taken for a host wait: a ``wait_all`` that
called it would return while the work still runs. The stand-ins below behave as torch's
events do (``query()``, ``synchronize()``, ``wait(stream=None)`` that returns at once), with
their work finished by a timer, so every case of the PyTorch issue runs here without a GPU;
``test_torch_interop.py`` runs the real classes on the GPU machine.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

import eventide as ev
from conftest import BLOCK_TIMEOUT_S, call_with_timeout, wait_until


class StreamWaitEvent:
    """An event with torch's meaning of wait(): a stream waits, the host does not."""

    def __init__(self, after: float | None = 0.15, error: Exception | None = None) -> None:
        self._done = threading.Event()
        self._error = error
        self.wait_calls = 0
        self.sync_calls = 0
        if after is not None:
            threading.Timer(after, self._done.set).start()

    def finish(self) -> None:
        self._done.set()

    def query(self) -> bool:
        return self._done.is_set()

    def synchronize(self) -> None:
        self.sync_calls += 1
        self._done.wait(BLOCK_TIMEOUT_S)
        if self._error is not None:
            raise self._error

    def wait(self, stream=None) -> None:  # torch: the current stream waits; returns at once
        self.wait_calls += 1

    def record(self, stream=None) -> None:
        pass


class _MpsDevice:
    type = "mps"
    index = 0


class TorchMpsLikeEvent(StreamWaitEvent):
    """torch.Event("mps") as eventide sees it: a torch module, an event_id, a device eventide
    has no backend for."""

    __module__ = "torch"
    device = _MpsDevice()
    event_id = 1234


class HostWaitEvent:
    """The tutorial's custom event class: wait() blocks the host."""

    def __init__(self, after: float) -> None:
        self._done = threading.Event()
        threading.Timer(after, self._done.set).start()

    def wait(self, timeout=None) -> bool:
        return self._done.wait(timeout)


@pytest.mark.parametrize("make", [StreamWaitEvent, TorchMpsLikeEvent])
def test_wait_all_blocks_until_a_stream_wait_event_has_finished(make):
    e = make(after=0.15)
    start = time.monotonic()
    assert call_with_timeout(lambda: ev.wait_all([e])) is True
    assert time.monotonic() - start >= 0.1
    assert e.query()
    assert e.wait_calls == 0  # its wait() is a stream wait: never called for a host wait


def test_a_timeout_returns_false_while_the_foreign_work_runs():
    e = StreamWaitEvent(after=None)
    assert ev.wait_all([e], timeout=0.02) is False
    assert ev.wait_any([e], timeout=0.02) is None
    e.finish()
    assert call_with_timeout(lambda: ev.wait_all([e], timeout=BLOCK_TIMEOUT_S)) is True


def test_wait_any_among_eventide_and_foreign_events():
    never = ev.UserEvent()
    e = StreamWaitEvent(after=0.05)
    assert call_with_timeout(lambda: ev.wait_any([never, e], timeout=BLOCK_TIMEOUT_S)) == 1
    never.set()


def test_a_failed_synchronize_is_raised_by_wait_all():
    e = StreamWaitEvent(after=0.05, error=RuntimeError("the device broke"))
    with pytest.raises(RuntimeError, match="the device broke"):
        call_with_timeout(lambda: ev.wait_all([e]))


def test_the_async_forms_and_callbacks_take_foreign_events():
    async def main():
        e = StreamWaitEvent(after=0.05)
        assert await asyncio.wait_for(ev.wait_all_async([e]), BLOCK_TIMEOUT_S) is True
        assert e.query()
        f = StreamWaitEvent(after=0.05)
        assert await asyncio.wait_for(ev.wait_any_async([ev.UserEvent(), f]), BLOCK_TIMEOUT_S) == 1
        assert e.wait_calls == 0 and f.wait_calls == 0

    asyncio.run(main())


def test_a_stream_waits_for_a_foreign_event_without_the_host():
    e = StreamWaitEvent(after=0.15)
    s = ev.Stream()
    start = time.monotonic()
    s.wait(e)  # returns at once: the stream's later work is held, not the caller
    assert time.monotonic() - start < 0.1
    seen = []
    with s:
        out = ev.ones(4)
    out.add_completion_callback(lambda: seen.append(e.query()))
    call_with_timeout(out.wait)
    wait_until(lambda: seen)
    assert seen == [True]  # the op ran only after the foreign event had finished
    s.wait_event(StreamWaitEvent(after=0.0))


def test_custom_host_wait_classes_keep_working():
    e = HostWaitEvent(after=0.05)
    assert call_with_timeout(lambda: ev.wait_all([ev.ones(2), e])) is True
    assert ev.wait_all([HostWaitEvent(after=5.0)], timeout=0.01) is False


def test_an_object_whose_wait_is_a_stream_wait_and_no_synchronize_is_refused():
    class OnlyStreamWait:
        def wait(self, stream=None):
            pass

    with pytest.raises(ev.InvalidArgumentError, match="makes a stream wait"):
        ev.wait_all([OnlyStreamWait()])


def test_wait_any_points_objects_with_only_wait_to_the_async_form():
    with pytest.raises(ev.InvalidArgumentError, match="wait_any_async"):
        ev.wait_any([HostWaitEvent(after=0.0)])


def test_record_takes_pytorchs_stream_keyword():
    s = ev.Stream()
    e = ev.Event()
    with s:
        ev.ones(8)
    e.record(stream=s)
    call_with_timeout(e.wait)
    assert e.completed
    with pytest.raises(TypeError, match="not both"):
        e.record(ev.ones(2), stream=s)
    e.record(stream=None)  # the current stream, as record()
    call_with_timeout(e.wait)


def test_record_and_wait_all_take_host_arrays_of_other_libraries():
    a = np.ones(4, dtype=np.float32)
    e = ev.Event()
    e.record(a)  # host memory: written when its op returned, nothing to wait for
    assert e.completed
    assert ev.wait_all([a, ev.ones(2)], timeout=BLOCK_TIMEOUT_S) is True
    assert ev.wait_any([a]) == 0


def test_event_takes_pytorchs_keywords():
    e = ev.Event(enable_timing=False, blocking=True, interprocess=True)
    assert (e.enable_timing, e.blocking, e.interprocess) == (False, True, True)
    assert (ev.Event().blocking, ev.Event().interprocess) == (False, False)
    u = ev.UserEvent()
    with ev.stream(ev.Stream()) as s:
        s.wait(u)
        e.record()
    threading.Timer(0.05, u.set).start()
    assert call_with_timeout(lambda: e.wait(BLOCK_TIMEOUT_S)) is True
    x = ev.export_event(e)  # interprocess events are exported as any event is
    assert x.handle


def test_event_wait_of_a_stream_points_to_stream_wait():
    e = ev.Event()
    e.record(ev.ones(2))
    with pytest.raises(ev.InvalidArgumentError, match=r"stream.wait\(event\)"):
        e.wait(ev.Stream())


def test_cpu_streams_have_one_priority():
    assert ev.stream_priority_range("cpu") == (0, 0)
    assert ev.Stream("cpu", priority=-1).priority == 0  # clamped, as torch clamps
    assert ev.Stream("cpu").priority == 0


def test_native_events_need_a_cuda_device():
    if any(d.type == "cuda" for d in ev.devices()):
        pytest.skip("this machine has a GPU: test_torch_interop.py covers native events")
    with pytest.raises(ev.InvalidArgumentError, match="CUDA"):
        ev.Event.from_native(0x1234)
    e = ev.Event()
    e.record(ev.ones(2))
    with pytest.raises(ev.EventStateError, match="cudaEvent_t"):
        e.cuda_event
    with pytest.raises(ev.EventStateError, match="empty"):
        ev.Event().native_handle()
    with pytest.raises(TypeError):
        ev.Event.from_native("not a handle")
