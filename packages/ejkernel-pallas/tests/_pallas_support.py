"""Helpers shared by this package's tests: a pretend TPU, calling an implementation directly,
and checking that its Pallas kernels (not a fallback) are what runs.

There is no TPU here, so the registry declines the Pallas implementations on real devices
(that is asserted in test_registration.py). The tests call them directly instead, telling
``decline``/``heuristic_cfg`` that the device is a TPU, inside ``interpret_mode()``: every
pallas_call then runs in Pallas' TPU interpreter on the CPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jax
import jax.extend.core as jex
import pytest

from ejkernel.errors import UnsupportedError
from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.testing import conformance as C

TPU = DeviceInfo(platform="tpu", kind="TPU v5 lite", runtime="interpret")
TPU_KINDS = ("TPU v4", "TPU v5 lite", "TPU v6 lite")


def kernel_fn(impl: KernelImpl, op: str, cfg: OpConfig | None, device: DeviceInfo = TPU) -> Callable[..., Any]:
    """``fn(**kwargs)`` running ``op`` through ``impl`` only: decline → config (``cfg`` filled
    from the heuristic) → validate → run, as the executor would on a TPU."""

    def fn(**kwargs: Any) -> Any:
        args = C.bind(op, **kwargs)
        reason = impl.decline(args, device)
        if reason is not None:
            raise UnsupportedError(op, impl.name or "pallas", reason)
        heuristic = impl.heuristic_cfg(args, device)
        full = heuristic if cfg is None else cfg.filled_from(heuristic)
        impl.validate_cfg(full, args, device)
        return impl.run(args, full)

    return fn


def assert_declines(fn: Callable[..., Any], kwargs: dict[str, Any], reason: str) -> None:
    """A declined feature raises the documented error carrying the documented reason."""
    with pytest.raises(UnsupportedError, match=re.escape(reason)):
        fn(**kwargs)


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
