"""Crafted inputs (issue 10): whatever layout, byte order and dtype an array or a DLPack capsule
describes, eventide gives a correct copy or view of its values, or a clear, typed error; never
wrong values, never a crash.

test_numpy.py checks fixed cases (each byte order and dtype with five layouts, the capsules of
the report). Here hypothesis generates the rest:

* NumPy views of any rank (0 to 4), with slices of any start, stop and step (negative too),
  transposes, zero strides (``broadcast_to``), in either byte order (``<``, ``>``, ``=``,
  ``|``), aligned or not, through ``from_numpy``, ``tensor`` (with and without a dtype to convert
  to) and ``from_dlpack``, then through an op (the op reads the memory the tensor describes);
* DLPack capsules built by hand with explicit strides (negative, zero, overlapping), byte
  offsets (aligned or not), every dtype code, bit width and lane count, device types and
  versions; and the capsule's deleter, called exactly once, after the last op that reads it;
* integers at and just beyond the bounds of int32 and int64;
* read-only memory (a NumPy array with writeable=False, a capsule flagged read-only) stays
  read-only when eventide hands it on.
"""

from __future__ import annotations

import ctypes
import gc
import math
import os
import time

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import eventide as ev  # noqa: E402
from conftest import Gate, call_with_timeout, wait_until  # noqa: E402

SUPPORTED = ["f2", "f4", "f8", "i4", "i8"]
WITH_OPS = {"f4", "f8", "i4", "i8"}  # add/mul/matmul on the cpu (f16: no ops)
UNSUPPORTED = ["b1", "i1", "u1", "i2", "u2", "u4", "u8", "c8", "c16"]
ORDERS = ["<", ">", "=", "|"]
# More for a long hunt (make soak): EVENTIDE_HYPOTHESIS_EXAMPLES=2000.
EXAMPLES = max(150, int(os.environ.get("EVENTIDE_HYPOTHESIS_EXAMPLES", "0")))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Errors eventide may give for input it cannot take: its own, and what NumPy's __dlpack__ raises
# (BufferError: another byte order, read-only arrays).
TYPED = (ev.InvalidArgumentError, BufferError, TypeError)


def distinct_values(kind: str, n: int) -> np.ndarray:
    """n distinct values that show a misread: fractions a float32 cannot hold (f8), integers
    beyond 32 bits (i8), negative numbers."""
    k = np.arange(n, dtype=np.int64)
    sign = np.where(k % 2 == 0, 1, -1)
    if kind == "f2":
        return sign * (k % 1000) / 4.0 + 0.25
    if kind == "f4":
        return sign * k + 0.5
    if kind == "f8":
        return sign * k + 0.1
    if kind == "i4":
        return sign * k * 1_000_003 + 7
    return sign * (k * (2 ** 33 + 7)) - 2 ** 40


def native(a: np.ndarray) -> np.ndarray:
    return np.array(a, dtype=a.dtype.newbyteorder("="))


@st.composite
def numpy_views(draw, kinds=SUPPORTED):
    kind = draw(st.sampled_from(kinds), label="dtype")
    order = draw(st.sampled_from(ORDERS), label="byte order")
    shape = draw(st.lists(st.integers(0, 5), min_size=0, max_size=4), label="shape")
    dt = np.dtype(order + kind)
    n = math.prod(shape)
    values = distinct_values(kind, n).astype(dt) if kind in SUPPORTED else \
        (np.arange(n) % 2).astype(dt)
    if draw(st.booleans(), label="unaligned"):
        raw = np.zeros(values.nbytes + 1, dtype=np.uint8)
        raw[1:] = values.view(np.uint8)
        values = np.frombuffer(raw.data, dtype=dt, count=n, offset=1)
    view = values.reshape(shape)
    if view.ndim:
        index = []
        for size in view.shape:
            step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
            start = draw(st.integers(-size - 1, size + 1)) if draw(st.booleans()) else None
            index.append(slice(start, None, step))
        view = view[tuple(index)]
    if view.ndim >= 2 and draw(st.booleans(), label="transpose"):
        view = view.transpose(draw(st.permutations(range(view.ndim))))
    if draw(st.booleans(), label="broadcast"):  # a zero stride
        view = np.broadcast_to(view, (draw(st.integers(1, 3)),) + view.shape)
    return view


