"""Memory through callbacks (issue 10, defect 7): what nobody can reach any more is freed.

* A callback that holds its own pending UserEvent does not keep it alive: Python's cycle
  collector finds the cycle, the event fails as when its last handle goes (streams waiting on
  it get that error), its callbacks run once with the failure, and then everything is freed.
* A cancelled ``await`` (``asyncio.wait_for`` timing out) takes its callback back from the
  event at once, instead of leaving it registered until the event finishes.

Memory is checked with tracemalloc (Python objects), with glibc's ``mallinfo2`` where there is
one (the C++ side: events, listeners), and by counting the awaits' callbacks still alive.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import time
import tracemalloc
import weakref
from typing import Callable, Optional

import pytest

import eventide as ev
from conftest import Gate, call_with_timeout, wait_until

pytestmark = pytest.mark.time_limit(30)

PAYLOAD = 100_000  # bytes each closure holds, as in the report


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _c_heap_reader() -> Optional[Callable[[], int]]:
    """Bytes the C heap has handed out (all arenas), or None without glibc's mallinfo2."""
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2

    def read() -> int:
        info = fn()
        return info.uordblks + info.hblkhd

    return read


c_heap = _c_heap_reader()


def traced_after_collect() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


# --- (a) a callback holding its own UserEvent ------------------------------------------------

def test_closures_holding_their_own_user_event_are_freed_after_gc_collect():
    """The report's case: 2,000 UserEvents, each with a callback whose closure holds the event
    and 100 kB. They stayed alive after gc.collect(); now the events fail ("destroyed without
    being set"), each callback runs once, and the memory comes back."""
    n = 2000
    statuses: list = []

    def make() -> None:
        u = ev.UserEvent()
        payload = bytearray(PAYLOAD)
        u.add_callback(lambda: statuses.append((u.status, len(payload))))

    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        gc.disable()  # the collector runs when the test says, not halfway through
        try:
            for _ in range(n):
                make()
            held = tracemalloc.get_traced_memory()[0] - base
        finally:
            gc.enable()
        assert held > n * PAYLOAD * 0.9  # nothing has freed them yet
        gc.collect()
        wait_until(lambda: len(statuses) == n, timeout=10, what="the callbacks of the dropped events")
        wait_until(lambda: traced_after_collect() - base < n * PAYLOAD * 0.02, timeout=10,
                   what="the closures' memory to be freed")
        kept = traced_after_collect() - base
    finally:
        tracemalloc.stop()
    assert kept < n * PAYLOAD * 0.02, f"{kept / 1e6:.1f} MB still held after gc.collect()"
    time.sleep(0.05)  # time for a (wrong) second call to show
    assert len(statuses) == n, "a callback ran twice"
    assert set(statuses) == {("failed", PAYLOAD)}


def test_the_last_handle_safety_net_fires_for_a_user_event_held_only_by_its_callback():
    """Streams and events waiting on such a UserEvent fail with its usual error."""
    def make():
        u = ev.UserEvent()
        s = ev.Stream("cpu")
        s.wait(u)
        with s:
            t = ev.ones(4) + ev.ones(4)  # held back by u
        u.add_callback(lambda: u)
        e = ev.Event()
        e.record(t)
        return t, e, weakref.ref(u)

    t, e, u_ref = make()
    assert e.status == "pending"
    gc.collect()
    with pytest.raises(ev.OpError) as info:
        call_with_timeout(lambda: t.wait(timeout=10))
    assert isinstance(info.value.__cause__, ev.EventStateError)
    assert "destroyed without being set" in str(info.value.__cause__)
    with pytest.raises(ev.OpError):
        call_with_timeout(lambda: e.wait(timeout=10))
    assert e.status == "failed"
    wait_until(lambda: (gc.collect(), u_ref() is None)[1], timeout=10, what="the UserEvent to be freed")


def test_every_callback_of_a_collected_user_event_runs_exactly_once():
    calls: list = []

    def make() -> None:
        u = ev.UserEvent()
        u.add_callback(lambda: calls.append(("plain", None)))  # holds nothing
        u.add_callback(lambda: calls.append(("self", type(u.error).__name__)))
        u.add_callback(lambda: calls.append(("self again", u.status)))

    make()
    gc.collect()
    wait_until(lambda: len(calls) == 3, timeout=10, what="the callbacks")
    time.sleep(0.05)
    gc.collect()
    time.sleep(0.05)
    assert sorted(calls) == [("plain", None), ("self", "EventStateError"), ("self again", "failed")]


def test_a_user_event_reachable_from_outside_is_left_alone_by_the_collector():
    calls: list = []
    u = ev.UserEvent()
    u.add_callback(lambda: calls.append(u.status))  # a cycle, but u is also a local here
    gc.collect()
    assert u.status == "pending"
    assert calls == []
    u.set()
    wait_until(lambda: calls == ["finished"], timeout=10, what="the callback")
    time.sleep(0.05)
    assert calls == ["finished"]


def test_mutually_held_user_events_are_collected_together():
    calls: list = []

    def make() -> None:
        a, b = ev.UserEvent(), ev.UserEvent()
        a.add_callback(lambda: calls.append(("a", b.status)))
        b.add_callback(lambda: calls.append(("b", a.status)))

    make()
    gc.collect()
    wait_until(lambda: len(calls) == 2, timeout=10, what="both callbacks")
    assert sorted(calls) == [("a", "failed"), ("b", "failed")]


