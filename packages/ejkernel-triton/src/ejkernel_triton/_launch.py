"""The one place that launches Triton kernels from JAX.

Every kernel goes through :func:`launch`, which calls ``jax_triton.triton_call``, or through
:func:`launch_compiled`, which compiles the kernel with Triton and lowers the launch to jaxlib's
Triton custom call itself. The second exists for kernels that jax-triton 0.3.1 cannot launch:
device-side TMA descriptors need a global scratch buffer, and a warp-specialized kernel runs more
warps than it was asked for. The jax-triton and jaxlib version drift stays in this file.
``jax_triton`` is imported only here, when a kernel is first lowered (0.3.x cannot even be
imported without a GPU-enabled jaxlib), so importing this package is safe on any machine.

Every launch runs as users call ops: eagerly (outside ``jax.jit``, each launch is dispatched as
its own compiled call), under ``jit``, and under ``jax.vmap``, where a launch runs once per
element of the mapped axis (``jax.custom_batching.sequential_vmap``: a Triton grid has no batch
axis to fold a mapped one into).

:func:`interpreted` switches :func:`launch` to Triton's interpreter (``TRITON_INTERPRET=1``, run
on the host through ``jax.pure_callback`` with PyTorch CPU tensors). It exists to check the
kernels and their host-side wrappers on a machine without a GPU; it is slow and needs ``torch``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
from jax._src import dispatch
from jax.interpreters import mlir

__all__ = [
    "availability",
    "compile_only",
    "compute_capability",
    "dot_precision",
    "gpu_availability",
    "interpreted",
    "launch",
    "launch_compiled",
]

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


def dot_precision(dtype: Any) -> str:
    """``tl.dot``'s ``input_precision`` for operands of ``dtype``: float32 takes three TF32
    products per dot (plain TF32 loses the precision float32 was chosen for; "ieee" leaves the
    tensor cores); 16-bit operands ignore it."""
    return "tf32x3" if jnp.dtype(dtype) == jnp.float32 else "tf32"


def gpu_availability(device: Any, min_cc: tuple[int, int] | None = (8, 0)) -> str | None:
    """Why a Triton implementation cannot run on ``device`` (``None``: it can): an NVIDIA GPU of
    compute capability ``min_cc`` or later (``None``: any), with Triton and jax-triton installed."""
    cc = device.compute_capability
    if cc is None:  # no CUDA compute capability: a CPU, a TPU or a ROCm GPU
        return f"needs an NVIDIA GPU; this call runs on {device.kind}"
    if min_cc is not None and cc < min_cc:
        return f"needs compute capability >= {min_cc[0]}.{min_cc[1]}, this GPU has {cc}"
    return availability()


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
    "int8": "i8",
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


def _compile(
    kernel: Any,
    arg_types: Sequence[Any],
    constexprs: dict[str, Any],
    num_warps: int,
    num_stages: int,
    capability: int,
    specialize_ones: bool,
) -> Any:
    """``triton.compile`` of ``kernel`` for ``sm_<capability>``: ``arg_types`` holds, in the
    kernel's argument order, a pointer's element type (``"bf16"``) or a scalar's value."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    constexprs = dict(constexprs)
    signature = {}
    for name, arg in zip(kernel.arg_names, arg_types, strict=False):
        if isinstance(arg, str):  # a pointer: its element type
            signature[name] = "*" + arg
        elif specialize_ones and arg == 1 and not isinstance(arg, (bool, np.float32, float)):
            constexprs[name] = 1
        else:
            signature[name] = _scalar_type(arg)
    for name in kernel.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
    # XLA's buffers are 16-byte aligned: every pointer is marked so, scalars are not.
    attrs = {
        (i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names) if signature[name].startswith("*")
    }
    src = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    options = {"num_warps": num_warps, "num_stages": num_stages}
    with triton.knobs.cache.scope():
        # jax-triton 0.3.1 sets TRITON_CACHE_DIR="" when imported, which leaves triton.compile
        # without a cache directory: give it a private one for this compile.
        if not triton.knobs.cache.dir:
            triton.knobs.cache.dir = os.path.join(tempfile.gettempdir(), f"ejkernel-triton-{os.getuid()}")
        return triton.compile(src, target=GPUTarget("cuda", capability, 32), options=options)