def check_same_values(t: ev.Tensor, want: np.ndarray, kind: str) -> None:
    assert t.shape == want.shape
    got = call_with_timeout(t.numpy)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    if kind in WITH_OPS:  # an op reads the memory the tensor describes
        np.testing.assert_array_equal(call_with_timeout((t + t).numpy), want + want)


@SETTINGS
@given(view=numpy_views())
def test_numpy_views_of_any_layout_and_byte_order_keep_their_values(view):
    want = native(view)
    kind = view.dtype.kind + str(view.dtype.itemsize)
    for make in (ev.from_numpy, ev.tensor):
        check_same_values(make(view), want, kind)
    try:
        t = ev.from_dlpack(view)
    except TYPED:
        return  # another byte order, not C-contiguous, read-only (broadcast): refused
    check_same_values(t, want, kind)


@SETTINGS
@given(view=numpy_views(kinds=UNSUPPORTED))
def test_arrays_of_unsupported_dtypes_are_refused_in_every_byte_order_and_layout(view):
    for make in (ev.from_numpy, ev.tensor):
        with pytest.raises(ev.InvalidArgumentError, match="dtype"):
            make(view)
    with pytest.raises(TYPED):
        ev.from_dlpack(view)


INT_RANGE = {"i4": (-2 ** 31, 2 ** 31 - 1), "i8": (-2 ** 63, 2 ** 63 - 1)}


@SETTINGS
@given(view=numpy_views(), target=st.sampled_from(SUPPORTED))
def test_tensor_converts_any_byte_order_and_layout_to_any_dtype_as_numpy_does(view, target):
    """ev.tensor(array, dtype=...) converts like NumPy's astype (floats to integers truncate),
    and refuses integers that do not fit rather than wrapping them."""
    want_dtype = np.dtype(target)
    src = native(view)
    if target in INT_RANGE:
        lo, hi = INT_RANGE[target]
        as_int = [int(x) for x in src.ravel()]  # (exact: Python integers)
        if any(x < lo or x > hi for x in as_int):
            with pytest.raises(ev.InvalidArgumentError, match="fit"):
                ev.tensor(view, dtype=want_dtype)
            return
    with np.errstate(all="ignore"):
        want = src.astype(want_dtype)
    try:
        with np.errstate(all="ignore"):  # (eventide converts through NumPy: its warnings)
            t = ev.tensor(view, dtype=want_dtype)
    except ev.InvalidArgumentError:
        # Allowed only where NumPy's conversion is lossy beyond rounding (finite to inf).
        assert not np.isfinite(want).all(), f"refused a conversion NumPy does exactly: {src!r}"
        return
    got = call_with_timeout(t.numpy)
    assert got.dtype == want_dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("data,dtype,want", [
    ([2 ** 31 - 1, -2 ** 31], "int32", [2 ** 31 - 1, -2 ** 31]),
    (np.array([2 ** 31 - 1, -2 ** 31], dtype=">i8"), "int32", [2 ** 31 - 1, -2 ** 31]),
    (np.array([2.0 ** 31 - 1, -2.0 ** 31]), "int32", [2 ** 31 - 1, -2 ** 31]),
    ([2 ** 63 - 1, -2 ** 63], "int64", [2 ** 63 - 1, -2 ** 63]),
    (np.array([-2.0 ** 63]), "int64", [-2 ** 63]),
    (np.array([2 ** 62], dtype=np.uint64), "int64", [2 ** 62]),
    (np.array([2 ** 31 - 1], dtype=np.uint32), "int32", [2 ** 31 - 1]),
    (np.array([2.0 ** 31 - 0.5, -2.0 ** 31 - 0.5]), "int32", [2 ** 31 - 1, -2 ** 31]),
], ids=["int32 list", "int64 array", "float64 array", "int64 list", "float -2**63",
        "uint64 array", "uint32 array", "floats truncated into range"])
