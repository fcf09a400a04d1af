"""The one place that launches Triton kernels from JAX.

Every kernel goes through :func:`launch`, which calls ``jax_triton.triton_call``; the jax-triton
version drift stays in this file. ``jax_triton`` is imported only here, when a kernel is first
lowered (0.3.x cannot even be imported without a GPU-enabled jaxlib), so importing this package
is safe on any machine.

:func:`interpreted` switches :func:`launch` to Triton's interpreter (``TRITON_INTERPRET=1``, run
on the host through ``jax.pure_callback`` with PyTorch CPU tensors). It exists to check the
kernels and their host-side wrappers on a machine without a GPU; it is slow and needs ``torch``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import numpy as np

__all__ = ["availability", "compile_only", "interpreted", "launch"]

_INTERPRET = False
_RECORD: list[dict[str, Any]] | None = None


def availability() -> str | None:
    """Why Triton kernels cannot be launched here (``None``: they can)."""
    if _INTERPRET:
        return None
    for module, dist in (("triton", "triton"), ("jax_triton", "jax-triton")):
        if importlib.util.find_spec(module) is None:
            return f"the {dist} package is not installed (pip install 'ejkernel-core[triton]')"
    return None


@contextlib.contextmanager
def interpreted() -> Iterator[None]:
    """Launch kernels with Triton's interpreter inside the ``with`` block (CPU checks only).

    ``TRITON_INTERPRET=1`` must be set before the kernels are imported: ``triton.jit`` reads it
    when it decorates them.
    """
    global _INTERPRET
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("set TRITON_INTERPRET=1 before importing ejkernel_triton's kernels")
    prev, _INTERPRET = _INTERPRET, True
    try:
        yield
    finally:
        _INTERPRET = prev


@contextlib.contextmanager
def compile_only() -> Iterator[list[dict[str, Any]]]:
    """Record launches instead of running them (outputs are zeros), for :func:`compile_launch`.

    Tracing an op inside the block (``jax.jit(f).lower(...)``) collects every kernel it would
    launch, with its argument types and compile-time constants: they can then be compiled for
    a GPU architecture on a machine without one.
    """
    global _RECORD
    prev, _RECORD = _RECORD, []
    try:
        yield _RECORD
    finally:
        _RECORD = prev


_TRITON_TYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "float32": "fp32",
    "int32": "i32",
    "uint32": "u32",
    "int64": "i64",
}


def _scalar_type(x: Any) -> str:
    if isinstance(x, np.float32):
        return "fp32"
    if isinstance(x, bool):
        return "i1"
    if isinstance(x, int):
        return "i32" if -(2**31) <= x < 2**31 else ("u32" if x < 2**32 else "i64")
    if isinstance(x, float):
        return "fp64"
    raise TypeError(f"unsupported scalar kernel argument {x!r}")


def compile_launch(record: dict[str, Any], capability: int = 90) -> Any:
    """Compile a recorded launch for ``sm_<capability>`` (no GPU needed: ptxas ships with Triton).

    Scalars equal to 1 become constants and pointers are 16-byte aligned, as jax-triton
    specializes them.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = record["kernel"]
    constexprs = dict(record["constexprs"])
    signature = {}
    for name, arg in zip(kernel.arg_names, record["args"], strict=False):
        if isinstance(arg, str):  # a pointer: its element type
            signature[name] = "*" + arg
        elif arg == 1 and not isinstance(arg, (bool, np.float32, float)):
            constexprs[name] = 1
        else:
            signature[name] = _scalar_type(arg)
    for name in kernel.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
    # jax-triton marks every pointer 16-byte aligned (XLA's buffers are) and scalars unaligned.
    attrs = {
        (i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names) if signature[name].startswith("*")
    }
    src = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    options = {"num_warps": record["num_warps"], "num_stages": record["num_stages"]}
    return triton.compile(src, target=GPUTarget("cuda", capability, 32), options=options)


def launch(
    kernel: Any,
    *args: Any,
    out_shape: Sequence[jax.ShapeDtypeStruct],
    grid: tuple[int, ...],
    num_warps: int,
    num_stages: int,
    zeroed_outputs: Sequence[int] = (),
    name: str = "",
    **constexprs: Any,
) -> list[jax.Array]:
    """Launch ``kernel`` on ``grid``: ``args`` are arrays (pointers) and Python scalars, in the
    kernel's order; outputs (``out_shape``) follow them; ``constexprs`` are compile-time."""
    if _INTERPRET:
        return _launch_interpreted(kernel, args, out_shape, grid, zeroed_outputs, constexprs)
    if _RECORD is not None:
        types = [
            _TRITON_TYPES[np.dtype(a.dtype).name] if (isinstance(a, jax.Array) or hasattr(a, "aval")) else a
            for a in args
        ]
        outs = [_TRITON_TYPES[np.dtype(o.dtype).name] for o in out_shape]
        _RECORD.append(
            dict(kernel=kernel, args=[*types, *outs], constexprs=constexprs, num_warps=num_warps,
                 num_stages=num_stages, grid=grid, name=name)
        )  # fmt: skip
        return [jax.numpy.zeros(o.shape, o.dtype) for o in out_shape]
    import jax_triton

    outs = jax_triton.triton_call(
        *args,
        kernel=kernel,
        out_shape=list(out_shape),
        grid=grid,
        num_warps=num_warps,
        num_stages=num_stages,
        zeroed_outputs=tuple(zeroed_outputs),
        name=name,
        **constexprs,
    )
    return list(outs)


def _launch_interpreted(
    kernel: Any, args: Sequence[Any], out_shape: Sequence[Any], grid: tuple[int, ...], zeroed: Sequence[int], meta: Any
) -> list[jax.Array]:
    array_pos = [i for i, a in enumerate(args) if isinstance(a, jax.Array) or hasattr(a, "aval")]
    # The interpreter takes plain Python numbers (jax-triton needs np.float32 for fp32 scalars).
    scalars = {i: (a.item() if isinstance(a, np.generic) else a) for i, a in enumerate(args) if i not in array_pos}

    def host(*arrays: np.ndarray) -> list[np.ndarray]:
        import torch

        def to_torch(x: np.ndarray) -> Any:
            x = np.ascontiguousarray(x)
            if x.dtype.name == "bfloat16":
                return torch.from_numpy(x.view(np.uint16).copy()).view(torch.bfloat16)
            return torch.from_numpy(x.copy())

        def to_numpy(t: Any, like: Any) -> np.ndarray:
            if like.dtype.name == "bfloat16":
                return t.view(torch.uint16).numpy().view(like.dtype)
            return t.numpy()

        it = iter(arrays)
        call_args = [to_torch(next(it)) if i in array_pos else scalars[i] for i in range(len(args))]
        outs = []
        for n, o in enumerate(out_shape):
            name = np.dtype(o.dtype).name
            dt = torch.bfloat16 if name == "bfloat16" else getattr(torch, name)
            if n in zeroed:
                outs.append(torch.zeros(o.shape, dtype=dt))
            else:  # poison: an element the kernel does not write fails the comparison
                outs.append(torch.full(o.shape, float("nan") if dt.is_floating_point else -7, dtype=dt))
        kernel[grid](*call_args, *outs, **meta)
        return [to_numpy(t, o) for t, o in zip(outs, out_shape, strict=True)]

    result = jax.pure_callback(host, list(out_shape), *[args[i] for i in array_pos])
    return list(result)