def compile_launch(record: dict[str, Any], capability: int = 90) -> Any:
    """Compile a recorded launch for ``sm_<capability>`` (no GPU needed: ptxas ships with Triton).

    Scalars equal to 1 become constants and pointers are 16-byte aligned, as jax-triton
    specializes them (:func:`launch_compiled` keeps every scalar an argument).
    """
    return _compile(
        record["kernel"],
        record["args"],
        record["constexprs"],
        record["num_warps"],
        record["num_stages"],
        capability,
        specialize_ones=not record["compiled"],
    )


def compute_capability() -> int:
    """The GPU's compute capability as Triton writes it (``90``); 90 in the interpreter."""
    if _INTERPRET:
        return 90
    from jax._src.lib import gpu_triton

    return int(gpu_triton.get_compute_capability(0))


def sm_count() -> int:
    """Streaming multiprocessors of the first GPU (132 on an H100 / H200, and where unknown)."""
    return int(getattr(jax.devices()[0], "core_count", 0) or 132)


# CUDA's grid limits: programs on axis 0, and on axes 1 and 2 (``_grid`` folds tiles x rows onto axis 0).
GRID_LIMITS = (2**31 - 1, 65535, 65535)


def check_grid(grid: tuple[int, ...], name: str) -> None:
    """Raise ``ValueError`` for a grid CUDA cannot launch: more programs on an axis than it allows."""
    for axis, (n, limit) in enumerate(zip(grid, GRID_LIMITS, strict=False)):
        if n > limit:
            raise ValueError(
                f"{name}: grid {tuple(grid)} has {n} programs on axis {axis}; CUDA launches at most {limit}"
            )


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
    check_grid(tuple(grid), name or getattr(kernel, "__name__", "kernel"))
    if _INTERPRET:
        interp = functools.partial(_launch_interpreted, kernel, out_shape=out_shape, grid=grid, zeroed=zeroed_outputs)
        return _mapped_sequentially(lambda *xs: interp(xs, meta=constexprs), args)
    if _RECORD is not None:
        return _record(kernel, args, out_shape, grid, num_warps, num_stages, name, constexprs, compiled=False)

    def call(*call_args: Any) -> list[jax.Array]:
        import jax_triton

        outs = jax_triton.triton_call(
            *call_args,
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

    return _mapped_sequentially(call, args)


def _mapped_sequentially(call: Any, args: Sequence[Any]) -> list[jax.Array]:
    """``call(*args)``, where a ``jax.vmap`` over the array arguments runs one call per mapped
    element (the kernels' primitives have no batching rule of their own)."""
    pos = [i for i, a in enumerate(args) if _is_array(a)]

    def on_arrays(*arrays: Any) -> list[jax.Array]:
        full = list(args)
        for i, a in zip(pos, arrays, strict=True):
            full[i] = a
        return call(*full)

    return list(jax.custom_batching.sequential_vmap(on_arrays)(*[args[i] for i in pos]))


def launch_compiled(
    kernel: Any,
    *args: Any,
    out_shape: Sequence[jax.ShapeDtypeStruct],
    grid: tuple[int, ...],
    num_warps: int,
    num_stages: int,
    name: str = "",
    **constexprs: Any,
) -> list[jax.Array]:
    """:func:`launch` for kernels jax-triton 0.3.1 cannot launch: device-side TMA descriptors
    (``tl.make_tensor_descriptor``, which need a global scratch buffer per program) and warp
    specialization (the compiled kernel runs more warps than ``num_warps``). The kernel is
    compiled here and launched by jaxlib's Triton custom call with the compiled warp count and
    scratch size. Same arguments as :func:`launch`, without zeroed outputs."""
    check_grid(tuple(grid), name or getattr(kernel, "__name__", "kernel"))
    if _INTERPRET:
        interp = functools.partial(_launch_interpreted, kernel, out_shape=out_shape, grid=grid, zeroed=())
        return _mapped_sequentially(lambda *xs: interp(xs, meta=constexprs), args)
    if _RECORD is not None:
        return _record(kernel, args, out_shape, grid, num_warps, num_stages, name, constexprs, compiled=True)
    scalars = tuple((i, a) for i, a in enumerate(args) if not _is_array(a))
    grid3 = (*tuple(grid), 1, 1, 1)[:3]

    def call(*call_args: Any) -> list[jax.Array]:
        return _compiled_call_p.bind(
            *[a for a in call_args if _is_array(a)],
            kernel=kernel,
            scalars=scalars,
            out_shapes=tuple(jax.ShapeDtypeStruct(o.shape, o.dtype) for o in out_shape),
            grid=grid3,
            num_warps=num_warps,
            num_stages=num_stages,
            name=name,
            constexprs=tuple(sorted(constexprs.items())),
        )

    return _mapped_sequentially(call, args)


def _is_array(a: Any) -> bool:
    return isinstance(a, jax.Array) or hasattr(a, "aval")


def _record(kernel, args, out_shape, grid, num_warps, num_stages, name, constexprs, *, compiled: bool):
    """:func:`compile_only`'s entry for one launch (outputs are zeros); ``compiled``: by
    :func:`launch_compiled`, whose scalars all stay arguments."""
    assert _RECORD is not None
    types = [_TRITON_TYPES[np.dtype(a.dtype).name] if _is_array(a) else a for a in args]
    types += [_TRITON_TYPES[np.dtype(o.dtype).name] for o in out_shape]
    _RECORD.append(
        dict(kernel=kernel, args=types, constexprs=constexprs, num_warps=num_warps, num_stages=num_stages,
             grid=grid, name=name, compiled=compiled)
    )  # fmt: skip
    return [jax.numpy.zeros(o.shape, o.dtype) for o in out_shape]


_compiled_call_p = jax.extend.core.Primitive("ejkernel_triton_compiled_call")
_compiled_call_p.multiple_results = True
# Outside jit a primitive needs an evaluation rule: dispatch it as a one-primitive jitted call,
# as JAX does for its own primitives.
_compiled_call_p.def_impl(functools.partial(dispatch.apply_primitive, _compiled_call_p))


@_compiled_call_p.def_abstract_eval
def _compiled_call_abstract_eval(*avals: Any, out_shapes: Sequence[Any], **_: Any) -> list[Any]:
    return [jax.core.ShapedArray(s.shape, s.dtype) for s in out_shapes]


@functools.cache
def _compiled_kernel(kernel, arg_types, constexprs, num_warps, num_stages, capability):
    return _compile(kernel, arg_types, dict(constexprs), num_warps, num_stages, capability, specialize_ones=False)


def _compiled_call_lowering(ctx, *arrays, kernel, scalars, out_shapes, grid, num_warps, num_stages, name, constexprs):
    from jax._src.lib import gpu_triton

    capability = compute_capability()
    scalar_at = dict(scalars)
    n_args = len(arrays) + len(scalars)
    avals = iter(ctx.avals_in)
    arg_types = []
    for i in range(n_args):
        arg_types.append(scalar_at[i] if i in scalar_at else _TRITON_TYPES[np.dtype(next(avals).dtype).name])
    arg_types += [_TRITON_TYPES[np.dtype(o.dtype).name] for o in ctx.avals_out]
    compiled = _compiled_kernel(kernel, tuple(arg_types), constexprs, num_warps, num_stages, capability)
    meta = compiled.metadata
    kernel_args = [meta.name, meta.num_warps, meta.num_ctas, meta.shared, compiled.asm["ptx"], "", capability]
    if meta.global_scratch_size:
        kernel_args += [meta.global_scratch_size, meta.global_scratch_align]
    triton_kernel = gpu_triton.TritonKernel(*kernel_args)
    params = []
    for t in arg_types:
        if isinstance(t, str):
            params.append(gpu_triton.create_array_parameter(0, 16))
        else:
            value = float(t) if isinstance(t, (float, np.floating)) else int(t)
            params.append(gpu_triton.create_scalar_parameter(value, _scalar_type(t)))
    call = gpu_triton.TritonKernelCall(triton_kernel, grid[0], grid[1], grid[2], params)
    proto = call.to_proto(name or meta.name, b"")
    rule = jax.ffi.ffi_lowering("triton_kernel_call", api_version=2, backend_config=zlib.compress(proto))
    return rule(ctx, *arrays)


mlir.register_lowering(_compiled_call_p, _compiled_call_lowering, platform="cuda")


def _launch_interpreted(
    kernel: Any, args: Sequence[Any], out_shape: Sequence[Any], grid: tuple[int, ...], zeroed: Sequence[int], meta: Any
) -> list[jax.Array]:
    array_pos = [i for i, a in enumerate(args) if _is_array(a)]
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
        import triton

        # Device-side TMA descriptors (tl.make_tensor_descriptor) ask the launcher for scratch.
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8))
        kernel[grid](*call_args, *outs, **meta)
        return [to_numpy(t, o) for t, o in zip(outs, out_shape, strict=True)]

    result = jax.pure_callback(host, list(out_shape), *[args[i] for i in array_pos])
    return list(result)