def test_integers_at_the_bounds_of_a_dtype_are_kept(data, dtype, want):
    assert call_with_timeout(ev.tensor(data, dtype=dtype).tolist) == want


@pytest.mark.parametrize("data,dtype", [
    (np.array([2.0 ** 63]), "int64"),
    (np.array([2.0 ** 63], dtype=np.float32), "int64"),
    (np.array([2 ** 63], dtype=np.uint64), "int64"),
    ([2 ** 63], None),
    ([2 ** 63], "int64"),
    ([2.0 ** 63], "int64"),
], ids=["float64 array", "float32 array", "uint64 array", "list, no dtype", "int list",
        "float list"])
def test_values_just_beyond_int64_are_refused(data, dtype):
    with pytest.raises(ev.InvalidArgumentError, match="fit"):
        with np.errstate(all="ignore"):
            ev.tensor(data, dtype=dtype)


@pytest.mark.parametrize("data,dtype,named", [
    ([2 ** 64], None, "18446744073709551616"),
    ([2 ** 64], "int64", "18446744073709551616"),
    ([-2 ** 63 - 1], None, "-9223372036854775809"),
    (np.array([2 ** 64 - 1], dtype=np.uint64), "int64", "18446744073709551615"),
    (np.array([2 ** 31], dtype=np.uint32), "int32", "2147483648"),
    (np.array([1.0, np.nan]), "int64", "nan"),
    (np.array([np.inf], dtype=np.float32), "int32", "inf"),
    (np.array([-2.0 ** 31 - 1]), "int32", "-2147483649"),
], ids=["2**64 list", "2**64 list, int64", "-2**63-1 list", "uint64 max", "uint32 2**31",
        "nan", "inf", "float below int32"])
def test_values_beyond_a_dtype_are_refused_naming_them_and_the_dtype(data, dtype, named):
    with pytest.raises(ev.InvalidArgumentError, match="do not fit") as info:
        ev.tensor(data, dtype=dtype)
    assert named in str(info.value) and (dtype or "int64") in str(info.value)


# --- DLPack capsules built by hand ------------------------------------------------------------

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


FLAG_READ_ONLY = 1
FLAG_IS_COPIED = 2
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]


class Producer:
    """Builds capsules by hand over memory it owns, and counts its deleter's calls."""

    def __init__(self) -> None:
        self.keep: list = []
        self.deleted: list = []
        self.deleter = DELETER(lambda ptr: self.deleted.append(ptr))

    def capsule(self, data: int, shape, strides=None, code=2, bits=32, lanes=1, device=(1, 0),
                byte_offset=0, version=None, flags=0):
        n = len(shape)
        shape_arr = (ctypes.c_int64 * max(n, 1))(*shape)
        self.keep.append(shape_arr)
        if version is None:
            mt = DLManagedTensor()
            name = b"dltensor"
        else:
            mt = DLManagedTensorVersioned()
            mt.version = DLPackVersion(*version)
            mt.flags = flags
            name = b"dltensor_versioned"
        self.keep.append(mt)
        mt.deleter = ctypes.cast(self.deleter, ctypes.c_void_p)
        dl = mt.dl_tensor
        dl.data = data
        dl.device = DLDevice(*device)
        dl.ndim = n
        dl.dtype = DLDataType(code, bits, lanes)
        dl.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
        if strides is not None:
            strides_arr = (ctypes.c_int64 * max(n, 1))(*strides)
            self.keep.append(strides_arr)
            dl.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
        dl.byte_offset = byte_offset
        return _capsule_new(ctypes.addressof(mt), name, None)


DL_CODES = {"f": 2, "i": 0}


@SETTINGS
@given(kind=st.sampled_from(["f4", "f8", "i4", "i8"]),
       shape=st.lists(st.integers(0, 4), min_size=1, max_size=3),
       data=st.data())
