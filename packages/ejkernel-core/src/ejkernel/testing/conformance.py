"""The conformance suite: every case of every op on every implementation, for ejkernel and plugins.

Each op's folder declares its cases (``ejkernel/ops/<op>/cases.py``: objects with a ``name``, a
``dtype`` and ``inputs(seed) -> kwargs``) and its float32 reference. :func:`check_impl` runs one
case through one implementation and asserts exactly one of two outcomes, decided from the
implementation's *declaration* (device, ``dtypes``, ``max_sizes``, ``unsupported`` features:
:func:`expected_decline`), never by asking the implementation's own code:

- the declaration rules the case out: the call raises :class:`~ejkernel.errors.UnsupportedError`
  carrying that reason;
- otherwise the output (and, for trainable ops, the gradient of every differentiable input)
  matches the reference, rows the reference makes exactly zero are exactly zero, and nothing is
  non-finite (but where the reference is NaN: an output that carries an input through, such as
  an updated cache's unused slots, keeps its NaNs exactly there). An implementation that declines such a case fails.

A plugin proves itself with the same suite::

    from ejkernel.testing import conformance as C

    @pytest.mark.parametrize("param", C.params(), ids=str)
    def test_conformance(param):
        C.check_impl(*param.values)

Tolerances follow FlashAttention's rule: a kernel's error against the float32 reference (HIGHEST
matmul precision) may be at most ``ERROR_RATIO`` times the error of the same reference computed in
low precision (the inputs' dtype at the default matmul precision, which for float32 on recent
GPUs is TF32), plus a small floor (``ATOL`` / ``GRAD_ATOL``, scaled by the reference's magnitude).
References therefore take ``dtype=`` and ``precision=`` keywords.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import UnsupportedError
from ..ops.config import OpConfig
from ..ops.device import DeviceInfo, device_for_arrays
from ..ops.executor import bind, run_impl
from ..ops.impl import KernelImpl, declared_decline
from ..ops.op import CALL_OPTIONS, get_op, list_ops, op_class
from ..ops.registry import KernelRegistry, kernel_registry

__all__ = [
    "ATOL",
    "ERROR_RATIO",
    "GRAD_ATOL",
    "LOW_PRECISION",
    "MODES",
    "Param",
    "assert_close",
    "bind",
    "call_modes",
    "check",
    "check_impl",
    "expected_decline",
    "first_accepted_case",
    "impl_configs",
    "params",
]

ERROR_RATIO = 2.0
LOW_PRECISION = jax.lax.Precision.DEFAULT
# Error floors, relative to max(1, max |reference|): float32 kernels differ from the reference
# only by summation order; low-precision floors cover the final rounding of the output.
ATOL = {"float32": 2e-5, "bfloat16": 4e-3, "float16": 1e-3}
GRAD_ATOL = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 4e-3}


def _err(x: Any, ref: Any) -> float:
    return float(jnp.max(jnp.abs(x.astype(jnp.float32) - ref.astype(jnp.float32)))) if ref.size else 0.0


def assert_close(name: str, x: Any, ref32: Any, ref_low: Any, dtype: str, atol: dict[str, float]) -> None:
    """FlashAttention's rule: ``err(x) <= ERROR_RATIO · err(ref_low) + floor``, no NaN."""
    x = jnp.asarray(x)
    if x.shape != ref32.shape:
        raise AssertionError(f"{name}: shape {x.shape} != reference {ref32.shape}")
    if not bool(jnp.all(jnp.isfinite(x.astype(jnp.float32)))):
        raise AssertionError(f"{name}: non-finite values")
    scale = max(1.0, float(jnp.max(jnp.abs(ref32)))) if ref32.size else 1.0
    err, err_low = _err(x, ref32), _err(ref_low, ref32)
    bound = ERROR_RATIO * err_low + atol.get(dtype, atol["float32"]) * scale
    if err > bound:
        raise AssertionError(
            f"{name}: max error {err:.3g} > {bound:.3g} (= {ERROR_RATIO} x reference-in-{dtype} error {err_low:.3g} "
            f"+ {atol.get(dtype, atol['float32'])} x {scale:.3g})"
        )


