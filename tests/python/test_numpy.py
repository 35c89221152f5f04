"""NumPy and DLPack interop on the CPU: views share memory, are read-only, keep their owners
alive, and wait for the producing op."""

from __future__ import annotations

import gc
import weakref

import ctypes

import numpy as np
import pytest

import eventide as ev
from conftest import Gate, call_with_timeout, wait_until


# --- out.numpy() ------------------------------------------------------------------------

def test_numpy_is_a_read_only_view_sharing_memory():
    t = ev.rand(4, 5)
    a = t.numpy()
    b = t.numpy()
    assert np.shares_memory(a, b)
    assert a.flags.writeable is False
    assert a.flags.c_contiguous
    with pytest.raises(ValueError, match="read-only"):
        a[0, 0] = 1.0
    with pytest.raises(ValueError):
        a += 1
    assert a.shape == (4, 5) and a.dtype == np.float32


def test_numpy_view_keeps_tensor_memory_alive():
    t = ev.full((256, 256), 7.0)
    a = t.numpy()
    del t
    gc.collect()
    _ = [ev.full((256, 256), 1.0).numpy() for _ in range(8)]  # reuse freed memory, if any
    assert (a == 7.0).all()


def test_numpy_waits_for_the_producer(gate: Gate):
    with gate:
        t = ev.full((8,), 3.0)
    result = []
    import threading
    th = threading.Thread(target=lambda: result.append(t.numpy()), daemon=True)
    th.start()
    th.join(0.1)
    assert th.is_alive() and not result
    gate.open()
    th.join(20)
    assert (result[0] == 3.0).all()


@pytest.mark.parametrize("dt", ["float32", "float64", "int32", "int64", "float16"])
def test_numpy_dtypes_round_trip(dt):
    src = (np.arange(12) - 5).astype(dt).reshape(3, 4)
    t = ev.tensor(src)
    assert t.numpy().dtype == np.dtype(dt)
    assert (t.numpy() == src).all()
    assert t.tolist() == src.tolist()


def test_numpy_of_zero_sized_and_zero_dim():
    assert ev.zeros(0, 3).numpy().shape == (0, 3)
    z = ev.full((), 2.5)
    assert z.numpy().shape == () and float(z.numpy()) == 2.5


def test_numpy_of_failed_tensor_raises(gate: Gate):
    with gate:
        t = ev.rand(4)
    exc = RuntimeError("no")
    gate.fail(exc)
    with pytest.raises(ev.OpError) as info:
        call_with_timeout(t.numpy)
    assert info.value.__cause__ is exc


def test_bfloat16_to_numpy_is_a_clear_error():
    with pytest.raises(ev.InvalidArgumentError, match="bfloat16"):
        ev.ones(2, dtype=ev.bfloat16).numpy()


# --- __array__ ----------------------------------------------------------------------------

def test_array_protocol():
    t = ev.full((2, 3), 1.5)
    a = np.asarray(t)
    assert a.shape == (2, 3) and a.dtype == np.float32 and (a == 1.5).all()
    assert np.shares_memory(a, t.numpy())
    d = np.asarray(t, dtype=np.float64)
    assert d.dtype == np.float64 and (d == 1.5).all()
    c = np.array(t)  # copy=True by default: a writable copy
    assert c.flags.writeable
    assert not np.shares_memory(c, t.numpy())
    c[0, 0] = 9
    assert t.numpy()[0, 0] == 1.5
    assert float(np.sum(t)) == pytest.approx(9.0)


# --- from_numpy -------------------------------------------------------------------------

def test_from_numpy_shares_memory_without_copy():
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ev.from_numpy(arr)
    assert np.shares_memory(arr, t.numpy())
    assert t.ready  # no op produced it
    arr[0, 0] = 42.0  # no copy: the tensor sees the array's memory
    assert t.numpy()[0, 0] == 42.0