def test_crafted_capsules_with_any_strides_give_their_values_or_are_refused(kind, shape, data):
    """Strides in elements, any sign, zero, overlapping: the tensor holds exactly what the
    capsule describes (read back through NumPy over the same memory), or is refused."""
    strides = data.draw(st.lists(st.integers(-6, 6), min_size=len(shape), max_size=len(shape)))
    dt = np.dtype(kind)
    buf = distinct_values(kind, 256).astype(dt)
    origin = 128  # every element the strides reach lies inside buf
    want = np.lib.stride_tricks.as_strided(buf[origin:], shape=shape,
                                           strides=[s * dt.itemsize for s in strides])
    if any(s < 0 for s in strides):
        # as_strided over buf[origin:] cannot step back: build the reference element by element
        want = np.empty(shape, dtype=dt)
        for idx in np.ndindex(*shape):
            want[idx] = buf[origin + sum(i * s for i, s in zip(idx, strides))]
    want = np.array(want)
    p = Producer()
    cap = p.capsule(buf.ctypes.data + origin * dt.itemsize, shape, strides,
                    code=DL_CODES[kind[0]], bits=dt.itemsize * 8)
    try:
        t = ev.from_dlpack(cap)
    except ev.InvalidArgumentError as exc:
        assert "contiguous" in str(exc)
        assert _capsule_name(cap) == b"dltensor", "a refused capsule was consumed"
        return
    check_same_values(t, want, kind)
    del t
    wait_until(lambda: (gc.collect(), len(p.deleted) == 1)[1], timeout=10,
               what="the capsule's deleter")


@SETTINGS
@given(kind=st.sampled_from(["f2", "f4", "f8", "i4", "i8"]), offset=st.integers(0, 17),
       n=st.integers(0, 9))
def test_crafted_capsules_with_any_byte_offset_read_from_that_byte(kind, offset, n):
    dt = np.dtype(kind)
    buf = distinct_values(kind, 32).astype(dt)
    want = np.frombuffer(buf.tobytes(), dtype=dt, count=n, offset=offset).copy()
    p = Producer()
    cap = p.capsule(buf.ctypes.data, [n], code=DL_CODES[kind[0]], bits=dt.itemsize * 8,
                    byte_offset=offset)
    try:
        t = ev.from_dlpack(cap)
    except ev.InvalidArgumentError:
        return  # (an unaligned offset may be refused)
    np.testing.assert_array_equal(call_with_timeout(t.numpy), want)
    if kind in WITH_OPS:
        # (an unaligned float may be a NaN pattern; compare bit for bit through a doubling)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(call_with_timeout((t + t).numpy), want + want)


@pytest.mark.parametrize("code,bits,lanes,accepted", [
    (2, 16, 1, "float16"), (2, 32, 1, "float32"), (2, 64, 1, "float64"),
    (0, 32, 1, "int32"), (0, 64, 1, "int64"), (4, 16, 1, "bfloat16"),
    (2, 32, 2, None), (2, 32, 0, None), (2, 24, 1, None), (2, 8, 1, None), (2, 128, 1, None),
    (0, 8, 1, None), (0, 16, 1, None), (0, 1, 1, None), (1, 32, 1, None), (1, 8, 1, None),
    (4, 32, 1, None), (5, 64, 1, None), (6, 8, 1, None), (3, 64, 1, None), (7, 32, 1, None),
    (255, 32, 1, None),
])
def test_crafted_capsules_of_every_dtype_code_width_and_lane_count(code, bits, lanes, accepted):
    buf = np.zeros(64, dtype=np.uint8)
    p = Producer()
    cap = p.capsule(buf.ctypes.data, [4], code=code, bits=bits, lanes=lanes)
    if accepted is None:
        with pytest.raises(ev.InvalidArgumentError, match="dtype"):
            ev.from_dlpack(cap)
        assert _capsule_name(cap) == b"dltensor" and p.deleted == []
        return
    t = ev.from_dlpack(cap)
    assert t.dtype.name == accepted and t.shape == (4,)


@pytest.mark.parametrize("device", [(99, 0), (-1, 0), (2, 0), (13, 0)],
                         ids=["unknown", "negative", "cuda", "webgpu"])
