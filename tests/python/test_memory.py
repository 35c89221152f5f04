"""Memory over repeated patterns (issue 10): after a warm-up, more rounds of the same work do not
grow the process's memory.

Each pattern is one round of ordinary use that handles a large payload (a 64 KB tensor, an
exception or a closure holding 64 KB, a profile of many ops). Three measures are read after a
warm-up batch and after each of three more batches, with the collector run, the runtime
synchronized and glibc's free memory given back (``malloc_trim``) first:

* the resident set (``/proc/self/statm``): a round's payload kept shows at once;
* the C heap in use (glibc's ``mallinfo2``): the runtime's own objects (an event's state is
  about 0.5 kB) kept show too, where the resident set would hide them in its noise;
* the number of objects Python's collector tracks: one Python object kept a round shows.

The growth over the last two batches must stay under each measure's tolerance (measured noise
here: about 0.05 MB, 12 kB and a handful of objects). Controls that do leak (a payload, an
event, a list a round) show each check can fail.

test_leaks.py measures the two leaks of the report (closures holding their own UserEvent,
cancelled awaits) precisely; this is the broad net over everything else.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import sys
from typing import Callable

import numpy as np
import pytest

import eventide as ev
from conftest import Gate, call_with_timeout

if not sys.platform.startswith("linux"):  # pragma: no cover
    pytest.skip("reads /proc/self/statm", allow_module_level=True)

PAYLOAD = 64 * 1024
ELEMS = PAYLOAD // 4  # float32 elements of one payload
# Rounds per batch: EVENTIDE_SOAK_ROUNDS raises it for a long soak (make soak).
ROUNDS = int(os.environ.get("EVENTIDE_SOAK_ROUNDS", "200"))
BATCHES = 3
RSS_TOLERANCE = 2 * 2 ** 20      # bytes over two batches (a 64 kB payload a round: 25 MB)
HEAP_TOLERANCE = 128 * 2 ** 10   # bytes over two batches (an event a round: 180 kB)
OBJECTS_TOLERANCE = ROUNDS // 2  # Python objects over two batches (one a round: 2 * ROUNDS)
PAGE = os.sysconf("SC_PAGE_SIZE")
pytestmark = pytest.mark.time_limit(max(120, ROUNDS * 0.2))
WAIT_S = 20.0

try:
    _malloc_trim = ctypes.CDLL(None).malloc_trim
    _malloc_trim.argtypes = [ctypes.c_size_t]
except (OSError, AttributeError):  # pragma: no cover  (not glibc)
    _malloc_trim = None


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


try:
    _mallinfo2 = ctypes.CDLL(None).mallinfo2
    _mallinfo2.restype = _MallInfo2
except (OSError, AttributeError):  # pragma: no cover  (glibc before 2.33)
    _mallinfo2 = None


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def c_heap() -> int:
    if _mallinfo2 is None:
        return 0
    info = _mallinfo2()
    return info.uordblks + info.hblkhd


def settle() -> tuple:
    for _ in range(3):
        gc.collect()
    call_with_timeout(ev.synchronize, WAIT_S)
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)
    return rss(), c_heap(), len(gc.get_objects())


def growth(pattern: Callable[[], None], rounds: int = ROUNDS) -> list:
    """(RSS, C heap, Python objects) after a warm-up batch, then after each of BATCHES more."""
    for _ in range(rounds):
        pattern()
    seen = [settle()]
    for _ in range(BATCHES):
        for _ in range(rounds):
            pattern()
        seen.append(settle())
    return seen


def assert_flat(seen: list) -> None:
    first, last = seen[1], seen[-1]
    table = ", ".join(f"{r / 2 ** 20:.2f} MB/{h / 2 ** 10:.0f} kB/{n}" for r, h, n in seen)
    where = f"over {2 * ROUNDS} rounds (RSS/C heap/objects after each batch: {table})"
    assert last[0] - first[0] < RSS_TOLERANCE, \
        f"resident memory grew {(last[0] - first[0]) / 2 ** 20:.2f} MB {where}"
    assert last[1] - first[1] < HEAP_TOLERANCE, \
        f"the C heap grew {(last[1] - first[1]) / 2 ** 10:.0f} kB {where}"
    assert last[2] - first[2] < OBJECTS_TOLERANCE, \
        f"Python objects grew by {last[2] - first[2]} {where}"


def wait(x) -> None:
    assert call_with_timeout(lambda: x.wait(WAIT_S), WAIT_S + 5)


# --- the patterns ----------------------------------------------------------------------------

class Boom(Exception):
    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.payload = bytearray(PAYLOAD)


def events_and_streams() -> None:
    s = ev.Stream("cpu")
    with s:
        a = ev.full(ELEMS, 1.0)
        b = a + a
    e = ev.Event()
    e.record(b)
    marker = ev.Event()
    marker.record(s)
    wait(e)
    wait(marker)
    e.time_elapsed()
    e.reset()


def callbacks() -> None:
    payload = bytearray(PAYLOAD)
    done = []
    t = ev.full(ELEMS, 2.0)
    t.add_completion_callback(lambda: done.append(len(payload)))
    e = ev.Event()
    e.record(t)
    e.add_callback(lambda: done.append(len(payload)))
    wait(e)
    call_with_timeout(lambda: _spin_until(lambda: len(done) == 2), WAIT_S + 5)


def _spin_until(predicate: Callable[[], bool]) -> None:
    import time
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, "a callback never ran"
        time.sleep(0.0005)


def user_event_failures() -> None:
    """Two gated streams failed with two different exceptions (each holding a payload), both
    recorded on one event: issue 10's freeze, as a pattern."""
    g1, g2 = Gate(), Gate()
    with g1:
        x1 = ev.full(ELEMS, 1.0)
    with g2:
        x2 = ev.full(ELEMS, 2.0)
    e = ev.Event()
    e.record(x1)
    e.record(x2)
    g1.fail(Boom("one"))
    g2.fail(Boom("two"))
    with pytest.raises(ev.OpError) as info:
        e.wait(WAIT_S)
    assert isinstance(info.value.__cause__, Boom)
    info.value.__traceback__ = None
    del info


