"""The torch.mps.Event tutorial's scenarios in eventide, one test per point (docs/TUTORIAL.md).

Each test follows the tutorial's usage as closely as eventide's API allows.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import eventide as ev
from conftest import Gate, call_with_timeout


@pytest.fixture
def ab():
    a = ev.rand(256, 256)
    b = ev.rand(256, 256)
    return a, b


def expected(a: ev.Tensor, b: ev.Tensor) -> np.ndarray:
    return a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)


# Point 1: Event() creates an event that is not completed by default.
def test_point1_new_event_not_completed():
    event = ev.Event()
    assert event.completed is False


# "MPS 演算の完了を待つ" (wait for an op) — points 2, 3, 9.
def test_snippet_wait_for_op(ab):
    a, b = ab
    output = ev.matmul(a, b)
    event = ev.Event()
    event.record(output)
    call_with_timeout(event.wait)
    assert event.completed
    np.testing.assert_allclose(output.numpy(), expected(a, b), rtol=1e-4)
    print(output)


# "複数の MPS 演算を同期させる" (synchronize several ops) — point 8.
def test_snippet_wait_all_of_two(ab):
    a, b = ab
    c, d = ev.rand(128, 64), ev.rand(64, 32)
    output1 = ev.matmul(a, b)
    output2 = ev.matmul(c, d)
    event1 = ev.Event()
    event2 = ev.Event()
    event1.record(output1)
    event2.record(output2)
    call_with_timeout(lambda: ev.wait_all([event1, event2]))
    assert event1.completed and event2.completed
    assert output1.ready and output2.ready
    print(output1, output2)


# "MPS 演算のパフォーマンスを分析" (time_elapsed) — point 7.
def test_snippet_time_elapsed(ab):
    a, b = ab
    output = ev.matmul(a, b)
    event = ev.Event()
    event.record(output)
    call_with_timeout(event.wait)
    time_elapsed = event.time_elapsed()
    assert isinstance(time_elapsed, float) and time_elapsed > 0.0
    print(f"Time elapsed: {time_elapsed}")


# "イベントの完了をチェック" (poll loop) — point 4. The loop does other work meanwhile.
def test_snippet_poll_loop(ab):
    a, b = ab
    output = ev.matmul(a, b)
    event = ev.Event()
    event.record(output)
    other_work = 0

    def loop():
        nonlocal other_work
        while not event.poll():
            other_work += 1  # 他の処理を行う
        return True

    assert call_with_timeout(loop)
    assert output.ready
    print(output, other_work)


def test_poll_never_blocks(gate: Gate):
    with gate:
        output = ev.rand(4)
    event = ev.Event()
    event.record(output)
    for _ in range(1000):
        assert event.poll() is False
    gate.open()
    call_with_timeout(event.wait)
    assert event.poll() is True


# "イベントをリセット" (reset) — point 5.
def test_snippet_reset(ab):
    a, b = ab
    output = ev.matmul(a, b)
    event = ev.Event()
    event.record(output)
    call_with_timeout(event.wait)
    event.reset()
    assert event.completed is False
    print(event.completed)


# Point 2 / the closing notes: one event tied to several operations.
def test_multiple_ops_on_one_event(ab):
    a, b = ab
    g = Gate()
    out1 = ev.matmul(a, b)
    with g:
        out2 = ev.matmul(b, a)
    event = ev.Event()
    event.record(out1)
    event.record(out2)
    call_with_timeout(out1.wait)
    assert event.poll() is False
    g.open()
    call_with_timeout(event.wait)
    assert event.completed and out2.ready


# Point 6: attributes completed and device.
def test_point6_attributes(ab):
    a, b = ab
    event = ev.Event()
    assert event.device is None
    event.record(ev.matmul(a, b))
    call_with_timeout(event.wait)
    assert event.completed is True
    assert event.device == a.device == ev.Device("cpu")


# Point 9: matmul returns before the result is ready.
def test_point9_matmul_is_asynchronous(gate: Gate):
    a = ev.rand(64, 64)
    with gate:
        output = ev.matmul(a, a)  # returns although its stream cannot run yet
    assert output.ready is False
    gate.open()
    call_with_timeout(output.wait)


# "torch.cuda.synchronize()" — point 10, device-wide.
def test_snippet_synchronize(ab):
    a, b = ab
    output = ev.matmul(a, b)
    call_with_timeout(ev.synchronize)
    assert output.ready
    print(output)


# "Python の threading モジュール" — point 11: threading.Event + completion callback,
# another thread waiting on it.
def test_snippet_threading_event(ab):
    a, b = ab
    output = ev.matmul(a, b)
    event = threading.Event()

    def on_complete():
        event.set()

    output.add_completion_callback(on_complete)
    assert event.wait(20)
    assert output.ready
    print(output)


def test_threading_event_waited_on_by_another_thread(gate: Gate):
    a = ev.rand(64, 64)
    with gate:
        output = ev.matmul(a, a)
    event = threading.Event()
    output.add_completion_callback(event.set)
    seen = []
    waiter = threading.Thread(target=lambda: seen.append((event.wait(20), output.ready)))
    waiter.start()
    assert not event.wait(0.05)
    gate.open()
    waiter.join(20)
    assert seen == [(True, True)]


# "カスタムイベント" — point 12: a user class with set()/wait(), driven by a completion
# callback, without busy-waiting; also passed to ev.wait_all together with real events.
class MyEvent:
    def __init__(self):
        self._completed = threading.Event()
        self.waits = 0

    def set(self):
        self._completed.set()

    def wait(self, timeout=None):
        self.waits += 1
        return self._completed.wait(timeout)


def test_snippet_custom_event(ab):
    a, b = ab
    output = ev.matmul(a, b)
    event = MyEvent()

    def on_complete():
        event.set()

    output.add_completion_callback(on_complete)
    assert call_with_timeout(event.wait)
    assert output.ready


def test_custom_event_in_wait_all_with_real_events(gate: Gate):
    a = ev.rand(64, 64)
    with gate:
        out1 = ev.matmul(a, a)
    out2 = ev.matmul(a, a)
    mine = MyEvent()
    out1.add_completion_callback(mine.set)
    real = ev.Event()
    real.record(out2)
    assert ev.wait_all([real, mine], timeout=0.05) is False
    finished = threading.Event()
    th = threading.Thread(target=lambda: (ev.wait_all([mine, real]), finished.set()), daemon=True)
    th.start()
    assert not finished.wait(0.05)
    gate.open()
    assert finished.wait(20)
    assert mine.waits >= 2 and out1.ready


def test_wait_all_custom_object_without_timeout_parameter():
    class Plain:
        def __init__(self):
            self.called = False

        def wait(self):
            self.called = True

    p = Plain()
    e = ev.Event()
    e.record(ev.rand(4))
    assert call_with_timeout(lambda: ev.wait_all([p, e], timeout=5)) is True
    assert p.called


def test_wait_all_rejects_objects_without_wait():
    with pytest.raises(ev.InvalidArgumentError, match="wait"):
        ev.wait_all([object()])