def check(
    fn: Callable[..., Any],
    case: Any,
    *,
    op: str,
    seed: int = 0,
    grads: bool = True,
    modes: Sequence[str] = ("jit",),
) -> None:
    """Check ``fn(**inputs)`` (e.g. a lambda around ``ejkernel.flash_attention``) on ``case`` of
    op ``op``: output and gradients of the differentiable inputs against the op's reference;
    rows the reference makes exactly zero are exactly zero; nothing non-finite.

    ``modes``: how ``fn`` is called, each checked on its own (see :data:`MODES`): under ``jit``
    (the default), ``eager`` (no ``jit`` anywhere: how a notebook or the README's first example
    calls it), under ``vmap`` (two examples, the second the inputs flipped along their last axis,
    forward and per-example gradients), inside ``shard_map`` (a one-device mesh, as a user's own
    sharded model calls an op).
    """
    unknown = set(modes) - set(MODES)
    if unknown:
        raise ValueError(f"modes: unknown {sorted(unknown)}; known: {MODES}")
    op_cls = op_class(op)
    reference = op_cls.get_reference()
    kw = case.inputs(seed)
    dtype = str(getattr(case, "dtype", "float32"))
    low = jnp.dtype(dtype) if dtype != "float32" else jnp.float32
    record = bind(op, **kw)
    # Differentiable arguments given as arrays (one given as a pytree, such as an LSTM's (h, c)
    # state, is left to the op's own tests).
    names = (
        [n for n in record.differentiable() if isinstance(kw.get(n), jax.Array | np.ndarray)]
        if op_cls.trainable
        else []
    )
    diff = {n: kw[n] for n in names}

    def call(f: Callable[..., Any], **extra: Any) -> Callable[[dict[str, Any]], Any]:
        return lambda d: f(**{**kw, **d}, **extra)

    ref_kw = {k: v for k, v in kw.items() if k not in CALL_OPTIONS}

    def call_ref(**extra: Any) -> Callable[[dict[str, Any]], Any]:
        # ``dtype``/``precision`` are the reference's compute dtype and precision: they replace an
        # op option of the same name (e.g. ``attention``'s output ``dtype``) in the reference call.
        return lambda d: reference(**{**ref_kw, **d, **extra})

    first = next(x for x in jax.tree.leaves(kw) if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating))
    atol = {**ATOL, **op_cls.conformance_atol}
    grad_atol = {**GRAD_ATOL, **op_cls.conformance_grad_atol}
    # Every floating-point array input travels as ``d`` (what vmap maps over); the gradients are
    # those of the differentiable ones among them.
    floats = {
        n: x
        for n, x in kw.items()
        if isinstance(x, jax.Array | np.ndarray) and x.ndim and jnp.issubdtype(x.dtype, jnp.floating)
    }
    base = {**floats, **diff}
    examples = [base]
    if "vmap" in modes:
        examples.append({n: jnp.flip(x, -1) for n, x in base.items()})
    refs = [
        (jax.jit(call_ref(dtype=jnp.float32))(d), jax.jit(call_ref(dtype=low, precision=LOW_PRECISION))(d))
        for d in examples
    ]
    rng = np.random.default_rng(seed + 1)
    cots = [jnp.asarray(rng.standard_normal(o.shape), jnp.float32) for o in jax.tree.leaves(refs[0][0])]

    def grad_of(f: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        """``d -> {name: gradient}`` of a random projection of ``f(d)``, for the differentiable names."""

        def loss(wrt: dict[str, Any], d: dict[str, Any]) -> Any:
            outs = jax.tree.leaves(f({**d, **wrt}))
            return sum(jnp.sum(o.astype(jnp.float32) * c) for o, c in zip(outs, cots, strict=True))

        return lambda d: jax.grad(loss)({n: d[n] for n in names}, d)

    ref_grads = []
    if grads and names:
        for d in examples:
            g32 = jax.jit(grad_of(call_ref(dtype=jnp.float32)))(d)
            g_low = jax.jit(grad_of(call_ref(dtype=low, precision=LOW_PRECISION)))(d)
            ref_grads.append((g32, g_low))

    for mode in modes:
        if mode == "shard_map" and kw.get("mesh") is not None:
            continue  # the case runs the op under its own shard_map (a ring) in every mode
        label = case.name if tuple(modes) == ("jit",) else f"{case.name} [{mode}]"
        f = call(fn)
        if mode == "vmap":
            stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *examples)
            outs = jax.jit(jax.vmap(f))(stacked)
            per_example = [jax.tree.map(lambda x, i=i: x[i], outs) for i in range(len(examples))]
            g = jax.jit(jax.vmap(grad_of(f)))(stacked) if ref_grads else None
            per_grads = [jax.tree.map(lambda x, i=i: x[i], g) for i in range(len(examples))] if g else []
        else:
            # An eager call consumes the arrays the op donates (``Op.donate``): it gets copies, so
            # the other modes still have the inputs.
            given = {n: jnp.copy(x) if mode == "eager" and n in op_cls.donate else x for n, x in base.items()}
            per_example = [_in_mode(mode, f)(given)]
            per_grads = [_in_mode(mode, grad_of(f))(base)] if ref_grads else []
        for i, out in enumerate(per_example):
            what = label if i == 0 else f"{label} example {i}"
            _compare_outputs(what, out, *refs[i], first.dtype, dtype, atol)
        for i, g in enumerate(per_grads):
            what = label if i == 0 else f"{label} example {i}"
            g32, g_low = ref_grads[i]
            for n in names:
                assert_close(f"{what}: d{n}", g[n], g32[n], g_low[n].astype(kw[n].dtype), dtype, grad_atol)


