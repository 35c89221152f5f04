"""Two GPUs in one process (issue 14, part 1), from Python.

Skipped, with the reason, unless eventide sees at least two CUDA devices (CI has none);
scripts/gpu-check.sh runs them on a two-GPU machine. The rest of the suite pins
EVENTIDE_DEVICE=cpu (conftest.py); these tests name their devices. The rule for events that
would span devices is GUARANTEES.md's "Several devices": an event belongs to one device.
"""

import asyncio
import json
import threading
import time

import numpy as np
import pytest

import eventide as ev

from conftest import call_with_timeout

CUDA_DEVICES = [d for d in ev.devices() if d.type == "cuda"]
pytestmark = pytest.mark.skipif(
    len(CUDA_DEVICES) < 2,
    reason=f"needs two CUDA devices, eventide sees {len(CUDA_DEVICES)}: "
           "run scripts/gpu-check.sh on a machine with two GPUs")

G0, G1 = "cuda:0", "cuda:1"


def busy(device, n=8192, rounds=4):
    """Keeps `device`'s current stream busy for tens of milliseconds (a chain of large
    matmuls) and returns the last result's event, which finishes only at the chain's end."""
    x = ev.ones(n, n, device=device)
    for _ in range(rounds):
        x = x @ x
    e = ev.Event()
    e.record(x)
    return e


def test_ops_on_the_second_gpu_run_there_with_the_right_values():
    a = ev.tensor(np.arange(64, dtype=np.float32).reshape(8, 8), device=G1)
    b = ev.full((8, 8), 2.0, device=G1)
    with ev.profile() as prof:
        s, p, m = a + b, a * b, a @ b
        assert call_with_timeout(m.wait)
    for t in (a, b, s, p, m):
        assert t.device == ev.Device(G1)
    an = np.arange(64, dtype=np.float32).reshape(8, 8)
    np.testing.assert_array_equal(s.numpy(), an + 2)
    np.testing.assert_array_equal(p.numpy(), an * 2)
    np.testing.assert_allclose(m.numpy(), an @ np.full((8, 8), 2.0, np.float32), rtol=1e-5)
    e = ev.Event()
    e.record(s)
    assert e.device == ev.Device(G1)
    assert prof.ops and all(op["device"] == ev.Device(G1) for op in prof.ops)
    assert all("cuda:1" in op["stream"] for op in prof.ops)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_to_the_other_gpu_and_back_keeps_the_values(dtype):
    want = (np.arange(1 << 16) * 3 - 7).astype(dtype)
    x = ev.tensor(want, device=G0)
    on1 = x.to(G1)
    back = on1.to(G0)
    assert on1.device == ev.Device(G1) and back.device == ev.Device(G0)
    np.testing.assert_array_equal(on1.numpy(), want)
    np.testing.assert_array_equal(back.numpy(), want)
    # Via the host too.
    np.testing.assert_array_equal(x.to("cpu").to(G1).numpy(), want)


def test_a_copy_to_the_second_gpu_waits_for_a_slow_producer_on_the_first():
    e = busy(G0)
    x = ev.full((1024,), 5.0, device=G0)  # behind the chain on cuda:0's stream
    y = x.to(G1) + ev.ones(1024, device=G1)
    np.testing.assert_array_equal(y.numpy(), np.full(1024, 6.0, np.float32))
    assert e.poll()


