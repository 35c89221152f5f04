"""Graphs from Python: ``with ev.capture() as g:`` and ``g.replay()``, on the CPU (the default
device of CI). The patterns are those of torch.cuda.graph users: a static input refreshed with
``copy_`` between replays, static outputs read after each replay, events recorded inside the
capture timing the latest replay, replays awaited and waited for with ``wait_all``, and capture
errors that leave everything usable.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

import eventide as ev
from conftest import call_with_timeout


def values(t: ev.Tensor) -> np.ndarray:
    return call_with_timeout(lambda: t.numpy().copy())


def test_a_chain_captured_once_runs_at_each_replay_and_not_before():
    x = ev.zeros(64)
    one = ev.ones(64)
    with ev.capture() as g:
        for _ in range(100):
            ev.add(x, one, out=x)
    assert g.ops == 100
    np.testing.assert_array_equal(values(x), np.zeros(64, np.float32))
    done = g.replay()
    call_with_timeout(done.wait)
    assert done.completed and done.query()
    assert done.time_elapsed() >= 0.0
    np.testing.assert_array_equal(values(x), np.full(64, 100.0, np.float32))
    g.replay()
    np.testing.assert_array_equal(values(x), np.full(64, 200.0, np.float32))


def test_static_input_and_output_between_replays():
    static_in = ev.zeros(16)
    with ev.capture() as g:
        static_out = ev.mul(ev.add(static_in, 1.0), 2.0)
    with pytest.raises(ev.EventideError, match="replay"):
        values(static_out)  # the graph's own tensor has no value before a replay
    for step in range(3):
        static_in.copy_(ev.full((16,), float(step)))
        g.replay()
        np.testing.assert_array_equal(values(static_out), np.full(16, (step + 1) * 2.0, np.float32))


def test_events_in_the_capture_time_the_latest_replay():
    x = ev.zeros(1024)
    one = ev.ones(1024)
    start, end = ev.Event(), ev.Event()
    with ev.capture() as g:
        start.record()
        for _ in range(10):
            ev.add(x, one, out=x)
        end.record()
    for _ in range(3):
        g.replay()
        call_with_timeout(end.wait)
        ms = start.elapsed_time(end)
        assert 0.0 <= ms < 250.0
        assert start.time_elapsed() < 1.0  # one point, the latest replay's


def test_a_replays_event_is_awaited_waited_for_and_called_back():
    x = ev.zeros(8)
    with ev.capture() as g:
        ev.add(x, 1.0, out=x)
    called = threading.Event()
    e = g.replay()
    e.add_callback(lambda: called.set())
    call_with_timeout(lambda: ev.wait_all([e, g.replay(ev.Stream())]))
    assert called.wait(10)

    async def main():
        await g.replay()
    call_with_timeout(lambda: asyncio.run(main()))
    np.testing.assert_array_equal(values(x), np.full(8, 3.0, np.float32))


@pytest.mark.parametrize("refused, mention", [
    (lambda x: ev.add(x, x).numpy(), "host wait or a poll"),
    (lambda x: ev.current_stream().synchronize(), "synchronize"),
    (lambda x: ev.synchronize("cpu"), "synchronize"),
    (lambda x: ev.current_stream().query(), "query"),
    (lambda x: ev.current_stream().wait(ev.UserEvent()), "UserEvent"),
])
def test_what_cannot_be_captured_raises_and_abandons_the_capture(refused, mention):
    x = ev.zeros(4)
    with pytest.raises(ev.EventStateError, match="the capture of graph") as info:
        with ev.capture() as g:
            ev.add(x, 1.0, out=x)
            refused(x)
    assert mention in str(info.value)
    with pytest.raises(ev.EventStateError, match="abandoned"):
        g.replay()
    np.testing.assert_array_equal(values(x), np.zeros(4, np.float32))  # nothing ran
    ev.add(x, 1.0, out=x)  # the default stream was never touched
    np.testing.assert_array_equal(values(x), np.ones(4, np.float32))


def test_each_replay_draws_fresh_numbers_and_a_seed_makes_it_repeat():
    # As torch.cuda.graph's generator: a replay draws what the same ops would draw eagerly
    # then, so manual_seed before a replay reproduces it, and eager draws go on after it.
    u = ev.empty(1001)
    with ev.capture() as g:
        ev.rand(1001, out=u)
        n = ev.randn(6, 7, dtype="float64")
    ev.manual_seed(3)
    call_with_timeout(g.replay().wait)
    first_u, first_n = values(u), values(n)
    after = values(ev.rand(5))
    ev.manual_seed(3)
    np.testing.assert_array_equal(values(ev.rand(1001)), first_u)
    np.testing.assert_array_equal(values(ev.randn(6, 7, dtype="float64")), first_n)
    np.testing.assert_array_equal(values(ev.rand(5)), after)
    call_with_timeout(g.replay().wait)
    assert not np.array_equal(values(u), first_u)
    ev.manual_seed(3)
    call_with_timeout(g.replay().wait)
    np.testing.assert_array_equal(values(u), first_u)
    np.testing.assert_array_equal(values(n), first_n)


def test_a_refusal_caught_inside_the_block_is_raised_at_its_end():
    x = ev.zeros(4)
    with pytest.raises(ev.EventStateError, match="synchronize"):
        with ev.capture():
            try:
                ev.current_stream().synchronize()
            except ev.EventStateError:
                pass
    np.testing.assert_array_equal(values(x), np.zeros(4, np.float32))


def test_an_exception_in_the_block_abandons_the_capture_and_propagates():
    x = ev.zeros(4)
    s = ev.Stream()
    with pytest.raises(KeyError):
        with ev.capture(stream=s) as g:
            ev.add(x, 1.0, out=x)
            raise KeyError("user code")
    with pytest.raises(ev.EventStateError):
        g.replay()
    with ev.capture(stream=s) as g2:  # the stream captures again
        ev.add(x, 1.0, out=x)
    g2.replay()
    np.testing.assert_array_equal(values(x), np.ones(4, np.float32))


def test_the_capture_stream_is_current_only_inside_the_block():
    outside = ev.current_stream()
    with ev.capture() as g:
        inside = ev.current_stream()
        assert inside != outside
        with pytest.raises(ev.EventStateError, match="still open"):
            g.replay()
    assert ev.current_stream() == outside


def test_joined_streams_are_captured_with_the_capture_stream():
    a, b = ev.zeros(4), ev.zeros(4)
    side = ev.Stream()
    with ev.capture() as g:
        side.wait(ev.current_stream().record_event())
        with side:
            ev.add(b, 1.0, out=b)
        ev.add(a, 1.0, out=a)
        ev.current_stream().wait(side.record_event())
    assert g.ops >= 2
    call_with_timeout(g.replay().wait)
    np.testing.assert_array_equal(values(a), np.ones(4, np.float32))
    np.testing.assert_array_equal(values(b), np.ones(4, np.float32))


def test_benchmark_with_graph_captures_once_and_times_replays():
    x = ev.zeros(4)
    calls = []

    def chain():
        calls.append(1)
        for _ in range(10):
            ev.add(x, 1.0, out=x)

    r = ev.benchmark(chain, n_repeat=5, n_warmup=2, graph=True, progress=False)
    assert len(calls) == 1
    assert r.n_runs == 5
    np.testing.assert_array_equal(values(x), np.full(4, 70.0, np.float32))
    with pytest.raises(ev.EventStateError, match="the capture of graph"):
        ev.benchmark(lambda: ev.ones(2).numpy(), graph=True, progress=False)


def test_under_a_profiler_a_replay_lists_its_nodes_inside_its_bar():
    x, one = ev.zeros(4096), ev.ones(4096)
    with ev.capture() as g:
        ev.add(x, one, out=x)
        ev.mul(x, one, out=x)
    with ev.profile() as prof:
        call_with_timeout(g.replay().wait)
    profile = prof.profile
    replays = [op for op in profile.ops if op["name"].startswith("replay of graph")]
    assert len(replays) == 1
    replay = replays[0]
    assert [p["name"] for p in replay["parts"]] == ["add", "mul"]
    for part in replay["parts"]:
        assert replay["start_us"] - 1e-3 <= part["start_us"] <= part["end_us"] <= replay["end_us"] + 1e-3
    assert "graph nodes" in profile.chrome_trace()
