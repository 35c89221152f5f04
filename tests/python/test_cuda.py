"""eventide on a GPU from Python: ops, events, and interop with PyTorch (DLPack, streams).

Skipped, with the reason, where there is no GPU (CI); scripts/gpu-check.sh runs them on the
GPU machine. The rest of the suite pins EVENTIDE_DEVICE=cpu (conftest.py); these tests name
the device.
"""

import threading

import numpy as np
import pytest

import eventide as ev
from torch_busy import torch_busy

GPU = "cuda:0"
pytestmark = pytest.mark.skipif(not ev.is_available(GPU),
                                reason="no CUDA device here: run scripts/gpu-check.sh on a GPU machine")

try:
    import torch
    HAVE_TORCH = torch.cuda.is_available()
except ImportError:  # Debian's interpreter has no PyTorch
    torch = None
    HAVE_TORCH = False

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch with CUDA is not installed here")


def test_ops_events_and_numpy_on_the_gpu():
    a = ev.randn(256, 128, device=GPU)
    b = ev.randn(128, 64, device=GPU)
    out = a @ b
    assert out.device == ev.Device(GPU)
    e = ev.Event()
    e.record(out)
    assert e.wait(timeout=30)
    assert e.device == ev.Device(GPU)
    assert e.time_elapsed() > 0
    want = a.numpy() @ b.numpy()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-3, atol=1e-3)
    assert "cuda:0" in repr(e)


def test_copies_between_host_and_gpu():
    x = ev.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=GPU)
    assert x.device == ev.Device(GPU)
    back = x.to("cpu")
    assert back.device == ev.Device("cpu")
    np.testing.assert_array_equal(back.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))
    assert ev.tensor(3.0, device=GPU).shape == ()


def test_user_event_gates_a_gpu_stream_and_await_works():
    import asyncio

    go = ev.UserEvent()
    s = ev.Stream(GPU)
    s.wait(go)
    with s:
        t = ev.full((64,), 7.0, device=GPU)
    assert not t.ready
    threading.Timer(0.05, go.set).start()

    async def main():
        e = ev.Event()
        e.record(t)
        await e
        return t.numpy()

    np.testing.assert_array_equal(asyncio.run(main()), np.full(64, 7.0, dtype=np.float32))


def test_callback_from_the_gpu_with_a_waiting_thread():
    done = threading.Event()
    out = ev.matmul(ev.rand(512, 512, device=GPU), ev.rand(512, 512, device=GPU))
    out.add_completion_callback(done.set)
    assert done.wait(30)
    assert out.ready


def test_tf32_switch():
    assert ev.allow_tf32() is False
    ev.set_allow_tf32(True)
    try:
        assert ev.allow_tf32() is True
        a = ev.randn(64, 64, device=GPU)
        np.testing.assert_allclose((a @ a).numpy(), a.numpy() @ a.numpy(), rtol=0.05, atol=0.05)
    finally:
        ev.set_allow_tf32(False)


@needs_torch
def test_dlpack_from_torch_shares_memory():
    t = torch.randn(32, 16, device="cuda")
    x = ev.from_dlpack(t)
    assert x.device == ev.Device(GPU)
    assert x.shape == (32, 16)
    assert torch.from_dlpack(x).data_ptr() == t.data_ptr()  # no copy either way
    np.testing.assert_allclose(x.numpy(), t.cpu().numpy())


@needs_torch
def test_dlpack_to_torch_orders_the_consumer_stream():
    # The producer runs on the GPU when torch takes the tensor: torch's stream waits for it
    # on the GPU, the host does not.
    s = ev.Stream(GPU)
    with s:
        x = ev.full((1 << 24,), 5.0, device=GPU)
    consumer = torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        t = torch.from_dlpack(x)
        y = t * 2
    consumer.synchronize()
    assert torch.all(y == 10.0).item()
    # A producer still held by a UserEvent (set by another thread) is waited for on the host.
    go = ev.UserEvent()
    s.wait(go)
    with s:
        x2 = ev.full((1024,), 3.0, device=GPU)
    threading.Timer(0.05, go.set).start()
    with torch.cuda.stream(consumer):
        y2 = torch.from_dlpack(x2) * 2
    consumer.synchronize()
    assert torch.all(y2 == 6.0).item()