#: The ways :func:`check` calls an op (its ``modes=``).
MODES = ("jit", "eager", "vmap", "shard_map")


def _in_mode(mode: str, f: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    if mode == "jit":
        return jax.jit(f)
    if mode == "eager":
        return f
    if mode == "shard_map":
        from jax.sharding import Mesh, PartitionSpec

        mesh = Mesh(np.array(jax.devices()[:1]), ("ejkernel_check",))
        return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec()))
    raise ValueError(f"unknown mode {mode!r}")


def _compare_outputs(label: str, out: Any, ref32: Any, ref_low: Any, low: Any, dtype: str, atol: dict) -> None:
    # The output may be a pytree (e.g. ``(out, final_state)``): each leaf is checked on its own.
    if jax.tree.structure(out) != jax.tree.structure(ref32):
        raise AssertionError(f"{label}: output structure {jax.tree.structure(out)} != reference's")
    leaves = list(zip(*(jax.tree.leaves(t) for t in (out, ref32, ref_low)), strict=True))
    for i, (o, r32, rlow) in enumerate(leaves):
        what = "output" if len(leaves) == 1 else f"output[{i}]"
        nan = jnp.isnan(r32) if jnp.issubdtype(r32.dtype, jnp.floating) else None
        if nan is not None and bool(nan.any()):
            # An output that carries input through (an updated cache's unused slots, NaN in the
            # cases) must keep the reference's NaNs exactly where they are; the rest is compared.
            if not bool(jnp.array_equal(jnp.isnan(jnp.asarray(o)), nan)):
                raise AssertionError(f"{label}: {what}: NaN where the reference has none, or a NaN of it lost")
            o, r32, rlow = (jnp.where(nan, 0, x) for x in (o, r32, rlow))
        assert_close(f"{label}: {what}", o, r32, rlow.astype(low), dtype, atol)
        if r32.ndim:
            zero_rows = jnp.all(r32 == 0, axis=-1)
            if bool(zero_rows.any()) and not bool(jnp.all(jnp.where(zero_rows[..., None], o, 0) == 0)):
                raise AssertionError(
                    f"{label}: {what}: rows the reference makes zero (nothing to attend) are not exactly zero"
                )


def expected_decline(
    impl: KernelImpl, args: Any, device: DeviceInfo, registry: KernelRegistry | None = None
) -> str | None:
    """The reason ``impl`` must decline ``args`` on ``device``, from its declaration alone (the
    environment: policy, device kind, :meth:`~ejkernel.ops.KernelImpl.available`; then
    :func:`~ejkernel.ops.impl.declared_decline`), or ``None`` if it must run them."""
    env = (registry or kernel_registry).environment(impl, device)
    return env if env is not None else declared_decline(impl, args)


def call_modes(op: str) -> tuple[str, ...]:
    """The :data:`MODES` other than ``jit`` that ``op`` supports (``vmap`` unless the op declares
    it unsupported): what a call-modes test runs besides the matrix, which runs under ``jit``."""
    return tuple(m for m in MODES if m != "jit" and not (m == "vmap" and op_class(op).vmap_unsupported))


def first_accepted_case(impl: KernelImpl, cases: Sequence[Any], device: DeviceInfo | None = None) -> Any:
    """The first of ``cases`` that ``impl``'s declaration accepts on ``device`` (default: the
    arrays' own), or ``None``."""
    op = get_op(impl.op_name)
    for case in cases:
        args = bind(impl.op_name, **case.inputs(0))
        dev = device if device is not None else device_for_arrays(op.arrays(args))
        if expected_decline(impl, args, dev) is None:
            return case
    return None