def test_from_numpy_keeps_the_array_alive():
    arr = np.arange(1000, dtype=np.float64)
    ref = weakref.ref(arr)
    t = ev.from_numpy(arr)
    del arr
    gc.collect()
    assert ref() is not None  # kept alive by the tensor
    assert t.numpy()[999] == 999.0
    total = (t + t).numpy()
    assert total[10] == 20.0
    del t, total
    wait_until(lambda: (gc.collect(), ref() is None)[1], what="the array to be released")


def test_from_numpy_array_lives_until_pending_ops_finish(gate: Gate):
    arr = np.full(4096, 2.0, dtype=np.float32)
    ref = weakref.ref(arr)
    t = ev.from_numpy(arr)
    with gate:
        out = t * t
    del arr, t
    gc.collect()
    assert ref() is not None  # a pending op still reads it
    gate.open()
    assert (call_with_timeout(out.numpy) == 4.0).all()


@pytest.mark.parametrize("make", [
    lambda: np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2],
    lambda: np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4)),
    lambda: np.arange(12, dtype=np.int64).reshape(3, 4).T,
    lambda: np.arange(10, dtype=np.float32)[::-1],
], ids=["strided", "fortran", "transposed", "reversed"])
def test_from_numpy_non_contiguous_is_copied(make):
    arr = make()
    t = ev.from_numpy(arr)
    assert t.shape == arr.shape
    got = call_with_timeout(t.numpy)
    assert not np.shares_memory(arr, got)
    assert (got == arr).all()


@pytest.mark.parametrize("dt", ["complex64", "bool", "uint8", "int8", "uint32", "object",
                                "int16", "U3"])
def test_from_numpy_unsupported_dtype(dt):
    arr = np.zeros(3, dtype=dt)
    with pytest.raises(ev.InvalidArgumentError, match="unsupported dtype"):
        ev.from_numpy(arr)


def test_from_numpy_rejects_non_arrays_and_bad_devices():
    with pytest.raises(TypeError):
        ev.from_numpy([1.0, 2.0])
    with pytest.raises(ev.InvalidArgumentError, match="tpu"):
        ev.from_numpy(np.zeros(2, np.float32), device="tpu")


def test_from_numpy_zero_dim():
    t = ev.from_numpy(np.array(3.0))
    assert t.shape == () and float(t.numpy()) == 3.0


def test_from_numpy_ops_read_correct_values():
    a = np.random.default_rng(5).standard_normal((32, 16)).astype(np.float32)
    b = np.random.default_rng(6).standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_allclose((ev.from_numpy(a) @ ev.from_numpy(b)).numpy(), a @ b,
                               rtol=1e-4, atol=1e-5)


# --- DLPack -------------------------------------------------------------------------------

def test_dlpack_device():
    assert ev.rand(2).__dlpack_device__() == (1, 0)  # kDLCPU, 0


def test_numpy_from_dlpack_shares_memory():
    t = ev.full((3, 4), 6.0)
    a = np.from_dlpack(t)
    assert a.shape == (3, 4) and a.dtype == np.float32
    assert np.shares_memory(a, t.numpy())
    assert (a == 6.0).all()


def test_numpy_from_dlpack_waits_for_producer(gate: Gate):
    with gate:
        t = ev.full((16,), 5.0)
    gate.open()
    a = call_with_timeout(lambda: np.from_dlpack(t))
    assert (a == 5.0).all()


def test_dlpack_round_trip_through_numpy():
    src = np.arange(20, dtype=np.float64).reshape(4, 5)
    t = ev.from_dlpack(src)  # NumPy 1.24 only speaks the legacy (unversioned) protocol
    assert t.shape == (4, 5) and t.dtype == ev.float64
    assert np.shares_memory(src, t.numpy())
    back = np.from_dlpack(t)
    assert np.shares_memory(src, back)
    assert (back == src).all()
    # (NumPy 1.24's from_dlpack arrays are read-only and it refuses to re-export them)
    again = ev.from_dlpack(t)  # eventide -> eventide through __dlpack__(max_version=(1, 0))
    assert np.shares_memory(src, again.numpy())
    assert again.tolist() == src.tolist()