def test_a_user_event_subclass_in_a_cycle_of_its_own_is_collected():
    class Tagged(ev.UserEvent):
        pass

    calls: list = []

    def make() -> "weakref.ref[Tagged]":
        t = Tagged()
        t.me = t  # an ordinary Python cycle through the instance dict
        t.add_callback(lambda: calls.append(t.status))
        return weakref.ref(t)

    ref = make()
    gc.collect()
    wait_until(lambda: calls == ["failed"], timeout=10, what="the callback")
    wait_until(lambda: (gc.collect(), ref() is None)[1], timeout=10, what="the instance to be freed")


def test_a_callback_may_revive_its_collected_user_event():
    """Resurrection: the event has failed (its last handle was found unreachable), and the
    revived handle still works: reset() starts a new round."""
    saved: list = []

    def make() -> None:
        u = ev.UserEvent()
        u.add_callback(lambda: saved.append(u))

    make()
    gc.collect()
    wait_until(lambda: len(saved) == 1, timeout=10, what="the callback")
    u = saved.pop()
    assert u.status == "failed"
    u.reset()
    assert u.status == "pending"
    u.set()
    assert u.wait(timeout=5)


def test_callbacks_on_device_work_run_even_when_every_handle_is_dropped(gate: Gate):
    """A guarantee the collector must not break: a plain event's callback that holds the
    event runs when the work finishes, also after gc.collect() with no handle left."""
    calls: list = []

    def make() -> None:
        with gate:
            t = ev.ones(4) + ev.ones(4)
        e = ev.Event()
        e.record(t)
        e.add_callback(lambda: calls.append(e.status))
        t.add_completion_callback(lambda: calls.append(t.ready))

    make()
    gc.collect()
    time.sleep(0.02)
    assert calls == []
    gate.open()
    wait_until(lambda: len(calls) == 2, timeout=10, what="the callbacks")
    assert sorted(calls, key=str) == sorted(["finished", True], key=str)


# --- (b) cancelled awaits ------------------------------------------------------------------

def live_await_callbacks() -> int:
    """The awaits' callbacks (closures made by eventide's asyncio support) still alive."""
    return sum(1 for o in gc.get_objects()
               if type(o).__name__ == "function"
               and o.__qualname__.endswith("_event_future.<locals>.on_finish"))


def run(coro_fn, timeout: float = 25.0):
    return call_with_timeout(lambda: asyncio.run(asyncio.wait_for(coro_fn(), timeout)), timeout + 5)


@pytest.mark.parametrize("kind", ["event", "user_event", "tensor"])
def test_ten_thousand_cancelled_awaits_keep_nothing(kind: str):
    """Each await given up (its task cancelled after it started waiting, as asyncio.wait_for
    does on a timeout) took its callback back: none is left registered, and neither Python's
    nor the C heap grows (an `await tensor` makes an event each time: it is freed too). The
    report: 10,000 cancellations kept about 6 MB."""
    n = 10_000

    async def main():
        gate = Gate()
        with gate:
            t = ev.ones(4) + ev.ones(4)  # pending until the gate opens
        e = ev.Event()
        e.record(t)
        target = {"event": e, "user_event": gate.user, "tensor": t}[kind]

        async def waiter():
            await target

        async def give_up_once():
            task = asyncio.ensure_future(waiter())
            await asyncio.sleep(0)  # it starts: its callback is registered
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        for _ in range(50):  # warm up (first-use allocations)
            await give_up_once()
        await asyncio.sleep(0.02)
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            c_base = c_heap() if c_heap else 0
            for _ in range(n):
                await give_up_once()
            await asyncio.sleep(0.02)
            gc.collect()
            python_kept = tracemalloc.get_traced_memory()[0] - base
            c_kept = c_heap() - c_base if c_heap else 0
        finally:
            tracemalloc.stop()
        registered = live_await_callbacks()
        # The target is still usable: an await now finishes when the gate opens.
        final = asyncio.ensure_future(waiter())
        await asyncio.sleep(0.01)
        assert not final.done()
        gate.open()
        await asyncio.wait_for(final, 10)
        return registered, python_kept, c_kept

    registered, python_kept, c_kept = run(main)
    assert registered == 0, f"{registered} callbacks of cancelled awaits are still registered"
    assert python_kept < 200_000, f"{python_kept / 1e6:.2f} MB of Python objects kept"
    assert c_kept < 1_000_000, f"{c_kept / 1e6:.2f} MB of C heap kept"


def test_wait_for_timeouts_and_the_async_waits_leave_no_callback_registered(gate: Gate):
    async def main():
        with gate:
            t = ev.ones(4) + ev.ones(4)
        e = ev.Event()
        e.record(t)
        for target in (e, gate.user, t):
            for _ in range(100):
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(target, 0.001)
        assert await ev.wait_all_async([e, t, gate.user], timeout=0.01) is False
        assert await ev.wait_any_async([e, t, gate.user], timeout=0.01) is None
        await asyncio.sleep(0.02)
        gc.collect()
        registered = live_await_callbacks()
        gate.open()
        await e
        return registered

    assert run(main) == 0
