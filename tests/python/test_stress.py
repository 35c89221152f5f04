"""A hypothesis state machine whose steps run on many threads at once (issue 10's stress suite).

Over 600 lines on purpose: the state machine's steps, invariants and checkers must be read
together, as one machine.

test_stateful.py checks exact answers, one call at a time. This machine checks what must hold
whatever the interleaving, while several things happen together:

* each ``fan_out`` step runs 2..FAN operations at once on a thread pool (released together by a
  barrier): creating and combining tensors on shared streams, recording tensors and stream
  markers on shared events, polls, short waits, callbacks, awaits, NumPy reads, and setting or
  failing UserEvents, with Python exceptions of several kinds;
* all the time, two poller threads poll and inspect every event and tensor (``poll`` holds the
  GIL and takes the event's lock), a recorder thread records markers on the events, adds
  callbacks to them and waits on them briefly, and an asyncio loop on its own thread runs the
  awaits (``asyncio.wait_for`` with timeouts, ``wait_all_async``, ``wait_any_async``,
  cancellations);
* some steps run inside ``ev.profile()`` or between ``Profiler()`` and ``stop()``;
* ``double_failure`` builds the ingredients of issue 10's freeze: one event with two records
  whose work fails with two different Python exceptions, failed from two threads at once,
  while the pollers poll and the main thread records on it and inspects it.

The model: every piece of work (an ``Item``) knows the UserEvent rounds it surely waits for
(``sure``), may wait for (``maybe``: operations that raced on one stream may be in either
order), surely fails with (``fsure``) and may fail with (``fmaybe``). Checked, from every
thread that looks:

* nothing finishes before the rounds it surely waits for were set or failed (a round is marked
  resolved *before* ``set()``/``fail()`` is called, so an observer that sees work finished sees
  the mark);
* work that surely fails reports an error, work that cannot fail reports none, and an error's
  root cause is the user's own exception object (or, for ``fail(SomeClass)``, an instance of
  exactly that class) from one of the rounds it may fail with;
* callbacks run exactly once, never before their work, never on the caller's thread;
* values read back equal NumPy's;
* a profile holds every op the step's threads enqueued, never says an op of a stream still
  held back finished, and a second profiler meanwhile is refused;
* no hang: every blocking call has a timeout, and the teardown waits for everything; no crash.

The test runs the machine with steps of up to 2 threads, then up to FAN (4). Run longer
(``make soak`` does): ``EVENTIDE_STRESS_EXAMPLES=1000 EVENTIDE_STRESS_THREADS=8``
(``EVENTIDE_STRESS_STEPS`` sets the steps of an example).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import random
import threading
import time
from collections import defaultdict
from typing import Any, Callable, Optional

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule  # noqa: E402

import eventide as ev  # noqa: E402
from conftest import call_with_timeout  # noqa: E402

EXAMPLES = int(os.environ.get("EVENTIDE_STRESS_EXAMPLES", "50"))
STEPS = int(os.environ.get("EVENTIDE_STRESS_STEPS", "40"))
FAN = max(3, int(os.environ.get("EVENTIDE_STRESS_THREADS", "4")))  # the most threads a step uses
FINISH_S = 20.0
SHORT_S = 0.002
PROFILE_STOP_S = 0.02  # what a profile's end waits for held-back work
SHAPE = (8, 8)
MAX_STREAMS, MAX_EVENTS, MAX_TENSORS, MAX_PENDING_GATES = 7, 6, 16, 4


# --- the model -------------------------------------------------------------------------------

class Boom(Exception):
    """A user exception with a payload."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.payload = bytearray(4096)


class OtherBoom(KeyError):
    pass


EXC_KINDS = ["boom", "other", "raised", "class"]


def make_exception(kind: str, name: str) -> Any:
    """What a user passes to UserEvent.fail: an instance, one that was raised (it carries a
    traceback, whose frame holds an eventide object: releasing it runs eventide code), or a
    class (eventide makes the instance)."""
    if kind == "boom":
        return Boom(name)
    if kind == "other":
        return OtherBoom(name)
    if kind == "raised":
        held = ev.Event()  # noqa: F841  (kept alive by the traceback's frame)
        try:
            raise ValueError(name)
        except ValueError as exc:
            return exc
    return RuntimeError  # a class


class Round:
    """One set()/fail() of a gate's UserEvent."""
    counter = itertools.count(1)

    def __init__(self, gate: str) -> None:
        self.name = f"{gate}.r{next(Round.counter)}"
        self.resolved = False       # flipped right before set()/fail() is called
        self.state = "pending"      # set | failed, decided when the call is planned
        self.exc: Any = None        # what fail() was given: an exception or a class

    def matches(self, cause: BaseException) -> bool:
        if self.state != "failed":
            return False
        if isinstance(self.exc, type):
            return type(cause) is self.exc
        return cause is self.exc

    def __repr__(self) -> str:
        return f"Round({self.name}, {self.state}, resolved={self.resolved})"


