"""ev.benchmark: host and device time per run from markers on the current stream (CPU here;
test_cuda.py has the GPU's)."""

import threading
import time

import pytest

import eventide as ev
from conftest import call_with_timeout

SLEEP_S = 0.02


def hold_stream_for(seconds: float):
    """A run whose device work takes `seconds`: the current stream waits on a UserEvent that a
    timer sets, so the device is busy between the markers while the call returns at once."""
    def run() -> None:
        u = ev.UserEvent()
        ev.current_stream().wait(u)
        timer = threading.Timer(seconds, u.set)
        timer.daemon = True
        timer.start()
    return run


def test_counts_warmup_and_timed_runs():
    calls = []
    r = call_with_timeout(lambda: ev.benchmark(calls.append, 1, n_repeat=7, n_warmup=3))
    assert len(calls) == 10
    assert r.n_runs == 7 and r.n_warmup == 3
    assert len(r.host_times_us) == len(r.device_times_us) == 7
    assert r.name == "append"
    assert r.device == ev.Device("cpu")


def test_arguments_and_keyword_arguments_reach_the_function():
    seen = []
    call_with_timeout(lambda: ev.benchmark(lambda *a, **k: seen.append((a, k)), 1, 2,
                                           kwargs={"x": 3}, n_repeat=2, n_warmup=0))
    assert seen == [((1, 2), {"x": 3})] * 2


def test_device_time_covers_work_held_on_the_stream_and_host_time_does_not():
    r = call_with_timeout(lambda: ev.benchmark(hold_stream_for(SLEEP_S), n_repeat=5, n_warmup=1))
    device = r.device_stats
    host = r.host_stats
    assert all(t > 0 for t in r.device_times_us)
    assert device["min"] >= SLEEP_S * 1e6 * 0.9, device
    assert device["max"] < SLEEP_S * 1e6 * 50, device  # plausible, even on a loaded machine
    assert host["mean"] < device["mean"], (host, device)


def test_device_time_of_a_matmul_is_positive():
    a, b = ev.randn(128, 128), ev.randn(128, 128)
    r = call_with_timeout(lambda: ev.benchmark(ev.matmul, a, b, n_repeat=5, n_warmup=1))
    assert all(t > 0 for t in r.device_times_us)
    assert r.name == "matmul"


def test_statistics_are_consistent():
    r = call_with_timeout(lambda: ev.benchmark(hold_stream_for(0.001), n_repeat=20, n_warmup=0))
    for stats, times in ((r.host_stats, r.host_times_us), (r.device_stats, r.device_times_us)):
        assert set(stats) == {"mean", "stdev", "min", "p50", "median", "p99", "max"}
        assert stats["min"] == min(times) and stats["max"] == max(times)
        assert stats["min"] <= stats["p50"] <= stats["p99"] <= stats["max"]
        assert stats["p50"] == stats["median"]
        assert stats["min"] <= stats["mean"] <= stats["max"]
        assert stats["stdev"] >= 0
        assert stats["mean"] == pytest.approx(sum(times) / len(times))


def test_str_reads_like_cupy_with_host_then_device_time():
    r = call_with_timeout(lambda: ev.benchmark(lambda: None, n_repeat=3, n_warmup=0, name="noop"))
    text = str(r)
    # "host" and "device (cpu)": "CPU" and "cpu" told them apart by case alone.
    assert text.startswith("noop : host: "), text
    assert "us +/-" in text and "(min:" in text and "/ max:" in text
    assert "    device (cpu): " in text.split("host: ", 1)[1] and "CPU" not in text, text
    assert "\n" not in text, "one line: print() ends it"
    assert repr(r) == text


def test_max_duration_ends_the_runs_early():
    r = call_with_timeout(lambda: ev.benchmark(hold_stream_for(0.01), n_repeat=10_000,
                                               n_warmup=0, max_duration=0.1))
    assert 1 <= r.n_runs < 100


def test_an_exception_in_the_function_propagates_as_itself():
    class Boom(Exception):
        pass

    calls = []

    def fn():
        calls.append(1)
        if len(calls) == 3:
            raise Boom("third call")

    with pytest.raises(Boom, match="third call") as info:
        call_with_timeout(lambda: ev.benchmark(fn, n_repeat=10, n_warmup=1))
    assert len(calls) == 3
    assert info.traceback[-1].name == "fn"  # the traceback reaches the raising line
    # Still usable afterwards.
    assert call_with_timeout(lambda: ev.benchmark(lambda: None, n_repeat=1)).n_runs == 1


def test_failed_device_work_propagates():
    def fn():
        u = ev.UserEvent()
        ev.current_stream().wait(u)
        u.fail(RuntimeError("device work failed"))

    def run():
        with ev.stream(ev.Stream("cpu")):  # (its own stream: the failure stays there)
            return ev.benchmark(fn, n_repeat=3, n_warmup=0)

    with pytest.raises((RuntimeError, ev.OpError), match="device work failed"):
        call_with_timeout(run)


