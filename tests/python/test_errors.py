"""Bad input raises the documented class, with a message naming the problem, and leaves
nothing half-done."""

from __future__ import annotations

import re

import numpy as np
import pytest

import eventide as ev
from conftest import Gate, call_with_timeout

CREATION = [ev.zeros, ev.ones, ev.empty, ev.rand, ev.randn]


def finished_event() -> ev.Event:
    e = ev.Event()
    e.record(ev.rand(2))
    call_with_timeout(e.wait)
    return e


# --- shapes -------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", CREATION, ids=lambda f: f.__name__)
def test_negative_dims(fn):
    with pytest.raises(ev.InvalidArgumentError, match=r"negative extent") as info:
        fn(2, -3)
    assert "[2, -3]" in str(info.value)
    with pytest.raises(ev.InvalidArgumentError, match="negative"):
        fn((-1,))
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError
        fn(-5)


@pytest.mark.parametrize("fn", [ev.zeros, ev.ones], ids=lambda f: f.__name__)
def test_negative_dims_message_names_the_function(fn):
    with pytest.raises(ev.InvalidArgumentError, match=f"^{fn.__name__}:"):
        fn(2, -3)


def test_full_negative_dims():
    with pytest.raises(ev.InvalidArgumentError, match="full: .*negative"):
        ev.full((2, -3), 1.0)


@pytest.mark.parametrize("bad", [2.5, "ab", (2, 2.5), [1, None], object()])
def test_non_integer_shapes(bad):
    with pytest.raises(ev.InvalidArgumentError, match="shape|int"):
        ev.zeros(bad)


def test_too_many_dims_and_too_large():
    with pytest.raises(ev.InvalidArgumentError, match="9 dimensions"):
        ev.rand(*([1] * 9))
    with pytest.raises(ev.InvalidArgumentError, match="too large"):
        ev.empty(2 ** 40, 2 ** 40)


# --- ops ----------------------------------------------------------------------------------

def test_matmul_shape_mismatch():
    with pytest.raises(ev.InvalidArgumentError, match=r"matmul.*\[2, 3\].*\[2, 3\]"):
        ev.matmul(ev.rand(2, 3), ev.rand(2, 3))
    with pytest.raises(ev.InvalidArgumentError, match="matmul"):
        ev.rand(2, 3) @ ev.rand(4, 5)
    with pytest.raises(ev.InvalidArgumentError, match="matmul"):
        ev.matmul(ev.rand(3), ev.rand(3))
    with pytest.raises(ev.InvalidArgumentError, match="matmul"):
        ev.matmul(ev.rand(2, 3, 4), ev.rand(3, 4, 5))


@pytest.mark.parametrize("op", [ev.add, ev.mul], ids=["add", "mul"])
def test_elementwise_shape_and_dtype_mismatch(op):
    name = op.__name__
    with pytest.raises(ev.InvalidArgumentError, match=rf"{name}: shapes \[2, 3\] and \[3, 2\]"):
        op(ev.rand(2, 3), ev.rand(3, 2))
    with pytest.raises(ev.InvalidArgumentError, match=rf"{name}: the dtypes differ"):
        op(ev.rand(2, 3), ev.rand(2, 3, dtype=ev.float64))


def test_operators_mismatch():
    with pytest.raises(ev.InvalidArgumentError, match="add"):
        ev.rand(2) + ev.rand(3)
    with pytest.raises(ev.InvalidArgumentError, match="mul"):
        ev.rand(2) * ev.rand(2, dtype=ev.float64)


def test_operators_with_non_tensors_are_type_errors():
    # Numbers are operands of the elementwise ops (test_api.py); other objects are not.
    with pytest.raises(TypeError, match="unsupported operand"):
        ev.rand(2) + "1"
    with pytest.raises(TypeError, match=r"ev.tensor\(b\).*ev.from_numpy\(b\)"):
        ev.rand(2, 2) @ np.ones((2, 2))
    with pytest.raises(TypeError, match="b is a int, not an eventide.Tensor"):
        ev.matmul(ev.rand(2, 2), 3)
    with pytest.raises(TypeError, match=r"a is a numpy.ndarray.*ev.tensor\(a\)"):
        ev.matmul(np.ones((2, 2)), np.ones((2, 2)))


@pytest.mark.parametrize("dt", [ev.int32, ev.int64, ev.float16])
def test_matmul_unsupported_dtype(dt):
    with pytest.raises(ev.InvalidArgumentError, match="matmul does not support"):
        ev.matmul(ev.ones(2, 2, dtype=dt), ev.ones(2, 2, dtype=dt))