def test_dlpack_keeps_producer_alive():
    src = np.arange(64, dtype=np.int64)
    ref = weakref.ref(src)
    t = ev.from_dlpack(src)
    del src
    gc.collect()
    assert ref() is not None
    assert t.numpy()[63] == 63
    del t
    wait_until(lambda: (gc.collect(), ref() is None)[1], what="the producer to be released")


def test_dlpack_versioned_capsule():
    t = ev.full((2, 2), 1.25, dtype=ev.float64)
    cap = t.__dlpack__(max_version=(1, 0))
    assert type(cap).__name__ == "PyCapsule"
    assert "dltensor_versioned" in repr(cap)
    u = ev.from_dlpack(cap)
    assert u.tolist() == [[1.25, 1.25], [1.25, 1.25]]
    assert np.shares_memory(u.numpy(), t.numpy())
    legacy = t.__dlpack__()
    assert '"dltensor"' in repr(legacy)
    old = t.__dlpack__(max_version=(0, 8))
    assert '"dltensor"' in repr(old)


def test_dlpack_capsule_is_consumed_once():
    cap = ev.rand(3).__dlpack__()
    ev.from_dlpack(cap)
    with pytest.raises(ev.InvalidArgumentError, match="consumed"):
        ev.from_dlpack(cap)


def test_dlpack_unconsumed_capsule_is_freed():
    t = ev.rand(3)
    for _ in range(100):
        t.__dlpack__()
        t.__dlpack__(max_version=(1, 0))
    gc.collect()
    assert t.numpy().shape == (3,)


def test_dlpack_copy_flag():
    t = ev.full((4,), 2.0)
    copied = np.from_dlpack(_CopyingProducer(t))
    assert not np.shares_memory(copied, t.numpy())
    assert (copied == 2.0).all()