def check_impl(
    impl: KernelImpl,
    case: Any,
    cfg: OpConfig | None = None,
    *,
    device: DeviceInfo | None = None,
    seed: int = 0,
    grads: bool = True,
    modes: Sequence[str] = ("jit",),
) -> str:
    """Run ``case`` through ``impl`` (with ``cfg``, missing fields from its heuristic) and assert
    what its declaration promises (see the module docstring). Returns ``"declined"`` or ``"ok"``.

    ``device``: the device to pretend the call runs on (e.g. a TPU for Pallas' interpret mode);
    by default the arrays' own device, and the call goes through the public function. ``modes``:
    as :func:`check`'s.
    """
    op = impl.op_name
    kw = case.inputs(seed)
    args = bind(op, **kw)
    dev = device if device is not None else device_for_arrays(get_op(op).arrays(args))
    reason = expected_decline(impl, args, dev)

    if device is None:
        function = get_op(op).function

        def fn(**k: Any) -> Any:
            return function(**k, platform=impl.name, cfg=cfg)

    else:

        def fn(**k: Any) -> Any:
            return run_impl(impl, bind(op, **k), cfg, device=device)

    if reason is not None:
        try:
            fn(**kw)
        except UnsupportedError as e:
            if not re.search(re.escape(reason), str(e)):
                raise AssertionError(f"{case.name}: declined for another reason than declared ({reason!r}): {e}") from e
            return "declined"
        raise AssertionError(f"{case.name}: {impl.name} ran a case its declaration rules out ({reason})")
    try:
        check(fn, case, op=op, seed=seed, grads=grads, modes=modes)
    except UnsupportedError as e:
        raise AssertionError(
            f"{case.name}: {impl.name} declined a case its declaration supports (declare the feature unsupported, "
            f"or implement it): {e}"
        ) from e
    return "ok"


@dataclasses.dataclass(frozen=True)
class Param:
    """One run of the suite: an implementation, a config (``None``: its heuristic) and a case."""

    impl: KernelImpl
    cfg_id: str
    cfg: OpConfig | None
    case: Any

    @property
    def values(self) -> tuple[Any, ...]:
        return (self.impl, self.case, self.cfg)

    def __str__(self) -> str:
        return f"{self.impl.op_name}-{self.impl.name}-{self.cfg_id}-{self.case.name}"


def impl_configs(op: str, registry: KernelRegistry | None = None) -> Iterator[tuple[KernelImpl, str, OpConfig | None]]:
    """Every registered implementation of ``op`` with each config the suite runs: its heuristic
    (``None``) and each of its ``test_configs``."""
    for impl in (registry or kernel_registry).implementations(op):
        yield impl, "heuristic", None
        for cfg_id, cfg in impl.test_configs.items():
            yield impl, cfg_id, cfg


def params(
    ops: Sequence[str] | None = None, *, full: bool = False, registry: KernelRegistry | None = None
) -> Iterator[Param]:
    """Every (implementation, config, case) of ``ops`` (default: every op)."""
    for op in ops if ops is not None else list_ops():
        cases = op_class(op).get_cases(full=full)
        for impl, cfg_id, cfg in impl_configs(op, registry):
            for case in cases:
                yield Param(impl, cfg_id, cfg, case)


# -- names of the earlier, per-op module (kept for plugins written against them) ------------------

_MOVED = {
    "AttentionCase": ("flash_attention", "AttentionCase"),
    "FLASH_ATTENTION_CASES": ("flash_attention", "CASES"),
    "make_attention_inputs": ("flash_attention", "make_attention_inputs"),
    "PageAttentionCase": ("page_attention", "PageAttentionCase"),
    "PAGE_ATTENTION_CASES": ("page_attention", "CASES"),
    "make_page_inputs": ("page_attention", "make_page_inputs"),
}


def check_attention(fn: Callable[..., Any], case: Any, *, seed: int = 0, grads: bool = True) -> None:
    """:func:`check` for the dense attention cases (``fn`` like ``ejkernel.flash_attention``)."""
    check(fn, case, op="flash_attention", seed=seed, grads=grads)


def check_page_attention(fn: Callable[..., Any], case: Any, *, seed: int = 0) -> None:
    """:func:`check` for the ``page_attention`` cases."""
    check(fn, case, op="page_attention", seed=seed)


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib

        folder, attr = _MOVED[name]
        return getattr(importlib.import_module(f"ejkernel.ops.{folder}.cases"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
