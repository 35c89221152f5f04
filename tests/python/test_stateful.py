"""A hypothesis state machine driving random sequences of eventide calls against a model.

The model tracks, for every piece of device work, the user-event *rounds* it cannot finish
before (``deps``: everything earlier on its stream, its inputs' producers, the events its stream
waited on) and the rounds whose failure makes it fail (``fdeps``: the events its stream waited
on, and its inputs' ``fdeps`` — a failed *input* fails an op but does not break its stream).
A round is one set()/fail() cycle of a UserEvent (UserEvent.reset() starts the next one; a
dropped, unset UserEvent fails its round).

From that it knows, for every event: empty, blocked (surely pending), or going to finish
(failed or not, and with which causes), and it checks poll, wait with small timeouts, reset,
wait_all / wait_any, stream queries and callbacks (exactly once, after completion, on a runtime
thread) after every step, with no crash and no hang.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from typing import Optional

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine, initialize, invariant, precondition, rule)

import eventide as ev  # noqa: E402
from conftest import call_with_timeout  # noqa: E402

# More for a long hunt: EVENTIDE_HYPOTHESIS_EXAMPLES=2000 pytest tests/python/test_stateful.py
EXAMPLES = int(os.environ.get("EVENTIDE_HYPOTHESIS_EXAMPLES", "50"))
FINISH_TIMEOUT_S = 20.0
SHORT_S = 0.003
MAIN_THREAD = threading.get_ident()


class Round:
    """One round of a UserEvent: pending until set (ok) or failed."""
    counter = 0

    def __init__(self, user_name: str) -> None:
        Round.counter += 1
        self.name = f"{user_name}.r{Round.counter}"
        self.state = "pending"            # pending | set | failed
        self.exc: Optional[BaseException] = None  # None with state failed: abandoned
        self.resolved = False             # flipped *before* set()/fail() is called

    def __repr__(self) -> str:
        return f"Round({self.name}, {self.state})"


class Item:
    """A piece of device work (an op, or a stream's wait)."""

    def __init__(self, deps=frozenset(), fdeps=frozenset()) -> None:
        self.deps = frozenset(deps)
        self.fdeps = frozenset(fdeps)

    def blocked(self) -> bool:
        return any(r.state == "pending" for r in self.deps)

    def failed_rounds(self) -> list:
        return [r for r in self.fdeps if r.state == "failed"]


DONE = Item()


class StreamM:
    def __init__(self) -> None:
        self.obj = ev.Stream("cpu")
        self.deps: frozenset = frozenset()
        self.fdeps: frozenset = frozenset()   # rounds this stream waited on (failure breaks it)
        self.last: Optional[Item] = None      # the last work: an op or a wait
        self.last_op: Optional[Item] = None   # the last op (not a wait)

    def enqueue(self, extra_deps=frozenset(), extra_fdeps=frozenset(), breaks=False) -> Item:
        """An op, or (breaks=True) a wait on an event / another stream."""
        item = Item(self.deps | extra_deps, self.fdeps | extra_fdeps)
        self.deps = item.deps
        if breaks:
            self.fdeps = self.fdeps | extra_fdeps
        else:
            self.last_op = item
        self.last = item
        return item

    def tie_points(self) -> list:
        """What record(stream) ties an event to: the last work, and the last op when a wait
        came after it (time_elapsed measures that op — and so its failure counts too)."""
        return [i for i in (self.last, self.last_op) if i is not None]


class EventM:
    def __init__(self, timing: bool) -> None:
        self.obj = ev.Event(enable_timing=timing)
        self.items: list = []

    def status(self) -> str:
        if not self.items:
            return "empty"
        if any(i.blocked() for i in self.items):
            return "blocked"
        return "failing" if self.failed_rounds() else "finishing"

    def failed_rounds(self) -> set:
        return {r for i in self.items for r in i.failed_rounds()}


class CallbackM:
    def __init__(self, items: list) -> None:
        self.items = list(items)
        self.count = 0
        self.violations: list = []
        self.lock = threading.Lock()

    def make(self):
        def cb():
            with self.lock:
                self.count += 1
                if threading.get_ident() == MAIN_THREAD:
                    self.violations.append("ran on the caller's thread")
                for item in self.items:
                    unresolved = [r for r in item.deps if not r.resolved]
                    if unresolved:
                        self.violations.append(f"ran before {unresolved} were resolved")
        return cb


def root_cause(exc: BaseException) -> BaseException:
    seen = 0
    while exc.__cause__ is not None and seen < 20:
        exc = exc.__cause__
        seen += 1
    return exc


def matches_round(exc: BaseException, rounds) -> bool:
    for r in rounds:
        if r.exc is not None and exc is r.exc:
            return True
        if r.exc is None and isinstance(exc, ev.EventStateError) and \
                "without being set" in str(exc):
            return True
    return False


def clear(exc: BaseException) -> None:
    # Raised exceptions collect tracebacks holding our frames (and so our objects): drop them
    # so that "dropping" an object really drops its last reference.
    while exc is not None:
        exc.__traceback__ = None
        exc = exc.__cause__


class EventideMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.streams: list = []
        self.users: list = []          # [UserEvent or None, current Round, name]
        self.tensors: list = []        # [Tensor, Item]
        self.events: list = []
        self.callbacks: list = []
        self.rounds: list = []
        self.n_users = 0

    # --- setup ---------------------------------------------------------------------------

    @initialize(gated=st.lists(st.booleans(), min_size=3, max_size=3))
    def setup(self, gated) -> None:
        for _ in range(3):
            self.streams.append(StreamM())
        for _ in range(2):
            self._new_user()
        for k in range(3):
            self.events.append(EventM(timing=k != 2))
        # Start with work in flight: some streams held back, a tensor on each, recorded.
        for k, s in enumerate(self.streams):
            if gated[k]:
                self.stream_waits_user(k, k)
            self.create(k, "full")
            self.record_tensor(k, k)

    def _new_user(self) -> None:
        self.n_users += 1
        name = f"u{self.n_users}"
        r = Round(name)
        self.rounds.append(r)
        self.users.append([ev.UserEvent(), r, name])

    def _live_users(self) -> list:
        return [u for u in self.users if u[0] is not None]

    # --- streams and users ---------------------------------------------------------------

    @rule()
    def new_stream(self) -> None:
        if len(self.streams) < 5:
            self.streams.append(StreamM())

    @rule(i=st.integers(0, 99))
    def drop_stream(self, i: int) -> None:
        # Drop the handle (pending work runs on); a fresh stream takes its slot.
        self.streams[i % len(self.streams)] = StreamM()

    @rule()
    def new_user(self) -> None:
        if len(self._live_users()) < 4:
            self._new_user()

    @rule(i=st.integers(0, 99), j=st.integers(0, 99))
    def stream_waits_user(self, i: int, j: int) -> None:
        live = self._live_users()
        if not live:
            return
        s = self.streams[i % len(self.streams)]
        u = live[j % len(live)]
        s.obj.wait(u[0])
        s.enqueue({u[1]}, {u[1]}, breaks=True)

    @rule(i=st.integers(0, 99), j=st.integers(0, 99))
    def stream_waits_event(self, i: int, j: int) -> None:
        s = self.streams[i % len(self.streams)]
        e = self.events[j % len(self.events)]
        if not e.items:
            with pytest.raises(ev.EventStateError):
                s.obj.wait_event(e.obj)
            return
        s.obj.wait_event(e.obj)
        deps = frozenset().union(*(it.deps for it in e.items))
        fdeps = frozenset().union(*(it.fdeps for it in e.items))
        s.enqueue(deps, fdeps, breaks=True)

    @rule(i=st.integers(0, 99), j=st.integers(0, 99))
    def stream_waits_stream(self, i: int, j: int) -> None:
        s = self.streams[i % len(self.streams)]
        other = self.streams[j % len(self.streams)]
        points = other.tie_points()
        s.obj.wait_stream(other.obj)
        if points:
            s.enqueue(frozenset().union(*(p.deps for p in points)),
                      frozenset().union(*(p.fdeps for p in points)), breaks=True)

    @rule(j=st.integers(0, 99))
    def user_set(self, j: int) -> None:
        live = self._live_users()
        if not live:
            return
        u = live[j % len(live)]
        r = u[1]
        if r.state == "pending":
            r.resolved = True
            r.state = "set"
            u[0].set()
        elif r.state == "set":
            u[0].set()  # idempotent
        else:
            with pytest.raises(ev.EventStateError):
                u[0].set()

    @rule(j=st.integers(0, 99))
    def user_fail(self, j: int) -> None:
        live = self._live_users()
        if not live:
            return
        u = live[j % len(live)]
        r = u[1]
        if r.state == "pending":
            r.resolved = True
            r.state = "failed"
            r.exc = RuntimeError(f"failed {r.name}")
            u[0].fail(r.exc)
        else:
            with pytest.raises(ev.EventStateError) as info:
                u[0].fail(ValueError("too late"))
            clear(info.value)

    @rule(j=st.integers(0, 99))
    def user_reset(self, j: int) -> None:
        live = self._live_users()
        if not live:
            return
        u = live[j % len(live)]
        if u[1].state == "pending":
            with pytest.raises(ev.EventStateError):
                u[0].reset()
            return
        u[0].reset()
        u[1] = Round(u[2])
        self.rounds.append(u[1])

    @rule(j=st.integers(0, 99))
    def drop_user(self, j: int) -> None:
        live = self._live_users()
        if not live:
            return
        u = live[j % len(live)]
        gc.collect()
        refs = sys.getrefcount(u[0])  # (outside the assert: pytest's rewriting holds values)
        assert refs == 2, "someone still holds the UserEvent"
        r = u[1]
        if r.state == "pending":
            r.resolved = True
            r.state = "failed"  # abandoned: "destroyed without being set"
        u[0] = None

    @rule(j=st.integers(0, 99))
    def user_poll_and_short_wait(self, j: int) -> None:
        live = self._live_users()
        if not live:
            return
        obj, r, _ = live[j % len(live)]
        assert obj.poll() == (r.state != "pending")
        if r.state == "pending":
            assert obj.wait(SHORT_S) is False
            assert obj.error is None
        elif r.state == "set":
            assert obj.wait(SHORT_S) is True
        else:
            with pytest.raises(BaseException) as info:
                obj.wait(SHORT_S)
            assert info.value is r.exc
            assert obj.error is r.exc
            clear(info.value)

    # --- work ----------------------------------------------------------------------------

    @rule(i=st.integers(0, 99), kind=st.sampled_from(["rand", "zeros", "full"]))
    def create(self, i: int, kind: str) -> None:
        if len(self.tensors) >= 12:
            return
        s = self.streams[i % len(self.streams)]
        with s.obj:
            t = {"rand": lambda: ev.rand(4, 4),
                 "zeros": lambda: ev.zeros((4, 4)),
                 "full": lambda: ev.full((4, 4), 1.5)}[kind]()
        self.tensors.append([t, s.enqueue()])

    @precondition(lambda self: self.tensors)
    @rule(i=st.integers(0, 99), a=st.integers(0, 99), b=st.integers(0, 99),
          op=st.sampled_from(["add", "mul", "matmul"]))
    def compute(self, i: int, a: int, b: int, op: str) -> None:
        if len(self.tensors) >= 12:
            return
        s = self.streams[i % len(self.streams)]
        ta = self.tensors[a % len(self.tensors)]
        tb = self.tensors[b % len(self.tensors)]
        with s.obj:
            t = {"add": ev.add, "mul": ev.mul, "matmul": ev.matmul}[op](ta[0], tb[0])
        item = s.enqueue(ta[1].deps | tb[1].deps, ta[1].fdeps | tb[1].fdeps)
        self.tensors.append([t, item])

    @precondition(lambda self: self.tensors)
    @rule(k=st.integers(0, 99))
    def drop_tensor(self, k: int) -> None:
        del self.tensors[k % len(self.tensors)]

    @precondition(lambda self: self.tensors)
    @rule(k=st.integers(0, 99))
    def tensor_ready(self, k: int) -> None:
        t, item = self.tensors[k % len(self.tensors)]
        if item.blocked():
            assert t.ready is False
            assert t.error is None

    # --- events --------------------------------------------------------------------------

    @rule(timing=st.booleans())
    def new_event(self, timing: bool) -> None:
        if len(self.events) < 6:
            self.events.append(EventM(timing))

    @rule(j=st.integers(0, 99))
    def drop_event(self, j: int) -> None:
        if len(self.events) > 1:
            del self.events[j % len(self.events)]

    @rule(i=st.integers(0, 99), j=st.integers(0, 99), kind=st.sampled_from(["rand", "zeros"]))
    def create_and_record(self, i: int, j: int, kind: str) -> None:
        self.create(i, kind)
        self.record_tensor(j, len(self.tensors) - 1)

    @precondition(lambda self: self.tensors)
    @rule(j=st.integers(0, 99), k=st.integers(0, 99))
    def record_tensor(self, j: int, k: int) -> None:
        e = self.events[j % len(self.events)]
        t, item = self.tensors[k % len(self.tensors)]
        e.obj.record(t)
        e.items.append(item)

    @rule(j=st.integers(0, 99), i=st.integers(0, 99), current=st.booleans())
    def record_stream(self, j: int, i: int, current: bool) -> None:
        e = self.events[j % len(self.events)]
        s = self.streams[i % len(self.streams)]
        if current:
            with s.obj:
                e.obj.record()
        else:
            e.obj.record(s.obj)
        e.items.extend(s.tie_points() or [DONE])

    @rule(j=st.integers(0, 99))
    def poll(self, j: int) -> None:
        e = self.events[j % len(self.events)]
        status = e.status()
        done = e.obj.poll()
        assert e.obj.completed in (done, True)  # it may finish in between
        if status in ("empty", "blocked"):
            assert done is False
            assert e.obj.query() is False
        if done:
            if status == "failing":
                assert e.obj.error is not None
            else:
                assert e.obj.error is None

    @rule(j=st.integers(0, 99))
    def wait_short(self, j: int) -> None:
        e = self.events[j % len(self.events)]
        status = e.status()
        if status == "empty":
            with pytest.raises(ev.EventStateError):
                e.obj.wait(SHORT_S)
            return
        try:
            result = e.obj.wait(SHORT_S)
        except ev.OpError as exc:
            assert status == "failing", f"unexpected failure: {exc!r}"
            assert matches_round(root_cause(exc), e.failed_rounds()), exc
            clear(exc)
            return
        if status == "blocked":
            assert result is False
        if result:
            assert status == "finishing"

    @rule(j=st.integers(0, 99))
    def wait_to_the_end(self, j: int) -> None:
        e = self.events[j % len(self.events)]
        status = e.status()
        if status in ("empty", "blocked"):
            return
        self._finish(e)

    def _finish(self, e: EventM) -> None:
        status = e.status()
        try:
            result = call_with_timeout(lambda: e.obj.wait(FINISH_TIMEOUT_S), FINISH_TIMEOUT_S + 5)
        except ev.OpError as exc:
            assert status == "failing", f"unexpected failure: {exc!r}"
            assert matches_round(root_cause(exc), e.failed_rounds()), exc
            assert e.obj.status == "failed"
            clear(exc)
            return
        assert result is True, "an event whose work can run did not finish"
        assert status == "finishing"
        assert e.obj.status == "finished"
        if e.obj.enable_timing:
            assert e.obj.time_elapsed() >= 0.0
        else:
            with pytest.raises(ev.EventStateError):
                e.obj.time_elapsed()

    @rule(j=st.integers(0, 99))
    def reset(self, j: int) -> None:
        e = self.events[j % len(self.events)]
        status = e.status()
        if status == "blocked":
            with pytest.raises(ev.EventStateError):
                e.obj.reset()
            assert e.obj.status == "pending"
            return
        if status in ("finishing", "failing"):
            self._finish(e)
        e.obj.reset()
        e.items = []
        assert e.obj.status == "empty" and e.obj.completed is False

    @rule(j=st.integers(0, 99))
    def add_callback(self, j: int) -> None:
        e = self.events[j % len(self.events)]
        if not e.items:
            with pytest.raises(ev.EventStateError):
                e.obj.add_callback(lambda: None)
            return
        cb = CallbackM(e.items)
        e.obj.add_callback(cb.make())
        self.callbacks.append(cb)

    @precondition(lambda self: self.tensors)
    @rule(k=st.integers(0, 99))
    def add_completion_callback(self, k: int) -> None:
        t, item = self.tensors[k % len(self.tensors)]
        cb = CallbackM([item])
        t.add_completion_callback(cb.make())
        self.callbacks.append(cb)

    @rule(data=st.data())
    def wait_all_or_any(self, data) -> None:
        chosen = data.draw(st.lists(st.sampled_from(range(len(self.events))), min_size=1,
                                    max_size=3, unique=True))
        es = [self.events[c] for c in chosen]
        statuses = [e.status() for e in es]
        if "empty" in statuses:
            with pytest.raises(ev.EventStateError):
                ev.wait_all([e.obj for e in es], timeout=SHORT_S)
            return
        idx = ev.wait_any([e.obj for e in es], timeout=SHORT_S)
        if idx is None:
            pass
        else:
            assert statuses[idx] != "blocked"
        try:
            ok = ev.wait_all([e.obj for e in es], timeout=SHORT_S)
        except ev.OpError as exc:
            first = next(k for k, s in enumerate(statuses) if s == "failing")
            assert matches_round(root_cause(exc), es[first].failed_rounds()), exc
            clear(exc)
            return
        if "blocked" in statuses:
            assert ok is False
        if ok:
            assert all(s == "finishing" for s in statuses)

    @rule(i=st.integers(0, 99))
    def stream_query(self, i: int) -> None:
        s = self.streams[i % len(self.streams)]
        if any(r.state == "pending" for r in s.deps):
            assert s.obj.query() is False

    @precondition(lambda self: all(r.state != "pending" for r in self.rounds))
    @rule()
    def synchronize(self) -> None:
        call_with_timeout(ev.synchronize, FINISH_TIMEOUT_S)
        for s in self.streams:
            assert s.obj.query() is True

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def callbacks_at_most_once_and_never_early(self) -> None:
        for cb in self.callbacks:
            with cb.lock:
                assert cb.count <= 1, "a callback ran more than once"
                assert not cb.violations, cb.violations

    # --- the end: everything resolves, every callback runs once --------------------------

    def teardown(self) -> None:
        try:
            for u in self._live_users():
                if u[1].state == "pending":
                    u[1].resolved = True
                    u[1].state = "set"
                    u[0].set()
            for e in self.events:
                if e.items:
                    assert e.status() in ("finishing", "failing")
                    self._finish(e)
            call_with_timeout(ev.synchronize, FINISH_TIMEOUT_S)
            deadline = time.monotonic() + FINISH_TIMEOUT_S
            while any(cb.count == 0 for cb in self.callbacks):
                assert time.monotonic() < deadline, "a callback never ran"
                time.sleep(0.002)
            time.sleep(0.005)
            for cb in self.callbacks:
                assert cb.count == 1, "a callback ran more than once"
                assert not cb.violations, cb.violations
        finally:
            # never leave streams held back for the next example
            for u in self._live_users():
                if u[1].state == "pending":
                    u[1].state = "set"
                    u[0].set()


EventideMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=30,
    deadline=None,
    database=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.time_limit(max(300, EXAMPLES * 0.6))
def test_eventide_state_machine():
    EventideMachine.TestCase("runTest").runTest()
