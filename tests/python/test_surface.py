"""The Python surface agrees with its stubs and reads as Python: keyword names, type names in
errors, docstrings.

The stubs (eventide/__init__.pyi) are what users and type checkers see; these tests walk them
with ``ast`` and hold the extension to them, so that a binding whose parameter is called
``arg0`` (or anything but the stub's name) fails here.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import eventide as ev

STUBS = Path(ev.__file__).with_name("__init__.pyi")


def _stub_functions():
    """(qualified name, runtime owner, attribute name, ast function) for every function and
    method in the stubs, properties left out."""
    tree = ast.parse(STUBS.read_text())
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((node.name, ev, node.name, node))
        elif isinstance(node, ast.ClassDef):
            cls = getattr(ev, node.name)
            for item in node.body:
                if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if any(isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list):
                    continue
                out.append((f"{node.name}.{item.name}", cls, item.name, item))
    return out


def _keyword_names(fn: ast.FunctionDef) -> list[str]:
    """The parameters a caller may pass by keyword: not self/cls, not positional-only (before
    `/`, or named `__x` by the stub convention), not *args / **kwargs."""
    names = [a.arg for a in fn.args.args] + [a.arg for a in fn.args.kwonlyargs]
    return [n for n in names if n not in ("self", "cls") and not n.startswith("__")]


_PARAM = re.compile(r"^\*{0,2}([A-Za-z_][A-Za-z0-9_]*)")


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return [p.strip() for p in parts]


def _runtime_signatures(obj, attr: str) -> list[dict[str, bool]]:
    """For each overload of the runtime callable: {parameter name: accepted by keyword}."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return [{name: p.kind in kinds for name, p in sig.parameters.items()}]
    # pybind11: the signatures open the docstring, "name(a: T, b: U = ...) -> R" (one per
    # overload, numbered, after "Overloaded function.").
    doc = obj.__doc__ or ""
    found = []
    for match in re.finditer(rf"(?:^|\n)(?:\d+\. )?{re.escape(attr)}\((.*)\) ->", doc):
        params = {}
        positional_only = False
        for part in _split_top_level(match.group(1)):
            if part == "/":
                params = {n: False for n in params}
                continue
            if part == "*":
                continue
            m = _PARAM.match(part)
            if m:
                params[m.group(1)] = not part.startswith("*") and not positional_only
        found.append(params)
    return found


def test_every_stub_parameter_is_accepted_by_keyword_under_its_stub_name():
    wrong = []
    for qualname, owner, attr, fn in _stub_functions():
        obj = inspect.getattr_static(owner, attr, None)
        if obj is None:
            wrong.append(f"{qualname}: in the stubs, missing at run time")
            continue
        if isinstance(obj, property):  # __cuda_stream__: a property returning the function
            continue
        obj = getattr(owner, attr)
        expected = _keyword_names(fn)
        if not expected:
            continue
        signatures = _runtime_signatures(obj, attr)
        if not signatures:
            wrong.append(f"{qualname}: no signature to read ({obj.__doc__!r:.80})")
            continue
        if not any(all(params.get(name, False) for name in expected) for params in signatures):
            wrong.append(f"{qualname}: stubs say {expected}, the binding takes {signatures}")
    assert not wrong, "\n".join(wrong)


def test_the_keyword_check_notices_a_binding_that_names_its_parameter_arg0():
    class Fake:
        """f(self: X, arg0: object) -> None"""
    fake = Fake()
    fake.__doc__ = "f(self: eventide.Event, arg0: object) -> None"
    tree = ast.parse("def f(self, device): ...").body[0]
    params = _runtime_signatures(fake, "f")
    assert params == [{"self": True, "arg0": True}]
    assert not all(params[0].get(n, False) for n in _keyword_names(tree))


def test_functions_take_the_stub_keywords_when_called():
    assert ev.is_available(device="cpu") is True
    assert ev.is_available(device="no-such-device") is False
    t = ev.ones(2, 2)
    assert (ev.add(a=t, b=t).numpy() == 2).all()
    assert (t.__matmul__(other=t).numpy() == 2).all()
    assert ev.cast(tensor=t, dtype=ev.float64).dtype == ev.float64


def test_classes_and_functions_live_in_the_public_module():
    for name in ("Event", "UserEvent", "Stream", "Tensor", "Device", "dtype", "Profile",
                 "Profiler", "BenchmarkResult"):
        assert getattr(ev, name).__module__ == "eventide", name
    assert ev.matmul.__module__ == "eventide"


def test_type_errors_name_python_types_not_cpp_ones():
    with pytest.raises(TypeError) as info:
        ev.matmul(1, 2)
    text = str(info.value)
    assert "eventide.Tensor" in text
    assert "_eventide" not in text and "::" not in text and "arg0" not in text
    e = ev.Event()
    with pytest.raises(TypeError) as info:
        e.elapsed_time(5)
    text = str(info.value)
    assert "eventide.Event" in text and "::" not in text and "_eventide" not in text


def test_error_messages_use_python_dtype_names():
    with pytest.raises(ev.InvalidArgumentError) as info:
        ev.add(ev.ones(2), ev.ones(2, dtype=ev.float64))
    text = str(info.value)
    assert "float32" in text and "float64" in text, text
    assert "f32" not in text.replace("float32", ""), text
    with pytest.raises(ev.InvalidArgumentError) as info:
        ev.rand(2, dtype=ev.int32)
    assert "int32" in str(info.value) and "i32" not in str(info.value).replace("int32", "")


def test_error_messages_keep_the_users_own_quoted_text():
    with pytest.raises(ev.InvalidArgumentError) as info:
        ev.Device("f32")
    assert "'f32'" in str(info.value) or '"f32"' in str(info.value), str(info.value)


def test_every_docstring_signature_names_python_types():
    """No pybind11 signature falls back to a C++ type name (a type bound after the function)."""
    bad = []
    for name in dir(ev):
        obj = getattr(ev, name)
        members = [obj] + ([getattr(obj, m) for m in dir(obj) if not m.startswith("__") or
                            m in ("__init__", "__matmul__", "__add__", "__mul__", "__array__",
                                  "__dlpack__")] if inspect.isclass(obj) else [])
        for member in members:
            doc = getattr(member, "__doc__", None) or ""
            if re.search(r"[A-Za-z_]\w*::[A-Za-z_]", doc) or "_eventide." in doc:
                bad.append(f"{name}: {doc[:120]!r}")
    assert not bad, "\n".join(bad)


def test_every_public_property_has_a_docstring():
    missing = []
    for name in ev.__all__:
        cls = getattr(ev, name)
        if not inspect.isclass(cls) or issubclass(cls, BaseException):
            continue
        for attr in dir(cls):
            if attr.startswith("_"):
                continue
            static = inspect.getattr_static(cls, attr)
            is_property = isinstance(static, property) or inspect.isgetsetdescriptor(static)
            if is_property and not (getattr(static, "__doc__", None) or "").strip():
                missing.append(f"{name}.{attr}")
    assert not missing, f"properties without a docstring: {missing}"


def test_error_messages_keep_the_users_paths(tmp_path):
    # A folder named like a dtype: the message names the path the user gave, unchanged.
    path = tmp_path / "no_such_dir" / "f32" / "trace.f16.json"
    with ev.profile() as prof:
        ev.ones(2).wait()
    with pytest.raises(ev.EventideError) as info:
        prof.export_chrome_trace(str(path))
    assert str(path) in str(info.value), str(info.value)
