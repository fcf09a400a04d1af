"""A bad-input sweep over every public op, generated from the op table and the ops' declarations.

For each op (``list_ops()``) a valid call is taken from its first conformance case; then each
array argument is broken in turn (not an array, an extra axis, a missing axis, the wrong dtype
kind, a size that disagrees with another argument sharing the axis), each keyword option gets a
value of the wrong type, and the call options get bad values. Each must raise ``ValueError`` or
``TypeError`` *naming the argument*, before anything runs. A new op joins the sweep by existing.
The traced-value half (index arrays under ``jit`` with checks on) is ``test_value_checks.py``;
the CLI's half is ``test_cli.py``.
"""

from __future__ import annotations

import inspect
from typing import Any

import jax.numpy as jnp
import pytest

import ejkernel
from ejkernel.ops import list_ops, op_class
from ejkernel.ops.op import CALL_OPTIONS


def _valid_call(op: str) -> tuple[Any, dict[str, Any], Any]:
    cls = op_class(op)
    case = cls.get_cases()[0]
    return getattr(ejkernel, op), case.inputs(0), cls.args_cls


def _shared_axes(args_cls: Any, kw: dict[str, Any], name: str) -> list[int]:
    """Dims of ``name`` whose axis another present array also has (so a size change must clash)."""
    spec = args_cls.field_spec(name)
    x = kw[name]
    if not spec.axes or x.ndim != len(spec.axes):
        return []
    others = {
        a
        for n in args_cls.array_names()
        if n != name and kw.get(n) is not None and hasattr(kw[n], "shape")
        for a in (args_cls.field_spec(n).axes or ())
        if a is not None and not args_cls.field_spec(n).broadcast
    }
    return [i for i, a in enumerate(spec.axes) if a in others and x.shape[i] > 1]


def _grow(x: Any, axis: int) -> Any:
    return jnp.concatenate([x, jnp.take(x, jnp.array([0]), axis=axis)], axis=axis)


def _cases() -> list[Any]:
    out = []
    for op in list_ops():
        fn, kw, args_cls = _valid_call(op)
        params = inspect.signature(fn).parameters
        arrays = [n for n, v in kw.items() if hasattr(v, "shape") and n in params and n in args_cls.array_names()]
        for name in arrays:
            x = kw[name]
            floating = jnp.issubdtype(x.dtype, jnp.floating)
            out.append(pytest.param(op, name, "not an array", {name: "abc"}, id=f"{op}-{name}-str"))
            out.append(pytest.param(op, name, "extra axis", {name: x[None, None]}, id=f"{op}-{name}-rank+2"))
            if x.ndim > 1:
                out.append(pytest.param(op, name, "missing axis", {name: x[0]}, id=f"{op}-{name}-rank-1"))
            bad_dtype = x.astype(jnp.int32) if floating else x.astype(jnp.float32)
            out.append(pytest.param(op, name, "dtype kind", {name: bad_dtype}, id=f"{op}-{name}-dtype"))
            for i in _shared_axes(args_cls, kw, name):
                out.append(pytest.param(op, name, f"axis {i} size", {name: _grow(x, i)}, id=f"{op}-{name}-size{i}"))
        for name, p in params.items():
            if p.kind is not inspect.Parameter.KEYWORD_ONLY or name in CALL_OPTIONS or name in arrays:
                continue
            out.append(pytest.param(op, name, "wrong type", {name: object()}, id=f"{op}-{name}-object"))
        out.append(pytest.param(op, "platform", "int", {"platform": 3}, id=f"{op}-platform-int"))
        out.append(pytest.param(op, "platform", "unknown", {"platform": "no-such"}, id=f"{op}-platform-unknown"))
        out.append(pytest.param(op, "cfg", "wrong type", {"cfg": object()}, id=f"{op}-cfg-object"))
    return out


CASES = _cases()


def test_the_sweep_is_wide():
    assert len(CASES) >= 100, len(CASES)
    assert {c.values[0] for c in CASES} == set(list_ops())


@pytest.mark.parametrize(("op", "name", "what", "change"), CASES)
def test_bad_input_is_a_clear_error_naming_the_argument(op, name, what, change):
    fn, kw, _ = _valid_call(op)
    with pytest.raises((ValueError, TypeError)) as info:
        fn(**{**kw, **change})
    message = str(info.value)
    name = op_class(op).param_aliases.get(name, name)  # an earlier name is reported as the canonical one
    assert name in message, f"{what}: the error does not name {name!r}: {message}"
    assert type(info.value).__module__.split(".")[0] in ("ejkernel", "builtins"), (
        f"{what}: {type(info.value).__module__}.{type(info.value).__name__} leaked from below: {message}"
    )
