"""Helpers shared by the Pallas interpret-mode op tests (``tests/ops/**/test_pallas_interpret*.py``):
a pretend TPU, the registered implementations, and checking that their Pallas kernels (not a
fallback) are what runs.

There is no TPU here, so the registry declines the Pallas implementations on real devices
(asserted in packages/ejkernel-pallas/tests/test_registration.py). The tests run them the
executor's way on a pretend TPU instead (``ejkernel.ops.run_impl(impl, args, cfg, device=TPU)``,
or the shared conformance suite's ``check_impl(..., device=TPU)``) inside ``interpret_mode()``:
every pallas_call then runs in Pallas' TPU interpreter on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.extend.core as jex

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig, kernel_registry, run_impl
from ejkernel.testing import conformance as C

TPU = DeviceInfo(platform="tpu", kind="TPU v5 lite", runtime="interpret")
TPU_KINDS = ("TPU v4", "TPU v5 lite", "TPU v6 lite")


def registered(op: str, name: str = "pallas") -> KernelImpl:
    """The Pallas implementation of ``op`` named ``name`` (the TPU one by default) as the entry
    point registered it."""
    return kernel_registry.get(op, platform=name)


def on_tpu(impl: KernelImpl, cfg: OpConfig | None = None) -> Callable[..., Any]:
    """``fn(**kwargs)``: one call of ``impl`` alone on the pretend TPU, as the executor runs it
    (declaration check, config from ``cfg`` filled from the heuristic, validation, run)."""
    return lambda **kw: run_impl(impl, C.bind(impl.op_name, **kw), cfg, device=TPU)


def pallas_kernel_names(fn: Callable[..., Any], *args: Any) -> list[str]:
    """Names of the pallas_calls in the jaxpr of ``fn(*args)``, nested jaxprs included."""
    names: list[str] = []

    def walk(jaxpr: Any) -> None:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "pallas_call":
                name = eqn.params.get("name") or eqn.params.get("name_and_src_info")
                names.append(str(getattr(name, "name", name)))
            for value in eqn.params.values():
                for sub in value if isinstance(value, (list, tuple)) else (value,):
                    if isinstance(sub, jex.ClosedJaxpr):
                        walk(sub.jaxpr)
                    elif isinstance(sub, jex.Jaxpr):
                        walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return names


def lower_for_tpu(fn: Callable[..., Any], *args: Any, kind: str = "TPU v5 lite") -> str:
    """StableHLO of ``fn(*args)`` exported for a TPU of ``kind`` (no TPU needed): Pallas lowers
    every kernel to Mosaic, checking block shapes against TPU tiling on the way."""
    device = jax.sharding.AbstractDevice(device_kind=kind, num_cores=1, platform="tpu")
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)
    with jax.sharding.use_abstract_mesh(mesh):
        exported = jax.export.export(jax.jit(fn), platforms=["tpu"])(*args)
    return exported.mlir_module()
