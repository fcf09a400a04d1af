"""The op contract: a new op is its own definition plus one ``register`` line, and everything
finds it; the conformance suite decides declines from declarations, not from implementations.

The toy op below (``scale``: ``x * factor``, XLA only) is written the way the core README's
"Adding an op" guide says; nothing else in the project names it, yet it reaches the exports,
``ejkernel info``, the shared conformance suite and ``ejkernel bench``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.cli import main
from ejkernel.ops import (
    Args,
    DeviceInfo,
    KernelImpl,
    Op,
    OpConfig,
    Platform,
    array,
    define,
    device_for_arrays,
    get_op,
    kernel_registry,
    list_ops,
    resolve_config,
    static,
    tile,
)
from ejkernel.ops import op as op_module
from ejkernel.ops.benchmark import BenchCase, OpBench, Peer
from ejkernel.ops.flash_attention.cases import AttentionCase
from ejkernel.testing import conformance as C
from ejkernel_xla.flash_attention import XlaFlashAttention

# -- a toy op, complete -------------------------------------------------------------------------


def _define_scale_op() -> tuple[type[Op], type[KernelImpl]]:
    class ScaleArgs(Args, shardable=("rows", "cols")):
        x: Any = array("rows", "cols", differentiable=True)
        factor: float = static(2.0)

        @property
        def dtype(self) -> Any:
            return self.x.dtype

    @dataclasses.dataclass(frozen=True)
    class ScaleConfig(OpConfig):
        block_rows: int | None = tile(power_of_two=True)

    def reference(x: Any, *, factor: float = 2.0, dtype: Any = jnp.float32, precision: Any = None) -> Any:
        return x.astype(dtype) * jnp.asarray(factor, dtype)

    @dataclasses.dataclass(frozen=True)
    class ScaleCase:
        name: str
        rows: int
        cols: int
        dtype: str = "float32"

        def inputs(self, seed: int = 0) -> dict[str, Any]:
            x = np.random.default_rng(seed).standard_normal((self.rows, self.cols))
            return {"x": jnp.asarray(x, self.dtype), "factor": 3.0}

    class ScaleBench(OpBench):
        metric = "gbps"
        peer = "jnp"

        def add_arguments(self, p: Any) -> None:
            p.add_argument("--rows", type=int, default=64)

        def cases(self, ns: Any, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
            if ns.rows < 1:
                raise ValueError(f"bad --rows {ns.rows}: must be positive")
            x = jnp.asarray(np.random.default_rng(0).standard_normal((ns.rows, 32)), dtype)
            ref = x * 2.0
            return [
                BenchCase(
                    label=f"rows{ns.rows}",
                    fields={"rows": ns.rows},
                    arrays=(x,),
                    options={"factor": 2.0},
                    cost=2 * x.nbytes,
                    peers=[Peer("jnp", lambda x: x * 2.0, (x,))] if peers else [],
                    check=(lambda out: ("ok" if bool(jnp.allclose(out, ref)) else "FAIL", 0.0)) if check else None,
                )
            ]

    class Scale(Op):
        name = "scale"
        config_cls = ScaleConfig
        args_cls = ScaleArgs
        trainable = True
        output_axes = ("rows", "cols")
        cases = (ScaleCase("odd", 7, 13), ScaleCase("bf16", 16, 5, "bfloat16"))
        bench = ScaleBench()

        def canonicalize(self, p: dict[str, Any]) -> ScaleArgs:
            return ScaleArgs(x=p["x"], factor=float(p["factor"]))

    Scale.reference = staticmethod(reference)

    @define(Scale)
    def scale(x: Any, *, factor: float = 2.0) -> Any:
        """``x * factor``."""

    class XlaScale(KernelImpl):
        def heuristic_cfg(self, args: ScaleArgs, device: DeviceInfo) -> ScaleConfig:
            return ScaleConfig(block_rows=8)

        def run(self, args: ScaleArgs, cfg: ScaleConfig) -> Any:
            return args.x * jnp.asarray(args.factor, args.x.dtype)

    return Scale, XlaScale


@pytest.fixture
def scale_op(monkeypatch):
    """The toy op, defined and registered (one ``register`` line) for one test, then removed."""
    monkeypatch.setattr(op_module, "_OPS", dict(op_module._OPS))
    Scale, XlaScale = _define_scale_op()
    kernel_registry.register("scale", Platform.XLA, priority=0)(XlaScale)
    try:
        yield Scale
    finally:
        kernel_registry.unregister("scale", "xla")


def test_a_new_op_reaches_exports_info_conformance_and_bench(scale_op, tmp_path, capsys):
    # exports
    assert "scale" in list_ops()
    assert ejkernel.scale is scale_op.function and ejkernel.modules.scale is scale_op.function
    assert ejkernel.modules.Scale is scale_op
    x = jnp.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(ejkernel.scale(x, factor=0.5), x * 0.5)
    with pytest.raises(ValueError, match=r"scale: x must be 2-D \[rows, cols\]"):
        ejkernel.scale(jnp.ones(3))  # validation from the declaration
    # ejkernel info
    assert main(["info"]) == 0
    assert "scale" in capsys.readouterr().out
    # the conformance suite: its cases on its implementation, gradients included
    params = list(C.params(["scale"]))
    assert [str(p) for p in params] == ["scale-xla-heuristic-odd", "scale-xla-heuristic-bf16"]
    assert [C.check_impl(*p.values) for p in params] == ["ok", "ok"]
    # ejkernel bench
    out = tmp_path / "s.json"
    assert main(["bench", "scale", "--rows", "24", "--repeats", "1", "--json", str(out)]) == 0
    records = json.loads(out.read_text())
    assert {r["impl"] for r in records} == {"xla", "jnp"}
    assert all(r["gbps"] > 0 for r in records) and records[0]["check"] == "ok"


def test_an_op_declares_the_arrays_an_eager_call_donates(scale_op, monkeypatch):
    x = jnp.arange(12.0).reshape(3, 4)
    jitted = jax.jit(lambda x: ejkernel.scale(x, factor=3.0))(x)
    assert not x.is_deleted()  # nothing is donated by default, nor under the caller's jit
    monkeypatch.setattr(scale_op, "donate", ("x",))
    assert not jax.jit(lambda x: ejkernel.scale(x, factor=3.0))(x).is_deleted() and not x.is_deleted()
    out = ejkernel.scale(x, factor=3.0)
    assert x.is_deleted() and np.array_equal(np.asarray(out), np.asarray(jitted))
    with pytest.raises(TypeError, match=r"donate names no array argument: \['y'\]"):
        type("Bad", (scale_op,), {"name": "bad_scale", "donate": ("y",)})


def test_a_new_op_is_sharded_from_its_declaration(scale_op):
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:2]), ("r",))
    x = jnp.arange(24.0).reshape(4, 6)
    out = ejkernel.scale(x, factor=2.0, mesh=mesh, in_specs=(P("r", None),))
    np.testing.assert_allclose(out, x * 2.0)


def test_the_toy_op_is_gone_after_its_test():
    assert "scale" not in list_ops()
    assert not hasattr(ejkernel, "scale")


# -- the conformance suite checks declarations, and an implementation that breaks its own fails ----

CPU = device_for_arrays([])
SINKS = AttentionCase("sinks", b=1, sq=33, sk=33, h=4, hk=2, sinks=1)


def _impl(cls: type[KernelImpl], name: str) -> KernelImpl:
    impl = cls()
    impl.op_name, impl.name = "flash_attention", name
    return impl


class DeclinesSinksAtRuntime(XlaFlashAttention):
    """Declares full support but refuses sinks when called: a feature silently refused."""

    def decline(self, args: Any, device: DeviceInfo) -> str | None:
        return "sinks are not supported" if args.softmax_aux is not None else None


class DeclaresNoSinksButRunsThem(XlaFlashAttention):
    unsupported = {"softmax_aux": "attention sinks are not supported"}  # noqa: RUF012

    def decline(self, args: Any, device: DeviceInfo) -> str | None:
        return None


def test_a_wrong_decline_fails_the_conformance_suite():
    """Mutation check: the suite does not ask the implementation whether it declines."""
    with pytest.raises(AssertionError, match="declined a case its declaration supports"):
        C.check_impl(_impl(DeclinesSinksAtRuntime, "bad"), SINKS, device=CPU, grads=False)


def test_a_declared_decline_must_raise_with_the_declared_reason(monkeypatch):
    assert C.check_impl(_impl(DeclaresNoSinksButRunsThem, "honest"), SINKS, device=CPU) == "declined"

    # ...and a pipeline that runs a case the declaration rules out fails the suite.
    def run_without_checking(impl, args, cfg=None, *, device=None, registry=None):
        return impl.run(args, resolve_config(get_op("flash_attention"), impl, args, device, cfg))

    monkeypatch.setattr(C, "run_impl", run_without_checking)
    with pytest.raises(AssertionError, match="ran a case its declaration rules out"):
        C.check_impl(_impl(DeclaresNoSinksButRunsThem, "sloppy"), SINKS, device=CPU)


def test_declared_capabilities_drive_the_registry():
    impl = _impl(DeclaresNoSinksButRunsThem, "declared")
    args = C.bind("flash_attention", **SINKS.inputs())
    assert kernel_registry.check(impl, args, CPU) == "attention sinks are not supported"
    assert kernel_registry.check(impl, C.bind("flash_attention", **AttentionCase("basic").inputs()), CPU) is None