class Item:
    """A piece of work: an op, a stream's wait, or a marker."""

    def __init__(self, sure=(), maybe=(), fsure=(), fmaybe=(), value=None) -> None:
        self.sure = frozenset(sure)
        self.maybe = frozenset(maybe) | self.sure
        self.fsure = frozenset(fsure)
        self.fmaybe = frozenset(fmaybe) | self.fsure
        self.value = value  # NumPy value of an op's output (None: not tracked)


DONE = Item()


def union(sets) -> frozenset:
    return frozenset().union(*sets)


def surely_blocked(items) -> list:
    return [r for i in items for r in i.sure if not r.resolved]


def settled(items) -> bool:
    return all(r.resolved for i in items for r in i.maybe)


def root_cause(exc: BaseException) -> BaseException:
    for _ in range(20):
        if exc.__cause__ is None:
            break
        exc = exc.__cause__
    return exc


class StreamM:
    def __init__(self, gate: Optional["GateM"] = None) -> None:
        self.obj = ev.Stream("cpu")
        self.name = repr(self.obj).removeprefix("<eventide.Stream ").removesuffix(">")
        self.fdeps: frozenset = frozenset()   # rounds whose failure broke it
        self.sure: frozenset = frozenset()
        self.maybe: frozenset = frozenset()
        self.last_ops: list = []              # the ops that may be the last one
        self.last: list = []                  # the work that may be the last (ops, waits)
        if gate is not None:
            self.obj.wait(gate.user)
            r = gate.round
            self.fdeps = self.sure = self.maybe = frozenset({r})
            self.last = [Item({r}, {r}, {r}, {r})]


class GateM:
    counter = itertools.count(1)

    def __init__(self) -> None:
        self.name = f"g{next(GateM.counter)}"
        self.user = ev.UserEvent()
        self.round = Round(self.name)

    def plan(self, how: str, kind: str) -> Callable[[], None]:
        """Decides the round's outcome now; returns the call that makes it so (which marks
        the round resolved right before)."""
        r = self.round
        assert r.state == "pending"
        if how == "set":
            r.state = "set"
            call = self.user.set
        else:
            r.state = "failed"
            r.exc = make_exception(kind, r.name)
            exc = r.exc

            def call() -> None:
                self.user.fail(exc)

        def resolve() -> None:
            r.resolved = True
            call()

        return resolve


class TensorM:
    def __init__(self, obj: ev.Tensor, item: Item) -> None:
        self.obj = obj
        self.item = item

    def snapshot(self):
        return None, [self.item]

    def stable(self, token) -> bool:
        return True


class EventM:
    """An event and the work recorded on it. ``version`` changes around every record and
    reset, ``epoch`` around every reset: an observer that read the same values before and after
    what it saw knows the items it read are exactly the event's work (``version``), or at
    least part of it (``epoch``)."""

    def __init__(self, timing: bool) -> None:
        self.obj = ev.Event(enable_timing=timing)
        self.items: list = []
        self.version = 0
        self.epoch = 0
        self.inflight = 0
        self.lock = threading.Lock()        # guards the counters
        self.reset_lock = threading.Lock()  # a reset excludes the recorder thread

    def begin(self) -> None:
        with self.lock:
            self.inflight += 1
            self.version += 1

    def end(self, item: Optional[Item]) -> None:
        with self.lock:
            if item is not None:
                self.items.append(item)
            self.inflight -= 1
            self.version += 1

    def reset(self) -> None:
        """Resets the event. Its items go, and the epoch moves, in one step before the reset
        (a reader then sees either the old work with the old epoch, or none with the new one);
        the reset counts as in flight, so no reader takes the empty list for the whole truth
        until it is done."""
        with self.lock:
            self.epoch += 1
            self.version += 1
            self.items = []
            self.inflight += 1
        try:
            self.obj.reset()
        finally:
            with self.lock:
                self.inflight -= 1
                self.version += 1

    def snapshot(self):
        with self.lock:
            return (self.version, self.epoch, self.inflight), list(self.items)

    def stable(self, token) -> bool:
        with self.lock:
            return token[2] == 0 and self.inflight == 0 and token[0] == self.version

    def same_epoch(self, token) -> bool:
        with self.lock:
            return token[1] == self.epoch


class CallbackM:
    def __init__(self, what: str, items: list) -> None:
        self.what = what
        self.items = items
        self.count = 0
        self.problems: list = []
        self.lock = threading.Lock()

    def make(self, forbidden_thread: int) -> Callable[[], None]:
        def cb() -> None:
            early = surely_blocked(self.items)
            with self.lock:
                self.count += 1
                if threading.get_ident() == forbidden_thread:
                    self.problems.append(f"{self.what}: ran on the thread that added it")
                if early:
                    self.problems.append(f"{self.what}: ran before {early} were resolved")
        return cb


class Violations:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list = []

    def add(self, msg: str) -> None:
        with self.lock:
            if len(self.seen) < 50:
                self.seen.append(msg)