@pytest.mark.parametrize("kwargs, what", [
    ({"n_repeat": 0}, "n_repeat"),
    ({"n_repeat": -5}, "n_repeat"),
    ({"n_warmup": -1}, "n_warmup"),
    ({"max_duration": -1.0}, "max_duration must be None or a non-negative"),
])
def test_bad_arguments_are_value_errors_naming_the_argument(kwargs, what):
    with pytest.raises(ValueError, match=what) as info:
        ev.benchmark(lambda: None, **kwargs)
    assert isinstance(info.value, ev.InvalidArgumentError)


def test_arguments_of_the_wrong_type_are_type_errors():
    with pytest.raises(TypeError, match="callable"):
        ev.benchmark(42)
    with pytest.raises(TypeError, match="n_repeat"):
        ev.benchmark(lambda: None, n_repeat=2.5)


def test_progress_appears_only_when_asked_or_long(capsys):
    call_with_timeout(lambda: ev.benchmark(lambda: None, n_repeat=5, n_warmup=0, name="quiet"))
    assert capsys.readouterr().err == ""
    call_with_timeout(lambda: ev.benchmark(lambda: None, n_repeat=5, n_warmup=0, name="asked",
                                           progress=True))
    err = capsys.readouterr().err
    assert "asked: run 5/5" in err and err.endswith("\n")
    call_with_timeout(lambda: ev.benchmark(hold_stream_for(0.05), n_repeat=10_000, n_warmup=0,
                                           max_duration=1.5, name="long", progress=False))
    assert capsys.readouterr().err == ""


@pytest.mark.time_limit(60)
def test_progress_appears_by_itself_on_a_long_run(capsys):
    r = call_with_timeout(lambda: ev.benchmark(hold_stream_for(0.05), n_repeat=10_000,
                                               n_warmup=0, max_duration=1.6, name="long"))
    err = capsys.readouterr().err
    assert f"long: run {r.n_runs}/10000" in err and err.endswith("\n"), err


def test_markers_go_to_the_current_stream():
    s = ev.Stream("cpu")
    held = []

    def run():
        with ev.profile() as prof:
            with ev.stream(s):
                ev.benchmark(lambda: held.append(ev.current_stream()), n_repeat=2, n_warmup=1)
        return prof

    prof = call_with_timeout(run)
    assert held == [s, s, s]
    markers = [op for op in prof.ops if op["is_marker"]]
    assert len(markers) == 1 + 2 * 2  # one after the warm-up run, two around each timed run
    assert {op["stream"] for op in markers} == {f"cpu stream {s.id}"}


def test_device_time_is_the_span_between_the_markers_host_gaps_included():
    # The device time is the markers' elapsed_time, as with a CUDA event pair: a sleep between
    # them counts though the device did nothing (GUARANTEES.md, "Benchmarks"); the host time
    # is the call's.
    r = call_with_timeout(lambda: ev.benchmark(time.sleep, 0.005, n_repeat=3, n_warmup=0, device="cpu"))
    assert min(r.device_times_us) >= 4900
    assert min(r.host_times_us) >= 4900


def test_a_huge_n_repeat_with_max_duration_runs_without_reserving_for_every_repeat():
    # It reserved room for every repeat up front: MemoryError before fn ran once.
    calls = []
    r = ev.benchmark(lambda: calls.append(1), n_repeat=10**9, n_warmup=0, max_duration=0.1,
                     progress=False)
    assert 0 < r.n_runs == len(calls) < 10**9


def test_work_on_a_stream_of_fns_own_is_timed_and_its_failures_propagate():
    # Before, only the current stream had markers: 35 ms of work on fn's own stream read as
    # tens of microseconds, still running when benchmark returned, and its failure was lost.
    own = ev.Stream("cpu")
    pending = []

    def fn():
        with ev.stream(own):
            pending.append(hold_stream_for(SLEEP_S)())

    r = call_with_timeout(lambda: ev.benchmark(fn, n_repeat=3, n_warmup=1, device="cpu"))
    assert min(r.device_times_us) >= SLEEP_S * 1e6 * 0.9, r.device_times_us
    assert own.query(), "benchmark returned while fn's work on its own stream ran"

    def failing():
        with ev.stream(own):
            u = ev.UserEvent()
            ev.current_stream().wait(u)
            u.fail(RuntimeError("work on fn's own stream failed"))

    with pytest.raises((RuntimeError, ev.OpError), match="own stream failed"):
        call_with_timeout(lambda: ev.benchmark(failing, n_repeat=2, n_warmup=0, device="cpu"))