@pytest.mark.parametrize("fn", [ev.rand, ev.randn], ids=lambda f: f.__name__)
def test_random_needs_floating_dtype(fn):
    with pytest.raises(ev.InvalidArgumentError, match="floating"):
        fn(2, dtype=ev.int32)


def test_bad_op_enqueues_nothing():
    """Nothing is left half-done: a rejected op enqueues nothing (the profiler sees every op
    enqueued)."""
    s = ev.Stream()
    x2, y3, z2 = ev.rand(2, 3), ev.rand(3), ev.rand(2)
    call_with_timeout(lambda: ev.wait_all([x2, y3, z2]))
    with ev.profile() as prof:
        with s:
            with pytest.raises(ev.InvalidArgumentError):
                ev.matmul(x2, x2)
            with pytest.raises(ev.InvalidArgumentError):
                ev.rand(-1)
            with pytest.raises(ev.InvalidArgumentError):
                ev.add(z2, y3)
            with pytest.raises(ev.InvalidArgumentError):
                ev.zeros(2, dtype="complex64")
    assert prof.ops == []


# --- dtypes -------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["complex64", "foo", object, "uint8", np.bool_])
def test_unknown_dtypes(bad):
    with pytest.raises(ev.InvalidArgumentError, match="dtype"):
        ev.zeros(2, dtype=bad)


def test_tensor_unsupported_data():
    with pytest.raises(ev.InvalidArgumentError, match="unsupported dtype"):
        ev.tensor(["a", "b"])
    with pytest.raises(ev.InvalidArgumentError, match="unsupported dtype"):
        ev.tensor([object()])
    with pytest.raises(ValueError):
        ev.tensor([[1, 2], [3]])
    with pytest.raises(ev.InvalidArgumentError, match="dtype"):
        ev.tensor(ev.rand(2), dtype=ev.float64)


# --- devices ------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["tpu", "", "cuda:-1", "cpu:1", "gpu:0"])
def test_unknown_device_strings(spec):
    with pytest.raises(ev.InvalidArgumentError, match="unknown device") as info:
        ev.rand(2, device=spec)
    assert repr(spec)[1:-1] in str(info.value) or f'"{spec}"' in str(info.value)
    with pytest.raises(ev.InvalidArgumentError, match="unknown device"):
        ev.Device(spec)
    with pytest.raises(ev.InvalidArgumentError, match="unknown device"):
        ev.Stream(spec)
    with pytest.raises(ev.InvalidArgumentError, match="unknown device"):
        ev.Event(device=spec)
    assert ev.is_available(spec) is False


@pytest.mark.parametrize("call", [
    lambda: ev.rand(2, device="cuda:0"),
    lambda: ev.zeros(2, device="cuda"),
    lambda: ev.Stream("cuda:0"),
    lambda: ev.Event(device="cuda:0"),
    lambda: ev.UserEvent(device="cuda:0"),
    lambda: ev.tensor([1.0], device="cuda:0"),
    lambda: ev.from_numpy(np.zeros(2, np.float32), device="cuda:0"),
    lambda: ev.rand(2).to("cuda:0"),
    lambda: ev.synchronize("cuda:0"),
    lambda: ev.current_stream("cuda:0"),
    lambda: ev.device_info("cuda:0"),
], ids=["rand", "zeros", "Stream", "Event", "UserEvent", "tensor", "from_numpy", "to",
        "synchronize", "current_stream", "device_info"])
def test_unavailable_cuda(call):
    if ev.is_available("cuda:0"):
        pytest.skip("this build has a GPU")
    with pytest.raises(ev.InvalidArgumentError, match=r"cuda:0 is not available"):
        call()


def test_without_a_gpu_the_message_says_none_was_found_and_to_use_the_cpu():
    # Without a driver CUDA itself says "CUDA driver version is insufficient for CUDA runtime
    # version", which sends a user to update a driver they do not have.
    if ev.is_available("cuda:0"):
        pytest.skip("a GPU is present: the no-GPU message is checked on a machine without one")
    with pytest.raises(ev.InvalidArgumentError) as raised:
        ev.Event(device="cuda:7")
    why = str(raised.value)
    assert why.startswith("device cuda:7 is not available: "), why
    if "this build of eventide has no CUDA backend" in why:
        return
    assert "no NVIDIA" in why and "was found" in why, why
    assert 'use the CPU, device "cpu" (EVENTIDE_DEVICE=cpu makes it the default)' in why, why
    assert re.search(r"\(cudaGetDeviceCount: cudaError[A-Za-z]+ = [0-9]+\)", why), why
    assert "insufficient" not in why, why


