"""Every Python line of API.md, one promise at a time (CPU only).

The snippet from API.md's Python section is quoted above each group of tests.

Over 600 lines on purpose: it follows API.md's Python section line by line, in its order.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import eventide as ev
from conftest import Gate, call_with_timeout, wait_until


def done_event(t: ev.Tensor) -> ev.Event:
    e = ev.Event()
    e.record(t)
    assert call_with_timeout(e.wait) is True
    return e


# --- a = ev.rand(512, 512, device="cpu"); b = ev.randn(512, 512) --------------------------
# --- zeros, ones, empty, tensor(data), from_numpy; shapes: ints or one tuple --------------

class TestCreation:
    def test_rand_with_device_string(self):
        a = ev.rand(512, 512, device="cpu")
        assert a.shape == (512, 512)
        assert a.dtype == ev.float32
        assert isinstance(a.device, ev.Device) and a.device == ev.Device("cpu")
        x = a.numpy()
        assert x.shape == (512, 512) and x.dtype == np.float32
        assert (x >= 0).all() and (x < 1).all()
        assert 0.45 < float(x.mean()) < 0.55

    def test_randn_default_device_and_dtype(self):
        b = ev.randn(512, 512)
        assert b.shape == (512, 512)
        assert b.dtype == ev.float32
        assert b.device == ev.default_device()
        x = b.numpy()
        assert abs(float(x.mean())) < 0.02
        assert 0.95 < float(x.std()) < 1.05

    @pytest.mark.parametrize("fn", [ev.zeros, ev.ones, ev.empty, ev.rand, ev.randn])
    def test_shape_as_ints_tuple_or_list(self, fn):
        assert fn(2, 3).shape == (2, 3)
        assert fn((2, 3)).shape == (2, 3)
        assert fn([2, 3]).shape == (2, 3)
        assert fn(7).shape == (7,)
        assert fn((7,)).shape == (7,)
        assert fn(np.int64(4), 5).shape == (4, 5)
        assert fn(2, 0).shape == (2, 0)
        assert fn(2, 3, 4, dtype=ev.float64).shape == (2, 3, 4)

    def test_zero_dim_shapes(self):
        assert ev.zeros(()).shape == ()
        assert ev.zeros(()).numel() == 1

    def test_full_as_in_api_md(self):
        c = ev.full((512, 512), 2.0, dtype=ev.float32, device=None)
        assert c.shape == (512, 512)
        assert c.dtype == ev.float32
        assert c.device == ev.default_device()
        assert (c.numpy() == 2.0).all()

    def test_full_with_int_shape_and_int_dtype(self):
        t = ev.full(5, 3, dtype=ev.int64)
        assert t.shape == (5,)
        assert t.numpy().tolist() == [3] * 5

    def test_zeros_ones_values(self):
        assert (ev.zeros(3, 4).numpy() == 0).all()
        assert (ev.ones(3, 4, dtype=ev.float64).numpy() == 1).all()
        assert ev.ones(2, dtype=ev.int32).numpy().dtype == np.int32

    def test_empty_has_shape_dtype_device(self):
        t = ev.empty(3, 5, dtype=ev.float64, device="cpu")
        assert (t.shape, t.dtype, t.device) == ((3, 5), ev.float64, ev.Device("cpu"))

    @pytest.mark.parametrize("spec,expected", [
        (ev.float32, np.float32), (ev.float64, np.float64), (ev.int32, np.int32),
        (ev.int64, np.int64), (ev.float16, np.float16),
        ("float64", np.float64), (np.float32, np.float32), (np.dtype("int32"), np.int32),
    ])
    def test_dtypes(self, spec, expected):
        t = ev.zeros(2, 2, dtype=spec)
        assert t.numpy().dtype == expected
        assert t.dtype == ev.dtype(spec)

    def test_bfloat16_exists_on_the_device(self):
        t = ev.ones(4, dtype=ev.bfloat16)
        assert t.dtype == ev.bfloat16 and t.dtype.itemsize == 2
        t.wait()

    def test_dtype_objects(self):
        assert ev.float32.name == "float32"
        assert ev.float64.itemsize == 8
        assert ev.float32.is_floating_point and not ev.int64.is_floating_point
        assert ev.float32 == "float32" and ev.float32 == np.float32
        assert ev.float32 != ev.float64 and ev.float32 != "nonsense"
        assert len({ev.float32, ev.dtype("float32"), ev.float64}) == 2
        assert repr(ev.float32) == "eventide.float32"

    def test_tensor_from_data(self):
        t = ev.tensor([[1.0, 2.0], [3.0, 4.0]])
        assert t.shape == (2, 2) and t.dtype == ev.float32  # Python floats: float32
        assert t.numpy().tolist() == [[1.0, 2.0], [3.0, 4.0]]
        i = ev.tensor([1, 2, 3])
        assert i.dtype == ev.int64 and i.tolist() == [1, 2, 3]  # Python ints: int64
        d = ev.tensor([1, 2], dtype=ev.float64)
        assert d.dtype == ev.float64 and d.tolist() == [1.0, 2.0]
        n = ev.tensor(np.arange(3, dtype=np.int32))
        assert n.dtype == ev.int32  # NumPy arrays keep their dtype

    def test_tensor_copies(self):
        src = np.arange(4, dtype=np.float32)
        t = ev.tensor(src)
        src[0] = 100.0
        assert t.numpy()[0] == 0.0
        assert not np.shares_memory(src, t.numpy())

    def test_tensor_scalar_is_zero_dim(self):
        assert ev.tensor(3.0).shape == ()

    def test_from_numpy(self):
        arr = np.arange(6, dtype=np.float64).reshape(2, 3)
        t = ev.from_numpy(arr)
        assert t.shape == (2, 3) and t.dtype == ev.float64 and t.device == ev.Device("cpu")
        assert t.ready
        assert t.numpy().tolist() == arr.tolist()

    def test_manual_seed_reproducible(self):
        ev.manual_seed(1234)
        a = ev.rand(16).numpy().copy()
        ev.manual_seed(1234)
        b = ev.rand(16).numpy().copy()
        ev.manual_seed(1234, device="cpu")
        c = ev.rand(16).numpy().copy()
        assert (a == b).all() and (a == c).all()


# --- out = ev.matmul(a, b)   # also a @ b; ev.add(a, b) / a + b; ev.mul(a, b) / a * b ------

class TestOps:
    def test_matmul_and_operator(self):
        a_np = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
        b_np = np.random.default_rng(1).standard_normal((32, 16)).astype(np.float32)
        a, b = ev.from_numpy(a_np), ev.from_numpy(b_np)
        out = ev.matmul(a, b)
        assert out.shape == (64, 16)
        np.testing.assert_allclose(out.numpy(), a_np @ b_np, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose((a @ b).numpy(), a_np @ b_np, rtol=1e-4, atol=1e-4)

    def test_batched_matmul_f64(self):
        rng = np.random.default_rng(2)
        a_np, b_np = rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 5, 2))
        out = ev.from_numpy(a_np) @ ev.from_numpy(b_np)
        assert out.shape == (3, 4, 2) and out.dtype == ev.float64
        np.testing.assert_allclose(out.numpy(), a_np @ b_np, rtol=1e-10)

    def test_add_mul_and_operators(self):
        x_np = np.arange(12, dtype=np.float32).reshape(3, 4)
        y_np = np.full((3, 4), 2.0, dtype=np.float32)
        x, y = ev.from_numpy(x_np), ev.from_numpy(y_np)
        assert (ev.add(x, y).numpy() == x_np + y_np).all()
        assert ((x + y).numpy() == x_np + y_np).all()
        assert (ev.mul(x, y).numpy() == x_np * y_np).all()
        assert ((x * y).numpy() == x_np * y_np).all()

    def test_int_elementwise(self):
        x = ev.tensor([1, 2, 3])
        assert (x + x).tolist() == [2, 4, 6]
        assert (x * x).tolist() == [1, 4, 9]
        assert (x - x * x).tolist() == [0, -2, -6]

    # Issue 27: what a PyTorch or NumPy user tries first on a tensor.
    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_sub_div_and_numbers_match_numpy(self, dtype):
        x_np = np.array([1.5, -2.0, 3.25, 0.5], dtype=dtype)
        y_np = np.array([2.0, 0.25, -1.0, 4.0], dtype=dtype)
        x, y = ev.tensor(x_np), ev.tensor(y_np)
        cases = {
            "x - y": (x - y, x_np - y_np), "x / y": (x / y, x_np / y_np),
            "ev.sub": (ev.sub(x, y), x_np - y_np), "ev.div": (ev.div(x, y), x_np / y_np),
            "x + 1.0": (x + 1.0, x_np + dtype(1.0)), "x * 2": (x * 2, x_np * dtype(2)),
            "2 * x": (2 * x, dtype(2) * x_np), "1 - x": (1 - x, dtype(1) - x_np),
            "x / 2": (x / 2, x_np / dtype(2)), "2 / x": (2 / x, dtype(2) / x_np),
            "-x": (-x, -x_np), "x - 0.5": (x - 0.5, x_np - dtype(0.5)),
            "np.float32(3) * x": (np.float32(3) * x, dtype(3) * x_np),
            "ev.add(x, 1)": (ev.add(x, 1), x_np + dtype(1)),
        }
        for what, (got, want) in cases.items():
            assert isinstance(got, ev.Tensor), what
            assert got.dtype == x.dtype, what
            np.testing.assert_array_equal(got.numpy(), want, err_msg=what)

    def test_numbers_with_integer_tensors_are_exact_or_refused(self):
        i = ev.tensor([1, 2, 3])
        assert (i + 2).tolist() == [3, 4, 5] and (10 - i).tolist() == [9, 8, 7]
        assert (i * 2.0).tolist() == [2, 4, 6]  # a whole float is exact
        with pytest.raises(ev.InvalidArgumentError, match="1.5 is not a whole number.*does not promote"):
            i + 1.5
        with pytest.raises(ev.InvalidArgumentError, match="true division of int64"):
            i / i
        with pytest.raises(ev.InvalidArgumentError, match="does not fit in the tensor's int32"):
            ev.tensor([1, 2], dtype=ev.int32) + 2 ** 40
        with pytest.raises(ev.InvalidArgumentError, match="does not fit"):
            i * 2 ** 60

    def test_cpu_and_to(self):
        t = ev.tensor([1.0, 2.0])
        assert t.cpu().device == ev.Device("cpu") and t.cpu().tolist() == [1.0, 2.0]
        assert t.to("cpu").tolist() == [1.0, 2.0]

    def test_what_a_tensor_lacks_is_named_with_what_it_has(self):
        t = ev.ones(2, 2)
        for attempt in (lambda: t.sum(), lambda: t.T, lambda: t.reshape(4)):
            with pytest.raises(AttributeError, match=r"has no attribute .*A tensor has: shape.*t\.numpy\(\)"):
                attempt()
        with pytest.raises(TypeError, match=r"cannot be indexed.*t\.numpy\(\)\[\.\.\.\]"):
            t[0]
        assert not hasattr(t, "__cuda_array_interface__")  # hasattr still says no, quietly
        with pytest.raises(TypeError, match=r"a is a numpy.ndarray.*ev\.tensor\(a\).*ev\.from_numpy\(a\)"):
            ev.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
        with pytest.raises(TypeError, match=r"ev\.tensor"):
            t + np.ones((2, 2))
        with pytest.raises(TypeError, match=r"ev\.tensor"):
            np.ones((2, 2)) + t  # NumPy defers to the tensor's reflected operator
        with pytest.raises(ev.InvalidArgumentError, match=r"ev\.full\(\(2, 2\), 3\.0\)"):
            ev.full(2, 2, 3.0)

    def test_ops_are_asynchronous(self, gate: Gate):
        # Rule: every op returns at once and runs in order on the current stream.
        with gate:
            a = ev.ones(64, 64)
            out = ev.matmul(a, a)
            out2 = out + out
        assert not out.ready and not out2.ready
        gate.open()
        assert (call_with_timeout(out2.numpy) == 128.0).all()
        assert out.ready and out2.ready

    def test_chained_ops_in_order(self):
        x = ev.ones(32, 32)
        for _ in range(20):
            x = x + x
        assert (x.numpy() == 2.0 ** 20).all()

    def test_tensor_properties(self):
        t = ev.rand(3, 4, dtype=ev.float64)
        assert t.ndim == 2 and t.numel() == 12 and t.nbytes == 96 and len(t) == 3
        assert t.error is None
        with pytest.raises(TypeError):
            len(ev.zeros(()))

    def test_to_same_device(self):
        t = ev.rand(3)
        u = t.to("cpu")
        assert u.device == ev.Device("cpu")
        assert u.tolist() == t.tolist()


# --- e = ev.Event()   # Event(device=None, enable_timing=True) -----------------------------
# --- e.record(out); e.wait(); e.poll(); e.completed; e.device; e.error --------------------

class TestEvent:
    def test_new_event_is_empty(self):
        e = ev.Event()
        assert e.completed is False
        assert e.poll() is False
        assert e.query() is False
        assert e.device is None
        assert e.error is None
        assert e.enable_timing is True
        assert e.status == "empty"

    def test_constructor_arguments(self):
        e = ev.Event(device="cpu", enable_timing=False)
        assert e.device == ev.Device("cpu") and isinstance(e.device, ev.Device)
        assert e.enable_timing is False
        e2 = ev.Event(ev.Device("cpu"))
        assert e2.device == ev.Device("cpu")
        assert ev.Event(device=None).device is None

    def test_record_tensor_then_wait(self):
        out = ev.matmul(ev.rand(128, 128), ev.rand(128, 128))
        e = ev.Event()
        assert e.record(out) is None
        assert call_with_timeout(e.wait) is True
        assert e.completed is True and e.poll() is True and e.query() is True
        assert e.device == ev.Device("cpu")
        assert e.error is None
        assert e.status == "finished"

    def test_record_already_done_tensor(self):
        out = ev.rand(4)
        out.wait()
        e = ev.Event()
        e.record(out)
        assert e.poll() is True  # "it may already be done"

    def test_device_is_set_by_first_record(self):
        e = ev.Event()
        assert e.device is None
        e.record(ev.rand(2))
        assert isinstance(e.device, ev.Device) and e.device.type == "cpu"

    def test_pending_until_work_done(self, gate: Gate):
        with gate:
            out = ev.rand(8)
        e = ev.Event()
        e.record(out)
        assert e.poll() is False and e.completed is False
        assert e.status == "pending"
        assert e.wait(timeout=0.05) is False
        gate.open()
        assert call_with_timeout(e.wait) is True
        assert e.completed

    def test_wait_timeout_returns_false_after_the_timeout(self, gate: Gate):
        with gate:
            out = ev.rand(8)
        e = ev.Event()
        e.record(out)
        t0 = time.monotonic()
        assert e.wait(0.2) is False
        elapsed = time.monotonic() - t0
        assert 0.18 <= elapsed < 5.0
        assert e.wait(0) is False
        assert e.wait(timeout=0.0) is False
        gate.open()
        assert call_with_timeout(lambda: e.wait(timeout=30)) is True

    def test_wait_on_empty_raises_state_error(self):
        e = ev.Event()
        with pytest.raises(ev.EventStateError, match="empty"):
            e.wait()
        with pytest.raises(ev.EventStateError, match="empty"):
            e.wait(timeout=0.01)
        with pytest.raises(ev.EventStateError):
            e.synchronize()

    def test_records_accumulate(self, gate: Gate):
        # Tutorial point 2: an event may be tied to several operations.
        done = ev.rand(4)
        with gate:
            later = ev.rand(4)
        e = ev.Event()
        e.record(done)
        e.record(later)
        done.wait()
        assert e.poll() is False  # finished only when all tied work has finished
        gate.open()
        assert call_with_timeout(e.wait) is True
        assert repr(e) == "<eventide.Event finished on cpu, 2 ops>"

    def test_record_on_finished_event_makes_it_pending_again(self, gate: Gate):
        e = done_event(ev.rand(4))
        with gate:
            t = ev.rand(4)
        e.record(t)
        assert e.poll() is False
        gate.open()
        assert call_with_timeout(e.wait)

    def test_record_stream_and_current_stream(self, gate: Gate):
        with gate:
            ev.rand(4)
            t2 = ev.rand(4)
        e = ev.Event()
        e.record(gate.stream)  # tied to all work so far on that stream
        assert not e.poll()
        gate.open()
        assert call_with_timeout(e.wait)
        assert t2.ready

        e2 = ev.Event()
        with gate.stream:
            e2.record()  # the current stream: gate.stream
            e3 = ev.Event()
            e3.record(None)
        assert call_with_timeout(e2.wait) and call_with_timeout(e3.wait)

    def test_record_on_stream_without_work_is_finished_at_once(self):
        s = ev.Stream("cpu")
        e = ev.Event()
        e.record(s)
        assert e.poll() is True
        assert e.time_elapsed() == 0.0

    def test_record_rejects_other_objects(self):
        e = ev.Event()
        with pytest.raises(TypeError):
            e.record(3)
        with pytest.raises(TypeError):
            e.record("cpu")
        assert e.status == "empty"

    # --- e.time_elapsed()   # float, microseconds ---

    def test_time_elapsed_is_microseconds_of_the_op(self):
        a = ev.rand(768, 768)
        a.wait()
        t0 = time.perf_counter()
        out = a @ a
        e = ev.Event()
        e.record(out)
        call_with_timeout(e.wait)
        wall_us = (time.perf_counter() - t0) * 1e6
        us = e.time_elapsed()
        assert isinstance(us, float)
        assert 0.0 < us <= wall_us * 1.05 + 1000
        # a 768^3 matmul takes far longer than a microsecond: a unit slip (ns, ms, s) shows
        assert us > 50.0

    def test_time_elapsed_spans_all_tied_ops(self):
        a = ev.rand(256, 256)
        x1 = a @ a
        x2 = x1 @ a
        e1, e2, both = ev.Event(), ev.Event(), ev.Event()
        e1.record(x1)
        e2.record(x2)
        both.record(x1)
        both.record(x2)
        ev.wait_all([e1, e2, both])
        assert both.time_elapsed() >= max(e1.time_elapsed(), e2.time_elapsed())
        assert both.time_elapsed() >= 0.99 * (e1.time_elapsed() + e2.time_elapsed())

    def test_record_stream_is_a_marker_a_point_after_everything_before_it(self):
        s = ev.Stream("cpu")
        start = ev.Event()
        start.record(s)
        with s:
            a = ev.rand(512, 512)
            big = a @ a
            small = ev.rand(4)
        e_small = ev.Event()
        e_small.record(small)
        e_stream = ev.Event()
        e_stream.record(s)
        ev.wait_all([e_small, e_stream])
        assert big.ready and small.ready  # the marker follows every op before it
        assert e_stream.time_elapsed() == 0.0  # a point: no duration of its own
        assert start.time_elapsed() == 0.0
        region_us = start.elapsed_time(e_stream) * 1000.0
        assert region_us >= e_small.time_elapsed()
        assert region_us > 0.0

    def test_time_elapsed_errors(self, gate: Gate):
        with pytest.raises(ev.EventStateError):
            ev.Event().time_elapsed()
        with gate:
            t = ev.rand(4)
        e = ev.Event()
        e.record(t)
        with pytest.raises(ev.EventStateError, match="not finished"):
            e.time_elapsed()
        gate.open()
        e.wait()
        assert e.time_elapsed() >= 0.0
        untimed = ev.Event(enable_timing=False)
        untimed.record(ev.rand(4))
        untimed.wait()
        with pytest.raises(ev.EventStateError, match="timing disabled"):
            untimed.time_elapsed()

    # --- e.reset() ---

    def test_reset_finished_event(self):
        e = done_event(ev.rand(4))
        e.reset()
        assert e.completed is False and e.poll() is False
        assert e.status == "empty"
        assert e.device is None
        assert e.error is None
        with pytest.raises(ev.EventStateError):
            e.wait()
        e.record(ev.rand(4))
        assert call_with_timeout(e.wait)

    def test_reset_restores_constructor_device(self):
        e = ev.Event(device="cpu")
        e.record(ev.rand(2))
        e.wait()
        e.reset()
        assert e.device == ev.Device("cpu")

    def test_reset_empty_is_fine(self):
        e = ev.Event()
        e.reset()
        assert e.status == "empty"

    def test_reset_pending_raises_and_changes_nothing(self, gate: Gate):
        with gate:
            t = ev.rand(4)
        e = ev.Event()
        e.record(t)
        with pytest.raises(ev.EventStateError, match="pending"):
            e.reset()
        assert e.status == "pending"
        assert repr(e) == "<eventide.Event pending on cpu, 1 op>"
        gate.open()
        assert call_with_timeout(e.wait)

    def test_reset_failed_event(self, gate: Gate):
        with gate:
            t = ev.rand(4)
        e = ev.Event()
        e.record(t)
        gate.fail(KeyError("x"))
        with pytest.raises(ev.OpError):
            call_with_timeout(e.wait)
        e.reset()
        assert e.error is None and e.status == "empty"

    # --- e.query(); e.synchronize(); e.elapsed_time(end)   # PyTorch-compatible spellings ---

    def test_pytorch_spellings(self, gate: Gate):
        with gate:
            t = ev.rand(4)
        e = ev.Event()
        e.record(t)
        assert e.query() is False
        gate.open()
        assert call_with_timeout(e.synchronize) is None
        assert e.query() is True

    def test_elapsed_time_is_milliseconds_between_completions(self):
        a = ev.rand(384, 384)
        start, end = ev.Event(), ev.Event()
        start.record(a)
        out = a @ a
        end.record(out)
        call_with_timeout(lambda: ev.wait_all([start, end]))
        ms = start.elapsed_time(end)
        assert isinstance(ms, float)
        assert ms >= 0.0
        # end finished when `out`'s op ended, after that op ran: at least its own duration
        assert ms >= end.time_elapsed() / 1000.0 * 0.99
        assert ms < 60_000  # milliseconds, not microseconds or nanoseconds
        assert end.elapsed_time(start) == pytest.approx(-ms)

    def test_elapsed_time_needs_finished_events(self, gate: Gate):
        done = done_event(ev.rand(2))
        with pytest.raises(ev.EventStateError):
            done.elapsed_time(ev.Event())
        with gate:
            t = ev.rand(2)
        pending = ev.Event()
        pending.record(t)
        with pytest.raises(ev.EventStateError):
            done.elapsed_time(pending)
        gate.open()

    # --- equality, hashing, repr ---

    def test_repr_shows_state(self, gate: Gate):
        e = ev.Event()
        assert repr(e) == "<eventide.Event empty, 0 ops>"
        with gate:
            t1 = ev.rand(4)
            t2 = ev.rand(4)
        e.record(t1)
        e.record(t2)
        assert repr(e) == "<eventide.Event pending on cpu, 2 ops>"
        gate.fail(ValueError("no"))
        with pytest.raises(ev.OpError):
            call_with_timeout(e.wait)
        assert repr(e) == "<eventide.Event failed on cpu, 2 ops>"
        assert repr(ev.UserEvent()) == "<eventide.UserEvent pending>"

    def test_repr_is_not_stale_after_set(self):
        u = ev.UserEvent()
        u.set()
        assert repr(u) == "<eventide.UserEvent finished>"

    def test_repr_is_not_stale_after_op(self, gate: Gate):
        with gate:
            t = ev.rand(4)
        e = ev.Event()
        e.record(t)
        gate.open()
        call_with_timeout(t.wait)  # the op is done; nothing has polled e
        assert repr(e) == "<eventide.Event finished on cpu, 1 op>"

    def test_equality_and_hash_follow_identity_of_state(self):
        e = ev.Event()
        assert e == e and hash(e) == hash(e)
        assert e != ev.Event()
        assert e != "event"
        s = ev.Stream()
        ev_ = s.record_event()
        assert len({e, ev_, e}) == 2


# --- out.add_completion_callback(fn); e.add_callback(fn) -------------------------------
# (more in test_callbacks.py)

class TestCallbacksBasic:
    def test_add_callback_runs_after_finish(self, gate: Gate):
        with gate:
            t = ev.rand(4)
        e = ev.Event()
        e.record(t)
        fired = threading.Event()
        seen = []
        e.add_callback(lambda: (seen.append(e.completed), fired.set()))
        assert not fired.wait(0.05)
        gate.open()
        assert fired.wait(20)
        assert seen == [True]

    def test_add_completion_callback(self, gate: Gate):
        with gate:
            t = ev.rand(4)
        fired = threading.Event()
        ready_inside = []
        t.add_completion_callback(lambda: (ready_inside.append(t.ready), fired.set()))
        assert not fired.wait(0.05)
        gate.open()
        assert fired.wait(20)
        assert ready_inside == [True]

    def test_callback_on_empty_event_raises(self):
        with pytest.raises(ev.EventStateError, match="empty"):
            ev.Event().add_callback(lambda: None)

    def test_completion_callback_on_ready_tensor(self):
        t = ev.from_numpy(np.zeros(3, np.float32))  # no producing op
        fired = threading.Event()
        t.add_completion_callback(fired.set)
        assert fired.wait(20)

    def test_callback_can_read_error(self, gate: Gate):
        with gate:
            t = ev.rand(4)
        e = ev.Event()
        e.record(t)
        errors = []
        e.add_callback(lambda: errors.append(e.error))
        cause = ValueError("device on fire")
        gate.fail(cause)
        wait_until(lambda: errors, what="the callback")
        assert isinstance(errors[0], ev.OpError)
        assert errors[0].__cause__ is cause


# --- out.ready; out.shape; out.dtype; out.device -----------------------------------------

def test_tensor_ready_shape_dtype_device(gate: Gate):
    with gate:
        out = ev.zeros(3, 5, dtype=ev.float64)
    assert out.ready is False
    assert out.shape == (3, 5)
    assert isinstance(out.shape, tuple)
    assert out.dtype == ev.float64 and isinstance(out.dtype, ev.dtype)
    assert out.device == ev.Device("cpu") and isinstance(out.device, ev.Device)
    assert "pending" in repr(out)
    gate.open()
    call_with_timeout(out.wait)
    assert out.ready is True
    assert repr(out) == "<eventide.Tensor (3, 5) float64 on cpu, ready>"


def test_tensor_ready_is_true_for_failed_producer(gate: Gate):
    with gate:
        out = ev.zeros(3)
    gate.fail(RuntimeError("x"))
    with pytest.raises(ev.OpError):
        call_with_timeout(out.wait)
    assert out.ready is True  # ready: the producing op has finished (also if it failed)
    assert isinstance(out.error, ev.OpError)
    assert "failed" in repr(out)


# --- ev.wait_all([e1, e2]); ev.wait_any([e1, e2])   # timeout=None ----------------------

class TestWaitAllAny:
    def test_wait_all(self):
        a = ev.rand(64, 64)
        e1, e2 = ev.Event(), ev.Event()
        e1.record(a @ a)
        e2.record(a + a)
        assert call_with_timeout(lambda: ev.wait_all([e1, e2])) is True
        assert e1.completed and e2.completed

    def test_wait_all_accepts_any_iterable(self):
        es = [done_event(ev.rand(2)) for _ in range(3)]
        assert ev.wait_all(iter(es)) is True
        assert ev.wait_all(tuple(es)) is True
        assert ev.wait_all([]) is True

    def test_wait_all_timeout(self, gate: Gate):
        done = done_event(ev.rand(2))
        with gate:
            t = ev.rand(2)
        pending = ev.Event()
        pending.record(t)
        assert ev.wait_all([done, pending], timeout=0.05) is False
        assert ev.wait_all([done, pending], 0) is False
        gate.open()
        assert call_with_timeout(lambda: ev.wait_all([done, pending], timeout=None)) is True

    def test_wait_all_blocks_until_every_event(self, gate: Gate):
        with gate:
            t = ev.rand(2)
        e1 = done_event(ev.rand(2))
        e2 = ev.Event()
        e2.record(t)
        finished = threading.Event()
        th = threading.Thread(target=lambda: (ev.wait_all([e1, e2]), finished.set()), daemon=True)
        th.start()
        assert not finished.wait(0.1)
        gate.open()
        assert finished.wait(20)

    def test_wait_all_empty_event_raises(self):
        with pytest.raises(ev.EventStateError, match="empty"):
            ev.wait_all([done_event(ev.rand(2)), ev.Event()])

    def test_wait_all_raises_first_failure_in_list_order(self):
        ok, a, b = ev.UserEvent(), ev.UserEvent(), ev.UserEvent()
        exc_a, exc_b = KeyError("a"), IndexError("b")
        b.fail(exc_b)
        a.fail(exc_a)
        ok.set()
        with pytest.raises(KeyError) as info:
            ev.wait_all([ok, a, b])
        assert info.value is exc_a
        with pytest.raises(IndexError) as info:
            ev.wait_all([b, a])
        assert info.value is exc_b

    def test_wait_all_waits_for_all_before_raising(self):
        failed, later = ev.UserEvent(), ev.UserEvent()
        failed.fail(KeyError("f"))
        finished = threading.Event()

        def body():
            try:
                ev.wait_all([failed, later])
            except KeyError:
                finished.set()

        th = threading.Thread(target=body, daemon=True)
        th.start()
        assert not finished.wait(0.1)  # `later` has not finished yet
        later.set()
        assert finished.wait(20)

    def test_wait_any(self, gate: Gate):
        with gate:
            t = ev.rand(2)
        pending = ev.Event()
        pending.record(t)
        done = done_event(ev.rand(2))
        assert ev.wait_any([pending, done]) == 1
        assert ev.wait_any([done, pending], timeout=None) == 0
        assert ev.wait_any([pending], timeout=0.05) is None
        gate.open()
        assert call_with_timeout(lambda: ev.wait_any([pending])) == 0

    def test_wait_any_lowest_finished_index(self):
        es = [done_event(ev.rand(2)) for _ in range(3)]
        assert ev.wait_any(es) == 0

    def test_wait_any_blocks_until_one(self):
        u1, u2 = ev.UserEvent(), ev.UserEvent()
        result = []
        th = threading.Thread(target=lambda: result.append(ev.wait_any([u1, u2])), daemon=True)
        th.start()
        time.sleep(0.1)
        assert not result
        u2.set()
        th.join(20)
        assert result == [1]
        u1.set()

    def test_wait_any_failed_event_counts_as_finished(self):
        u1, u2 = ev.UserEvent(), ev.UserEvent()
        u2.fail(KeyError("x"))
        assert ev.wait_any([u1, u2], timeout=5) == 1  # no raise: check its error
        u1.set()

    def test_wait_any_bad_lists(self):
        with pytest.raises(ev.InvalidArgumentError, match="empty"):
            ev.wait_any([])
        with pytest.raises(ev.EventStateError, match="empty"):
            ev.wait_any([ev.Event()])
        with pytest.raises(ev.InvalidArgumentError):
            ev.wait_any([1, 2])

    def test_wait_any_empty_event_raises_even_if_another_is_done(self):
        with pytest.raises(ev.EventStateError):
            ev.wait_any([ev.Event(), done_event(ev.rand(2))])


# --- ev.synchronize()   # synchronize(device=None) ---------------------------------------

class TestSynchronize:
    def test_synchronize_waits_for_every_stream(self):
        g1, g2 = Gate(), Gate()
        with g1:
            t1 = ev.rand(4)
        with g2:
            t2 = ev.rand(4)
        t3 = ev.rand(64, 64) @ ev.rand(64, 64)  # default stream
        finished = threading.Event()
        th = threading.Thread(target=lambda: (ev.synchronize(), finished.set()), daemon=True)
        th.start()
        assert not finished.wait(0.1)
        g1.open()
        assert not finished.wait(0.1)
        g2.open()
        assert finished.wait(20)
        assert t1.ready and t2.ready and t3.ready

    @pytest.mark.parametrize("device", [None, "cpu", ev.Device("cpu")])
    def test_synchronize_device_argument(self, device, gate: Gate):
        with gate:
            t = ev.rand(4)
        gate.open()
        assert call_with_timeout(lambda: ev.synchronize(device)) is None
        assert t.ready
        assert call_with_timeout(lambda: ev.synchronize(device=device)) is None

    def test_synchronize_does_not_raise_for_failed_work(self, gate: Gate):
        with gate:
            t = ev.rand(4)
        gate.fail(RuntimeError("x"))
        call_with_timeout(ev.synchronize)
        assert isinstance(t.error, ev.OpError)


# --- await e   # events are awaitable in asyncio   (more in test_asyncio.py) --------------

def test_await_event():
    import asyncio

    async def main():
        e = ev.Event()
        e.record(ev.rand(16, 16) @ ev.rand(16, 16))
        await e
        return e.completed

    assert call_with_timeout(lambda: asyncio.run(main())) is True


def test_awaiting_an_empty_event_says_so():
    import asyncio

    async def main():
        await ev.Event()

    with pytest.raises(ev.EventStateError, match=r"await: .* is empty \(never recorded\).*record work"):
        call_with_timeout(lambda: asyncio.run(main()))


# --- s = ev.Stream("cuda:0"); s.wait_event(e); s.wait(e), s.wait_stream(s2),
# --- s.record_event() -> Event, s.synchronize(), s.query(), `with s:` / `with ev.stream(s):`,
# --- ev.current_stream()

class TestStream:
    def test_stream_construction(self):
        s = ev.Stream("cpu")
        assert s.device == ev.Device("cpu")
        assert isinstance(s.id, int)
        assert ev.Stream().device == ev.default_device()
        assert ev.Stream(ev.Device("cpu")).id != s.id
        assert repr(s) == f"<eventide.Stream cpu stream {s.id}>"

    def test_stream_cuda_unavailable(self):
        if ev.is_available("cuda:0"):
            pytest.skip("this build has CUDA")
        with pytest.raises(ev.InvalidArgumentError, match="cuda:0"):
            ev.Stream("cuda:0")

    @pytest.mark.parametrize("method", ["wait_event", "wait"])
    def test_wait_event_gates_later_work(self, method):
        u = ev.UserEvent()
        s = ev.Stream("cpu")
        before = None
        with s:
            before = ev.rand(4)
        before.wait()
        assert getattr(s, method)(u) is None  # the host does not block
        with s:
            after = ev.rand(4)
        time.sleep(0.05)
        assert not after.ready
        assert s.query() is False
        u.set()
        call_with_timeout(after.wait)
        assert s.query() is True

    def test_wait_on_op_event(self, gate: Gate):
        with gate:
            t = ev.rand(4)
        e = ev.Event()
        e.record(t)
        s = ev.Stream()
        s.wait_event(e)
        with s:
            x = ev.rand(4)
        time.sleep(0.05)
        assert not x.ready
        gate.open()
        call_with_timeout(x.wait)

    @pytest.mark.parametrize("method", ["wait_stream", "wait"])
    def test_wait_stream(self, method, gate: Gate):
        with gate:
            ev.rand(4)
        s = ev.Stream()
        getattr(s, method)(gate.stream)
        with s:
            x = ev.rand(4)
        time.sleep(0.05)
        assert not x.ready
        gate.open()
        call_with_timeout(x.wait)

    def test_wait_stream_only_covers_work_so_far(self, gate: Gate):
        s = ev.Stream()
        s.wait_stream(gate.stream)  # gate.stream has only its wait so far: gated
        with gate:
            ev.rand(2)
        with s:
            x = ev.rand(2)
        time.sleep(0.05)
        assert not x.ready
        gate.open()
        call_with_timeout(x.wait)

    def test_wait_on_empty_event_raises(self):
        with pytest.raises(ev.EventStateError, match="empty"):
            ev.Stream().wait(ev.Event())

    def test_record_event(self, gate: Gate):
        with gate:
            t = ev.rand(4)
        e = gate.stream.record_event()
        assert isinstance(e, ev.Event)
        assert e.poll() is False
        mine = ev.Event(enable_timing=False)
        assert gate.stream.record_event(mine) == mine  # same event (a new wrapper, not `is`)
        gate.open()
        assert call_with_timeout(e.wait)
        assert t.ready
        assert call_with_timeout(mine.wait)

    def test_synchronize_and_query(self, gate: Gate):
        with gate:
            t = ev.rand(4)
        assert gate.stream.query() is False
        finished = threading.Event()
        th = threading.Thread(target=lambda: (gate.stream.synchronize(), finished.set()),
                              daemon=True)
        th.start()
        assert not finished.wait(0.1)
        gate.open()
        assert finished.wait(20)
        assert gate.stream.query() is True
        assert t.ready

    def test_with_stream_makes_it_current(self):
        s = ev.Stream()
        default = ev.current_stream()
        assert default == ev.default_stream()
        with s as entered:
            assert entered == s
            assert ev.current_stream() == s
            assert ev.current_stream("cpu") == s
            e = ev.Event()
            e.record(ev.rand(2))
        assert ev.current_stream() == default

    def test_ev_stream_context_manager(self):
        s1, s2 = ev.Stream(), ev.Stream()
        default = ev.current_stream()
        with ev.stream(s1) as got:
            assert got is s1
            assert ev.current_stream() == s1
            with ev.stream(s2):
                assert ev.current_stream() == s2
            assert ev.current_stream() == s1
            with ev.stream(None) as nothing:
                assert nothing is None
                assert ev.current_stream() == s1
        assert ev.current_stream() == default

    def test_stream_restored_after_exception(self):
        s = ev.Stream()
        default = ev.current_stream()
        with pytest.raises(ZeroDivisionError):
            with ev.stream(s):
                1 / 0
        assert ev.current_stream() == default
        with pytest.raises(ZeroDivisionError):
            with s:
                1 / 0
        assert ev.current_stream() == default

    def test_ops_go_to_current_stream(self, gate: Gate):
        with ev.stream(gate.stream):
            t = ev.rand(4)
        u = ev.rand(4)  # default stream: not gated
        call_with_timeout(u.wait)
        assert not t.ready
        gate.open()
        call_with_timeout(t.wait)

    def test_current_stream_is_per_thread(self):
        s = ev.Stream()
        seen = []
        with s:
            th = threading.Thread(target=lambda: seen.append(ev.current_stream()))
            th.start()
            th.join()
        assert seen == [ev.default_stream()]

    def test_cross_stream_read_waits_for_producer(self, gate: Gate):
        # Rule: using a tensor from any stream is never a data race.
        with gate:
            x = ev.full((64, 64), 3.0)
        other = ev.Stream()
        with other:
            y = x + x
        time.sleep(0.05)
        assert not y.ready
        gate.open()
        assert (call_with_timeout(y.numpy) == 6.0).all()

    def test_stream_equality(self):
        s = ev.Stream()
        assert s == s and s != ev.Stream() and s != 1
        assert hash(s) == hash(s)
        with s:
            assert ev.current_stream() == s
            assert hash(ev.current_stream()) == hash(s)


# --- u = ev.UserEvent(); u.set()   # or u.fail(exception) ------------------------------

class TestUserEvent:
    def test_starts_pending_and_set_finishes(self):
        u = ev.UserEvent()
        assert isinstance(u, ev.Event)
        assert u.poll() is False and u.completed is False and u.status == "pending"
        assert u.wait(0.02) is False
        u.set()
        assert u.poll() is True
        assert u.wait() is True
        assert u.error is None

    def test_set_wakes_a_waiter_in_another_thread(self):
        u = ev.UserEvent()
        result = []
        th = threading.Thread(target=lambda: result.append(u.wait()), daemon=True)
        th.start()
        time.sleep(0.05)
        assert not result
        u.set()
        th.join(20)
        assert result == [True]

    def test_set_is_idempotent(self):
        u = ev.UserEvent()
        u.set()
        u.set()
        assert u.poll()

    def test_waiters_get_the_exact_exception(self):
        u = ev.UserEvent()
        exc = ValueError("the host gave up")
        u.fail(exc)
        with pytest.raises(ValueError) as info:
            u.wait()
        assert info.value is exc
        assert u.error is exc
        assert u.completed is True  # finished (failed)
        assert u.status == "failed"

    def test_fail_with_exception_class(self):
        u = ev.UserEvent()
        u.fail(KeyError)
        with pytest.raises(KeyError):
            u.wait()
        assert isinstance(u.error, KeyError)

    def test_dependents_get_op_error_caused_by_it(self, gate: Gate):
        with gate:
            out = ev.rand(4)
        e = ev.Event()
        e.record(out)
        exc = ValueError("cancelled by host")
        gate.fail(exc)
        with pytest.raises(ev.OpError) as info:
            call_with_timeout(e.wait)
        assert info.value.__cause__ is exc
        assert isinstance(e.error, ev.OpError) and e.error.__cause__ is exc
        with pytest.raises(ev.OpError) as info:
            out.wait()
        assert info.value.__cause__ is exc
        with pytest.raises(ev.OpError) as info:
            out.numpy()
        assert info.value.__cause__ is exc
        # the stream that waited on the failed event is broken; later work fails too
        assert isinstance(gate.stream.error, ev.OpError)
        with gate:
            later = ev.rand(4)
        with pytest.raises(ev.OpError) as info:
            call_with_timeout(later.wait)
        assert info.value.__cause__ is exc

    def test_readers_on_other_streams_fail_too(self, gate: Gate):
        with gate:
            x = ev.rand(4)
        with ev.Stream():
            y = x + x
        exc = KeyError("k")
        gate.fail(exc)
        with pytest.raises(ev.OpError) as info:
            call_with_timeout(y.wait)
        assert info.value.__cause__ is exc

    def test_set_after_fail_and_fail_after_set_raise(self):
        u = ev.UserEvent()
        u.fail(KeyError("x"))
        with pytest.raises(ev.EventStateError, match="failed"):
            u.set()
        v = ev.UserEvent()
        v.set()
        with pytest.raises(ev.EventStateError, match="set"):
            v.fail(KeyError("y"))
        assert v.error is None

    def test_reset_starts_a_new_round(self):
        u = ev.UserEvent()
        with pytest.raises(ev.EventStateError, match="pending"):
            u.reset()
        u.set()
        u.reset()
        assert u.status == "pending" and not u.poll()
        u.fail(KeyError("round 2"))
        assert isinstance(u.error, KeyError)
        u.reset()
        assert u.error is None and u.status == "pending"
        u.set()
        assert u.wait(1)

    def test_dropping_an_unset_user_event_fails_its_dependents(self):
        u = ev.UserEvent()
        s = ev.Stream()
        s.wait(u)
        with s:
            t = ev.rand(4)
        del u
        with pytest.raises(ev.OpError) as info:
            call_with_timeout(t.wait)
        assert isinstance(info.value.__cause__, ev.EventStateError)
        assert "never" in str(info.value.__cause__) or "without being set" in str(info.value.__cause__)

    def test_user_event_can_be_used_with_wait_all_and_callbacks(self):
        u = ev.UserEvent()
        fired = threading.Event()
        u.add_callback(fired.set)
        assert not fired.wait(0.02)
        u.set()
        assert fired.wait(20)
        assert ev.wait_all([u]) is True


# --- out.numpy(); ev.from_dlpack(x); out.__dlpack__()   (more in test_numpy.py) ---------

def test_numpy_dlpack_line():
    out = ev.full((2, 3), 5.0)
    assert (out.numpy() == 5.0).all()
    back = ev.from_dlpack(out)
    assert back.tolist() == out.tolist()
    cap = out.__dlpack__()
    assert type(cap).__name__ == "PyCapsule"


# --- exceptions -------------------------------------------------------------------------

class TestExceptionClasses:
    def test_hierarchy(self):
        assert issubclass(ev.EventideError, RuntimeError)
        for cls in (ev.EventStateError, ev.DeviceError, ev.OpError, ev.InvalidArgumentError):
            assert issubclass(cls, ev.EventideError)
        assert issubclass(ev.InvalidArgumentError, ValueError)
        assert not issubclass(ev.EventStateError, ValueError)
        assert ev.EventideError.__module__ == "eventide"
        assert ev.OpError.__name__ == "OpError"

    def test_catchable_as_builtin_bases(self):
        with pytest.raises(ValueError):
            ev.rand(-1)
        with pytest.raises(RuntimeError):
            ev.Event().wait()

    def test_instances_can_be_raised_by_users(self):
        with pytest.raises(ev.OpError, match="mine"):
            raise ev.OpError("mine")


# --- devices (beyond API.md's lines, used by the rest) ----------------------------------

def test_devices():
    assert ev.devices()[0] == ev.Device("cpu")
    assert ev.is_available("cpu") is True
    assert ev.is_available("tpu") is False
    d = ev.Device("cpu")
    assert (d.type, d.index, str(d), repr(d)) == ("cpu", 0, "cpu", "eventide.Device('cpu')")
    assert d == "cpu" and d != "tpu"
    assert ev.Device(None) == ev.default_device()
    info = ev.device_info("cpu")
    assert info["device"] == d and isinstance(info["description"], str)
    assert isinstance(ev.__version__, str) and ev.__version__
