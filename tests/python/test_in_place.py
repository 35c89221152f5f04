"""Writing a tensor that exists: ``out=`` on the ops and the creation functions, and
``Tensor.copy_(src)`` (how a tensor is updated in place, between the replays of a graph among
others). On the CPU, and on cuda:0 where there is one (the device is in each test's name).
"""

from __future__ import annotations

import numpy as np
import pytest

import eventide as ev
from conftest import call_with_timeout

DEVICES = ["cpu"] + (["cuda:0"] if ev.is_available("cuda:0") else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def values(t: ev.Tensor) -> np.ndarray:
    return call_with_timeout(lambda: t.numpy().copy())


def test_add_with_out_accumulates_in_place(device):
    x = ev.zeros(256, device=device)
    one = ev.ones(256, device=device)
    for _ in range(10):
        assert ev.add(x, one, out=x) is x  # the out object itself, as PyTorch returns it
    np.testing.assert_array_equal(values(x), np.full(256, 10.0, np.float32))
    ev.mul(x, 2.0, out=x)  # a number on the other side, as without out=
    ev.sub(x, one, out=x)
    ev.div(x, ev.full((256,), 19.0, device=device), out=x)
    np.testing.assert_array_equal(values(x), np.ones(256, np.float32))


def test_matmul_with_out(device):
    a = ev.tensor([[1.0, 2.0], [3.0, 4.0]], device=device)
    b = ev.tensor([[5.0, 6.0], [7.0, 8.0]], device=device)
    out = ev.empty(2, 2, device=device)
    assert ev.matmul(a, b, out=out) is out
    np.testing.assert_allclose(values(out), [[19, 22], [43, 50]], rtol=1e-3)
    with pytest.raises(ev.InvalidArgumentError, match="one of the inputs"):
        ev.matmul(a, b, out=a)


def test_cast_with_out_takes_outs_dtype(device):
    x = ev.tensor(np.array([1.5, -2.25]), device=device)  # float64
    f = ev.zeros(2, device=device)
    ev.cast(x, out=f)
    np.testing.assert_array_equal(values(f), np.array([1.5, -2.25], np.float32))
    with pytest.raises(ev.InvalidArgumentError, match="is not out's"):
        ev.cast(x, ev.float16, out=f)


def test_creation_functions_with_out_write_in_place(device):
    t = ev.empty(64, device=device)
    ev.full((64,), 2.5, out=t)
    np.testing.assert_array_equal(values(t), np.full(64, 2.5, np.float32))
    assert ev.zeros(out=t) is t
    np.testing.assert_array_equal(values(t), np.zeros(64, np.float32))
    ev.ones(64, out=t)  # the shape may be given, if it is out's
    np.testing.assert_array_equal(values(t), np.ones(64, np.float32))
    ev.manual_seed(3)
    fresh = ev.randn(64, device=device)
    ev.manual_seed(3)
    ev.randn(out=t)
    np.testing.assert_array_equal(values(t), values(fresh))
    with pytest.raises(ev.InvalidArgumentError, match=r"the shape \[32\] is not out's"):
        ev.zeros(32, out=t)
    with pytest.raises(ev.InvalidArgumentError, match="dtype float64 is not out's"):
        ev.ones(out=t, dtype=ev.float64)
    with pytest.raises(ev.InvalidArgumentError, match="has no out="):
        ev.empty(64, out=t)


def test_copy_writes_the_sources_values_into_the_same_tensor(device):
    x = ev.zeros(4, device=device)
    r = x.copy_(ev.tensor([1.0, 2.0, 3.0, 4.0]))  # from the cpu, whatever x's device
    assert r is x
    np.testing.assert_array_equal(values(x), [1, 2, 3, 4])
    y = ev.zeros(4, device=device)
    y.copy_(x)
    np.testing.assert_array_equal(values(y), [1, 2, 3, 4])
    with pytest.raises(ev.InvalidArgumentError, match="shape"):
        x.copy_(ev.zeros(5))
    with pytest.raises(TypeError, match="ev.tensor"):
        x.copy_(np.zeros(4, np.float32))


def test_copy_to_and_from_the_cpu_and_across_streams(device):
    src = ev.tensor(np.arange(1024, dtype=np.float32), device=device)
    host = ev.zeros(1024)  # memory of the cpu's, not the GPU's pinned memory
    host.copy_(src)
    np.testing.assert_array_equal(values(host), np.arange(1024, dtype=np.float32))
    dst = ev.zeros(1024, device=device)
    gate = ev.UserEvent()
    held = ev.Stream(device)
    held.wait(gate)
    with held:
        old = dst + dst  # reads dst's zeros once the gate opens
    other = ev.Stream(device)
    with other:
        dst.copy_(src)  # another stream: must wait for that reader
    assert not dst.ready
    gate.set()
    np.testing.assert_array_equal(values(old), np.zeros(1024, np.float32))
    np.testing.assert_array_equal(values(dst), np.arange(1024, dtype=np.float32))


def test_a_number_operand_with_a_refused_out_launches_nothing(device):
    a = ev.ones(2, 3, device=device)
    with pytest.raises(ev.InvalidArgumentError, match="out has shape"):
        ev.add(a, 2.0, out=ev.zeros(4, device=device))


def test_out_must_be_a_tensor_of_the_results_kind(device):
    a = ev.ones(2, 3, device=device)
    with pytest.raises(TypeError, match="out must be an eventide.Tensor"):
        ev.add(a, a, out=np.zeros((2, 3), np.float32))
    with pytest.raises(ev.InvalidArgumentError, match=r"out has shape \[3, 2\], the result has shape \[2, 3\]"):
        ev.add(a, a, out=ev.zeros(3, 2, device=device))
    with pytest.raises(ev.InvalidArgumentError, match="out is float64, the result is float32|out is f64"):
        ev.add(a, a, out=ev.zeros(2, 3, dtype=ev.float64, device=device))
    if device != "cpu":
        with pytest.raises(ev.InvalidArgumentError, match="out is on cpu"):
            ev.add(a, a, out=ev.zeros(2, 3, device="cpu"))


def test_an_in_place_write_waits_for_the_readers_of_the_old_values(device):
    x = ev.full((1024,), 1.0, device=device)
    gate = ev.UserEvent()
    held = ev.Stream(device)
    held.wait(gate)
    with held:
        y = x * x  # reads the old values once the gate opens
    ev.full((1024,), 5.0, out=x)  # on the current stream: after that reader
    assert not x.ready
    gate.set()
    np.testing.assert_array_equal(values(y), np.ones(1024, np.float32))
    np.testing.assert_array_equal(values(x), np.full(1024, 5.0, np.float32))