def test_cuda_device_value_is_only_spelling():
    d = ev.Device("cuda:1")  # a Device only checks the spelling
    assert (d.type, d.index, str(d)) == ("cuda", 1, "cuda:1")


@pytest.mark.parametrize("bad", [3, 2.5, object()])
def test_non_device_objects(bad):
    with pytest.raises(ev.InvalidArgumentError, match="not a device"):
        ev.zeros(2, device=bad)
    with pytest.raises(ev.InvalidArgumentError, match="not a device"):
        ev.Stream(bad)


# --- callbacks ----------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [None, 3, "print", [1]])
def test_non_callable_callbacks(bad):
    e = finished_event()
    with pytest.raises(ev.InvalidArgumentError, match="add_callback: the callback is not callable"):
        e.add_callback(bad)
    with pytest.raises(ev.InvalidArgumentError,
                       match="add_completion_callback: the callback is not callable"):
        ev.rand(2).add_completion_callback(bad)


def test_callback_with_wrong_arity_goes_to_unraisablehook():
    from conftest import capture_unraisable, wait_until
    with capture_unraisable() as seen:
        e = finished_event()
        e.add_callback(lambda needed: None)  # callbacks take no arguments
        wait_until(lambda: seen, what="the hook")
    assert seen[0][0] is TypeError


# --- UserEvent.fail -----------------------------------------------------------------------

@pytest.mark.parametrize("bad", [3, "error", None, int, object()])
def test_fail_with_non_exception(bad):
    u = ev.UserEvent()
    with pytest.raises(ev.InvalidArgumentError, match="expected an exception"):
        u.fail(bad)
    assert u.status == "pending"  # nothing half-done
    u.set()


# --- timeouts -----------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [-1, -0.5, float("nan")])
def test_bad_timeout_values(bad):
    e = finished_event()
    with pytest.raises(ev.InvalidArgumentError, match="timeout"):
        e.wait(bad)
    with pytest.raises(ev.InvalidArgumentError, match="timeout"):
        ev.wait_all([e], timeout=bad)
    with pytest.raises(ev.InvalidArgumentError, match="timeout"):
        ev.wait_any([e], timeout=bad)


def test_infinite_timeout_is_fine():
    e = finished_event()
    assert e.wait(float("inf")) is True
    assert ev.wait_all([e], timeout=float("inf")) is True


@pytest.mark.parametrize("call", ["wait", "wait_all", "wait_any"])
def test_timeout_of_wrong_type(call):
    e = finished_event()
    fn = {"wait": lambda: e.wait("soon"),
          "wait_all": lambda: ev.wait_all([e], timeout="soon"),
          "wait_any": lambda: ev.wait_any([e], timeout="soon")}[call]
    with pytest.raises((TypeError, ev.InvalidArgumentError)):
        fn()


def test_record_event_wrong_type():
    with pytest.raises((TypeError, ev.InvalidArgumentError)):
        ev.Stream().record_event(3)


def test_wrong_argument_types_are_type_errors():
    with pytest.raises(TypeError):
        ev.Event().record(3)
    with pytest.raises(TypeError):
        ev.Stream().wait(3)
    with pytest.raises(TypeError):
        ev.Stream().wait_event(ev.Stream())
    with pytest.raises(TypeError):
        finished_event().elapsed_time(3)
    with pytest.raises(TypeError):
        ev.full((2, 2), "x")
    with pytest.raises(TypeError):
        ev.Tensor()


# --- state errors -------------------------------------------------------------------------

def test_state_errors_name_the_event():
    e = ev.Event()
    with pytest.raises(ev.EventStateError, match=r"empty event \(<eventide.Event empty, 0 ops>\)"):
        e.wait()
    g = Gate()
    with g:
        t = ev.rand(2)
    e.record(t)
    with pytest.raises(ev.EventStateError, match="pending"):
        e.reset()
    with pytest.raises(ev.EventStateError, match="not finished"):
        e.time_elapsed()
    g.open()
    call_with_timeout(e.wait)


def test_wait_all_empty_event_names_its_index():
    with pytest.raises(ev.EventStateError, match="event 1"):
        ev.wait_all([finished_event(), ev.Event()])