def check_finished(v: Violations, what: str, target, token, items: list,
                   error: Optional[BaseException]) -> None:
    """``target`` was seen finished (with ``error``); ``items`` were read before."""
    if isinstance(target, EventM) and not target.same_epoch(token):
        return  # reset in between: the items read are not its work any more
    early = surely_blocked(items)
    if early:
        v.add(f"{what} finished before {early} were set or failed")
    if not target.stable(token):
        return  # records in between: the error may come from work not read
    if error is None:
        failed = [r for i in items for r in i.fsure if r.state == "failed"]
        if failed:
            v.add(f"{what} finished without an error, though {failed} failed")
        return
    if not isinstance(error, ev.OpError):
        v.add(f"{what}: its error is {type(error).__name__}, not an OpError: {error!r}")
    cause = root_cause(error)
    if not any(r.matches(cause) for i in items for r in i.fmaybe):
        rounds = sorted({r.name for i in items for r in i.fmaybe if r.state == "failed"})
        v.add(f"{what} failed with root cause {cause!r}, not the exception of a round it "
              f"depends on (failed: {rounds}): {error}")


# --- threads that run through a whole example -------------------------------------------------

class LoopThread:
    """An asyncio loop on its own thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="stress-asyncio")
        self.thread.start()

    def submit(self, coro) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(FINISH_S)
        assert not self.thread.is_alive(), "the asyncio loop did not stop"
        self.loop.close()


POOL = concurrent.futures.ThreadPoolExecutor(max_workers=FAN, thread_name_prefix="stress-fan")


class StressMachine(RuleBasedStateMachine):
    fan = FAN  # threads a step may use (the test sets it)

    def __init__(self) -> None:
        super().__init__()
        self.v = Violations()
        self.streams: list = []
        self.gates: list = []
        self.tensors: list = []
        self.events: list = []
        self.callbacks: list = []
        self.cb_lock = threading.Lock()
        self.awaits: list = []   # concurrent futures of the coroutines on the loop
        self.stop = threading.Event()
        self.background: list = []
        self.loop: Optional[LoopThread] = None

    # --- setup: in-flight work, the background threads ------------------------------------

    @initialize()
    def setup(self) -> None:
        for _ in range(2):
            self._new_gate()
        self.streams.append(StreamM())
        for k in range(3):
            self.events.append(EventM(timing=k != 2))
        # Two gated tensors, both on event 0: failing both gates is the freeze's recipe.
        for i in range(2):
            self._sequential_op(self.streams[i], 1.0 + i)
            t = self.tensors[-1].obj
            self._record(self.events[0], self.tensors[-1].item, lambda e, t=t: e.record(t))
        self.loop = LoopThread()
        for k in range(2):
            self._start(self._poller, f"stress-poller{k}")
        self._start(self._recorder, "stress-recorder")

    def _start(self, fn: Callable[[], None], name: str) -> None:
        def body() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001  (reported by the invariant)
                self.v.add(f"{name} died: {exc!r}")
        t = threading.Thread(target=body, daemon=True, name=name)
        t.start()
        self.background.append(t)

    def _poller(self) -> None:
        """Polls and inspects everything, holding the GIL between calls as user code does."""
        v = self.v
        while not self.stop.is_set():
            for em in list(self.events):
                token, items = em.snapshot()
                try:
                    done = em.obj.poll()
                    err = em.obj.error
                    status = em.obj.status
                    repr(em.obj)
                    if done and status == "finished" and em.obj.enable_timing:
                        try:
                            em.obj.time_elapsed()
                        except ev.EventideError:
                            pass  # a failure, or markers only: allowed
                except Exception as exc:  # noqa: BLE001
                    v.add(f"polling an event raised {exc!r}")
                    continue
                if done:
                    check_finished(v, "an event (poll)", em, token, items, err)
                elif not items and em.same_epoch(token) and status != "empty" and em.stable(token):
                    v.add(f"an event with no work reads {status!r}")
            for tm in list(self.tensors):
                ready = tm.obj.ready
                if ready:
                    check_finished(v, "a tensor (ready)", tm, None, [tm.item], tm.obj.error)
            for g in list(self.gates):
                r = g.round
                if g.user.poll() and not r.resolved:
                    v.add(f"{g.name}'s UserEvent finished before set()/fail() ({r})")
            time.sleep(0.0005)

    def _recorder(self) -> None:
        """Records markers (of an idle stream: they finish at once) and finished tensors on
        the events, adds callbacks to them and waits on them briefly."""
        own = ev.Stream("cpu")
        done = ev.full(SHAPE, 0.0)
        done.wait(FINISH_S)
        rng = random.Random(1)
        while not self.stop.is_set():
            events = list(self.events)
            if not events:
                time.sleep(0.001)
                continue
            em = rng.choice(events)
            token, items = em.snapshot()
            try:
                if em.obj.wait(SHORT_S):
                    check_finished(self.v, "an event (recorder's wait)", em, token, items, None)
            except ev.OpError as exc:
                check_finished(self.v, "an event (recorder's wait)", em, token, items, exc)
            except ev.EventStateError:
                if items and em.same_epoch(token):
                    self.v.add("wait() raised EventStateError on an event with work")
            if em.reset_lock.acquire(blocking=False):
                try:
                    what = rng.random()
                    if what < 0.3:
                        self._add_callback(em, "recorder's callback")
                    else:
                        em.begin()
                        try:
                            em.obj.record(own if what < 0.7 else done)
                        finally:
                            em.end(DONE)
                finally:
                    em.reset_lock.release()
            time.sleep(0.001)

    # --- helpers -------------------------------------------------------------------------

    def _new_gate(self, n_streams: int = 1) -> GateM:
        g = GateM()
        self.gates.append(g)
        for _ in range(n_streams):
            self._add_stream(StreamM(g))
        return g

    def _add_stream(self, s: StreamM) -> None:
        if len(self.streams) >= MAX_STREAMS:
            self.streams.pop(0)  # its handle goes; its work runs on
        self.streams.append(s)

    def _add_tensor(self, tm: TensorM) -> None:
        if len(self.tensors) >= MAX_TENSORS:
            self.tensors.pop(0)
        self.tensors.append(tm)

    def _pending_gates(self) -> list:
        return [g for g in self.gates if g.round.state == "pending"]

    def _record(self, em: EventM, item: Item, do: Callable[[ev.Event], None]) -> None:
        em.begin()
        try:
            do(em.obj)
        finally:
            em.end(item)

    def _sequential_op(self, s: StreamM, value: float) -> None:
        with s.obj:
            t = ev.full(SHAPE, value)
        item = Item(s.sure, s.maybe, s.fdeps, s.fdeps, np.full(SHAPE, value, np.float32))
        s.sure, s.maybe = item.sure, item.maybe
        s.last_ops = s.last = [item]
        self._add_tensor(TensorM(t, item))

    def _add_callback(self, target, what: str, on_tensor: bool = False) -> None:
        token, items = target.snapshot()
        cb = CallbackM(what, items)
        fn = cb.make(threading.get_ident())
        try:
            if on_tensor:
                target.obj.add_completion_callback(fn)
            else:
                target.obj.add_callback(fn)
        except ev.EventStateError:
            if items:
                self.v.add(f"{what}: add_callback refused an event with work: EventStateError")
            return
        if not items and isinstance(target, EventM) and target.stable(token):
            self.v.add(f"{what}: add_callback accepted an empty event")
        with self.cb_lock:
            self.callbacks.append(cb)

    # --- fan-out: operations at once on many threads -------------------------------------

    def _task(self, spec: tuple) -> tuple:
        """(run in a pool thread, apply to the model afterwards, op info or None)."""
        kind = spec[0]
        v = self.v
        S = lambda i: self.streams[i % len(self.streams)]  # noqa: E731
        E = lambda j: self.events[j % len(self.events)]  # noqa: E731
        T = lambda k: self.tensors[k % len(self.tensors)]  # noqa: E731

        if kind in ("create", "compute"):
            s = S(spec[1])
            if kind == "create":
                value = float(spec[2])
                inputs: list = []
                want = np.full(SHAPE, value, np.float32)
                make = lambda: ev.full(SHAPE, value)  # noqa: E731
            else:
                a, b, op = T(spec[2]), T(spec[3]), spec[4]
                inputs = [a.item, b.item]
                fn = {"add": ev.add, "mul": ev.mul, "matmul": ev.matmul}[op]
                npfn = {"add": np.add, "mul": np.multiply, "matmul": np.matmul}[op]
                want = None
                if a.item.value is not None and b.item.value is not None:
                    with np.errstate(all="ignore"):
                        want = npfn(a.item.value, b.item.value).astype(np.float32)
                ta, tb = a.obj, b.obj
                make = lambda: fn(ta, tb)  # noqa: E731

            def run():
                with s.obj:
                    return make()

            op = {"stream": s, "inputs": inputs, "value": want}
            return run, None, op

        if kind == "from_numpy":
            value = np.full(SHAPE, float(spec[1]), np.float32)

            def run():
                return ev.from_numpy(value.copy())

            def apply(t, ctx):
                self._add_tensor(TensorM(t, Item(value=value)))
            return run, apply, None

        if kind == "record_tensor":
            em, tm = E(spec[1]), T(spec[2])

            def run():
                em.begin()
                em.obj.record(tm.obj)

            def apply(_, ctx):
                em.end(tm.item)
            return run, apply, None

        if kind == "record_stream":
            em, s = E(spec[1]), S(spec[2])

            def run():
                em.begin()
                em.obj.record(s.obj)

            def apply(_, ctx):
                em.end(ctx.marker(s))
            return run, apply, None

        if kind in ("poll", "wait_short"):
            em = E(spec[1])

            def run():
                token, items = em.snapshot()
                if kind == "poll":
                    done = em.obj.poll()
                    err = em.obj.error
                    completed, again = em.obj.completed, em.obj.poll()
                    if completed and not again and em.stable(token):
                        v.add("completed is True, then poll() is False, with no record between")
                else:
                    try:
                        done, err = em.obj.wait(SHORT_S), None
                    except ev.EventStateError as exc:
                        if items and em.same_epoch(token):
                            v.add(f"wait() on an event with work raised {exc!r}")
                        return
                    except ev.OpError as exc:
                        done, err = True, exc
                if done:
                    check_finished(v, f"an event ({kind})", em, token, items, err)
                elif kind == "wait_short" and not items and em.stable(token):
                    v.add("wait() on an empty event returned instead of raising EventStateError")
            return run, None, None

        if kind == "tensor_wait_short":
            tm = T(spec[1])

            def run():
                try:
                    done, err = tm.obj.wait(SHORT_S), None
                except ev.OpError as exc:
                    done, err = True, exc
                if done:
                    check_finished(v, "a tensor (wait)", tm, None, [tm.item], err)
            return run, None, None

        if kind == "numpy":
            tm = T(spec[1])
            if not settled([tm.item]):
                return (lambda: None), None, None  # would block until a gate is resolved

            def run():
                try:
                    got = call_with_timeout(tm.obj.numpy, FINISH_S)
                except ev.OpError as exc:
                    check_finished(v, "a tensor (numpy)", tm, None, [tm.item], exc)
                    return
                check_finished(v, "a tensor (numpy)", tm, None, [tm.item], None)
                check_value(v, tm, got)
            return run, None, None

        if kind == "callback":
            em = E(spec[1])
            return (lambda: self._add_callback(em, "a fan-out callback")), None, None

        if kind == "completion_callback":
            tm = T(spec[1])
            return (lambda: self._add_callback(tm, "a completion callback", on_tensor=True)), \
                None, None

        if kind == "await":
            target = E(spec[1]) if spec[2] != "tensor" else T(spec[1])
            how, timeout = spec[2], spec[3]

            def run():
                fut = self.loop.submit(self._await(target, how, timeout))
                with self.cb_lock:
                    self.awaits.append(fut)
            return run, None, None

        if kind == "wait_any":
            ems = [E(j) for j in spec[1]]

            def run():
                snaps = [em.snapshot() for em in ems]
                try:
                    idx = ev.wait_any([em.obj for em in ems], timeout=SHORT_S)
                except ev.EventStateError:
                    if all(items for _, items in snaps):
                        v.add("wait_any raised EventStateError over events that all have work")
                    return
                if idx is not None:
                    token, items = snaps[idx]
                    if ems[idx].same_epoch(token) and surely_blocked(items):
                        v.add(f"wait_any returned event {idx}, which waits for "
                              f"{surely_blocked(items)}")
            return run, None, None

        if kind == "resolve":
            g, how, exc_kind = spec[1], spec[2], spec[3]
            return g.plan(how, exc_kind), None, None

        raise AssertionError(kind)

    def _task_specs(self, data) -> list:
        n = data.draw(st.integers(2, self.fan), label="threads")
        ix = st.integers(0, 99)
        kinds = st.sampled_from([
            "create", "compute", "compute", "from_numpy", "record_tensor", "record_tensor",
            "record_stream", "poll", "wait_short", "tensor_wait_short", "numpy", "callback",
            "completion_callback", "await", "wait_any", "resolve"])
        specs = []
        resolving = set()
        for _ in range(n):
            kind = data.draw(kinds, label="kind")
            if kind == "create":
                spec = (kind, data.draw(ix), data.draw(st.sampled_from([-1.5, 0.5, 1.0, 2.0])))
            elif kind == "compute":
                if not self.tensors:
                    continue
                spec = (kind, data.draw(ix), data.draw(ix), data.draw(ix),
                        data.draw(st.sampled_from(["add", "mul", "matmul"])))
            elif kind == "from_numpy":
                spec = (kind, data.draw(st.sampled_from([3.0, -0.25])))
            elif kind in ("record_tensor", "tensor_wait_short", "numpy", "completion_callback"):
                if not self.tensors:
                    continue
                spec = (kind, data.draw(ix), data.draw(ix)) if kind == "record_tensor" \
                    else (kind, data.draw(ix))
            elif kind == "record_stream":
                spec = (kind, data.draw(ix), data.draw(ix))
            elif kind == "await":
                how = data.draw(st.sampled_from(["event", "tensor", "all", "any", "cancel"]))
                if how == "tensor" and not self.tensors:
                    continue
                spec = (kind, data.draw(ix), how, data.draw(st.sampled_from([0.001, 0.01, 0.05])))
            elif kind == "wait_any":
                spec = (kind, data.draw(st.lists(ix, min_size=1, max_size=3)))
            elif kind == "resolve":
                pending = [g for g in self._pending_gates() if g not in resolving]
                if not pending:
                    continue
                g = pending[data.draw(ix) % len(pending)]
                resolving.add(g)
                spec = (kind, g, data.draw(st.sampled_from(["set", "fail", "fail"])),
                        data.draw(st.sampled_from(EXC_KINDS)))
            else:
                spec = (kind, data.draw(ix))
            specs.append(spec)
        return specs

    def _run_batch(self, specs: list) -> int:
        """Runs the tasks at once; returns how many ops they enqueued."""
        if not specs:
            return 0
        tasks = [self._task(spec) for spec in specs]
        barrier = threading.Barrier(len(tasks), timeout=FINISH_S)

        def body(run):
            barrier.wait()
            return run()

        futures = [POOL.submit(body, run) for run, _, _ in tasks]
        results = []
        for f in futures:
            try:
                results.append(f.result(timeout=FINISH_S))
            except concurrent.futures.TimeoutError:
                pytest.fail(f"a fan-out task did not return within {FINISH_S} s (hang): {specs}")
        ctx = BatchModel([(op, res) for (_, _, op), res in zip(tasks, results) if op is not None])
        for (_, apply, op), res in zip(tasks, results):
            if op is not None:
                self._add_tensor(TensorM(res, ctx.item_of[id(res)]))
        for (_, apply, _), res in zip(tasks, results):
            if apply is not None:
                apply(res, ctx)
        ctx.commit()
        return len(ctx.ops)

    @rule(data=st.data())
    def fan_out(self, data) -> None:
        self._run_batch(self._task_specs(data))

    @rule(data=st.data())
    def fan_out_again(self, data) -> None:
        """(The same: twice as likely as the other rules.)"""
        self._run_batch(self._task_specs(data))

    @rule(data=st.data(), explicit=st.booleans())
    def profile_fan_out(self, data, explicit: bool) -> None:
        specs = self._task_specs(data)
        before = {s.name: s.sure for s in self.streams}  # what the batch's ops surely wait for
        if explicit:
            p = ev.Profiler()
            try:
                n_ops = self._run_batch(specs)
                self._second_profiler_is_refused()
            finally:
                prof = p.stop(timeout=PROFILE_STOP_S)
            with pytest.raises(ev.EventStateError):
                p.stop(timeout=PROFILE_STOP_S)
        else:
            with ev.profile(timeout=PROFILE_STOP_S) as prof:
                n_ops = self._run_batch(specs)
                self._second_profiler_is_refused()
        ops = [op for op in prof.ops if not op["is_marker"] and not op["is_wait"]]
        assert len(ops) >= n_ops, f"{n_ops} ops enqueued from the pool, {len(ops)} recorded"
        # Streams held back since before the batch, and still now: every op the batch put
        # there (the profile has no other op of theirs) is unfinished.
        held = {name for name, sure in before.items() if surely_blocked([Item(sure)])}
        for op in prof.ops:
            if op["finished"]:
                assert op["start_us"] <= op["end_us"], op
                assert op["stream"] not in held, \
                    f"the profile says {op} finished, on a stream still held back"

    def _second_profiler_is_refused(self) -> None:
        def second():
            with pytest.raises(ev.EventStateError):
                ev.Profiler()
        POOL.submit(second).result(timeout=FINISH_S)

    # --- steps on the main thread --------------------------------------------------------

    @rule(n=st.integers(1, 2))
    def new_gate(self, n: int) -> None:
        if len(self._pending_gates()) < MAX_PENDING_GATES:
            self._new_gate(n)

    @rule(how=st.sampled_from(["set", "fail"]), kind=st.sampled_from(EXC_KINDS),
          j=st.integers(0, 99))
    def resolve(self, how: str, kind: str, j: int) -> None:
        pending = self._pending_gates()
        if pending:
            pending[j % len(pending)].plan(how, kind)()

    @rule(kind1=st.sampled_from(EXC_KINDS), kind2=st.sampled_from(EXC_KINDS),
          delay=st.sampled_from([0.0, 0.001, 0.004]),
          inspect=st.sampled_from(["poll", "record", "error", "wait"]))
    def double_failure(self, kind1: str, kind2: str, delay: float, inspect: str) -> None:
        """Issue 10's freeze: an event with two failed records whose causes are two different
        Python exceptions, folded by the runtime's workers while Python threads poll it,
        record on it and inspect it."""
        g1, g2 = self._new_gate(), self._new_gate()
        s1, s2 = self.streams[-2], self.streams[-1]
        self._sequential_op(s1, 1.0)
        t1 = self.tensors[-1]
        self._sequential_op(s2, 2.0)
        t2 = self.tensors[-1]
        if len(self.events) >= MAX_EVENTS:
            self.events.pop(0)
        em = EventM(timing=True)
        self._record(em, t1.item, lambda e: e.record(t1.obj))
        self._record(em, t2.item, lambda e: e.record(t2.obj))
        self.events.append(em)
        fail1, fail2 = g1.plan("fail", kind1), g2.plan("fail", kind2)
        barrier = threading.Barrier(2, timeout=FINISH_S)

        def later(fail, pause):
            barrier.wait()
            time.sleep(pause)
            fail()

        futures = [POOL.submit(later, fail1, 0.0), POOL.submit(later, fail2, delay)]
        spare = ev.Stream("cpu")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.01:
            if inspect == "poll":
                em.obj.poll()
            elif inspect == "record":
                self._record(em, DONE, lambda e: e.record(spare))
            elif inspect == "error":
                _ = em.obj.error, em.obj.status, repr(em.obj)
            else:
                try:
                    em.obj.wait(0.0005)
                except ev.OpError:
                    pass
        for f in futures:
            f.result(timeout=FINISH_S)
        token, items = em.snapshot()
        with pytest.raises(ev.OpError) as info:
            call_with_timeout(lambda: em.obj.wait(FINISH_S), FINISH_S + 5)
        cause = root_cause(info.value)
        assert g1.round.matches(cause) or g2.round.matches(cause), (cause, g1.round, g2.round)
        check_finished(self.v, "the doubly failed event", em, token, items, info.value)

    @rule(j=st.integers(0, 99))
    def reset_event(self, j: int) -> None:
        em = self.events[j % len(self.events)]
        with em.reset_lock:  # the recorder stays away; the pool is idle
            token, items = em.snapshot()
            blocked = surely_blocked(items)
            if blocked:
                with pytest.raises(ev.EventStateError):
                    em.obj.reset()
                assert em.obj.status == "pending", blocked
                return
            if not settled(items):
                return  # it may or may not have finished: a reset may or may not be refused
            if items:
                try:
                    assert call_with_timeout(lambda: em.obj.wait(FINISH_S), FINISH_S + 5)
                    err = None
                except ev.OpError as exc:
                    err = exc
                check_finished(self.v, "an event (before reset)", em, token, items, err)
            em.reset()
            assert em.obj.status == "empty" and not em.obj.poll()

    @rule(timing=st.booleans())
    def new_event(self, timing: bool) -> None:
        if len(self.events) >= MAX_EVENTS:
            self.events.pop(0)
        self.events.append(EventM(timing))

    @rule(k=st.integers(0, 99))
    def drop_tensor(self, k: int) -> None:
        if self.tensors:
            del self.tensors[k % len(self.tensors)]

    @rule()
    def new_stream(self) -> None:
        self._add_stream(StreamM())

    @rule()
    def synchronize(self) -> None:
        if self._pending_gates():
            return
        call_with_timeout(ev.synchronize, FINISH_S)
        for s in self.streams:
            assert s.obj.query(), f"{s.name} has work left after synchronize()"

    # --- asyncio -------------------------------------------------------------------------

    async def _await(self, target, how: str, timeout: float) -> None:
        v = self.v
        if how == "tensor":
            token, items = target.snapshot()
            what, aw = "await tensor", target.obj
        else:
            token, items = target.snapshot()
            what, aw = f"await event ({how})", target.obj
        try:
            if how in ("event", "tensor"):
                await asyncio.wait_for(aw, timeout)
            elif how == "all":
                if not await ev.wait_all_async([aw], timeout=timeout):
                    raise asyncio.TimeoutError
            elif how == "any":
                if await ev.wait_any_async([aw], timeout=timeout) is None:
                    raise asyncio.TimeoutError
                if aw.error is not None:
                    raise aw.error
            else:  # cancel: the await is given up after it started
                task = asyncio.ensure_future(asyncio.wait_for(aw, FINISH_S))
                await asyncio.sleep(0)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    return
                # it finished before the cancel took
            err = None
        except asyncio.TimeoutError:
            return
        except ev.EventStateError as exc:
            if items and (how == "tensor" or target.same_epoch(token)):
                v.add(f"{what} raised {exc!r} though it has work")
            return
        except ev.OpError as exc:
            err = exc
        except Exception as exc:  # noqa: BLE001
            v.add(f"{what} raised {exc!r}")
            return
        check_finished(v, what, target, token, items, err)

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def nothing_went_wrong(self) -> None:
        with self.v.lock:
            assert not self.v.seen, self.v.seen
        with self.cb_lock:
            callbacks = list(self.callbacks)
        for cb in callbacks:
            with cb.lock:
                assert cb.count <= 1, f"{cb.what} ran {cb.count} times"
                assert not cb.problems, cb.problems

    # --- the end: every gate is set, everything finishes, every callback ran once ----------

    def teardown(self) -> None:
        try:
            for g in self._pending_gates():
                g.plan("set", "boom")()
            time.sleep(0.01)
            self.stop.set()
            for t in self.background:
                t.join(FINISH_S)
                assert not t.is_alive(), f"{t.name} did not stop (hang)"
            for em in self.events:
                token, items = em.snapshot()
                if not items:
                    continue
                try:
                    ok = call_with_timeout(lambda: em.obj.wait(FINISH_S), FINISH_S + 5)
                    assert ok, "an event did not finish after every gate was resolved"
                    err = None
                except ev.OpError as exc:
                    err = exc
                check_finished(self.v, "an event (teardown)", em, token, items, err)
                if em.obj.enable_timing and err is None:
                    try:
                        assert em.obj.time_elapsed() >= 0
                    except ev.EventStateError:
                        pass  # no op tied (older work, markers of an idle stream)
            for tm in self.tensors:
                try:
                    got = call_with_timeout(tm.obj.numpy, FINISH_S)
                except ev.OpError as exc:
                    check_finished(self.v, "a tensor (teardown)", tm, None, [tm.item], exc)
                    continue
                check_finished(self.v, "a tensor (teardown)", tm, None, [tm.item], None)
                check_value(self.v, tm, got)
            if self.loop is not None:
                with self.cb_lock:
                    awaits = list(self.awaits)
                for fut in awaits:
                    try:
                        fut.result(timeout=FINISH_S)
                    except concurrent.futures.TimeoutError:
                        pytest.fail("an await did not end after every gate was resolved (hang)")
                # A last await of everything: it must end, with the right outcome.
                for em in self.events:
                    if em.snapshot()[1]:
                        self.loop.submit(self._await(em, "event", FINISH_S)).result(FINISH_S + 5)
            call_with_timeout(ev.synchronize, FINISH_S)
            deadline = time.monotonic() + FINISH_S
            while True:
                with self.cb_lock:
                    waiting = [cb.what for cb in self.callbacks if cb.count == 0]
                if not waiting:
                    break
                assert time.monotonic() < deadline, f"callbacks never ran: {waiting[:5]}"
                time.sleep(0.002)
            time.sleep(0.01)
            for cb in self.callbacks:
                assert cb.count == 1, f"{cb.what} ran {cb.count} times"
                assert not cb.problems, cb.problems
            assert not self.v.seen, self.v.seen
        finally:
            self.stop.set()
            for g in self.gates:
                if g.round.state == "pending":
                    g.round.resolved = True
                    g.round.state = "set"
                    g.user.set()
            if self.loop is not None:
                self.loop.stop()


def check_value(v: Violations, tm: TensorM, got: np.ndarray) -> None:
    want = tm.item.value
    if want is None:
        return
    scale = float(np.nanmax(np.abs(want[np.isfinite(want)]))) if np.isfinite(want).any() else 0.0
    try:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(scale, 1.0))
    except AssertionError as exc:
        v.add(f"wrong values: {exc}")


class BatchModel:
    """The model of the ops a batch enqueued at once: ops on one stream may have run in any
    order, so each may wait for what the others wait for (``maybe``), and a marker recorded
    during the batch may come after any of them."""

    def __init__(self, ops: list) -> None:
        self.ops = ops
        self.item_of: dict = {}
        by_stream: dict = defaultdict(list)
        for op, tensor in ops:
            s = op["stream"]
            item = Item(s.sure | union(i.sure for i in op["inputs"]),
                        s.maybe | union(i.maybe for i in op["inputs"]),
                        s.fdeps | union(i.fsure for i in op["inputs"]),
                        s.fdeps | union(i.fmaybe for i in op["inputs"]),
                        op["value"])
            by_stream[id(s)].append((s, item))
            self.item_of[id(tensor)] = item
        self.by_stream = by_stream
        self.maybe_of = {}
        for key, pairs in by_stream.items():
            together = union(item.maybe for _, item in pairs)
            self.maybe_of[key] = together
            for _, item in pairs:
                item.maybe = item.maybe | together

    def marker(self, s: StreamM) -> Item:
        siblings = [item for _, item in self.by_stream.get(id(s), [])]
        candidates = list(s.last_ops) + siblings
        fsure = s.fdeps
        if s.last_ops and candidates:
            fsure = fsure | frozenset.intersection(*(c.fsure for c in candidates))
        fmaybe = s.fdeps | union(c.fmaybe for c in candidates) | union(c.fmaybe for c in s.last)
        return Item(s.sure, s.maybe | self.maybe_of.get(id(s), frozenset()), fsure, fmaybe)

    def commit(self) -> None:
        for pairs in self.by_stream.values():
            s = pairs[0][0]
            items = [item for _, item in pairs]
            s.sure = s.sure | union(i.sure for i in items)
            s.maybe = s.maybe | union(i.maybe for i in items)
            s.last_ops = s.last = items


StressMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
)


@pytest.mark.time_limit(max(150, EXAMPLES * 1.5))  # (a freeze holds the GIL: only this ends it)
@pytest.mark.parametrize("threads", sorted({2, FAN}))
def test_many_threads_state_machine(threads):
    """Steps that run the same kinds of operation on 2 and on FAN threads at once."""
    StressMachine.fan = threads
    try:
        StressMachine.TestCase("runTest").runTest()
    finally:
        StressMachine.fan = FAN
