"""The profiler from Python: ``ev.profile()`` (the context manager), ``ev.Profiler`` and the
``ev.Profile`` it returns, and its two exports (the Chrome trace, the timeline page).

Blocking: the end of a ``with ev.profile()`` block waits for the recorded work, at most the
profile's ``timeout`` (10 s by default); tests whose work could stay unfinished pass a small one.
Every other wait goes through ``call_with_timeout``.

One profiler runs at a time per process, so a test that leaked one would break the next:
every test here stops what it starts (a ``with`` block, or ``try/finally`` around ``stop()``).

Over 600 lines: the profiler's whole Python surface in one file, one section per part (the
context manager, the Profiler, each export), as its C++ tests are in one binary.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter, defaultdict
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Callable

import pytest

import eventide as ev
from conftest import Gate, call_with_timeout

CPU = ev.Device("cpu")
OP_KEYS = {"id", "name", "stream", "device", "seq", "detail", "is_wait", "is_marker", "finished",
           "start_us", "end_us", "duration_us", "error", "waits_for", "parts"}


def ready(*shape: int, dtype: Any = ev.float32) -> ev.Tensor:
    """A tensor whose producing op has finished (made before a profile: not in it)."""
    t = ev.randn(*shape, dtype=dtype)
    call_with_timeout(t.wait)
    return t


def wait(e: Any) -> None:
    """``e.wait()`` (an event or a tensor), failing the test if it hangs."""
    call_with_timeout(e.wait)


def recorded(t: ev.Tensor) -> ev.Event:
    e = ev.Event()
    e.record(t)
    return e


def stream_name(s: ev.Stream) -> str:
    """"cpu stream 3": how the profile names a stream (its repr without the brackets)."""
    return repr(s).removeprefix("<eventide.Stream ").removesuffix(">")


def op_by_id(prof: Any) -> dict:
    return {op["id"]: op for op in prof.ops}


def ops_named(prof: Any, name: str) -> list:
    return [op for op in prof.ops if op["name"] == name]


def blocked_waiter(wait_fn: Callable[[], Any]) -> threading.Thread:
    """Starts a daemon thread that calls ``wait_fn()``; returns once the thread is about to
    call it (give it a moment more to block: tests sleep before they release it)."""
    about_to_wait = threading.Event()

    def body() -> None:
        about_to_wait.set()
        wait_fn()

    t = threading.Thread(target=body, daemon=True)
    t.start()
    assert about_to_wait.wait(20), "the waiter thread did not start"
    return t


def last_callback_done(event: ev.Event) -> Callable[[], None]:
    """Adds a last callback to `event` and returns a function that blocks until it has run.

    The runtime records a callback when it has returned, just before it runs the next one of
    the same device: so once this one has started, every callback added before it is in the
    profile (if the profile was still recording)."""
    flag = threading.Event()
    event.add_callback(flag.set)
    return lambda: call_with_timeout(lambda: flag.wait(10) or pytest.fail("callback never ran"))


# --- ops -------------------------------------------------------------------------------------

class TestOps:
    def test_op_has_name_stream_device_shapes_and_times(self):
        a = ready(64, 32)
        b = ready(32, 16)
        c = ready(64, 16, dtype=ev.float64)
        d = ready(16, 16)
        s = ev.Stream("cpu")
        with ev.profile() as prof:
            with ev.stream(s):
                x = ev.matmul(a, b)
                y = ev.matmul(x, d)
            z = ev.add(c, c)
            for t in (y, z):
                wait(t)
        ops = prof.ops
        assert [op["name"] for op in ops] == ["matmul", "matmul", "add"]
        assert [op["id"] for op in ops] == [1, 2, 3]  # in enqueue order
        for op in ops:
            assert set(op) == OP_KEYS
            assert op["device"] == CPU
            assert op["finished"] is True and op["error"] is None and op["is_wait"] is False
            assert op["waits_for"] == []  # same stream, or inputs from before the profile
            assert op["parts"] == []  # (a graph replay's alone)
            assert 0 <= op["start_us"] <= op["end_us"] <= prof.duration_us
            assert op["duration_us"] == pytest.approx(op["end_us"] - op["start_us"])
        m1, m2, add = ops
        assert m1["stream"] == m2["stream"] == stream_name(s)
        assert add["stream"] == stream_name(ev.default_stream()) != m1["stream"]
        assert (m1["seq"], m2["seq"]) == (1, 2)  # a fresh stream numbers from 1
        assert m1["detail"] == "f32[64, 32], f32[32, 16] -> f32[64, 16]"
        assert m2["detail"] == "f32[64, 16], f32[16, 16] -> f32[64, 16]"
        assert add["detail"] == "f64[64, 16], f64[64, 16] -> f64[64, 16]"
        # In order on their stream: the second starts after the first has ended.
        assert m2["start_us"] >= m1["end_us"]

    def test_creation_ops_in_the_block_are_recorded(self):
        with ev.profile() as prof:
            t = ev.zeros(3, 5, dtype=ev.float64)
            wait(t)
        assert len(prof.ops) == 1
        assert prof.ops[0]["detail"] == "-> f64[3, 5]"

    def test_op_times_are_the_times_of_time_elapsed(self):
        a = ready(128, 128)
        with ev.profile() as prof:
            x = ev.matmul(a, a)
            e1 = recorded(x)
            y = ev.mul(x, x)
            e2 = recorded(y)
            wait(e2)
        m, mul = prof.ops
        # The same device times: to the nanosecond (the profile keeps three decimals of µs).
        assert e1.time_elapsed() == pytest.approx(m["duration_us"], abs=2e-3)
        assert e2.time_elapsed() == pytest.approx(mul["duration_us"], abs=2e-3)
        # elapsed_time: milliseconds from one event's completion to the other's.
        assert e1.elapsed_time(e2) == pytest.approx((mul["end_us"] - m["end_us"]) / 1000, abs=2e-6)

    def test_failed_op_is_finished_with_its_error(self, gate: Gate):
        a = ready(8, 8)
        with ev.profile() as prof:
            with gate:
                x = ev.mul(a, a)
            gate.fail(ValueError("boom"))
            with pytest.raises(ev.OpError):
                wait(x)
        (mul,) = prof.ops  # the gate's wait was enqueued before the profile
        assert mul["finished"] is True
        assert "did not run" in mul["error"] and "boom" in mul["error"]


# --- event records ---------------------------------------------------------------------------

class TestRecords:
    def test_a_record_names_the_op_it_tied(self):
        a = ready(16, 16)
        with ev.profile() as prof:
            x = ev.matmul(a, a)
            e = recorded(x)
            e.record(ev.add(x, a))  # the same event again, on a later op
            wait(e)
        by_id = op_by_id(prof)
        recs = prof.records
        assert len(recs) == 2
        assert recs[0]["event"] == recs[1]["event"] == 1  # one event, one small id
        assert by_id[recs[0]["op"]]["name"] == "matmul"
        assert by_id[recs[1]["op"]]["name"] == "add"
        for r in recs:
            assert set(r) == {"event", "event_name", "op", "at_us"}
            assert r["event_name"].startswith("<Event ")
            assert 0 <= r["at_us"] <= prof.duration_us
        assert recs[0]["at_us"] <= recs[1]["at_us"]

    def test_events_get_small_ids_in_order_of_first_record(self):
        a = ready(4, 4)
        with ev.profile() as prof:
            events = [recorded(ev.add(a, a)) for _ in range(3)]
            for e in events:
                wait(e)
        assert [r["event"] for r in prof.records] == [1, 2, 3]
        assert all(r["op"] in op_by_id(prof) for r in prof.records)

    def test_a_record_of_older_work_ties_no_op_and_a_stream_record_is_a_marker(self):
        before = ready(4, 4)  # its op ran before the profile
        idle = ev.Stream("cpu")
        with ev.profile() as prof:
            e_old = recorded(before)
            e_idle = ev.Event()
            e_idle.record(idle)
            assert e_old.poll() and e_idle.poll()
        (marker,) = prof.ops
        assert marker["is_marker"] and marker["name"] == "marker" and not marker["is_wait"]
        assert marker["stream"] == stream_name(idle)
        assert marker["start_us"] == marker["end_us"]  # a point
        assert [r["op"] for r in prof.records] == [None, marker["id"]]


# --- stream waits ----------------------------------------------------------------------------

class TestStreamWaits:
    # Only work still pending when the wait is enqueued is waited for: the gate holds it.

    def test_a_stream_wait_is_a_wait_op_pointing_at_what_it_waited_for(self, gate: Gate):
        a = ready(128, 128)
        s2 = ev.Stream("cpu")
        with ev.profile() as prof:
            with gate:
                x = ev.matmul(a, a)
            e = recorded(x)
            s2.wait(e)
            with ev.stream(s2):
                y = ev.add(x, a)
            gate.open()
            wait(y)
        by_id = op_by_id(prof)
        (matmul,) = ops_named(prof, "matmul")
        (w,) = [op for op in prof.ops if op["is_wait"]]
        (add,) = ops_named(prof, "add")
        assert w["name"] == "wait"
        assert w["stream"] == add["stream"] != matmul["stream"]
        assert w["waits_for"] == [matmul["id"]]
        assert all(i in by_id for i in w["waits_for"])
        (rec,) = prof.records
        assert w["detail"] == f"event {rec['event']}"
        # The op after the wait depends on the matmul too (it reads x).
        assert add["waits_for"] == [matmul["id"]]
        # A wait on the CPU lasts until what it waited for had finished.
        assert w["finished"] and w["start_us"] is not None
        assert w["end_us"] >= matmul["end_us"]
        assert add["start_us"] >= w["end_us"]

    def test_stream_on_stream_wait(self, gate: Gate):
        a = ready(64, 64)
        s2 = ev.Stream("cpu")
        with ev.profile() as prof:
            with gate:
                ev.matmul(a, a)
            s2.wait(gate.stream)  # a marker on the gated stream, and a wait for it
            gate.open()
            call_with_timeout(s2.synchronize)
        (matmul,) = ops_named(prof, "matmul")
        (marker,) = [op for op in prof.ops if op["is_marker"]]
        waits = [op for op in prof.ops if op["is_wait"]]
        assert marker["stream"] == matmul["stream"] and marker["seq"] > matmul["seq"]
        assert len(waits) == 1 and waits[0]["waits_for"] == [marker["id"]]
        assert waits[0]["stream"] != matmul["stream"]
        assert marker["start_us"] >= matmul["end_us"]


# --- host waits ------------------------------------------------------------------------------

# SLICE_NOTE: Python waits in slices of 20 ms (to see Ctrl-C); the package makes the slices of
# one wait one host wait for the profiler (core HostWaitGroup), however long taking the GIL back
# takes, and finished even when its last slice found the work done without blocking.
# test_one_python_wait_is_one_host_wait_under_gil_contention checks that. The other tests open
# their gates half-way through a slice (after 50, 150 ms, ...) all the same, so that they would
# not depend on it.

class TestHostWaits:
    def test_event_wait_from_a_thread_is_one_host_wait(self, gate: Gate):
        a = ready(8, 8)
        hold_s = 0.15  # mid-slice: see SLICE_NOTE
        with ev.profile() as prof:
            with gate:
                x = ev.mul(a, a)
            e = recorded(x)
            waiter = blocked_waiter(e.wait)
            time.sleep(hold_s)
            gate.open()
            waiter.join(20)
            assert not waiter.is_alive()
        (mul,) = prof.ops
        (rec,) = prof.records
        # Python waits in slices of 20 ms (for Ctrl-C): still one wait in the profile.
        (hw,) = prof.host_waits
        assert set(hw) == {"event", "thread", "start_us", "end_us", "finished", "ops"}
        assert hw["event"] == rec["event"]
        assert hw["ops"] == [mul["id"]]
        assert hw["thread"] == "thread 1"
        assert hw["finished"] is True
        assert hw["end_us"] - hw["start_us"] >= (hold_s - 0.05) * 1e6
        assert hw["start_us"] <= mul["end_us"] <= hw["end_us"] <= prof.duration_us

    def test_a_wait_that_times_out_is_unfinished(self, gate: Gate):
        a = ready(8, 8)
        with ev.profile() as prof:
            with gate:
                x = ev.mul(a, a)
            e = recorded(x)
            assert call_with_timeout(lambda: e.wait(timeout=0.05)) is False
            gate.open()
        first = prof.host_waits[0]  # the wait after the gate opened is there if it blocked
        assert first["finished"] is False
        assert first["end_us"] - first["start_us"] >= 40_000
        assert first["event"] == prof.records[0]["event"] and first["ops"] == [prof.ops[0]["id"]]
        assert first["end_us"] < prof.ops[0]["end_us"]  # it gave up before the op ran

    def test_tensor_and_stream_waits_name_the_op_not_an_event(self, gate: Gate):
        a = ready(8, 8)
        with ev.profile() as prof:
            with gate:
                x = ev.mul(a, a)
                ev.add(a, a)  # the stream's last op
            waiter = blocked_waiter(x.wait)
            time.sleep(0.02)
            syncer = blocked_waiter(gate.stream.synchronize)
            time.sleep(0.03)  # both opened mid-slice: see SLICE_NOTE
            gate.open()
            for t in (waiter, syncer):
                t.join(20)
                assert not t.is_alive()
        mul, add = prof.ops
        tensor_wait, stream_wait = prof.host_waits  # in order of their start
        assert tensor_wait["event"] == 0 and tensor_wait["ops"] == [mul["id"]]
        assert stream_wait["event"] == 0 and stream_wait["ops"] == [add["id"]]
        assert tensor_wait["thread"] != stream_wait["thread"]
        assert tensor_wait["finished"] and stream_wait["finished"]

    def test_a_wait_on_finished_work_is_not_recorded(self):
        a = ready(8, 8)
        with ev.profile() as prof:
            x = ev.add(a, a)
            e = recorded(x)
            wait(e)
            for _ in range(3):
                assert e.wait() is True
                x.wait()
                # (The stream's: a device-wide synchronize waits on a GPU for all work on the
                # device, other libraries' too, so it is a wait each time.)
                call_with_timeout(ev.current_stream().synchronize)
        assert len(prof.host_waits) <= 1  # only the first, if the add was still running

    def test_one_python_wait_is_one_host_wait_under_gil_contention(self, gate: Gate):
        a = ready(8, 8)
        with ev.profile() as prof:
            with gate:
                x = ev.mul(a, a)
            waiter = blocked_waiter(recorded(x).wait)
            end = time.monotonic() + 0.15
            while time.monotonic() < end:  # this thread holds the GIL as long as it may
                pass
            gate.open()
            waiter.join(20)
            assert not waiter.is_alive()
        (hw,) = prof.host_waits
        assert hw["finished"] is True
        assert hw["end_us"] >= prof.ops[0]["end_us"]

    @pytest.mark.parametrize("n_threads", [1, 2, 3, 7])
    def test_waiting_threads_are_numbered(self, gate: Gate, n_threads):
        a = ready(8, 8)
        with ev.profile() as prof:
            with gate:
                x = ev.mul(a, a)
            events = [recorded(x) for _ in range(n_threads)]
            threads = [blocked_waiter(e.wait) for e in events]
            time.sleep(0.19)  # every waiter is in wait() by now; mid-slice: see SLICE_NOTE
            gate.open()
            for t in threads:
                t.join(20)
                assert not t.is_alive()
        waits = prof.host_waits
        assert len(waits) == n_threads
        assert sorted(w["thread"] for w in waits) == sorted(f"thread {i}" for i in range(1, n_threads + 1))
        assert sorted(w["event"] for w in waits) == sorted(r["event"] for r in prof.records)
        assert all(w["finished"] and w["ops"] == [prof.ops[0]["id"]] for w in waits)


# --- callbacks -------------------------------------------------------------------------------

class TestCallbacks:
    def test_event_callback_run_is_recorded(self):
        a = ready(64, 64)
        ran = []
        with ev.profile() as prof:
            x = ev.matmul(a, a)
            e = recorded(x)
            e.add_callback(lambda: ran.append(threading.current_thread().name))
            last_callback_done(e)()
        assert len(ran) == 1
        (rec,) = prof.records
        mine = [c for c in prof.callbacks if c["event"] == rec["event"]]
        assert len(mine) >= 1  # ours, maybe the waiting one too
        cb = mine[0]
        assert set(cb) == {"event", "thread", "start_us", "end_us"}
        assert cb["thread"] == "callbacks cpu"
        assert prof.ops[0]["end_us"] <= cb["start_us"] <= cb["end_us"] <= prof.duration_us

    def test_tensor_completion_callback_is_recorded_under_its_event(self):
        a = ready(64, 64)
        done = threading.Event()
        with ev.profile() as prof:
            x = ev.matmul(a, a)
            x.add_completion_callback(done.set)
            # The completion callback's own event is internal: follow it with one of ours on
            # the same device's callback thread, to know it has been recorded.
            later = recorded(ev.add(x, a))
            after = last_callback_done(later)
            call_with_timeout(lambda: done.wait(10))
            after()
        (matmul,) = ops_named(prof, "matmul")
        # The completion callback's event was recorded on the matmul, inside the profile.
        tied = {r["event"] for r in prof.records if r["op"] == matmul["id"]}
        assert len(tied) == 1
        assert [c["event"] for c in prof.callbacks if c["event"] in tied] == list(tied)

    def test_a_callback_running_when_the_profile_ends_is_not_in_it(self):
        a = ready(4, 4)
        inside, release = threading.Event(), threading.Event()
        with ev.profile() as prof:
            e = recorded(ev.add(a, a))
            e.add_callback(lambda: (inside.set(), release.wait(20)))
            call_with_timeout(lambda: inside.wait(10))
        release.set()
        assert prof.callbacks == []


# --- several threads -------------------------------------------------------------------------

@pytest.mark.parametrize("n_threads", [1, 2, 3, 7])
def test_work_from_every_thread_is_recorded(n_threads):
    per_thread = 4
    a = ready(32, 32)
    streams = [ev.Stream("cpu") for _ in range(n_threads)]
    shared = ev.Stream("cpu")
    go = threading.Barrier(n_threads)
    errors: list = []

    def worker(s: ev.Stream) -> None:
        try:
            go.wait(20)
            with ev.stream(s):
                x = a
                for _ in range(per_thread):
                    x = ev.matmul(x, a)
            with ev.stream(shared):
                ev.add(a, a)
            e = recorded(x)
            assert e.wait(timeout=20)
        except BaseException as exc:  # noqa: BLE001  (checked below)
            errors.append(exc)

    with ev.profile() as prof:
        threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in streams]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
            assert not t.is_alive()
        call_with_timeout(shared.synchronize)
    assert errors == []
    ops = prof.ops
    assert len(ops) == n_threads * (per_thread + 1)
    assert sorted(op["id"] for op in ops) == list(range(1, len(ops) + 1))
    assert all(op["finished"] and op["start_us"] is not None for op in ops)
    by_stream = defaultdict(list)
    for op in ops:
        by_stream[op["stream"]].append(op)
    assert len(by_stream) == n_threads + 1
    for stream_ops in by_stream.values():
        # Ids are given in enqueue order, so a stream's ops by id are its ops by seq, and
        # they ran one after the other.
        stream_ops.sort(key=lambda op: op["id"])
        assert [op["seq"] for op in stream_ops] == sorted(op["seq"] for op in stream_ops)
        assert len({op["seq"] for op in stream_ops}) == len(stream_ops)
        for before, after in zip(stream_ops, stream_ops[1:]):
            assert after["start_us"] >= before["end_us"]
    assert Counter(len(v) for v in by_stream.values()) == (
        Counter({per_thread: n_threads, n_threads: 1}) if per_thread != n_threads
        else Counter({per_thread: n_threads + 1}))
    assert len(prof.records) == n_threads
    assert {r["op"] for r in prof.records} <= {op["id"] for op in ops}


# --- the profile's life ----------------------------------------------------------------------

class TestLifecycle:
    def test_the_profile_exists_only_after_the_block(self, tmp_path: Path):
        prof = ev.profile()
        with pytest.raises(ev.EventStateError, match="not started"):
            prof.profile
        assert repr(prof) == "<eventide.profile not started>"
        with prof:
            assert repr(prof) == "<eventide.profile recording>"
            for attr in ("profile", "ops", "records", "host_waits", "callbacks", "duration_us"):
                with pytest.raises(ev.EventStateError, match="still recording"):
                    getattr(prof, attr)
            with pytest.raises(ev.EventStateError):
                prof.export_chrome_trace(tmp_path / "never-written.json")
        assert not (tmp_path / "never-written.json").exists()
        assert isinstance(prof.profile, ev.Profile)
        assert prof.ops == [] and prof.duration_us > 0
        assert repr(prof).startswith("<eventide.profile 0 ops on 0 streams, 0 records")

    def test_a_second_profile_at_once_is_a_state_error(self):
        a = ready(4, 4)
        with ev.profile() as outer:
            ev.add(a, a)
            with pytest.raises(ev.EventStateError, match="another one is recording"):
                with ev.profile():
                    pass
            with pytest.raises(ev.EventStateError):
                ev.Profiler()
            # From another thread too.
            with pytest.raises(ev.EventStateError):
                call_with_timeout(lambda: ev.profile().__enter__())
            ev.mul(a, a)
            call_with_timeout(ev.synchronize)
        # The outer one was not disturbed.
        assert [op["name"] for op in outer.ops] == ["add", "mul"]
        # And once it has ended, a new one starts.
        with ev.profile() as again:
            ev.add(a, a)
            call_with_timeout(ev.synchronize)
        assert [op["name"] for op in again.ops] == ["add"]

    def test_entering_one_profile_twice_is_a_state_error(self):
        prof = ev.profile()
        with prof:
            with pytest.raises(ev.EventStateError, match="entered already"):
                with prof:
                    pass
        first = prof.profile
        with pytest.raises(ev.EventStateError, match="entered already"):
            with prof:
                pass
        assert prof.profile is first  # still the first one's

    def test_an_exception_in_the_block_still_takes_the_profile(self):
        a = ready(4, 4)
        with pytest.raises(KeyError):
            with ev.profile() as prof:
                wait(ev.add(a, a))
                raise KeyError("mine")
        assert [op["name"] for op in prof.ops] == ["add"]
        with ev.profile():  # and the profiler is free again
            pass

    def test_nothing_is_recorded_after_the_block(self):
        a = ready(16, 16)
        with ev.profile() as prof:
            wait(ev.add(a, a))
        trace = prof.chrome_trace()
        host_waits = prof.host_waits  # the add's, if it was still running
        gate = Gate()
        with gate:
            x = ev.matmul(a, a)
        e = recorded(x)
        e.add_callback(lambda: None)
        waiter = blocked_waiter(e.wait)
        time.sleep(0.01)
        gate.open()
        waiter.join(20)
        done = last_callback_done(e)
        done()
        assert [op["name"] for op in prof.ops] == ["add"]
        assert prof.records == [] and prof.host_waits == host_waits and prof.callbacks == []
        assert prof.chrome_trace() == trace
        # A later profile starts from nothing: its own ids, none of the earlier work.
        with ev.profile() as later:
            wait(ev.mul(a, a))
        assert [(op["id"], op["name"]) for op in later.ops] == [(1, "mul")]

    def test_work_from_before_the_profile_has_no_arrow(self, gate: Gate):
        a = ready(8, 8)
        with gate:
            early = ev.mul(a, a)  # enqueued before the profile, held back
        with ev.profile() as prof:
            late = ev.add(early, a)  # on the default stream: depends on `early`
            gate.open()
            wait(late)
        (add,) = prof.ops
        assert add["waits_for"] == []

    def test_profiler_directly(self):
        a = ready(4, 4)
        profiler = ev.Profiler()
        try:
            wait(ev.add(a, a))
        finally:
            p = call_with_timeout(lambda: profiler.stop(5))
        assert isinstance(p, ev.Profile)
        assert [op["name"] for op in p.ops] == ["add"]
        assert repr(p).startswith("<eventide.Profile: 1 op on 1 stream, 0 records, ")
        with pytest.raises(ev.EventStateError, match="stopped already"):
            profiler.stop()

    def test_profiler_stop_checks_its_timeout(self):
        profiler = ev.Profiler()
        try:
            with pytest.raises(TypeError, match="timeout"):
                profiler.stop("soon")
            with pytest.raises(ev.InvalidArgumentError, match="timeout"):
                profiler.stop(-1)
        finally:
            p = call_with_timeout(lambda: profiler.stop(5))  # a bad argument did not stop it
        assert p.ops == []

    def test_a_dropped_profiler_stops_recording(self):
        profiler = ev.Profiler()
        del profiler  # never stopped: its destructor stops it
        with ev.profile() as prof:
            pass
        assert prof.ops == []


@pytest.mark.time_limit(30)
def test_a_user_event_nobody_sets_does_not_hang_the_end():
    a = ready(8, 8)
    user = ev.UserEvent()
    s = ev.Stream("cpu")
    s.wait(user)  # before the profile: the wait itself is not in it
    prof = ev.profile(timeout=0.2)

    def run() -> float:
        with prof:
            done = ev.add(a, a)
            with ev.stream(s):
                held = ev.mul(a, a)
                ev.add(held, a)  # behind it on its stream
            wait(done)
            start = time.monotonic()
        return time.monotonic() - start

    try:
        took = call_with_timeout(run, 10)
    finally:
        user.set()
    assert 0.15 <= took < 5
    done, held, after = prof.ops
    assert done["finished"] is True and done["start_us"] is not None
    for op in (held, after):
        assert op["finished"] is False
        assert op["start_us"] is None and op["end_us"] is None and op["duration_us"] is None
        assert op["error"] is None
    assert prof.duration_us >= 200_000
    trace = json.loads(prof.chrome_trace())["traceEvents"]
    unfinished = [e for e in trace if e.get("cat") == "unfinished"]
    assert sorted(e["args"]["id"] for e in unfinished) == [held["id"], after["id"]]
    assert all(e["ph"] == "i" and e["ts"] == pytest.approx(prof.duration_us) for e in unfinished)
    assert [e["args"]["id"] for e in trace if e.get("cat") in ("op", "wait")] == [done["id"]]
    bars = TimelinePage.parse(prof.timeline_html())
    assert [b["data-id"] for b in bars.bars("op", "wait")] == [str(done["id"])]


def test_a_wait_on_a_user_event_nobody_sets_is_unfinished():
    a = ready(8, 8)
    user = ev.UserEvent()
    s = ev.Stream("cpu")
    try:
        with ev.profile(timeout=0.1) as prof:
            s.wait(user)
            with ev.stream(s):
                ev.add(a, a)
    finally:
        user.set()
    w, add = prof.ops
    assert w["is_wait"] and not w["finished"] and w["start_us"] is None
    assert w["detail"].startswith("event ")
    assert not add["finished"]


# --- the Chrome trace ------------------------------------------------------------------------

def busy_profile(gate: Gate) -> ev.profile:
    """Two streams joined by an event wait, a dependency, a host wait from a thread, a callback:
    every kind of thing the exporters draw."""
    a = ready(128, 128)
    s2 = ev.Stream("cpu")
    with ev.profile() as prof:
        with gate:  # held until the waiter waits: so the wait and the add wait for `x`
            x = ev.matmul(a, a)
            x = ev.matmul(x, a)
            g = ev.mul(a, a)
        e = recorded(x)
        s2.wait(e)
        with ev.stream(s2):
            y = ev.add(x, a)
        waiter = blocked_waiter(recorded(g).wait)
        time.sleep(0.05)  # mid-slice: see SLICE_NOTE
        gate.open()
        waiter.join(20)
        assert not waiter.is_alive()
        e_y = recorded(y)
        e_y.add_callback(lambda: None)
        last_callback_done(e_y)()
        wait(y)
    assert prof.host_waits and prof.callbacks
    return prof


class Trace:
    """A Chrome trace, parsed, and its events by kind."""

    def __init__(self, text: str) -> None:
        doc = json.loads(text)
        assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
        self.doc = doc
        self.events = doc["traceEvents"]
        self.meta = [e for e in self.events if e["ph"] == "M"]
        self.slices = [e for e in self.events if e["ph"] == "X"]
        self.flows = [e for e in self.events if e["ph"] in ("s", "f")]
        self.marks = [e for e in self.events if e["ph"] == "i"]
        assert len(self.meta) + len(self.slices) + len(self.flows) + len(self.marks) == len(self.events)

    def thread_names(self) -> dict:
        return {(e["pid"], e["tid"]): e["args"]["name"] for e in self.meta if e["name"] == "thread_name"}

    def process_names(self) -> dict:
        return {e["pid"]: e["args"]["name"] for e in self.meta if e["name"] == "process_name"}

    def op_slice(self, op_id: int) -> dict:
        (s,) = [e for e in self.slices if e["cat"] in ("op", "wait") and e["args"]["id"] == op_id]
        return s

    def flow_pairs(self) -> list:
        """[{"s": start, "f": finish}], checking that each id has exactly one of each."""
        by_id: dict = defaultdict(dict)
        for f in self.flows:
            assert f["ph"] not in by_id[f["id"]], f"two '{f['ph']}' events for flow {f['id']}"
            by_id[f["id"]][f["ph"]] = f
        for flow_id, pair in by_id.items():
            assert set(pair) == {"s", "f"}, f"flow {flow_id} is not a pair: {pair}"
        return list(by_id.values())


def finished_host_wait_arrows(prof: Any) -> int:
    return sum(len(h["ops"]) for h in prof.host_waits if h["finished"])


class TestChromeTrace:
    def test_export_with_str_and_path(self, tmp_path: Path, gate: Gate):
        prof = busy_profile(gate)
        as_str = tmp_path / "as_str.json"
        prof.export_chrome_trace(str(as_str))
        as_path = tmp_path / "as_path.json"
        prof.export_chrome_trace(as_path)
        text = prof.chrome_trace()
        assert as_str.read_text(encoding="utf-8") == text
        assert as_path.read_text(encoding="utf-8") == text
        assert Trace(text).slices
        # The Profile itself exports the same.
        prof.profile.export_chrome_trace(tmp_path / "direct.json")
        assert (tmp_path / "direct.json").read_text(encoding="utf-8") == text

    def test_every_event_is_on_a_named_track(self, gate: Gate):
        prof = busy_profile(gate)
        t = Trace(prof.chrome_trace())
        threads = t.thread_names()
        processes = t.process_names()
        assert sorted(processes.values()) == ["cpu", "host"]
        for e in t.slices + t.flows + t.marks:
            assert (e["pid"], e["tid"]) in threads, e
        cpu_pid = next(pid for pid, name in processes.items() if name == "cpu")
        host_pid = next(pid for pid, name in processes.items() if name == "host")
        assert {n for (pid, _), n in threads.items() if pid == cpu_pid} == {op["stream"] for op in prof.ops}
        host_tracks = {n for (pid, _), n in threads.items() if pid == host_pid}
        assert host_tracks == ({f"host waits · {h['thread']}" for h in prof.host_waits}
                               | {c["thread"] for c in prof.callbacks})
        assert {"host waits · thread 1", "callbacks cpu"} <= host_tracks
        for op in prof.ops:  # each op on the track of its stream
            s = t.op_slice(op["id"])
            assert threads[(s["pid"], s["tid"])] == op["stream"]
            assert s["name"] == op["name"]
            assert s["args"]["seq"] == op["seq"]

    def test_times_are_non_negative_and_match_the_ops(self, gate: Gate):
        prof = busy_profile(gate)
        t = Trace(prof.chrome_trace())
        for e in t.slices + t.flows + t.marks:
            assert e["ts"] >= 0
        for e in t.slices:
            assert e["dur"] >= 0
        by_track = defaultdict(list)
        for e in t.slices:
            by_track[(e["pid"], e["tid"])].append(e)
        for slices in by_track.values():  # a track's slices never overlap
            slices.sort(key=lambda e: e["ts"])
            for before, after in zip(slices, slices[1:]):
                assert after["ts"] >= before["ts"] + before["dur"] - 1e-9
        for op in prof.ops:
            s = t.op_slice(op["id"])
            assert s["ts"] >= op["start_us"] - 1e-6
            assert s["ts"] + s["dur"] >= op["end_us"] - 1e-6
            assert s["cat"] == ("wait" if op["is_wait"] else "op")
            assert s["args"]["detail"] == op["detail"]
        assert t.doc["otherData"]["duration_us"] == pytest.approx(prof.duration_us)

    def test_flows_pair_up_and_bind_to_their_slices(self, gate: Gate):
        prof = busy_profile(gate)
        t = Trace(prof.chrome_trace())
        pairs = t.flow_pairs()
        for pair in pairs:
            assert pair["s"]["name"] == pair["f"]["name"] and pair["s"]["cat"] == pair["f"]["cat"]
            assert pair["s"]["ts"] <= pair["f"]["ts"]  # arrows go forward in time
        # Each flow point lies inside exactly one slice of its track, [ts, ts + dur): that is
        # how viewers bind them; a flow on no slice would be drawn nowhere.
        for f in t.flows:
            inside = [s for s in t.slices if (s["pid"], s["tid"]) == (f["pid"], f["tid"])
                      and s["ts"] <= f["ts"] < s["ts"] + s["dur"]]
            assert len(inside) == 1, f
        names = Counter(pair["s"]["name"] for pair in pairs)
        assert names["wait"] == sum(len(op["waits_for"]) for op in prof.ops if op["is_wait"]) == 1
        assert names["dependency"] == sum(len(op["waits_for"]) for op in prof.ops if not op["is_wait"]) == 1
        assert names["host wait"] == finished_host_wait_arrows(prof) >= 1
        assert names["callback"] == len(prof.callbacks) >= 1
        assert sum(names.values()) == len(pairs)

    def test_a_flow_goes_from_the_op_waited_for_to_the_wait(self, gate: Gate):
        prof = busy_profile(gate)
        t = Trace(prof.chrome_trace())
        (pair,) = [p for p in t.flow_pairs() if p["s"]["name"] == "wait"]
        (w,) = [op for op in prof.ops if op["is_wait"]]
        src = t.op_slice(w["waits_for"][0])
        dst = t.op_slice(w["id"])
        assert (pair["s"]["pid"], pair["s"]["tid"]) == (src["pid"], src["tid"])
        assert (pair["f"]["pid"], pair["f"]["tid"]) == (dst["pid"], dst["tid"])
        assert src["ts"] < pair["s"]["ts"] < src["ts"] + src["dur"]  # at the end of the op
        assert dst["ts"] < pair["f"]["ts"] < dst["ts"] + dst["dur"]  # at the end of the wait

    def test_a_host_wait_that_timed_out_has_no_arrow(self, gate: Gate):
        a = ready(8, 8)
        with ev.profile() as prof:
            with gate:
                x = ev.mul(a, a)
            e = recorded(x)
            assert call_with_timeout(lambda: e.wait(timeout=0.03)) is False
            # Apart by more than 2 ms: else the profile takes them for slices of one wait.
            time.sleep(0.01)
            gate.open()
            wait(e)
        assert prof.host_waits[0]["finished"] is False
        pairs = Trace(prof.chrome_trace()).flow_pairs()
        assert len(pairs) == finished_host_wait_arrows(prof)  # 0 or 1: the second wait's
        for pair in pairs:
            assert pair["s"]["ts"] <= pair["f"]["ts"]
        page = TimelinePage.parse(prof.timeline_html())
        assert len(page.arrows()) == finished_host_wait_arrows(prof)

    def test_records_are_marks_where_their_op_ends(self, gate: Gate):
        prof = busy_profile(gate)
        t = Trace(prof.chrome_trace())
        marks = [m for m in t.marks if m["cat"] == "record"]
        tied = [r for r in prof.records if r["op"] is not None]
        assert len(marks) == len(tied) == len(prof.records)
        for m, r in zip(marks, tied):
            s = t.op_slice(r["op"])
            assert m["args"]["event"] == r["event"] and m["args"]["op"] == r["op"]
            assert m["name"] == f"event {r['event']}"
            assert (m["pid"], m["tid"]) == (s["pid"], s["tid"])
            assert m["ts"] == pytest.approx(s["ts"] + s["dur"], abs=1e-6)

    def test_host_waits_and_callbacks_are_slices_of_the_host(self, gate: Gate):
        prof = busy_profile(gate)
        t = Trace(prof.chrome_trace())
        hw = [s for s in t.slices if s["cat"] == "host_wait"]
        cb = [s for s in t.slices if s["cat"] == "callback"]
        assert len(hw) == len(prof.host_waits) and len(cb) == len(prof.callbacks)
        for s, h in zip(hw, prof.host_waits):
            assert s["args"]["thread"] == h["thread"]
            assert s["ts"] == pytest.approx(h["start_us"], abs=1e-3)
            assert s["name"] == f"wait event {h['event']}"
        for s, c in zip(cb, prof.callbacks):
            assert s["args"]["event"] == c["event"]
            assert s["name"] == f"callback of event {c['event']}"

    def test_an_unwritable_path_raises_naming_it(self, tmp_path: Path):
        with ev.profile() as prof:
            pass
        missing = tmp_path / "no-such-dir" / "trace.json"
        for export in (prof.export_chrome_trace, prof.export_timeline):
            for path in (missing, str(missing), tmp_path):  # a missing folder; a folder
                with pytest.raises(ev.EventideError) as info:
                    export(path)
                assert str(path) in str(info.value)
                assert export.__name__ in str(info.value)
        assert not missing.parent.exists()

    def test_an_empty_profile_exports(self, tmp_path: Path):
        with ev.profile() as prof:
            pass
        assert prof.ops == [] and prof.records == [] and prof.host_waits == [] and prof.callbacks == []
        prof.export_chrome_trace(tmp_path / "empty.json")
        t = Trace((tmp_path / "empty.json").read_text(encoding="utf-8"))
        assert t.slices == [] and t.flows == [] and t.marks == []
        prof.export_timeline(tmp_path / "empty.html")
        page = TimelinePage.parse((tmp_path / "empty.html").read_text(encoding="utf-8"))
        assert page.canvas_count == 1
        assert page.bars("op", "wait", "hostwait", "callback") == [] and page.arrows() == []
        assert "No ops were recorded." in page.text


# --- the timeline page -----------------------------------------------------------------------

class TimelinePage(HTMLParser):
    """What the timeline page holds: its data (the JSON its script draws from, read back into
    one dict per bar, with the keys the page's elements used to carry), its canvas and
    scripts, and its text."""

    def __init__(self) -> None:
        super().__init__()
        self.canvas_count = 0
        self.scripts: list = []
        self.text = ""
        self._script: "dict | None" = None
        self.data: dict = {}

    @classmethod
    def parse(cls, html: str) -> "TimelinePage":
        page = cls()
        page.feed(html)
        page.close()
        found = [s for s in page.scripts if s["attrs"].get("id") == "eventide-timeline-data"]
        assert len(found) == 1, "the page has no data element"
        page.data = json.loads(found[0]["text"])
        return page

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "canvas":
            self.canvas_count += 1
        elif tag == "script":
            self._script = {"attrs": dict(attrs), "text": ""}

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            self.scripts.append(self._script)
            self._script = None

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._script["text"] += data
        else:
            self.text += data

    @property
    def unit(self) -> str:
        return self.data["unit"]

    def all_bars(self) -> list:
        d = self.data
        texts = d["texts"]
        out = []
        for i, (lane, kind, colour, label, start, dur, id_, seq, detail, error, flags) in enumerate(d["bars"]):
            kind = d["kinds"][kind]
            b = {"index": i, "class": kind + (" failed" if flags & 1 else ""), "kind": kind,
                 "lane": d["lanes"][lane], "fill": None if colour < 0 else d["colours"][colour],
                 "label": None if label < 0 else texts[label], "start-ns": start, "dur-ns": dur,
                 "data-dur-us": dur / 1000, "flags": flags}
            if kind in ("op", "wait"):
                b.update({"data-id": str(id_), "data-name": texts[label] if kind == "op" else None,
                          "data-stream": d["lanes"][lane]["key"], "seq": seq,
                          "detail": None if detail < 0 else texts[detail],
                          "error": None if error < 0 else texts[error]})
            else:
                b.update({"data-event": str(id_), "data-thread": d["lanes"][lane]["key"]})
            out.append(b)
        return out

    def bars(self, *kinds: str) -> list:
        return [b for b in self.all_bars() if b["kind"] in kinds]

    @property
    def rows(self) -> list:
        return [{"data-kind": lane["kind"], "data-stream" if lane["kind"] == "stream" else "data-thread": lane["key"]}
                for lane in self.data["lanes"]]

    def arrows(self) -> list:
        return self.data["arrows"]


class TestTimeline:
    def test_export_with_str_and_path(self, tmp_path: Path, gate: Gate):
        prof = busy_profile(gate)
        prof.export_timeline(str(tmp_path / "a.html"))
        prof.export_timeline(tmp_path / "b.html")
        html = prof.timeline_html()
        assert (tmp_path / "a.html").read_text(encoding="utf-8") == html
        assert (tmp_path / "b.html").read_text(encoding="utf-8") == html
        assert html.startswith("<!DOCTYPE html>")
        assert TimelinePage.parse(html).canvas_count == 1

    def test_one_bar_per_op_and_a_lane_per_stream(self, gate: Gate):
        prof = busy_profile(gate)
        page = TimelinePage.parse(prof.timeline_html())
        bars = page.bars("op", "wait")
        assert all(op["start_us"] is not None for op in prof.ops)  # on the CPU, even waits
        assert sorted(int(b["data-id"]) for b in bars) == sorted(op["id"] for op in prof.ops)
        by_id = op_by_id(prof)
        for b in bars:
            op = by_id[int(b["data-id"])]
            assert b["data-stream"] == op["stream"] and b["seq"] == op["seq"]
            assert (b["kind"] == "wait") == op["is_wait"]
            if not op["is_wait"]:
                assert b["data-name"] == op["name"]
            assert b["data-dur-us"] == pytest.approx(op["duration_us"], abs=1e-3)
            assert b["start-ns"] / 1000 == pytest.approx(op["start_us"], abs=1e-3)
        stream_rows = [r["data-stream"] for r in page.rows if r["data-kind"] == "stream"]
        assert sorted(stream_rows) == sorted({op["stream"] for op in prof.ops})
        host_rows = [r["data-thread"] for r in page.rows if r["data-kind"] == "host"]
        assert len(host_rows) == len({h["thread"] for h in prof.host_waits} | {c["thread"] for c in prof.callbacks})
        assert len(page.bars("hostwait")) == len(prof.host_waits)
        assert len(page.bars("callback")) == len(prof.callbacks)
        # One colour per op name, a different one for each name; waits hatched (no colour).
        fills = defaultdict(set)
        for b in page.bars("op"):
            fills[b["data-name"]].add(b["fill"])
        assert all(len(f) == 1 for f in fills.values())
        assert len({next(iter(f)) for f in fills.values()}) == len(fills) == 3
        assert all(b["fill"] is None for b in page.bars("wait"))

    def test_an_arrow_per_dependency(self, gate: Gate):
        prof = busy_profile(gate)
        page = TimelinePage.parse(prof.timeline_html())
        arrows = page.arrows()
        n_deps = sum(len(op["waits_for"]) for op in prof.ops)
        assert len(arrows) == n_deps + finished_host_wait_arrows(prof) + len(prof.callbacks)
        bars = page.all_bars()
        for frm, to, _at_end, to_host, _held in arrows:
            assert bars[frm]["kind"] == "op"
            assert (bars[to]["kind"] in ("hostwait", "callback")) == bool(to_host)

    def test_the_arrows_held_back_are_from_what_each_target_waited_for_last(self, gate: Gate):
        prof = busy_profile(gate)
        page = TimelinePage.parse(prof.timeline_html())
        bars = page.all_bars()
        end = lambda i: bars[i]["start-ns"] + bars[i]["dur-ns"]
        # The end of the bar before each op's bar on its stream (its own work it waited for).
        before: dict = {}
        for lane in {b["lane"]["key"] for b in bars if b["kind"] in ("op", "wait")}:
            on_lane = [b for b in bars if b["kind"] in ("op", "wait") and b["lane"]["key"] == lane]
            on_lane.sort(key=lambda b: b["seq"])
            for prev, b in zip(on_lane, on_lane[1:]):
                before[b["index"]] = end(prev["index"])
        into = defaultdict(list)
        for a in page.arrows():
            into[a[1]].append(a)
        assert into
        for to, arrows in into.items():
            last = max(end(a[0]) for a in arrows)
            none = bars[to]["kind"] in ("op", "wait") and before.get(to, -1) >= last
            assert [bool(a[4]) for a in arrows] == [not none and end(a[0]) == last for a in arrows], (to, arrows)
        # The host wait of `g` waited for the mul alone: that arrow held it back.
        assert any(a[4] and bars[a[1]]["kind"] == "hostwait" for a in page.arrows())

    def test_the_page_has_the_title_and_note_it_is_given(self, tmp_path: Path):
        a = ready(8, 8)
        with ev.profile() as prof:
            wait(ev.add(a, a))
        plain = prof.timeline_html()
        assert "<h1>eventide timeline</h1>" in plain and 'class="note"' not in plain
        html = prof.timeline_html(title="Adds <fast>", note="Look at the add & its wait.")
        assert "<title>Adds &lt;fast&gt; · eventide timeline</title>" in html
        assert "<h1>Adds &lt;fast&gt;</h1>" in html
        assert '<p class="note">Look at the add &amp; its wait.</p>' in html
        prof.export_timeline(tmp_path / "t.html", title="Adds <fast>", note="Look at the add & its wait.")
        assert (tmp_path / "t.html").read_text(encoding="utf-8") == html
        prof.profile.export_timeline(str(tmp_path / "u.html"), "Adds <fast>", "Look at the add & its wait.")
        assert (tmp_path / "u.html").read_text(encoding="utf-8") == html
        with pytest.raises(TypeError, match="title must be a str or None, got 3"):
            prof.export_timeline(tmp_path / "v.html", title=3)
        with pytest.raises(TypeError, match="note must be a str or None"):
            prof.timeline_html(note=b"bytes")

    def test_an_op_name_has_one_colour_on_every_page(self):
        a = ready(8, 8)
        with ev.profile() as first:
            wait(ev.matmul(a, a))
            wait(ev.add(a, a))
            wait(ev.mul(a, a))
        with ev.profile() as second:  # other names first: the colours do not follow the order
            wait(ev.randn(8, 8))
            wait(ev.mul(a, a))
            wait(ev.add(a, a))
            wait(ev.matmul(a, a))

        def colours(prof: Any) -> dict:
            return {b["data-name"]: b["fill"] for b in TimelinePage.parse(prof.timeline_html()).bars("op")}

        one, two = colours(first), colours(second)
        assert {n: one[n] for n in ("matmul", "add", "mul")} == {n: two[n] for n in ("matmul", "add", "mul")}
        assert len({two[n] for n in ("matmul", "add", "mul", "randn")}) == 4  # eventide's own ops: one each

    def test_one_unit_for_the_whole_page(self, gate: Gate):
        prof = busy_profile(gate)
        page = TimelinePage.parse(prof.timeline_html())
        waits = sum(op["is_wait"] for op in prof.ops)
        streams = len({op["stream"] for op in prof.ops})
        # The ops as len(prof.ops) and the CLI count them, waits among them.
        assert f"{len(prof.ops)} ops ({waits} wait) on {streams} streams" in page.text
        assert f"{len(prof.records)} event records · " in page.text
        # The unit follows the span drawn (µs under 10 ms, else ms), and every time written
        # on the page is in it.
        span_ns = page.data["t1"] - page.data["t0"]
        assert span_ns > 0
        assert page.unit == ("µs" if span_ns < 10_000_000 else "ms")
        assert page.data["ns_per_unit"] == {"µs": 1000, "ms": 1_000_000}[page.unit]
        assert f"times in {page.unit}" in page.text
        written = re.findall(r"\d(?:[\d.]*) (µs|ms|ns|s)\b", page.text)
        assert written and set(written) == {page.unit}, written

    def test_a_short_profile_is_drawn_in_microseconds(self):
        a = ready(8, 8)
        with ev.profile() as prof:
            wait(ev.add(a, a))
        page = TimelinePage.parse(prof.timeline_html())
        assert page.data["t1"] - page.data["t0"] < 10_000_000
        assert page.unit == "µs" and page.data["ns_per_unit"] == 1000
        written = re.findall(r"\d(?:[\d.]*) (µs|ms|ns|s)\b", page.text)
        assert written and set(written) == {"µs"}, written

    def test_a_long_profile_is_drawn_in_milliseconds(self):
        a = ready(8, 8)
        with ev.profile() as prof:
            wait(ev.add(a, a))
            time.sleep(0.02)
            wait(ev.add(a, a))
        page = TimelinePage.parse(prof.timeline_html())
        assert page.data["t1"] - page.data["t0"] >= 10_000_000
        assert page.unit == "ms" and page.data["ns_per_unit"] == 1_000_000
        written = re.findall(r"\d(?:[\d.]*) (µs|ms|ns|s)\b", page.text)
        assert written and set(written) == {"ms"}, written

