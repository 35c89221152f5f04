"""eventide inside a PyTorch program (and beside CuPy and Numba), on the GPU.

Each case of the issue on PyTorch programs: torch's events wherever an event is taken (a host
wait blocks until the GPU passed them: torch's Event.wait() is a stream wait and is never
called), synchronize(device) over torch's streams, torch's keywords, priorities, stream
capture (eventide's ops on torch's capturing stream go into torch's graph, and nothing
eventide does breaks torch.cuda.graph), and no drain at the first eventide
op. Skipped, with the reason, where there is no GPU or no PyTorch (CI);
scripts/gpu-check.sh runs them on the GPU machine. test_foreign_events.py runs stand-ins of
the same classes on the CPU.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import subprocess
import sys
import time

import pytest

import eventide as ev
from torch_busy import torch_busy
from conftest import child_env

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

try:
    import cupy
except ImportError:
    cupy = None
try:
    from numba import cuda as numba_cuda
except ImportError:
    numba_cuda = None


@pytest.fixture(autouse=True, scope="module")
def _torch_kernels_loaded():
    """The torch kernels these tests launch behind busy work, loaded before: the first use of a
    kernel waits until the GPU is idle (CUDA's lazy loading), which would finish the busy work
    before the test looks at it."""
    if HAVE_TORCH:
        x = torch.full((256,), 1.0, device="cuda")
        (torch.ones(8, device="cuda") * 2 + 1).cpu()
        (x + x).add_(x)
        torch.cuda.synchronize()


def _torch_events():
    yield "torch.cuda.Event", torch.cuda.Event()
    yield "torch.Event", torch.Event("cuda")


# --- 1. torch's events wherever an event is taken ---------------------------------------------

@needs_torch
@pytest.mark.parametrize("kind", ["torch.cuda.Event", "torch.Event"])
def test_wait_all_on_a_torch_event_blocks_until_the_gpu_passed_it(kind):
    te = torch.cuda.Event() if kind == "torch.cuda.Event" else torch.Event("cuda")
    torch_busy(60)
    te.record()
    assert ev.wait_all([te], timeout=0.001) is False
    assert not te.query()
    start = time.monotonic()
    assert ev.wait_all([te]) is True
    assert te.query(), "wait_all returned while torch's work ran"
    assert time.monotonic() - start > 0.02
    torch.cuda.synchronize()


@needs_torch
def test_wait_any_async_forms_and_callbacks_on_torch_events():
    te = torch.cuda.Event()
    torch_busy(40)
    te.record()
    assert ev.wait_any([ev.UserEvent(), te], timeout=30) == 1
    assert te.query()

    async def main():
        t2 = torch.cuda.Event()
        torch_busy(40)
        t2.record()
        assert await asyncio.wait_for(ev.wait_all_async([t2]), 30) is True
        assert t2.query()
        t3 = torch.Event("cuda")
        torch_busy(40)
        t3.record()
        assert await asyncio.wait_for(ev.wait_any_async([ev.UserEvent(), t3]), 30) == 1
        assert t3.query()

    asyncio.run(main())
    e = ev.Event.from_native(te.cuda_event)
    fired = []
    e.add_callback(lambda: fired.append(True))
    e.wait(30)


@needs_torch
def test_a_torch_event_never_recorded_is_complete_as_torch_says():
    te = torch.cuda.Event()
    assert te.query()
    assert ev.wait_all([te], timeout=1) is True
    assert ev.wait_any([te], timeout=1) == 0


@needs_torch
def test_an_eventide_stream_waits_for_a_torch_event_on_the_gpu():
    s = ev.Stream(GPU)
    te = torch.cuda.Event()
    torch_busy(60)
    x = torch.full((256,), 3.0, device="cuda")
    te.record()
    start = time.monotonic()
    s.wait(te)  # a GPU-side wait: returns at once
    assert time.monotonic() - start < 0.03
    with s:
        out = ev.ones(256, device=GPU)
    done = ev.Event()
    done.record(out)
    assert done.wait(30)
    assert te.query(), "the op after the stream's wait finished before torch's event"


@needs_torch
def test_eventides_event_gives_a_native_handle_torchs_stream_can_wait_on():
    cudart = ctypes.CDLL("libcudart.so.13") if os.path.exists("/usr/local/cuda/lib64/libcudart.so.13") \
        else None
    s = ev.Stream(GPU)
    with s:
        a = ev.randn(2048, 2048, device=GPU)
        for _ in range(20):
            a = a @ a
    e = ev.Event()
    e.record(a)
    handle = e.cuda_event
    assert isinstance(handle, int) and handle != 0
    assert e.native_handle() == handle
    if cudart is None:
        pytest.skip("libcudart.so.13 not found to call cudaStreamWaitEvent")
    ts = torch.cuda.Stream()
    assert cudart.cudaStreamWaitEvent(ctypes.c_void_p(ts.cuda_stream), ctypes.c_void_p(handle), 0) == 0
    marker = torch.cuda.Event()
    marker.record(ts)
    marker.synchronize()
    assert e.completed or e.wait(1), "torch's stream passed the native event before eventide's work"


@pytest.mark.skipif(cupy is None, reason="CuPy is not installed here")
def test_cupy_and_numba_events_are_events():
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        x = cupy.ones((4096, 4096), dtype=cupy.float32)
        for _ in range(5):
            x = x @ x
    ce = cupy.cuda.Event()
    ce.record(s)
    assert ev.wait_all([ce], timeout=30) is True
    assert ce.done
    if numba_cuda is not None:
        ne = numba_cuda.event()
        ne.record()
        assert ev.wait_all([ne], timeout=30) is True
        assert ne.query()
        ev.Stream(GPU).wait(ne)


@needs_torch
def test_record_and_wait_all_take_torch_tensors():
    torch_busy(50)
    t = torch.ones(8, device="cuda") * 2  # on torch's current stream, behind the busy work
    made = torch.cuda.Event()
    made.record()
    e = ev.Event()
    e.record(t)  # a marker on torch's current stream: after the op that made t
    assert not made.query()
    assert e.wait(30)
    assert made.query(), "the event on a torch tensor finished before the op that made it"
    torch_busy(50)
    u = torch.ones(8, device="cuda") + 1
    assert ev.wait_all([u], timeout=30) is True
    ready = torch.cuda.Event()
    ready.record()
    assert ready.query(), "wait_all on a torch tensor returned before the op that made it"


# --- 2. synchronize(device) covers torch's work --------------------------------------------------

@needs_torch
def test_synchronize_of_the_device_covers_torchs_streams():
    side = torch.cuda.Stream()
    torch_busy(60)
    torch_busy(60, side)
    ev.synchronize(GPU)
    assert torch.cuda.current_stream().query()
    assert side.query()
    torch_busy(40, side)
    ev.synchronize()
    assert side.query()


# --- 3. PyTorch's names and keywords ----------------------------------------------------------------

@needs_torch
def test_record_takes_the_stream_keyword_for_torch_and_eventide_streams():
    ts = torch.cuda.Stream()
    torch_busy(30, ts)
    e = ev.Event()
    e.record(stream=ts)
    assert e.wait(30)
    assert ts.query()
    e.record(stream=ev.Stream(GPU))
    assert e.wait(30)


@needs_torch
def test_priorities_as_torch_has_them():
    least, greatest = ev.stream_priority_range(GPU)
    assert least == 0 and greatest < 0
    assert ev.Stream(GPU, priority=-1).priority == -1
    assert ev.Stream(GPU, priority=-100).priority == greatest
    assert ev.Stream(GPU, priority=5).priority == least
    ts = torch.cuda.Stream(priority=-1)
    assert ev.Stream(ts).priority == ts.priority == -1
    with pytest.raises(ev.InvalidArgumentError, match="keeps its own priority"):
        ev.Stream(ts, priority=-2)


# --- 4. Stream capture ------------------------------------------------------------------------------

@needs_torch
def test_eventide_work_beside_a_torch_graph_capture_keeps_it_valid():
    x = torch.zeros(256, device="cuda")
    y = ev.ones(256, device=GPU)
    y.wait()
    s = ev.Stream(GPU)
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        x.add_(1)
        with s:  # eventide's own stream: outside the capture
            z = y + y
        e = ev.Event()
        with pytest.raises(ev.EventStateError, match="captured"):
            e.record(torch.cuda.current_stream())  # torch's capturing stream: refused untouched
        x.add_(1)
    assert z.numpy().tolist() == [2.0] * 256
    g.replay()
    g.replay()
    torch.cuda.synchronize()
    assert x.tolist() == [4.0] * 256  # two replays of two captured adds


def capture_in_torch(issue):
    """torch.cuda.graph of t += 1, then `issue()` on torch's capturing stream, then t += 1:
    (the graph, t, what issue returned)."""
    t = torch.zeros(256, device="cuda")
    ev.synchronize(GPU)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        t.add_(1)
        with ev.stream(torch.cuda.current_stream()):
            made = issue()
        t.add_(1)
    return g, t, made


@needs_torch
def test_eventide_ops_on_torchs_capturing_stream_run_at_each_replay_of_torchs_graph():
    # torch.cuda.graph's pattern: a static input refreshed on the replay's stream, replays,
    # a static output read after them. eventide's ops issued on torch's capturing stream go
    # into torch's graph; the sum made in the capture is memory of torch's graph, which keeps
    # it after its handle goes (here at once).
    static_in = ev.full(256, 1.0, device=GPU)
    acc = ev.zeros(256, device=GPU)
    g, t, _ = capture_in_torch(lambda: ev.add(acc, static_in + static_in, out=acc))
    assert acc.numpy().tolist() == [0.0] * 256  # nothing ran in the capture
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert acc.numpy().tolist() == [6.0] * 256
    assert t.tolist() == [6.0] * 256
    with ev.stream(torch.cuda.current_stream()):  # in the replays' order, as torch's copy_
        static_in.copy_(ev.full(256, 2.0, device=GPU))
    g.replay()
    # Read with no torch.cuda.synchronize(): memory torch's graph writes is read after the
    # device's work, the replay's included.
    assert acc.numpy().tolist() == [10.0] * 256
    del g
    gc.collect()
    with ev.stream(torch.cuda.current_stream()):  # the stream works eagerly again
        assert (acc + acc).numpy().tolist() == [20.0] * 256


@needs_torch
def test_in_torchs_capture_what_cannot_be_put_in_its_graph_is_refused_and_its_capture_replays():
    x = ev.ones(256, device=GPU)

    def issue():
        y = x + x
        with pytest.raises(ev.EventStateError, match="other code"):
            ev.rand(4, device=GPU)  # each replay of torch's graph would draw the same numbers
        with pytest.raises(ev.EventStateError, match="other code"):
            y.wait()  # captured work has not run
        return y

    g, t, y = capture_in_torch(issue)
    g.replay()
    torch.cuda.synchronize()
    assert t.tolist() == [2.0] * 256
    with pytest.raises(ev.EventStateError):
        y.wait()  # abandoned by the refusal: it says so


_FIRST_USE_IN_A_CAPTURE = r"""
import torch
import eventide as ev
t = torch.zeros(256, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    t.add_(1)
    try:
        with ev.stream(torch.cuda.current_stream()):
            ev.ones(4, device="cuda:0")  # eventide's first use of the device
        raise SystemExit("not refused")
    except ev.EventStateError as e:
        assert "has not started" in str(e), str(e)
    t.add_(1)
g.replay()
torch.cuda.synchronize()
assert t.tolist() == [2.0] * 256  # torch's capture stayed valid
"""


@needs_torch
@pytest.mark.time_limit(120)
def test_eventide_first_used_inside_torchs_capture_refuses_and_the_capture_replays():
    out = subprocess.run([sys.executable, "-c", _FIRST_USE_IN_A_CAPTURE], env=child_env(), capture_output=True,
                         text=True, timeout=100)
    assert out.returncode == 0, out.stderr + out.stdout


# --- 5. No drain at the first eventide op -----------------------------------------------------

_FIRST_OP = r"""
import sys, time, torch
first = sys.argv[1]
a = torch.randn(4096, 4096, device="cuda"); torch.mm(a, a); torch.cuda.synchronize()
te = torch.cuda.Event(); te.record(); te.synchronize()  # (torch's own first use, before)
t = time.perf_counter(); torch.mm(a, a); torch.cuda.synchronize(); per = time.perf_counter() - t
for _ in range(max(1, int(0.4 / per))): torch.mm(a, a)
te.record()
import eventide as ev
t = time.perf_counter()
if first == "ops":
    s = ev.Stream("cuda:0")
    with s:
        x = ev.ones(4, device="cuda:0")
        y = x + x
    e = ev.Event(); e.record(s)
elif first == "wait on a torch event":
    assert ev.wait_all([te], timeout=0.001) is False
    e = ev.Event.from_native(te.cuda_event, device="cuda:0")
else:  # a marker on torch's stream
    e = ev.Event(); e.record(torch.cuda.current_stream())
host_ms = (time.perf_counter() - t) * 1e3
busy = not torch.cuda.current_stream().query()
assert e.wait(60)
print(f"{host_ms:.2f} {busy}")
"""


@needs_torch
@pytest.mark.time_limit(120)
@pytest.mark.parametrize("first", ["ops", "wait on a torch event", "a marker on torch's stream"])
def test_the_first_eventide_op_does_not_wait_for_torchs_queued_work(first):
    out = subprocess.run([sys.executable, "-c", _FIRST_OP, first], env=child_env(), capture_output=True,
                         text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    host_ms, busy = out.stdout.split()
    assert busy == "True", "torch's work had finished: the first op waited for it"
    assert float(host_ms) < 100.0, f"the first op blocked {host_ms} ms behind torch's work"
