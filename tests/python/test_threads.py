"""Threads: the GIL is released while waiting, callbacks run exactly once on a runtime thread,
may re-enter eventide without deadlock, and their exceptions go to sys.unraisablehook."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import pytest

import eventide as ev
from conftest import Gate, call_with_timeout, capture_unraisable, wait_until


# --- GIL release --------------------------------------------------------------------------

def test_blocked_waiters_release_the_gil(gate: Gate):
    with gate:
        out = ev.rand(64, 64)
    e = ev.Event()
    e.record(out)
    waiting = threading.Barrier(3)
    results: list = []

    def waiter_event():
        waiting.wait()
        results.append(("event", e.wait()))

    def waiter_user():
        waiting.wait()
        results.append(("user", gate.user.wait()))

    w1 = threading.Thread(target=waiter_event, daemon=True)
    w2 = threading.Thread(target=waiter_user, daemon=True)
    w1.start()
    w2.start()
    waiting.wait()
    time.sleep(0.05)  # both are now inside wait()

    counts = [0]
    stop = threading.Event()

    def counter():
        while not stop.is_set():
            counts[0] += 1

    c = threading.Thread(target=counter, daemon=True)
    c.start()
    time.sleep(0.5)
    sample1 = counts[0]
    time.sleep(0.3)
    sample2 = counts[0]
    stop.set()
    c.join(20)
    assert w1.is_alive() and w2.is_alive()  # still blocked ...
    assert sample1 > 1000  # ... while a third Python thread ran freely
    assert sample2 > sample1
    assert not results

    gate.open()
    w1.join(20)
    w2.join(20)
    assert not w1.is_alive() and not w2.is_alive()
    assert sorted(results) == [("event", True), ("user", True)]


@pytest.mark.parametrize("blocking", ["wait_all", "wait_any", "synchronize", "stream_sync",
                                      "tensor_wait", "numpy"])
def test_every_blocking_call_releases_the_gil(blocking, gate: Gate):
    with gate:
        out = ev.rand(8)
    e = ev.Event()
    e.record(out)
    calls = {
        "wait_all": lambda: ev.wait_all([e]),
        "wait_any": lambda: ev.wait_any([e]),
        "synchronize": ev.synchronize,
        "stream_sync": gate.stream.synchronize,
        "tensor_wait": out.wait,
        "numpy": out.numpy,
    }
    done = threading.Event()
    th = threading.Thread(target=lambda: (calls[blocking](), done.set()), daemon=True)
    th.start()
    time.sleep(0.05)
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < 0.3:
        n += 1
    assert not done.is_set()
    assert n > 1000
    gate.open()
    assert done.wait(20)


# --- callbacks: exactly once, on a runtime thread -----------------------------------------

def test_callbacks_run_exactly_once_on_a_runtime_thread():
    main = threading.get_ident()
    g = Gate()
    with g:
        outs = [ev.rand(16) for _ in range(20)]
    counts = [0] * 40
    threads = set()
    lock = threading.Lock()

    def make(i):
        def cb():
            with lock:
                counts[i] += 1
                threads.add(threading.get_ident())
        return cb

    events = []
    for i, t in enumerate(outs):
        t.add_completion_callback(make(i))
        e = ev.Event()
        e.record(t)
        e.add_callback(make(20 + i))
        events.append(e)
    time.sleep(0.05)
    assert counts == [0] * 40
    g.open()
    call_with_timeout(lambda: ev.wait_all(events))
    wait_until(lambda: sum(counts) == 40, what="all callbacks")
    time.sleep(0.1)
    assert counts == [1] * 40
    assert main not in threads


def test_callback_on_finished_event_runs_on_runtime_thread_not_inline():
    e = ev.Event()
    e.record(ev.rand(4))
    call_with_timeout(e.wait)
    main = threading.get_ident()
    inside_call = threading.local()
    seen = []

    def cb():
        seen.append((threading.get_ident(), getattr(inside_call, "flag", False)))

    inside_call.flag = True
    e.add_callback(cb)
    inside_call.flag = False
    wait_until(lambda: seen, what="the callback")
    (tid, flag), = seen
    assert tid != main and flag is False
    t = ev.rand(4)
    t.wait()
    seen.clear()
    t.add_completion_callback(cb)
    wait_until(lambda: seen, what="the completion callback")
    assert seen[0][0] != main


def test_callback_fires_for_failed_work():
    g = Gate()
    with g:
        t = ev.rand(4)
    e = ev.Event()
    e.record(t)
    fired = []
    e.add_callback(lambda: fired.append(("event", e.error)))
    t.add_completion_callback(lambda: fired.append(("tensor", t.error)))
    g.fail(KeyError("x"))
    wait_until(lambda: len(fired) == 2, what="both callbacks")
    for _, err in fired:
        assert isinstance(err, ev.OpError)


def test_callback_exception_goes_to_unraisablehook(gate: Gate):
    with capture_unraisable() as unraisable:
        check_callback_exception_goes_to_unraisablehook(unraisable, gate)


def check_callback_exception_goes_to_unraisablehook(unraisable, gate: Gate):
    with gate:
        out = ev.rand(4)
    e = ev.Event()
    e.record(out)
    ran = []

    def bad():
        raise ZeroDivisionError("callback boom")

    e.add_callback(bad)
    e.add_callback(lambda: ran.append("event"))
    out.add_completion_callback(bad)
    out.add_completion_callback(lambda: ran.append("tensor"))
    gate.open()
    wait_until(lambda: len(ran) == 2 and len(unraisable) == 2, what="callbacks and the hook")
    assert sorted(ran) == ["event", "tensor"]
    for exc_type, exc_value, _msg, _obj in unraisable:
        assert exc_type is ZeroDivisionError
        assert str(exc_value) == "callback boom"
    # the runtime goes on
    e2 = ev.Event()
    e2.record(ev.rand(4))
    assert call_with_timeout(e2.wait)
    later = []
    e2.add_callback(lambda: later.append(1))
    wait_until(lambda: later, what="a later callback")


def test_callback_raising_base_exceptions_does_not_kill_runtime():
    with capture_unraisable() as unraisable:
        check_callback_raising_base_exceptions(unraisable)


def check_callback_raising_base_exceptions(unraisable):
    e = ev.Event()
    e.record(ev.rand(4))

    def exits():
        raise SystemExit(3)

    e.add_callback(exits)
    wait_until(lambda: unraisable, what="the hook")
    assert unraisable[0][0] is SystemExit
    e2 = ev.Event()
    e2.record(ev.rand(4))
    assert call_with_timeout(e2.wait)


def test_callbacks_reenter_eventide(gate: Gate):
    """A callback may call any eventide API: record, enqueue ops, wait on another event, add
    callbacks, set user events, synchronize, drop objects."""
    a = ev.rand(64, 64)
    with gate:
        trigger = ev.rand(4)
    e = ev.Event()
    e.record(trigger)
    chained = ev.UserEvent()
    result: dict = {}
    nested = threading.Event()

    def cb():
        x = a @ a                         # enqueue
        ex = ev.Event()
        ex.record(x)                      # record
        ex.wait()                         # wait on another event
        s = ev.Stream()
        s.wait_event(e)                   # streams
        with s:
            y = x + x
        ey = s.record_event()
        ev.wait_all([ey])
        e.record(y)                       # record more on the event being reported
        ev.synchronize()
        e.add_callback(nested.set)        # a callback from a callback
        result["y"] = y.numpy().copy()
        result["x"] = x.numpy().copy()
        chained.set()                     # finish a user event
        del x, y, ex, ey, s               # drop objects inside a callback

    e.add_callback(cb)
    gate.open()
    assert call_with_timeout(chained.wait) is True
    assert nested.wait(20)
    np.testing.assert_allclose(result["y"], 2 * result["x"])


def test_callback_waiting_on_pending_work_does_not_block_the_runtime():
    """A callback blocked in wait() on later work: that work still runs (no deadlock)."""
    g1 = Gate()
    with g1:
        first = ev.rand(4)
    e1 = ev.Event()
    e1.record(first)
    later = ev.rand(256, 256) @ ev.rand(256, 256)
    e2 = ev.Event()
    e2.record(later)
    got = []
    e1.add_callback(lambda: got.append(e2.wait(timeout=20)))
    g1.open()
    wait_until(lambda: got, what="the callback's wait")
    assert got == [True]


def test_callback_holding_last_reference_to_event():
    fired = threading.Event()
    e = ev.Event()
    e.record(ev.rand(128, 128) @ ev.rand(128, 128))
    e.add_callback(fired.set)
    del e  # dropping the event never blocks; the callback still runs
    gc.collect()
    assert fired.wait(20)


def test_callbacks_are_released_after_running():
    class Token:
        pass

    tok = Token()
    ref = weakref.ref(tok)
    e = ev.Event()
    e.record(ev.rand(4))
    e.add_callback(lambda tok=tok: None)
    del tok
    call_with_timeout(e.wait)
    wait_until(lambda: (gc.collect(), ref() is None)[1], what="the callback to be dropped")


# --- thread safety ------------------------------------------------------------------------

def test_many_threads_record_and_wait_concurrently():
    shared = ev.Event()
    shared.record(ev.rand(4))
    errors = []
    a = ev.rand(32, 32)

    def worker(k):
        try:
            s = ev.Stream()
            for i in range(20):
                with s:
                    x = a @ a if i % 2 else a + a
                e = ev.Event()
                e.record(x)
                shared.record(x)
                e.wait()
                shared.poll()
                _ = repr(shared)
            s.synchronize()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert call_with_timeout(shared.wait)


def test_dropping_pending_tensors_and_events_never_blocks(gate: Gate):
    with gate:
        a = ev.ones(64, 64)
        b = a @ a
        c = b + a
    e = ev.Event()
    e.record(c)
    result = ev.Event()
    result.record(c)
    t0 = time.monotonic()
    del a, b, e
    gc.collect()
    assert time.monotonic() - t0 < 0.5
    s = gate.stream
    del s
    gate.open()
    assert call_with_timeout(result.wait)
    assert (c.numpy() == 65.0).all()  # memory of dropped inputs lived until their ops ran


def test_dropping_a_stream_with_pending_work():
    g = Gate()
    with g:
        t = ev.full(8, 4.0)
    g.stream = None  # drop the last handle to the stream
    gc.collect()
    g.open()
    assert (call_with_timeout(t.numpy) == 4.0).all()