class _CopyingProducer:
    """Asks eventide for a copy through __dlpack__(copy=True)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__(copy=True)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_dlpack_errors():
    t = ev.rand(2)
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        t.__dlpack__(stream=1)
    with pytest.raises(ev.InvalidArgumentError, match="__dlpack__"):
        ev.from_dlpack(3)
    with pytest.raises(ev.InvalidArgumentError, match="dtype"):
        ev.from_dlpack(np.arange(3, dtype=np.uint8))
    with pytest.raises(ev.InvalidArgumentError, match="contiguous"):
        ev.from_dlpack(np.arange(6.0).reshape(2, 3)[:, ::2])


def test_dlpack_bfloat16_export():
    t = ev.ones(3, dtype=ev.bfloat16)
    cap = t.__dlpack__()
    u = ev.from_dlpack(cap)
    assert u.dtype == ev.bfloat16


# --- Every byte order, stride and dtype (issue 10: big-endian arrays were read as if native) --

@pytest.mark.parametrize("kind", ["f2", "f4", "f8", "i4", "i8"])
@pytest.mark.parametrize("order", ["<", ">", "="])
@pytest.mark.parametrize("layout", ["contiguous", "strided", "transposed", "reversed", "0-d"])
def test_arrays_of_every_byte_order_stride_and_dtype_keep_their_values(kind, order, layout):
    base = np.arange(1, 25, dtype=order + kind).reshape(4, 6)
    arr = {"contiguous": base, "strided": base[:, ::2], "transposed": base.T,
           "reversed": base[::-1, ::-1], "0-d": np.array(7, dtype=order + kind)}[layout]
    want = arr.astype(arr.dtype.newbyteorder("="))
    for t in (ev.from_numpy(arr), ev.tensor(arr)):
        got = t.numpy()
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_tensor_refuses_values_that_do_not_fit_an_integer_dtype(dtype):
    big = 2.0 ** 40 if dtype == "int32" else 1e30
    for bad in ([big], [-big], [float("nan")], [float("inf")]):
        with pytest.raises(ev.InvalidArgumentError, match="do not fit"):
            ev.tensor(bad, dtype=dtype)
    with pytest.raises(ev.InvalidArgumentError, match="not fit"):
        ev.full((1,), big, dtype=dtype)  # the same rule as ev.full's
    assert ev.tensor([1.7, -3.0], dtype=dtype).tolist() == [1, -3]  # truncates, as NumPy
    assert ev.tensor([], dtype=dtype).shape == (0,)


# --- Crafted DLPack capsules and bad arguments (issue 10, defects 9 and 10) -------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", ctypes.c_void_p)]  # null: nothing to release


def _capsule(data, shape, ndim=None, keep=None):
    """A legacy "dltensor" capsule of float32 on the cpu, as any code could build it."""
    n = len(shape) if shape is not None else 0
    shape_arr = (ctypes.c_int64 * max(n, 1))(*(shape or [0]))
    mt = _DLManagedTensor()
    mt.dl_tensor.data = data
    mt.dl_tensor.device = _DLDevice(1, 0)  # kDLCPU
    mt.dl_tensor.ndim = n if ndim is None else ndim
    mt.dl_tensor.dtype = _DLDataType(2, 32, 1)  # kDLFloat, 32 bits
    mt.dl_tensor.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64)) if shape is not None else None
    mt.dl_tensor.strides = None
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    cap = new(ctypes.addressof(mt), b"dltensor", None)
    if keep is not None:
        keep.extend([mt, shape_arr])
    return cap


def test_crafted_dlpack_capsules_are_refused_with_clear_errors():
    keep = []
    buf = np.arange(4, dtype=np.float32)
    good = ev.from_dlpack(_capsule(buf.ctypes.data, [4], keep=keep))
    assert good.tolist() == [0.0, 1.0, 2.0, 3.0]  # the control: a sound capsule works
    with pytest.raises(ev.InvalidArgumentError, match="null data pointer"):
        ev.from_dlpack(_capsule(None, [4], keep=keep))
    assert ev.from_dlpack(_capsule(None, [0], keep=keep)).shape == (0,)  # empty: no data needed
    with pytest.raises(ev.InvalidArgumentError, match="-1 dimensions"):
        ev.from_dlpack(_capsule(buf.ctypes.data, [4], ndim=-1, keep=keep))
    with pytest.raises(ev.InvalidArgumentError, match="no shape"):
        ev.from_dlpack(_capsule(buf.ctypes.data, None, ndim=1, keep=keep))
    with pytest.raises(ev.InvalidArgumentError, match="at most 8"):
        ev.from_dlpack(_capsule(buf.ctypes.data, [1] * 9, keep=keep))
    with pytest.raises(ev.InvalidArgumentError, match="negative"):
        ev.from_dlpack(_capsule(buf.ctypes.data, [-4], keep=keep))
    del good


def test_arrays_of_more_dimensions_than_the_ops_take_are_refused():
    with pytest.raises(ev.InvalidArgumentError, match="at most 8"):
        ev.from_numpy(np.zeros([1] * 9, dtype=np.float32))
    with pytest.raises(ev.InvalidArgumentError, match="at most 8"):
        ev.tensor(np.zeros([1] * 9, dtype=np.float32))
    assert ev.from_numpy(np.zeros([1] * 8, dtype=np.float32)).ndim == 8


def test_out_of_range_arguments_are_typed_errors():
    with pytest.raises(ev.InvalidArgumentError, match="64 bits"):
        ev.zeros(2 ** 63)
    with pytest.raises(ev.InvalidArgumentError):
        ev.zeros(2 ** 62, 4)  # too large to address
    t = ev.ones(3, device="cpu")
    t.wait()
    with pytest.raises(TypeError, match="dl_device"):
        t.__dlpack__(dl_device="x")
    with pytest.raises(TypeError, match="max_version"):
        t.__dlpack__(max_version="x")
    with pytest.raises(TypeError, match="max_version"):
        t.__dlpack__(max_version=(1,))