def test_crafted_capsules_of_devices_eventide_cannot_reach_are_refused(device):
    if device[0] == 2 and any(d.type == "cuda" for d in ev.devices()):
        pytest.skip("a CUDA device is present: cuda capsules are valid here")
    buf = np.zeros(4, dtype=np.float32)
    p = Producer()
    cap = p.capsule(buf.ctypes.data, [4], device=device)
    with pytest.raises(ev.InvalidArgumentError, match="device"):
        ev.from_dlpack(cap)
    assert _capsule_name(cap) == b"dltensor" and p.deleted == []


@pytest.mark.parametrize("versioned", [False, True])
def test_a_crafted_capsule_is_released_once_after_the_last_op_reading_it(versioned, gate: Gate):
    buf = np.arange(16, dtype=np.float32)
    p = Producer()
    cap = p.capsule(buf.ctypes.data, [16], version=(1, 0) if versioned else None)
    t = ev.from_dlpack(cap)
    assert _capsule_name(cap) == (b"used_dltensor_versioned" if versioned else b"used_dltensor")
    with gate:
        out = t + t  # pending: reads the producer's memory later
    del t, cap
    gc.collect()
    time.sleep(0.02)
    assert p.deleted == [], "released while an op still reads the memory"
    gate.open()
    np.testing.assert_array_equal(call_with_timeout(out.numpy), 2 * buf)
    wait_until(lambda: (gc.collect(), len(p.deleted) == 1)[1], timeout=10,
               what="the capsule's deleter")
    time.sleep(0.02)
    assert len(p.deleted) == 1


@pytest.mark.parametrize("version", [(1, 0), (1, 3), (1, 99)])
def test_versioned_capsules_of_major_version_1_are_read(version):
    buf = np.arange(4, dtype=np.float64)
    p = Producer()
    t = ev.from_dlpack(p.capsule(buf.ctypes.data, [4], code=2, bits=64, version=version))
    assert call_with_timeout(t.numpy).tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("major", [0, 2, 7])
def test_versioned_capsules_of_another_major_version_are_refused(major):
    buf = np.arange(4, dtype=np.float32)
    p = Producer()
    cap = p.capsule(buf.ctypes.data, [4], version=(major, 0))
    with pytest.raises(TYPED, match=f"version {major}.0"):
        ev.from_dlpack(cap)
    # Refused unconsumed, as NumPy refuses it: the producer's capsule releases it when it goes
    # (this hand-built capsule has no destructor, so nothing calls the deleter).
    assert _capsule_name(cap) == b"dltensor_versioned" and p.deleted == []


@pytest.mark.parametrize("source", ["read-only numpy array", "read-only capsule"])
def test_read_only_memory_stays_read_only_when_exported_again(source):
    buf = np.arange(4, dtype=np.float32)
    if source == "read-only numpy array":
        buf.flags.writeable = False
        t = ev.from_numpy(buf)
    else:
        p = Producer()
        t = ev.from_dlpack(p.capsule(buf.ctypes.data, [4], version=(1, 0), flags=FLAG_READ_ONLY))
    cap = t.__dlpack__(max_version=(1, 0))
    exported = DLManagedTensorVersioned.from_address(_capsule_pointer(cap, b"dltensor_versioned"))
    if exported.dl_tensor.data == buf.ctypes.data:  # (a copy would be the tensor's own)
        assert exported.flags & FLAG_READ_ONLY, "read-only memory exported as writable"


def read_only_tensor(source: str, buf: np.ndarray, keep: list) -> ev.Tensor:
    if source == "read-only numpy array":
        buf.flags.writeable = False
        return ev.from_numpy(buf)
    p = Producer()
    keep.append(p)
    return ev.from_dlpack(p.capsule(buf.ctypes.data, [4], version=(1, 0), flags=FLAG_READ_ONLY))