def test_a_stream_of_the_second_gpu_waits_for_an_event_of_the_first():
    # Launched work on cuda:0: cuda:1 waits for it on the GPU. The marker on cuda:1 reads
    # nothing of cuda:0's: only the stream's wait orders it.
    s1 = ev.Stream(G1)
    e0 = busy(G0)
    assert e0.device == ev.Device(G0)
    s1.wait(e0)
    after = s1.record_event()
    assert not after.poll(), "cuda:1 waits for cuda:0's matmuls"
    assert call_with_timeout(lambda: after.wait(timeout=30))
    assert e0.poll(), "cuda:1 went on only after cuda:0's event had finished"

    # Held on the host (a UserEvent gates cuda:0): cuda:1 waits for it as well.
    go = ev.UserEvent()
    s0 = ev.Stream(G0)
    s0.wait(go)
    with s0:
        held = ev.full((16,), 1.0, device=G0)
    e_held = ev.Event()
    e_held.record(held)
    s2 = ev.Stream(G1)
    s2.wait(e_held)
    with s2:
        z = ev.full((16,), 4.0, device=G1)
    time.sleep(0.02)
    assert not z.ready
    go.set()
    np.testing.assert_array_equal(z.numpy(), np.full(16, 4.0, np.float32))


def test_synchronize_waits_for_every_gpu():
    e0, e1 = busy(G0), busy(G1)
    call_with_timeout(ev.synchronize)
    assert e0.poll() and e1.poll()
    # One device's synchronize: that device only.
    e0 = busy(G0, rounds=1)
    e1 = busy(G1, rounds=12)
    call_with_timeout(lambda: ev.synchronize(G0))
    assert e0.poll()
    assert not e1.poll(), "synchronize('cuda:0') does not wait for cuda:1"
    call_with_timeout(lambda: ev.synchronize(G1))
    assert e1.poll()


def test_mixing_devices_in_one_op_is_a_clear_error():
    a, b = ev.ones(4, device=G0), ev.ones(4, device=G1)
    with pytest.raises(ev.InvalidArgumentError, match=r"different devices \(cuda:0, cuda:1\).*\.to\(\)"):
        a + b
    with pytest.raises(ev.InvalidArgumentError, match=r"cuda:1, cuda:0"):
        ev.matmul(ev.ones(2, 2, device=G1), ev.ones(2, 2, device=G0))
    with pytest.raises(ev.InvalidArgumentError, match=r"cpu, cuda:1"):
        ev.ones(4, device="cpu") * b
    np.testing.assert_array_equal((a.to(G1) + b).numpy(), np.full(4, 2.0, np.float32))


def test_an_event_belongs_to_one_device_and_the_error_names_both():
    t0, t1 = ev.ones(4, device=G0), ev.ones(4, device=G1)
    e = ev.Event()
    e.record(t0)
    with pytest.raises(ev.InvalidArgumentError, match=r"of cuda:1 on an event of cuda:0.*one event per device"):
        e.record(t1)
    with pytest.raises(ev.InvalidArgumentError, match=r"cuda:1.*cuda:0"):
        e.record(ev.Stream(G1))
    with pytest.raises(ev.InvalidArgumentError, match=r"of cpu on an event of cuda:0"):
        e.record(ev.ones(4, device="cpu"))
    assert call_with_timeout(lambda: e.wait(timeout=30))
    assert e.device == ev.Device(G0)
    with pytest.raises(ev.InvalidArgumentError, match=r"of cuda:0 on an event of cuda:1"):
        ev.Event(G1).record(t0)
    # Timing between two devices is refused, not computed from two clocks.
    a0, b0, a1 = ev.Stream(G0).record_event(), ev.Stream(G0).record_event(), ev.Stream(G1).record_event()
    assert call_with_timeout(lambda: ev.wait_all([a0, b0, a1], timeout=30))
    assert isinstance(a0.elapsed_time(b0), float)
    with pytest.raises(ev.InvalidArgumentError, match=r"different devices \(cuda:0, cuda:1\).*clocks"):
        a0.elapsed_time(a1)


