"""The kernels an implementation launches for a call, compiled for an architecture without a GPU.

:func:`traced_launches` traces a call (forward, and with ``grads`` the gradient of every
differentiable input) under :func:`~ejkernel_triton._launch.compile_only` and returns its launch
records; :func:`compiled_shared` compiles one for ``sm_<capability>`` (Triton ships ``ptxas``) and
returns the shared memory it allocates, the ground truth the declared needs
(``KernelImpl.resources``) are checked against. Needs ``triton`` without its interpreter
(``TRITON_INTERPRET`` unset when the kernels are imported).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig, bind

from ._launch import compile_launch, compile_only

__all__ = ["compiled_shared", "traced_launches"]


def traced_launches(
    impl: KernelImpl, op: str, kwargs: dict[str, Any], cfg: OpConfig | None, device: DeviceInfo, *, grads: bool = True
) -> list[dict[str, Any]]:
    """The launch records of ``impl`` on the op's call ``kwargs`` (arrays may be zeros: only their
    shapes and dtypes matter) with ``cfg``, its ``None`` fields filled from the heuristic for
    ``device``. Nothing runs, and nothing checks that the config fits: configs that do not are
    compiled too."""
    record = bind(op, **kwargs)
    heuristic = impl.heuristic_cfg(record, device)
    full = heuristic if cfg is None else cfg.filled_from(heuristic)
    names = [n for n in record.differentiable() if kwargs.get(n) is not None] if grads else []
    diff = {n: kwargs[n] for n in names}

    def fwd(d: dict[str, Any]) -> Any:
        return impl.run(bind(op, **{**kwargs, **d}), full)

    def loss(d: dict[str, Any]) -> Any:
        return sum(jnp.sum(o.astype(jnp.float32)) for o in jax.tree.leaves(fwd(d)))

    with compile_only() as records:
        if names:
            jax.jit(jax.grad(loss)).lower(diff)
        else:
            jax.jit(fwd).lower(diff)
    return records


def compiled_shared(record: dict[str, Any], capability: int) -> int:
    """Bytes of shared memory per block that Triton allocates for the launch ``record`` compiled
    for ``sm_<capability>`` (``metadata.shared``)."""
    return int(compile_launch(record, capability).metadata.shared)