@needs_torch
def test_a_torch_stream_can_be_used_and_recorded():
    ts = torch.cuda.Stream()
    s = ev.Stream(ts)  # wraps torch's stream (not owned)
    assert s.native_handle == ts.cuda_stream
    assert ev.Stream(ts) == s  # one wrapper per native stream
    with torch.cuda.stream(ts):
        a = torch.randn(2048, 2048, device="cuda")
        torch.mm(a, a)
    e = ev.Event()
    e.record(s)  # a marker in torch's stream: after torch's mm
    with s:
        z = ev.zeros(8, device=GPU)  # runs after torch's mm, in the same stream
    e.record(z)
    assert e.wait(timeout=30)
    assert ts.query()
    assert repr(s).startswith("<eventide.Stream cuda:0")


# --- Markers on other libraries' work ---------------------------------------------------------------



@needs_torch
@pytest.mark.parametrize("which", ["default", "side"])
def test_the_timing_idiom_around_torch_work_matches_torch_cuda_event(which):
    # PyTorch's default stream (the legacy one) and a torch.cuda.Stream: eventide's markers
    # and torch's events around the same region read the same time (5% or 10 us).
    ts = torch.cuda.current_stream() if which == "default" else torch.cuda.Stream()
    a = torch.randn(2048, 2048, device="cuda")
    with torch.cuda.stream(ts):
        torch.mm(a, a)  # warm
        ev.Event().record(ts)  # eventide's first GPU work starts its timing (once a process)
    torch.cuda.synchronize()
    diffs, readings = [], []
    for it in range(5):
        ours_start, ours_end = ev.Event(), ev.Event()
        theirs_start = torch.cuda.Event(enable_timing=True)
        theirs_end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(ts):
            # The same order at both ends, so that neither reading holds the other's records.
            ours_start.record(ts)          # the stream object itself, no wrapping by hand
            theirs_start.record()
            for _ in range(3 + it):
                torch.mm(a, a)
            ours_end.record(torch.cuda.current_stream())
            theirs_end.record()
        torch.cuda.synchronize()
        assert ours_end.wait(timeout=30)
        ours = ours_start.elapsed_time(ours_end)
        theirs = theirs_start.elapsed_time(theirs_end)
        print(f"{which} stream: eventide {ours:.4f} ms, torch.cuda.Event {theirs:.4f} ms")
        diffs.append(abs(ours - theirs))
        readings.append(theirs)
        assert ours > 0.0
        assert ours_start.time_elapsed() == 0.0
    # The typical reading (a loaded machine can delay any one record call).
    diffs.sort()
    readings.sort()
    assert diffs[len(diffs) // 2] <= max(0.010, 0.05 * readings[len(readings) // 2])


@needs_torch
def test_a_marker_on_torchs_stream_finishes_only_after_torchs_kernels():
    ts = torch.cuda.current_stream()
    torch_end = torch.cuda.Event()
    torch_busy(20)
    torch_end.record()
    e = ev.Event()
    e.record(ts)
    assert not e.query()  # before: "finished" at once while torch was busy
    assert not e.wait(timeout=0)
    seen = []
    done = threading.Event()

    def callback():
        seen.append(torch_end.query())  # torch's own kernels, as torch sees them
        done.set()

    e.add_callback(callback)
    assert e.wait(timeout=30)
    assert done.wait(30)
    assert seen == [True]


@needs_torch
def test_events_on_torch_work_are_awaited_in_asyncio():
    import asyncio

    ts = torch.cuda.Stream()

    async def main():
        torch_busy(20, ts)
        e = ev.Event()
        e.record(ts)
        ticks = 0

        async def ticker():
            nonlocal ticks
            while not e.query():
                ticks += 1
                await asyncio.sleep(0.001)

        t = asyncio.ensure_future(ticker())
        await e
        await t
        return ticks, ts.query()

    ticks, idle = asyncio.run(asyncio.wait_for(main(), 30))
    assert idle and ticks > 0  # the loop ran while torch's kernels did


@needs_torch
def test_a_user_event_gates_eventides_work_on_a_torch_stream_and_torch_keeps_working():
    # Eventide's ops and markers on PyTorch's stream wait for the UserEvent (held on the
    # host); PyTorch's own work on that stream keeps running meanwhile (eventide cannot hold
    # another library's launches, and a GPU-side wait for the host could deadlock CUDA's lazy
    # loading): nothing hangs, and after set() eventide's results reach torch in order.
    ts = torch.cuda.Stream()
    s = ev.Stream(ts)
    go = ev.UserEvent()
    s.wait(go)
    with ev.stream(ts):
        x = ev.full((1024,), 3.0, device=GPU)
        y = x + x
    marker = s.record_event()
    with torch.cuda.stream(ts):
        t = torch.ones(1024, device="cuda") * 5  # torch's own, on the gated stream
    ts.synchronize()  # torch's work finishes: the stream is not blocked on the GPU
    assert torch.all(t == 5).item()
    assert not y.ready and not marker.query()
    go.set()
    assert marker.wait(timeout=30)
    assert y.ready
    with torch.cuda.stream(ts):
        z = torch.from_dlpack(y) * 2
    ts.synchronize()
    assert torch.all(z == 12.0).item()


@needs_torch
def test_a_torch_stream_waits_on_the_gpu_for_eventide_work():
    # Stream.wait on a torch stream: torch's later kernels there start after eventide's op,
    # and the host does not block.
    mine = ev.Stream(GPU)
    with ev.stream(mine):
        a = ev.randn(4096, 4096, device=GPU)
        big = a @ a  # a few milliseconds
    e = ev.Event()
    e.record(big)
    ts = torch.cuda.Stream()
    ev.Stream(ts).wait(e)
    after = torch.cuda.Event()
    after.record(ts)  # torch's own record, after the wait
    after.synchronize()
    assert e.query()  # torch's stream passed the wait only once eventide's matmul had finished


@needs_torch
def test_torch_takes_an_eventide_stream_through_the_stream_protocol():
    s = ev.Stream(GPU)
    version, handle = s.__cuda_stream__()
    assert version == 0 and handle == s.native_handle
    ext = torch.cuda.ExternalStream(handle)
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start = s.record_event()
    with torch.cuda.stream(ext):  # torch's kernel on eventide's stream
        t0.record()
        torch.cuda._sleep(10_000_000)
        t1.record()
    end = s.record_event()
    assert end.wait(timeout=30)
    assert t1.query()  # torch's work was done when eventide's marker after it finished
    assert start.elapsed_time(end) >= t0.elapsed_time(t1)


@needs_torch
def test_wait_stream_and_with_take_torch_streams():
    ts = torch.cuda.Stream()
    mine = ev.Stream(GPU)
    torch_busy(10, ts)
    mine.wait_stream(ts)  # a marker in torch's stream, waited for on the GPU
    with ev.stream(mine):
        start = ev.Event()
        start.record()  # the innermost `with` stream's device, as in PyTorch
    assert start.device == ev.Device(GPU)
    assert start.wait(timeout=30)
    assert ts.query()  # the marker mine waited for came after torch's kernel


def _have_cupy() -> bool:
    try:
        import cupy  # noqa: F401
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


needs_cupy = pytest.mark.skipif(not _have_cupy(), reason="CuPy with a GPU is not installed here")


@needs_cupy
@pytest.mark.parametrize("which", ["stream", "null", "ptds"])
def test_markers_on_cupy_streams(which):
    import cupy

    cs = {"stream": cupy.cuda.Stream(non_blocking=True), "null": cupy.cuda.Stream.null,
          "ptds": cupy.cuda.Stream.ptds}[which]
    a = cupy.random.rand(2048, 2048, dtype=cupy.float32)
    with cs:
        a @ a  # warm
    cs.synchronize()
    start, end = ev.Event(), ev.Event()
    c0, c1 = cupy.cuda.Event(), cupy.cuda.Event()
    with cs:
        ev.Event().record(cs)  # eventide's first GPU work starts its timing (once a process)
    cs.synchronize()
    with cs:
        start.record(cs)
        c0.record()
        for _ in range(4):
            a @ a
        end.record(cs)
        c1.record()
    assert end.wait(timeout=30)
    c1.synchronize()
    theirs = cupy.cuda.get_elapsed_time(c0, c1)
    ours = start.elapsed_time(end)
    print(f"cupy {which}: eventide {ours:.4f} ms, cupy events {theirs:.4f} ms")
    assert abs(ours - theirs) <= max(0.010, 0.05 * theirs)


def _have_numba() -> bool:
    try:
        from numba import cuda  # noqa: F401
        return cuda.is_available()
    except Exception:
        return False


@pytest.mark.skipif(not _have_numba(), reason="Numba with a GPU is not installed here")
def test_a_numba_stream_takes_markers():
    from numba import cuda

    ns = cuda.stream()
    s = ev.Stream(ns)
    assert ev.Stream(ns) == s
    with ev.stream(ns):
        x = ev.full((1024,), 2.0, device=GPU)
    e = s.record_event()
    assert e.wait(timeout=30)
    assert x.ready
    ns.synchronize()


STICKY_ERROR_CHILD = r"""
import asyncio, threading, time
import torch
import eventide as ev
GPU = 'cuda:0'
x = ev.ones(1024, device=GPU); x.wait()
u = ev.UserEvent()
s = ev.Stream(GPU)
s.wait(u)
with s:
    held = x + x                      # held behind the UserEvent
inflight = ev.Event(); inflight.record(held)
results = {}
calls = []

def waiter():
    try:
        inflight.wait(timeout=30)
        results['wait'] = 'returned'
    except ev.DeviceError as exc:
        results['wait'] = 'DeviceError'
    except BaseException as exc:
        results['wait'] = repr(exc)

def poller():
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            if inflight.query():
                results['poll'] = 'finished, error: %r' % (inflight.error,)
                return
        except BaseException as exc:
            results['poll'] = repr(exc)
            return
        time.sleep(0.001)
    results['poll'] = 'still pending after 30 s'

async def awaiter():
    try:
        await asyncio.wait_for(inflight, 30)
        results['await'] = 'returned'
    except ev.DeviceError:
        results['await'] = 'DeviceError'
    except BaseException as exc:
        results['await'] = repr(exc)

inflight.add_callback(lambda: calls.append('inflight'))
threads = [threading.Thread(target=waiter), threading.Thread(target=poller),
           threading.Thread(target=lambda: asyncio.run(awaiter()))]
for t in threads: t.start()
time.sleep(0.2)
# A device-side assert in PyTorch's kernel: a sticky error of the context eventide shares.
idx = torch.tensor([10**6], device='cuda')
try:
    torch.ones(4, device='cuda')[idx].sum().item()
except RuntimeError:
    pass
u.set()
for t in threads: t.join(40)
assert not any(t.is_alive() for t in threads), 'a thread hung'
try:
    ev.synchronize(GPU)
    results['synchronize'] = 'returned'
except ev.DeviceError:
    results['synchronize'] = 'DeviceError'
# Every synchronize raises it, as in C++: the device-wide one for every device, a stream's (the
# one that held work, and the default stream, which did nothing since).
for name, sync in (('synchronize all', lambda: ev.synchronize()),
                   ('stream synchronize', lambda: s.synchronize()),
                   ('default stream synchronize', lambda: ev.default_stream(GPU).synchronize())):
    try:
        sync()
        results[name] = 'returned'
    except ev.DeviceError:
        results[name] = 'DeviceError'
try:
    ev.ones(4, device=GPU).wait(timeout=10)
    results['new op'] = 'returned'
except ev.DeviceError:
    results['new op'] = 'DeviceError'
end = time.monotonic() + 10
while not calls and time.monotonic() < end: time.sleep(0.01)
results['callbacks'] = calls
print(results, flush=True)
"""


@needs_torch
def test_a_sticky_error_fails_waiters_pollers_awaits_and_callbacks_without_a_hang():
    """A device-side assert (PyTorch's, on the shared context) while Python threads wait, poll
    and await eventide work held behind a UserEvent: every one of them ends with DeviceError,
    the callback runs once, every synchronize (device, all devices, streams) and new ops raise
    DeviceError, nothing hangs."""
    import ast
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", STICKY_ERROR_CHILD], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr[-3000:])
    results = ast.literal_eval(p.stdout.strip().splitlines()[-1])
    assert results["wait"] == "DeviceError", results
    assert results["await"] == "DeviceError", results
    assert results["poll"].startswith("finished, error: DeviceError"), results
    assert results["synchronize"] == "DeviceError", results
    assert results["synchronize all"] == "DeviceError", results
    assert results["stream synchronize"] == "DeviceError", results
    assert results["default stream synchronize"] == "DeviceError", results
    assert results["new op"] == "DeviceError", results
    assert results["callbacks"] == ["inflight"], results


def test_benchmark_times_gpu_work_between_markers_on_the_current_stream():
    a = ev.randn(1024, 1024, device=GPU)
    r = ev.benchmark(ev.matmul, a, a, n_repeat=20, n_warmup=3, device=GPU)
    assert r.n_runs == 20 and r.device == ev.Device(GPU)
    assert all(t > 0 for t in r.device_times_us)
    # 2 GFLOP: more than a microsecond on any GPU, far less than a second.
    assert 1 < r.device_stats["p50"] < 1e6, r.device_stats
    assert str(r).startswith("matmul : host: ") and "device (cuda:0): " in str(r)


def test_astype_converts_bfloat16_and_float16_on_the_gpu():
    src = np.linspace(-4, 4, 4097, dtype=np.float32)
    t = ev.tensor(src, device=GPU)
    for dtype in (ev.bfloat16, ev.float16):
        back = t.astype(dtype).astype(ev.float32)
        assert back.device == ev.Device(GPU)
        want = ev.tensor(src).astype(dtype).astype(ev.float32).numpy()  # the CPU's rounding
        np.testing.assert_array_equal(back.numpy(), want)


def test_a_graph_captured_on_the_gpu_replays_into_cuda_graphs():
    # torch.cuda.graph's patterns: a static input refreshed with copy_, a static output read
    # after each replay, events inside the capture timing the latest replay.
    s = ev.Stream(GPU)
    x = ev.full((1024,), 2.0, device=GPU)
    one = ev.ones(1024, device=GPU)
    start, end = ev.Event(), ev.Event()
    with ev.capture(stream=s) as g:
        start.record(s)
        y = x * x
        for _ in range(50):
            ev.add(y, one, out=y)
        end.record(s)
    assert g.device == ev.Device(GPU) and g.ops == 51
    done = g.replay(stream=s)
    assert done.wait(timeout=30)
    assert done.time_elapsed() > 0
    np.testing.assert_array_equal(y.numpy(), np.full(1024, 54.0, np.float32))
    assert start.elapsed_time(end) > 0
    x.copy_(ev.full((1024,), 3.0, device=GPU))
    g.replay(stream=ev.Stream(GPU))  # another stream: ordered after the first replay's readers
    np.testing.assert_array_equal(y.numpy(), np.full(1024, 59.0, np.float32))


@needs_torch
def test_a_graphs_replays_match_torchs_cuda_graph_on_the_same_memory():
    t = torch.arange(4096, dtype=torch.float32, device="cuda")
    x = ev.from_dlpack(t)
    one = ev.ones(4096, device=GPU)
    torch.cuda.synchronize()
    with ev.capture(stream=ev.Stream(GPU)) as g:
        for _ in range(10):
            ev.add(x, one, out=x)
    tg = torch.cuda.CUDAGraph()
    static = torch.zeros(4096, device="cuda")
    with torch.cuda.graph(tg):
        static.add_(1.0)
    for _ in range(3):
        assert g.replay().wait(timeout=30)
        tg.replay()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(4096, dtype=np.float32) + 30)
    assert static[0].item() == 3.0
