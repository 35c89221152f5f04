"""The rule of core/runtime_lock.hpp: no Python object is released while a runtime lock is
held. Issue 10's freeze: a worker folding a failed record under an event's lock dropped the
last C++ reference to an exception from UserEvent.fail, whose release took the GIL, while a
Python thread holding the GIL waited for that event's lock."""

from __future__ import annotations

import threading
import time

import pytest

import eventide as ev
from conftest import call_with_timeout


class Boom(Exception):
    pass


@pytest.mark.time_limit(120)
def test_events_failed_by_python_exceptions_never_freeze_a_polling_thread():
    stop = threading.Event()
    holder = {"e": None}

    def poll_forever():
        # Holds the GIL between polls (poll() does not release it) and takes the event's lock.
        while not stop.is_set():
            e = holder["e"]
            if e is not None:
                e.poll()
                _ = e.status, repr(e)

    pollers = [threading.Thread(target=poll_forever, daemon=True) for _ in range(2)]
    for t in pollers:
        t.start()
    before = ev._eventide._deferred_releases()

    def rounds():
        for i in range(200):
            u1, u2 = ev.UserEvent(), ev.UserEvent()
            s1, s2 = ev.Stream("cpu"), ev.Stream("cpu")
            s1.wait(u1)
            s2.wait(u2)
            with s1:
                x1 = ev.rand(4)
            with s2:
                x2 = ev.rand(4)
            e = ev.Event()
            e.record(x1)
            e.record(x2)
            holder["e"] = e
            del x1, x2, s1, s2  # the event holds the last references to the work
            # x2 fails first (a Python exception as its cause), and its stream lets go of it:
            # the event then holds the last reference to that failure.
            u2.fail(Boom(f"two {i}"))
            del u2  # nothing but the failed work holds the exception now
            time.sleep(0.004)
            # A waiter arms the event; x1 fails later, on its worker, which folds the event:
            # dropping x2 there, under the event's lock, released the Python exception.
            threading.Timer(0.002, u1.fail, args=(Boom(f"one {i}"),)).start()
            del u1
            with pytest.raises(ev.OpError):
                e.wait(timeout=10)
            holder["e"] = None
            e.reset()

    try:
        call_with_timeout(rounds, timeout=100)
    finally:
        stop.set()
        for t in pollers:
            t.join(10)
    # Releases that would have happened under a lock waited for it to be let go: the path
    # of the freeze was taken (and did not freeze).
    assert ev._eventide._deferred_releases() > before
