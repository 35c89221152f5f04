"""``ev.range``: a named region of the user's code, as a ``with`` block or a decorator, in the
profile (``prof.ranges``), its Chrome trace and its timeline page. (Its NVTX side is checked
by the C++ nvtx_test, through NVTX's injection mechanism: ``ev.range`` is eventide::Range.)

Blocking: each profile's end waits for its recorded work (at most 10 s); threads are joined
with a time limit and every other wait goes through ``call_with_timeout``.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

import eventide as ev
from test_profile import TimelinePage
from conftest import call_with_timeout

RANGE_KEYS = {"name", "thread", "start_us", "end_us"}


def by_name(prof: ev.profile, name: str) -> list:
    return [r for r in prof.ranges if r["name"] == name]


def test_a_range_is_in_the_profile_with_its_thread_and_times():
    with ev.profile() as prof:
        with ev.range("step") as r:
            assert isinstance(r, ev.range) and r.name == "step"
            time.sleep(0.002)
    [step] = prof.ranges
    assert set(step) == RANGE_KEYS
    assert step["name"] == "step"
    assert step["thread"].startswith("thread ")
    assert 2000 <= step["end_us"] - step["start_us"]
    assert 0 <= step["start_us"] <= step["end_us"] <= prof.duration_us
    assert "1 range" in repr(prof.profile)


def test_ranges_nest_on_one_thread_in_the_order_they_began():
    with ev.profile() as prof:
        with ev.range("outer"):
            with ev.range("inner"):
                t = ev.full((16,), 1.0)
                call_with_timeout(t.wait)
            with ev.range("second inner"):
                pass
    assert [r["name"] for r in prof.ranges] == ["outer", "inner", "second inner"]
    outer, inner, second = prof.ranges
    assert outer["start_us"] <= inner["start_us"] <= inner["end_us"] <= second["start_us"]
    assert second["end_us"] <= outer["end_us"]
    assert outer["thread"] == inner["thread"] == second["thread"]


def test_a_range_opened_before_the_profile_is_not_in_it():
    with ev.range("before"):
        with ev.profile() as prof:
            with ev.range("during"):
                pass
    assert [r["name"] for r in prof.ranges] == ["during"]


def test_an_exception_inside_the_block_still_closes_the_range():
    r = ev.range("failing")
    with ev.profile() as prof:
        with pytest.raises(ZeroDivisionError):
            with r:
                1 / 0
        with r:  # the object is usable again: nothing was left open
            pass
    assert [x["name"] for x in prof.ranges] == ["failing", "failing"]
    first, second = prof.ranges
    assert first["end_us"] <= second["start_us"]
    assert r._open == {}  # nothing left open


def test_a_decorated_function_is_a_range_at_each_call_recursion_included():
    @ev.range("fib")
    def fib(n: int) -> int:
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    with ev.profile() as prof:
        assert fib(4) == 3
    calls = by_name(prof, "fib")
    assert len(calls) == 9  # fib(4) calls fib 9 times in all
    outermost = calls[0]
    assert all(outermost["start_us"] <= c["start_us"] <= c["end_us"] <= outermost["end_us"] for c in calls)


def test_the_name_is_any_object_as_its_str():
    with ev.profile() as prof:
        with ev.range(42):
            pass
    assert prof.ranges[0]["name"] == "42"
    assert repr(ev.range("x")) == "<eventide.range 'x'>"


@pytest.mark.parametrize("n_threads", [1, 2, 3, 7])
def test_one_range_object_on_several_threads_at_once_makes_a_region_per_entry(n_threads):
    shared = ev.range("shared")
    per_thread = 5
    go = threading.Barrier(n_threads)
    errors: list = []

    def worker(i: int) -> None:
        try:
            go.wait(20)
            for _ in range(per_thread):
                with shared:
                    with ev.range(f"thread {i} inner"):
                        e = ev.Event()
                        e.record(ev.full((8,), float(i)))
                        assert e.wait(timeout=20)
        except BaseException as exc:  # noqa: BLE001  (checked below)
            errors.append(exc)

    with ev.profile() as prof:
        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
            assert not t.is_alive()
    assert errors == []
    shared_ranges = by_name(prof, "shared")
    assert len(shared_ranges) == n_threads * per_thread
    assert len({r["thread"] for r in shared_ranges}) == n_threads
    for i in range(n_threads):
        inner = by_name(prof, f"thread {i} inner")
        assert len(inner) == per_thread
        # Each inner range lies in a "shared" range of its own thread.
        for r in inner:
            assert any(s["thread"] == r["thread"] and s["start_us"] <= r["start_us"]
                       and r["end_us"] <= s["end_us"] for s in shared_ranges)
    assert shared._open == {}  # every region closed


def test_the_chrome_trace_and_the_timeline_page_show_the_range():
    with ev.profile() as prof:
        with ev.range("load <data>"):
            with ev.range("decode"):
                time.sleep(0.001)
    trace = json.loads(prof.chrome_trace())
    ranges = {e["name"]: e for e in trace["traceEvents"] if e.get("cat") == "range"}
    assert set(ranges) == {"load <data>", "decode"}
    assert all(e["ph"] == "X" for e in ranges.values())
    assert ranges["load <data>"]["tid"] == ranges["decode"]["tid"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    load = ranges["load <data>"]
    assert names[(load["pid"], load["tid"])] == "ranges · " + prof.ranges[0]["thread"]
    page = TimelinePage.parse(prof.timeline_html())
    data = page.data
    bars = [b for b in data["bars"] if data["kinds"][b[1]] == "range"]
    assert len(bars) == 2
    assert all(data["lanes"][b[0]]["kind"] == "range" for b in bars)
    assert any(data["texts"][b[3]].startswith("load <data>") for b in bars)
    assert [l["sub"] for l in data["lanes"] if l["kind"] == "range"] == ["ranges", "ranges, depth 1"]


class TestRangesInGenerators:
    def test_a_generator_resumed_on_another_thread_closes_its_range(self):
        r = ev.range("gen")

        def gen():
            with r:
                yield 1
                yield 2

        with ev.profile() as prof:
            g = gen()
            assert next(g) == 1  # opened here
            out = []
            t = threading.Thread(target=lambda: out.append(list(g)))  # closed there
            t.start()
            t.join(20)
            assert out == [[2]]
        (rg,) = [x for x in prof.ranges if x["name"] == "gen"]
        assert rg["end_us"] >= rg["start_us"]

    def test_two_generators_interleaved_on_one_range_keep_their_own_ends(self):
        r = ev.range("inter")

        def gen():
            with r:
                yield

        with ev.profile() as prof:
            first, second = gen(), gen()
            next(first)  # the first region opens...
            time.sleep(0.03)
            next(second)  # ...then the second...
            next(first, None)  # ...the first closes...
            time.sleep(0.03)
            next(second, None)  # ...and the second, 30 ms later
        regions = sorted((x for x in prof.ranges if x["name"] == "inter"), key=lambda x: x["start_us"])
        assert len(regions) == 2
        # A stack per thread paired the first exit with the last entry: the first region
        # then ended last, and the second at once.
        assert regions[0]["end_us"] < regions[1]["end_us"], regions
        assert regions[1]["end_us"] - regions[1]["start_us"] >= 25_000, regions