def test_a_failure_on_the_first_gpu_fails_dependent_work_on_the_second():
    gate = ev.UserEvent()
    s0 = ev.Stream(G0)
    s0.wait(gate)
    with s0:
        x = ev.ones(16, device=G0)
    e = ev.Event()
    e.record(x)
    s1 = ev.Stream(G1)
    s1.wait(e)
    with s1:
        waited = ev.full((16,), 2.0, device=G1)
    copied = x.to(G1) + ev.ones(16, device=G1)
    gate.fail(RuntimeError("loader failed"))
    for t in (copied, waited):
        with pytest.raises(ev.OpError, match="loader failed"):
            call_with_timeout(lambda t=t: t.wait(timeout=30))
    assert s1.error is not None, "the cuda:1 stream is broken by its wait"
    np.testing.assert_array_equal((ev.ones(4, device=G0).to(G1) + ev.ones(4, device=G1)).numpy(),
                                  np.full(4, 2.0, np.float32))


def test_callbacks_wait_any_and_asyncio_over_events_of_both_gpus():
    slow0 = busy(G0, rounds=12)
    fast1 = ev.Event()
    fast1.record(ev.ones(4, device=G1))
    assert call_with_timeout(lambda: ev.wait_any([slow0, fast1], timeout=30)) == 1
    assert not slow0.poll()

    done = []
    lock = threading.Lock()
    finished = threading.Event()
    events = {"cuda:0": busy(G0, rounds=2), "cuda:1": busy(G1, rounds=2)}

    def callback(name):
        def run():
            with lock:
                done.append((name, events[name].poll()))
                if len(done) == 2:
                    finished.set()
        return run

    for name, e in events.items():
        e.add_callback(callback(name))
    assert finished.wait(30)
    assert sorted(done) == [("cuda:0", True), ("cuda:1", True)]

    async def main():
        a, b = busy(G0, rounds=1), busy(G1, rounds=1)
        await asyncio.wait_for(asyncio.gather(a, b), 30)
        return a.poll() and b.poll()

    assert asyncio.run(main())


def test_the_profile_and_its_trace_show_both_gpus():
    s1 = ev.Stream(G1)
    with ev.profile() as prof:
        e0 = busy(G0, rounds=2)  # still running when cuda:1 waits for it
        s1.wait(e0)
        with s1:
            y = ev.ones(1024, device=G1)
        assert call_with_timeout(lambda: y.wait(timeout=30))
    devices = {str(op["device"]) for op in prof.ops}
    assert {"cuda:0", "cuda:1"} <= devices
    trace = json.loads(prof.chrome_trace())
    names = {e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert {"cuda:0", "cuda:1"} <= names
    waits = [op for op in prof.ops if op["is_wait"] and str(op["device"]) == "cuda:1"]
    assert waits and waits[0]["waits_for"], "the cuda:1 wait names the cuda:0 op it waited for"


@pytest.mark.parametrize("library", ["torch", "cupy"])
def test_the_current_device_of_torch_and_cupy_is_kept_across_eventide_work(library):
    """What PyTorch's device guards keep: eventide's ops, events and copies on one GPU leave
    the thread's current device (torch.cuda.current_device(), cupy.cuda.Device()) where the
    program set it, so a following allocation lands where the program expects."""
    lib = pytest.importorskip(library)
    if library == "torch":
        current, set_current = lib.cuda.current_device, lib.cuda.set_device
    else:
        current = lambda: lib.cuda.Device().id  # noqa: E731 (CuPy asks CUDA each time)
        set_current = lambda i: lib.cuda.Device(i).use()  # noqa: E731
    for mine, other in ((0, G1), (1, G0)):
        set_current(mine)
        s = ev.Stream(device=other)
        with ev.stream(s):
            x = ev.ones(64, 64, device=other)
            y = x @ (x + x)
            e = ev.Event()
            e.record(y)
        assert call_with_timeout(e.wait)
        np.testing.assert_allclose(y.to(f"cuda:{mine}").numpy(), np.full((64, 64), 128.0))
        ev.synchronize()
        del x, y, s
        assert current() == mine, f"eventide's work on {other} left cuda:{current()} current"
        if library == "torch":
            assert lib.ones(1, device="cuda").device.index == mine
        else:
            assert lib.ones(1).device.id == mine
