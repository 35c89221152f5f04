"""asyncio: events are awaitable; wait_all_async / wait_any_async; cancellation is harmless."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import eventide as ev
from conftest import Gate, call_with_timeout


def run(coro_fn, timeout: float = 20.0):
    """asyncio.run under a hang guard."""
    return call_with_timeout(lambda: asyncio.run(asyncio.wait_for(coro_fn(), timeout)),
                             timeout + 5)


def test_await_event():
    async def main():
        a = ev.rand(128, 128)
        e = ev.Event()
        e.record(a @ a)
        result = await e
        return result, e.completed

    assert run(main) == (None, True)


def test_await_does_not_block_the_loop(gate: Gate):
    async def main():
        with gate:
            t = ev.rand(4)
        e = ev.Event()
        e.record(t)
        ticks = 0

        async def ticker():
            nonlocal ticks
            while not e.completed:
                ticks += 1
                await asyncio.sleep(0.001)

        async def opener():
            await asyncio.sleep(0.1)
            gate.open()

        task = asyncio.create_task(ticker())
        asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(opener()))
        await e
        await task
        return ticks

    assert run(main) >= 3  # the loop kept running while the event was awaited


def test_await_finished_event_and_user_event():
    async def main():
        e = ev.Event()
        e.record(ev.rand(4))
        e.wait()
        await e  # already finished: completes at once
        await e  # and again
        u = ev.UserEvent()
        asyncio.get_running_loop().call_later(0.02, u.set)
        await u
        return u.completed

    assert run(main) is True


def test_gather_events():
    async def main():
        a = ev.rand(64, 64)
        e1, e2 = ev.Event(), ev.Event()
        e1.record(a @ a)
        e2.record(a + a)
        await asyncio.gather(e1, e2)
        return e1.completed and e2.completed

    assert run(main) is True


def test_wait_all_async():
    async def main():
        g = Gate()
        with g:
            t = ev.rand(4)
        e1 = ev.Event()
        e1.record(t)
        e2 = ev.Event()
        e2.record(ev.rand(4))
        task = asyncio.create_task(ev.wait_all_async([e1, e2]))
        await asyncio.sleep(0.05)
        assert not task.done()
        g.open()
        assert await task is True
        return e1.completed and e2.completed

    assert run(main) is True


def test_wait_all_async_raises_first_failure():
    async def main():
        u1, u2 = ev.UserEvent(), ev.UserEvent()
        exc = KeyError("first")
        loop = asyncio.get_running_loop()
        loop.call_later(0.02, u1.fail, exc)
        with pytest.raises(KeyError) as info:
            await ev.wait_all_async([u1, u2])
        assert info.value is exc
        u2.set()

    run(main)


def test_wait_any_async():
    async def main():
        u1, u2 = ev.UserEvent(), ev.UserEvent()
        asyncio.get_running_loop().call_later(0.02, u2.set)
        i = await ev.wait_any_async([u1, u2])
        assert i == 1
        assert await ev.wait_any_async([u1, u2]) == 1  # already finished: at once
        assert await ev.wait_any_async([u1], timeout=0.02) is None
        u1.set()
        assert await ev.wait_any_async([u1, u2]) == 0
        with pytest.raises(ev.InvalidArgumentError):
            await ev.wait_any_async([])

    run(main)


def test_wait_any_async_failed_event_is_finished():
    async def main():
        u1, u2 = ev.UserEvent(), ev.UserEvent()
        errors = []
        asyncio.get_running_loop().set_exception_handler(lambda _l, ctx: errors.append(ctx))
        asyncio.get_running_loop().call_later(0.02, u1.fail, KeyError("x"))
        assert await ev.wait_any_async([u1, u2]) == 0
        u2.set()
        await asyncio.sleep(0.05)
        return errors

    assert run(main) == []


def test_await_failed_event_raises_its_error():
    async def main():
        u = ev.UserEvent()
        exc = ValueError("failed on purpose")
        u.fail(exc)
        with pytest.raises(ValueError) as info:
            await u
        assert info.value is exc

        g = Gate()
        with g:
            t = ev.rand(4)
        e = ev.Event()
        e.record(t)
        asyncio.get_running_loop().call_later(0.02, g.fail, exc)
        with pytest.raises(ev.OpError) as info:
            await e
        assert info.value.__cause__ is exc

    run(main)


def test_cancelling_a_task_awaiting_an_event_leaves_it_usable():
    async def main():
        g = Gate()
        with g:
            t = ev.rand(4)
        e = ev.Event()
        e.record(t)

        async def waiter(x):
            await x

        tasks = [asyncio.create_task(waiter(e)), asyncio.create_task(waiter(g.user))]
        await asyncio.sleep(0.05)
        for task in tasks:
            assert not task.done()
            task.cancel()
        for task in tasks:
            with pytest.raises(asyncio.CancelledError):
                await task
        assert e.status == "pending" and g.user.status == "pending"
        g.open()
        assert e.wait(20) is True
        assert e.poll() and g.user.poll()
        await e
        await g.user
        # and a fresh await after a cancelled wait_any_async / wait_all_async
        u = ev.UserEvent()
        task = asyncio.create_task(ev.wait_all_async([u]))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        task = asyncio.create_task(ev.wait_any_async([u]))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        u.set()
        await u
        assert await ev.wait_any_async([u]) == 0
        return True

    assert run(main) is True


def test_asyncio_wait_for_timeout_on_event():
    async def main():
        u = ev.UserEvent()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(u, 0.05)
        u.set()
        await asyncio.wait_for(u, 5)

    run(main)


def test_awaiting_an_empty_event_raises():
    async def main():
        with pytest.raises(ev.EventStateError):
            await ev.Event()
        with pytest.raises(ev.EventStateError):
            await ev.wait_all_async([ev.Event()])

    run(main)


def test_event_finished_after_loop_closed_is_harmless(gate: Gate):
    """A task awaiting an event is cancelled when asyncio.run ends; the event finishing later
    must not break the runtime (the loop is gone)."""
    with gate:
        t = ev.rand(4)
    e = ev.Event()
    e.record(t)

    async def main():
        asyncio.ensure_future(_await(e))
        await asyncio.sleep(0.02)

    async def _await(x):
        await x

    call_with_timeout(lambda: asyncio.run(main()))
    gate.open()
    assert call_with_timeout(e.wait)
    e2 = ev.Event()
    e2.record(ev.rand(4))
    assert call_with_timeout(e2.wait)


def test_await_from_several_loops_in_threads():
    u = ev.UserEvent()
    results = []

    def thread_main():
        async def main():
            await u
            return threading.get_ident()
        results.append(asyncio.run(asyncio.wait_for(main(), 20)))

    threads = [threading.Thread(target=thread_main, daemon=True) for _ in range(4)]
    for th in threads:
        th.start()
    time.sleep(0.05)
    assert not results
    u.set()
    for th in threads:
        th.join(20)
    assert len(results) == 4


def test_with_stream_in_interleaved_tasks():
    s1, s2 = ev.Stream(), ev.Stream()

    async def task_a():
        with s1:
            await asyncio.sleep(0.01)
        return ev.current_stream()

    async def task_b():
        with s2:
            await asyncio.sleep(0.03)
            return ev.current_stream()

    async def main():
        return await asyncio.gather(task_a(), task_b())

    after_a, inside_b = run(main)
    assert inside_b == s2
    assert after_a == ev.default_stream()
