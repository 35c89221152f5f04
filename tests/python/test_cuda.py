"""eventide on a GPU from Python: ops, events, and interop with PyTorch (DLPack, streams).

Skipped, with the reason, where there is no GPU (CI); scripts/gpu-check.sh runs them on the
GPU machine. The rest of the suite pins EVENTIDE_DEVICE=cpu (conftest.py); these tests name
the device.
"""

import threading

import numpy as np
import pytest

import eventide as ev

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
    with torch.cuda.stream(ts):
        a = torch.randn(2048, 2048, device="cuda")
        torch.mm(a, a)
    e = ev.Event()
    e.record(s)  # nothing of eventide's there yet: ties no work
    with s:
        z = ev.zeros(8, device=GPU)  # runs after torch's mm, in the same stream
    e.record(z)
    assert e.wait(timeout=30)
    assert ts.query()
    assert repr(s).startswith("<eventide.Stream cuda:0")
