"""Tensor.astype / ev.cast: converting between the floating dtypes on the tensor's device."""

import math

import numpy as np
import pytest

import eventide as ev
from conftest import call_with_timeout


def test_bfloat16_reads_in_numpy_after_astype_float32():
    values = [1.0, -2.5, 0.15625, 3.0e38, 1.0e-38]
    t = ev.tensor(values, dtype=ev.bfloat16)
    with pytest.raises(ev.InvalidArgumentError, match=r"astype\(eventide.float32\)"):
        t.numpy()
    back = call_with_timeout(t.astype(ev.float32).numpy)
    want = np.array(values, dtype=np.float32)
    # bf16 keeps 8 significant bits: within half a unit of the 8th bit.
    np.testing.assert_allclose(back, want, rtol=2.0 ** -8)
    assert back[0] == 1.0 and back[1] == -2.5 and back[2] == 0.15625


def test_float32_to_bfloat16_rounds_to_nearest_even():
    # 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7: even (1) wins; 1 + 3 * 2^-8 halfway
    # between 1 + 2^-7 and 1 + 2^-6: even (1 + 2^-6) wins.
    t = ev.tensor([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -20], dtype=ev.float32)
    out = call_with_timeout(t.astype(ev.bfloat16).astype(ev.float32).numpy)
    assert out.tolist() == [1.0, 1 + 2.0 ** -6, 1 + 2.0 ** -7]


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_float64_to_16_bits_rounds_once(device):
    if not ev.is_available(device):
        pytest.skip(f"{device} is not available here")
    # Just above a halfway point of the 16-bit type, by less than float32 can hold: rounded to
    # float32 first it would sit exactly halfway and round (to even) the wrong way.
    values = [1 + 2.0 ** -8 + 2.0 ** -40, 1 + 2.0 ** -11 + 2.0 ** -40, -(1 + 2.0 ** -8 + 2.0 ** -40), 1 + 2.0 ** -9]
    t = ev.tensor(values, dtype=ev.float64, device=device)
    bf16 = call_with_timeout(t.astype(ev.bfloat16).astype(ev.float64).to("cpu").numpy)
    f16 = call_with_timeout(t.astype(ev.float16).to("cpu").numpy)
    assert bf16.tolist() == [1 + 2.0 ** -7, 1.0, -(1 + 2.0 ** -7), 1.0]
    np.testing.assert_array_equal(f16, np.array(values, dtype=np.float64).astype(np.float16))


def test_float16_round_trips_through_float32_exactly():
    every = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = every[np.isfinite(every)]
    t = ev.tensor(finite.astype(np.float32)).astype(ev.float16)
    assert t.dtype == ev.float16
    np.testing.assert_array_equal(call_with_timeout(t.numpy), finite)
    back = call_with_timeout(t.astype(ev.float32).numpy)
    np.testing.assert_array_equal(back, finite.astype(np.float32))


def test_special_values_survive_casts():
    t = ev.tensor([math.inf, -math.inf, math.nan, -0.0, 70000.0], dtype=ev.float32)
    half = call_with_timeout(t.astype(ev.float16).numpy)
    assert half[0] == np.inf and half[1] == -np.inf and np.isnan(half[2])
    assert half[3] == 0 and np.signbit(half[3])
    assert half[4] == np.inf  # beyond f16's range
    bf = call_with_timeout(ev.cast(t, "bfloat16").astype(ev.float64).numpy)
    assert bf[0] == np.inf and np.isnan(bf[2]) and bf[4] == 70144.0  # bf16's nearest


def test_cast_to_the_same_dtype_is_a_copy_and_float64_keeps_float32_values():
    src = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    t = ev.tensor(src)
    same = t.astype(ev.float32)
    assert same is not t
    np.testing.assert_array_equal(call_with_timeout(same.numpy), src)
    wide = t.astype(np.float64)
    assert wide.dtype == ev.float64 and wide.shape == t.shape
    np.testing.assert_array_equal(call_with_timeout(wide.numpy), src.astype(np.float64))


def test_cast_is_ordered_after_the_producer_on_a_held_stream(gate):
    with gate:
        t = ev.full((64,), 1.5)
        out = t.astype(ev.bfloat16)
    assert not out.ready
    gate.open()
    np.testing.assert_array_equal(call_with_timeout(out.astype(ev.float32).numpy), np.full(64, 1.5))


def test_cast_refuses_integer_dtypes_with_a_clear_error():
    with pytest.raises(ev.InvalidArgumentError, match="floating dtypes"):
        ev.ones(3, dtype=ev.int32).astype(ev.float32)
    with pytest.raises(ev.InvalidArgumentError, match="floating dtypes"):
        ev.ones(3).astype(ev.int64)
    with pytest.raises(ev.InvalidArgumentError, match="dtype"):
        ev.ones(3).astype(None)