def awaits_cancelled(loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    async def one_round() -> None:
        g = Gate()
        with g:
            t = ev.full(ELEMS, 3.0)
        e = ev.Event()
        e.record(t)
        for target in (e, t, g.user):
            try:
                await asyncio.wait_for(target, 0.0005)
            except asyncio.TimeoutError:
                pass
        g.open()
        await asyncio.wait_for(e, WAIT_S)

    return lambda: loop.run_until_complete(one_round())


def dlpack_round_trips() -> None:
    src = np.arange(ELEMS, dtype=np.float32)
    t = ev.from_dlpack(src)
    back = np.from_dlpack(t)
    again = ev.from_dlpack(t)
    out = again + t
    assert float(call_with_timeout(out.numpy)[ELEMS - 1]) == 2.0 * (ELEMS - 1)
    t.__dlpack__()  # never consumed
    t.__dlpack__(max_version=(1, 0))
    ev.from_dlpack(ev.full(ELEMS, 1.0).__dlpack__(max_version=(1, 0)))
    del back


def numpy_views() -> None:
    t = ev.from_numpy(np.full(ELEMS, 5.0, dtype=np.float32)[::-1])  # copied
    u = ev.tensor(np.arange(ELEMS, dtype=">f4"))                    # converted
    v = (t * u).numpy()
    assert v.shape == (ELEMS,)


def profiler_blocks() -> None:
    with ev.profile(timeout=WAIT_S) as prof:
        x = ev.full(1024, 1.0)
        for _ in range(20):
            x = x + x
        e = ev.Event()
        e.record(x)
        e.add_callback(lambda: None)
        wait(e)
    assert len(prof.ops) >= 21
    prof.chrome_trace()
    prof.timeline_html()


# --- the tests -------------------------------------------------------------------------------

PATTERNS = {
    "events_and_streams": events_and_streams,
    "callbacks": callbacks,
    "user_event_failures": user_event_failures,
    "dlpack_round_trips": dlpack_round_trips,
    "numpy_views": numpy_views,
}


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_repeated_pattern_does_not_grow_rss(name):
    assert_flat(growth(PATTERNS[name]))


def test_repeated_cancelled_awaits_do_not_grow_rss():
    loop = asyncio.new_event_loop()
    try:
        assert_flat(growth(awaits_cancelled(loop)))
    finally:
        loop.close()


def test_repeated_profiles_do_not_grow_rss():
    # A profile of 21 ops is a few kB: more rounds, so that keeping each one would show.
    seen = growth(profiler_blocks, rounds=ROUNDS)
    assert_flat(seen)


@pytest.mark.parametrize("kept,message", [
    ("payload", "resident memory grew"), ("event", "the C heap grew"),
    ("list", "Python objects grew")])
def test_each_check_sees_a_leak(kept, message):
    """The controls: a pattern that keeps one payload, one (small) event or one list a round
    fails the check that is there for it."""
    if kept == "event" and _mallinfo2 is None:  # pragma: no cover
        pytest.skip("no mallinfo2")
    keep: list = []

    def payload() -> None:
        b = bytearray(PAYLOAD)
        b[::4096] = b"x" * len(b[::4096])  # touched: resident
        keep.append(b)

    def event() -> None:
        e = ev.Event()
        e.record(ev.full(4, 1.0))
        keep.append(e)

    leaky = {"payload": payload, "event": event, "list": lambda: keep.append([len(keep)])}
    with pytest.raises(AssertionError, match=message):
        assert_flat(growth(leaky[kept]))


def test_empty_cache_gives_the_blocks_of_freed_large_tensors_back():
    # A freed large CPU tensor's block is kept for the next tensor of its size (no fresh pages
    # to fault in); empty_cache() gives such blocks back to the system.
    if os.environ.get("EVENTIDE_CPU_CACHE_MB") == "0":
        pytest.skip("EVENTIDE_CPU_CACHE_MB=0: nothing is cached")
    t = ev.ones((1 << 21,), device="cpu")  # 8 MiB
    assert t.wait(timeout=30)
    address = lambda x: x.numpy().__array_interface__["data"][0]  # a view: the tensor's memory
    ptr = address(t)
    del t
    again = ev.empty((1 << 21,), device="cpu")
    assert address(again) == ptr  # the same block, back from the cache
    del again
    assert ev.empty_cache() >= 8 << 20
    assert ev.empty_cache() == 0  # nothing is left to give back
    after = ev.full((1 << 21,), 2.0, device="cpu")
    assert after.numpy().min() == after.numpy().max() == 2.0


@pytest.mark.parametrize("value", ["lots", "-5", "12MB", ""])
def test_a_bad_cache_limit_is_said_not_ignored_silently(value):
    import subprocess
    env = dict(os.environ, EVENTIDE_DEVICE="cpu", EVENTIDE_CPU_CACHE_MB=value)
    r = subprocess.run([sys.executable, "-c", "import eventide as ev; ev.ones(1 << 20).wait()"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("is not a whole number of MiB") == 1, r.stderr


def test_temporaries_issued_far_ahead_reuse_their_memory():
    # Issue 26, item 4: 10,000 short-lived 256 KiB tensors issued as fast as the host can, each
    # dropped at once. Before: each took a fresh block while the stream ran far behind, and
    # 2.5 GB stayed resident. Now a dropped one's block goes to the stream's next output.
    if os.environ.get("EVENTIDE_CPU_CACHE_MB") == "0":
        pytest.skip("EVENTIDE_CPU_CACHE_MB=0: nothing is cached or reused")
    ev.synchronize()
    ev.empty_cache()
    start = rss()
    peak = start

    def run() -> None:
        nonlocal peak
        for i in range(10_000):
            t = ev.ones((256 * 1024 // 4,), device="cpu")
            del t
            if i % 1000 == 999:
                peak = max(peak, rss())
        ev.synchronize()

    call_with_timeout(run, 120)
    peak = max(peak, rss())
    assert peak - start < 64 * 2 ** 20, f"{(peak - start) / 2 ** 20:.0f} MB more resident while issuing"
    ev.empty_cache()
    assert rss() - start < 8 * 2 ** 20, f"{(rss() - start) / 2 ** 20:.0f} MB more resident afterwards"
