"""Markers: Event.record(stream) / record() / Stream.record_event() place a point at the end of
a stream. The timing idioms PyTorch and CuPy users write, on every state a stream can be in,
and the Python API around them: awaiting tensors, the async waits, timed tensor waits, the
stream arguments."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

import eventide as ev
from conftest import Gate, call_with_timeout


def sleep_on(stream: ev.Stream, seconds: float) -> None:
    """Holds `stream` for about `seconds`: it waits for a UserEvent a timer sets (an op of a
    known length would depend on the machine)."""
    u = ev.UserEvent()
    stream.wait(u)
    timer = threading.Timer(seconds, u.set)
    timer.daemon = True
    timer.start()


def run(coro_fn, timeout: float = 20.0):
    return call_with_timeout(lambda: asyncio.run(asyncio.wait_for(coro_fn(), timeout)),
                             timeout + 5)


# --- The timing idioms -------------------------------------------------------------------------

class TestTimingIdiom:
    def test_on_a_new_stream(self):
        s = ev.Stream("cpu")
        start, end = ev.Event(), ev.Event()
        start.record(s)
        with ev.stream(s):
            a = ev.rand(256, 256)
            b = a @ a
        end.record(s)
        call_with_timeout(end.synchronize)
        ms = start.elapsed_time(end)
        assert ms > 0.0
        assert b.ready

    def test_on_the_current_stream_with_record_of_nothing(self):
        s = ev.Stream("cpu")
        with s:
            start, end = ev.Event(), ev.Event()
            start.record()
            a = ev.rand(128, 128)
            _ = a @ a
            end.record()
        call_with_timeout(ev.synchronize)  # the device-wide spelling, as torch.cuda.synchronize
        assert end.completed
        assert start.elapsed_time(end) > 0.0

    def test_stream_record_event_of_an_existing_event(self):
        s = ev.Stream("cpu")
        start = ev.Event()
        assert s.record_event(start) is start
        end = s.record_event()
        call_with_timeout(end.wait)
        assert start.elapsed_time(end) >= 0.0

    def test_a_drained_stream_does_not_count_the_hosts_idle_time(self):
        s = ev.Stream("cpu")
        with s:
            ev.rand(64, 64)
        call_with_timeout(s.synchronize)
        time.sleep(0.3)
        start, end = ev.Event(), ev.Event()
        start.record(s)
        with s:
            ev.rand(4)
        end.record(s)
        call_with_timeout(end.wait)
        assert 0.0 <= start.elapsed_time(end) < 150.0  # not the 300 ms before the start
        assert start.time_elapsed() == 0.0  # one marker: a point

    def test_events_reused_in_a_loop_read_each_iteration(self):
        s = ev.Stream("cpu")
        start, end = ev.Event(), ev.Event()
        for _ in range(3):
            time.sleep(0.1)  # host work between iterations
            start.record(s)
            with s:
                ev.rand(16, 16)
            end.record(s)
            call_with_timeout(end.synchronize)
            assert start.elapsed_time(end) < 80.0

    def test_elapsed_time_before_the_end_finished_is_a_state_error(self):
        s = ev.Stream("cpu")
        start = s.record_event()
        sleep_on(s, 0.2)
        end = s.record_event()
        assert not end.query()
        with pytest.raises(ev.EventStateError, match="not finished"):
            start.elapsed_time(end)
        call_with_timeout(end.wait)
        assert start.elapsed_time(end) >= 150.0


# --- Markers ------------------------------------------------------------------------------

class TestMarkers:
    def test_a_marker_on_a_busy_stream_follows_the_work_before_it(self, gate: Gate):
        with gate:
            t = ev.rand(8)
        e = ev.Event()
        e.record(gate.stream)
        time.sleep(0.02)
        assert not e.query()  # the stream has not reached it
        gate.open()
        call_with_timeout(e.wait)
        assert t.ready

    def test_two_markers_on_one_event_span_the_time_between_them(self):
        s = ev.Stream("cpu")
        e = ev.Event()
        e.record(s)
        sleep_on(s, 0.05)
        e.record(s)
        call_with_timeout(e.wait)
        assert e.time_elapsed() >= 40_000.0  # microseconds, earliest .. latest marker

    def test_a_marker_after_a_failed_op_fails_with_its_cause(self):
        s = ev.Stream("cpu")
        u = ev.UserEvent()
        s.wait(u)
        e = s.record_event()
        u.fail(KeyError("boom"))
        with pytest.raises(ev.OpError) as info:
            call_with_timeout(e.wait)
        assert isinstance(info.value.__cause__, KeyError)

    def test_in_the_profile_a_marker_is_a_point(self):
        s = ev.Stream("cpu")
        with ev.profile() as prof:
            e = s.record_event()
            call_with_timeout(e.wait)
        (m,) = prof.ops
        assert m["is_marker"] and m["duration_us"] == 0.0


# --- Stream arguments ---------------------------------------------------------------------------

class TestStreamArguments:
    def test_a_cpu_stream_has_no_cuda_stream_protocol(self):
        s = ev.Stream("cpu")
        assert not hasattr(s, "__cuda_stream__")
        assert s.native_handle == 0

    def test_objects_that_are_not_streams_are_type_errors(self):
        e = ev.Event()
        with pytest.raises(TypeError, match="Event.record"):
            e.record(object())
        with pytest.raises(TypeError, match="Stream.wait"):
            ev.Stream("cpu").wait(42)
        with pytest.raises(TypeError, match="wait_stream"):
            ev.Stream("cpu").wait_stream("cpu")
        assert e.status == "empty"  # nothing half-done

    @pytest.mark.skipif(ev.is_available("cuda:0"), reason="checks the message where no GPU is")
    def test_a_foreign_cuda_stream_without_a_gpu_says_why(self):
        class Foreign:
            def __cuda_stream__(self):
                return (0, 12345)

        with pytest.raises(ev.InvalidArgumentError, match="no CUDA device"):
            ev.Stream(Foreign())
        with pytest.raises(ev.InvalidArgumentError, match="no CUDA device"):
            ev.Event().record(Foreign())
        with pytest.raises(ev.InvalidArgumentError):
            ev.Stream.from_native(12345)

    def test_a_bad_cuda_stream_protocol_is_refused(self):
        class Version1:
            def __cuda_stream__(self):
                return (1, 12345)

        class NotATuple:
            def __cuda_stream__(self):
                return 12345

        with pytest.raises(ev.InvalidArgumentError, match="version 1"):
            ev.Stream(Version1())
        with pytest.raises(TypeError, match="version, handle"):
            ev.Stream(NotATuple())

    def test_from_native_needs_an_int(self):
        with pytest.raises(TypeError, match="int"):
            ev.Stream.from_native("cpu", "not a handle")
        with pytest.raises(ev.InvalidArgumentError, match="cpu"):
            ev.Stream.from_native("cpu", 1)

    def test_stream_of_an_eventide_stream_is_that_stream(self):
        s = ev.Stream("cpu")
        assert ev.Stream(s) == s
        with ev.stream(s) as inner:
            assert inner == s
            assert ev.current_stream("cpu") == s


# --- Tensors ---------------------------------------------------------------------------------

class TestTensorWaits:
    def test_wait_with_a_timeout(self, gate: Gate):
        with gate:
            t = ev.rand(4)
        assert t.wait(timeout=0.02) is False
        gate.open()
        assert call_with_timeout(lambda: t.wait(timeout=10)) is True
        assert t.wait() is True

    def test_wait_raises_the_producers_error(self):
        u = ev.UserEvent()
        s = ev.Stream("cpu")
        s.wait(u)
        with s:
            t = ev.rand(4)
        u.fail(ValueError("no"))
        with pytest.raises(ev.OpError):
            call_with_timeout(lambda: t.wait(timeout=10))
        with pytest.raises(ev.OpError):
            t.wait(timeout=0)  # finished: the error, not a timeout

    def test_await_a_tensor(self, gate: Gate):
        async def main():
            with gate:
                t = ev.rand(4)
            task = asyncio.ensure_future(_await(t))
            await asyncio.sleep(0.02)
            assert not task.done()
            gate.open()
            await task
            return t.ready

        assert run(main) is True

    def test_await_a_failed_tensor_raises(self):
        async def main():
            u = ev.UserEvent()
            s = ev.Stream("cpu")
            s.wait(u)
            with s:
                t = ev.rand(4)
            u.fail(KeyError("k"))
            with pytest.raises(ev.OpError):
                await t

        run(main)

    def test_await_a_tensor_no_op_produced(self):
        async def main():
            t = ev.from_numpy(np.ones(3, dtype=np.float32))
            await t
            return True

        assert run(main) is True


async def _await(x):
    await x


# --- The async waits take what wait_all takes -----------------------------------------------------

class CustomEvent:
    """A user-written event class (the tutorial's): set() and wait()."""

    def __init__(self) -> None:
        self._flag = threading.Event()

    def set(self) -> None:
        self._flag.set()

    def wait(self, timeout=None) -> bool:
        return self._flag.wait(timeout)


class TestAsyncWaits:
    def test_wait_all_async_takes_events_tensors_and_custom_events(self, gate: Gate):
        async def main():
            with gate:
                t = ev.rand(4)
            e = ev.Event()
            e.record(ev.rand(2))
            custom = CustomEvent()
            task = asyncio.ensure_future(ev.wait_all_async([e, t, custom]))
            await asyncio.sleep(0.02)
            assert not task.done()
            gate.open()
            await asyncio.sleep(0.02)
            assert not task.done()
            custom.set()
            return await task

        assert run(main) is True

    def test_wait_all_async_times_out(self, gate: Gate):
        async def main():
            with gate:
                t = ev.rand(4)
            result = await ev.wait_all_async([t], timeout=0.02)
            gate.open()
            return result

        assert run(main) is False

    def test_wait_any_async_takes_tensors_and_custom_events(self, gate: Gate):
        async def main():
            with gate:
                t = ev.rand(4)
            custom = CustomEvent()
            loop = asyncio.get_running_loop()
            loop.call_later(0.02, custom.set)
            i = await ev.wait_any_async([t, custom])
            gate.open()
            return i

        assert run(main) == 1

    def test_the_sync_and_async_waits_refuse_the_same_objects(self):
        async def main():
            with pytest.raises(ev.InvalidArgumentError, match="wait_all_async"):
                await ev.wait_all_async([object()])
            with pytest.raises(ev.InvalidArgumentError, match="wait_any_async"):
                await ev.wait_any_async([object()])

        with pytest.raises(ev.InvalidArgumentError, match="wait_all"):
            ev.wait_all([object()])
        run(main)

    def test_wait_all_takes_tensors(self, gate: Gate):
        with gate:
            t = ev.rand(4)
        assert ev.wait_all([t], timeout=0.02) is False
        gate.open()
        assert call_with_timeout(lambda: ev.wait_all([t])) is True


# --- DLPack ----------------------------------------------------------------------------------

class TestDlpackStreamArgument:
    @pytest.mark.parametrize("bad", ["x", 1.5, True, object()])
    def test_a_stream_that_is_not_an_int_is_a_type_error(self, bad):
        t = ev.ones(3, device="cpu")
        call_with_timeout(t.wait)
        with pytest.raises(TypeError, match="stream"):
            t.__dlpack__(stream=bad)