@pytest.mark.parametrize("source", ["read-only numpy array", "read-only capsule"])
def test_read_only_memory_is_refused_to_unversioned_dlpack_as_numpy_refuses_it(source):
    """An unversioned capsule cannot say read-only: NumPy's __dlpack__ refuses a read-only
    array (BufferError) unless asked for a versioned capsule; eventide does the same, and a copy
    (copy=True) is the consumer's own, writable, flagged as copied."""
    buf = np.arange(4, dtype=np.float32)
    keep: list = []  # (the producer of a hand-built capsule)
    t = read_only_tensor(source, buf, keep)
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__()
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__(max_version=(0, 8))
    try:
        a = np.from_dlpack(t)
    except BufferError:
        pass  # NumPy 1.x asks for an unversioned capsule
    else:
        assert not a.flags.writeable  # NumPy 2 asks for a versioned one, and reads the flag
    cap = t.__dlpack__(max_version=(1, 0), copy=True)
    copied = DLManagedTensorVersioned.from_address(_capsule_pointer(cap, b"dltensor_versioned"))
    assert copied.dl_tensor.data != buf.ctypes.data
    assert copied.flags == FLAG_IS_COPIED
    assert ev.from_dlpack(t.__dlpack__(copy=True)).tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("source", ["read-only numpy array", "read-only capsule"])
def test_read_only_memory_is_an_input_to_ops_like_any_other(source):
    buf = np.arange(4, dtype=np.float32)
    keep: list = []  # (the producer of a hand-built capsule)
    t = read_only_tensor(source, buf, keep)
    assert call_with_timeout((t + t).tolist) == [0.0, 2.0, 4.0, 6.0]
    assert call_with_timeout((t * t).tolist) == [0.0, 1.0, 4.0, 9.0]
    assert buf.tolist() == [0.0, 1.0, 2.0, 3.0]
    # Through eventide again (a versioned capsule), it is still read-only.
    again = ev.from_dlpack(t)
    with pytest.raises(BufferError, match="read-only"):
        again.__dlpack__()


@pytest.mark.parametrize("source", ["eventide tensor", "writable numpy array",
                                    "writable capsule", "unversioned capsule"])
def test_writable_memory_is_exported_writable(source):
    buf = np.arange(4, dtype=np.float32)
    p = Producer()
    t = {"eventide tensor": lambda: ev.tensor(buf),
         "writable numpy array": lambda: ev.from_numpy(buf),
         "writable capsule": lambda: ev.from_dlpack(p.capsule(buf.ctypes.data, [4], version=(1, 0))),
         # (the unversioned protocol cannot say read-only, and producers that follow NumPy
         # refuse to hand read-only memory through it: what comes through it is writable)
         "unversioned capsule": lambda: ev.from_dlpack(p.capsule(buf.ctypes.data, [4])),
         }[source]()
    cap = t.__dlpack__(max_version=(1, 0))
    exported = DLManagedTensorVersioned.from_address(_capsule_pointer(cap, b"dltensor_versioned"))
    assert exported.flags == 0
    assert '"dltensor"' in repr(t.__dlpack__())


# --- Out-of-range and mistyped arguments get eventide's errors, never pybind11's bare cast ---

@pytest.mark.parametrize("call, kind, words", [
    (lambda: ev.UserEvent().wait(-10**400), ev.InvalidArgumentError, "non-negative"),
    (lambda: ev.set_process_label(rank=2**40), ev.InvalidArgumentError, "rank must be from"),
    (lambda: ev.set_process_label(size=2.5), TypeError, "size must be an integer"),
    (lambda: ev.set_process_label(host=5), TypeError, "host must be a str"),
    (lambda: ev.benchmark(lambda: None, name="\udcff", n_repeat=1), ev.InvalidArgumentError, "UTF-8"),
    (lambda: ev.ones(2).__dlpack__(copy="x"), TypeError, "copy must be None, True or False"),
])
def test_bad_arguments_are_named_not_bare_cast_errors(call, kind, words):
    with pytest.raises(kind, match=words):
        call()


def test_a_timeout_past_any_clock_is_no_limit():
    e = ev.UserEvent()
    e.set()
    assert e.wait(10**400) is True
    assert ev.ones(2).wait(10**400) is True
    r = ev.benchmark(lambda: None, n_repeat=3, n_warmup=0, max_duration=10**400)
    assert r.n_runs == 3
