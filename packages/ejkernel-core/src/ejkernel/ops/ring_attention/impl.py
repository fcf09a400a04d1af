"""The composite implementation of ``ring_attention``: the ring (:mod:`._ring`) over the
``flash_attention`` blocks of one platform."""

from __future__ import annotations

import logging
from typing import Any

import jax
import jax.numpy as jnp

from ..args import describe_array
from ..device import DeviceInfo, device_for_arrays
from ..families.attention import AttentionArgs
from ..flash_attention.op import FlashAttentionConfig
from ..impl import KernelImpl
from ..registry import KernelRegistry, kernel_registry
from ..resources import Need
from ._ring import RingPlan, ring
from .op import RingAttentionArgs, RingAttentionConfig, bound_axis_size

__all__ = ["RingAttentionImpl", "block_probes"]

log = logging.getLogger("ejkernel")


def _sds(shape: tuple[int, ...], dtype: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(int(d) for d in shape), dtype)


def _probe(a: RingAttentionArgs, nq: int, nk: int, causal: bool, offset: bool, window: bool = True) -> AttentionArgs:
    """Abstract arguments of one inner call of ``nq`` queries against ``nk`` keys."""

    def cut(x: Any) -> Any:
        if x is None:
            return None
        return _sds((x.shape[0], x.shape[1], nq if x.shape[2] > 1 else 1, nk if x.shape[3] > 1 else 1), x.dtype)

    b = a.batch
    return AttentionArgs(
        query=_sds((b, nq, *a.query.shape[2:]), a.query.dtype),
        key=_sds((b, nk, *a.key.shape[2:]), a.key.dtype),
        value=_sds((b, nk, *a.value.shape[2:]), a.value.dtype),
        bias=cut(a.bias),
        q_segment_ids=None if a.q_segment_ids is None else _sds((b, nq), jnp.int32),
        kv_segment_ids=None if a.kv_segment_ids is None else _sds((b, nk), jnp.int32),
        attention_mask=cut(a.attention_mask),
        position_offset=_sds((), jnp.int32) if offset else None,
        causal=causal,
        softmax_scale=a.softmax_scale,
        sliding_window=a.sliding_window if offset and window else None,
        logits_soft_cap=a.logits_soft_cap,
    )


def block_probes(a: RingAttentionArgs) -> list[AttentionArgs]:
    """Abstract arguments of every kind of inner call the ring makes (the first is the largest)."""
    sq, sk = a.seq_q, a.seq_k
    if a.mode == "full":
        return [_probe(a, sq, sk, False, False)]
    if a.mode == "causal":
        if a.layout == "zigzag":
            return [_probe(a, sq, sq, True, False), _probe(a, sq // 2, sq // 2, False, False)]
        return [_probe(a, sq, sq, True, False), _probe(a, sq, sq, False, False)]
    h = sq // (2 if a.layout == "zigzag" else 1)
    probes = [_probe(a, h, h, a.causal, True)]
    if a.attention_sink_size:  # chunks of sinks run without the window, whole or split at the last sink
        probes.append(_probe(a, h, h, a.causal, True, window=False))
        cut = a.attention_sink_size % h
        if cut:
            probes += [_probe(a, h, cut, a.causal, True, window=False), _probe(a, h, h - cut, a.causal, True)]
    return probes


class RingAttentionImpl(KernelImpl):
    """``ring_attention`` over the ``flash_attention`` implementations of one platform: a
    composite implementation.

    A backend whose ``flash_attention`` provides the log-sum-exp protocol registers it like any
    other implementation, at the platform and priority of that kernel::

        registry.register("ring_attention", Platform.TRITON, Backend.ANY, priority=PRIORITY)(RingAttentionImpl)

    It accepts a call when an implementation of its platform with ``supports_lse`` accepts every
    kind of block the ring will run (see :func:`block_probes`).
    """

    version = "1"

    def __init__(self, registry: KernelRegistry | None = None):
        self._registry = registry if registry is not None else kernel_registry

    def _lse_impls(self) -> list[KernelImpl]:
        return [
            i
            for i in self._registry.implementations("flash_attention")
            if i.platform is self.platform and getattr(i, "supports_lse", False)
        ]

    # The declaration is the inner kernel's: a ring supports what its blocks' kernel supports
    # (windowed rings need blocks at a position offset).
    @property  # type: ignore[override]
    def unsupported(self) -> dict[str, str]:
        impls = self._lse_impls()
        if not impls:
            return {}
        out = dict(impls[0].unsupported)
        if "position_offset" in out:
            out["sliding_window"] = f"the window's blocks need a position offset, which {impls[0].name} declines"
        out.pop("position_offset", None)
        return out

    @property  # type: ignore[override]
    def device_requirement(self) -> str | None:
        impls = self._lse_impls()
        return impls[0].device_requirement if impls else None

    @property  # type: ignore[override]
    def dtypes(self) -> Any:
        impls = self._lse_impls()
        return impls[0].dtypes if impls else None

    @property  # type: ignore[override]
    def max_sizes(self) -> Any:
        impls = self._lse_impls()
        return impls[0].max_sizes if impls else {}

    def available(self, device: DeviceInfo) -> str | None:
        impls = self._lse_impls()
        if not impls:
            return f"no flash_attention implementation of platform {self.platform.value!r} provides the log-sum-exp protocol"
        reasons = [self._registry.environment(i, device) for i in impls]
        return (
            None
            if any(r is None for r in reasons)
            else "; ".join(f"flash_attention/{i.name} {r}" for i, r in zip(impls, reasons, strict=True))
        )

    def inner(self, args: RingAttentionArgs, device: DeviceInfo) -> tuple[KernelImpl | None, str]:
        """The inner implementation for ``args`` on ``device``, or ``None`` and why."""
        impls = [i for i in self._registry.implementations("flash_attention") if i.platform is self.platform]
        if not impls:
            return None, f"no flash_attention implementation of platform {self.platform.value!r} is registered"
        probes = block_probes(args)
        reasons = []
        for impl in impls:
            if not getattr(impl, "supports_lse", False):
                reasons.append(f"flash_attention/{impl.name} does not provide the log-sum-exp protocol (supports_lse)")
                continue
            why = next((r for p in probes if (r := self._registry.check(impl, p, device)) is not None), None)
            if why is None:
                return impl, ""
            reasons.append(f"flash_attention/{impl.name} declines the ring's blocks: {why}")
        return None, "; ".join(reasons)

    def decline(self, args: RingAttentionArgs, device: DeviceInfo) -> str | None:
        # The ring's own capabilities are those of its inner kernels, asked through the registry.
        impl, why = self.inner(args, device)
        return None if impl is not None else why

    def _inner_or_raise(self, args: RingAttentionArgs, device: DeviceInfo) -> KernelImpl:
        impl, why = self.inner(args, device)
        if impl is None:
            raise ValueError(f"ring_attention/{self.name}: {why}")
        return impl

    @staticmethod
    def _flash_cfg(cfg: Any, impl: KernelImpl) -> FlashAttentionConfig:
        return FlashAttentionConfig(fwd_params=cfg.fwd_params, bwd_params=cfg.bwd_params, platform=impl.name)

    def heuristic_cfg(self, args: RingAttentionArgs, device: DeviceInfo) -> RingAttentionConfig:
        impl = self._inner_or_raise(args, device)
        inner = impl.heuristic_cfg(block_probes(args)[0], device)
        return RingAttentionConfig(fwd_params=inner.fwd_params, bwd_params=inner.bwd_params)

    def candidate_cfgs(self, args: RingAttentionArgs, device: DeviceInfo) -> list[RingAttentionConfig]:
        return []  # the ring runs only under its mesh: autotuning falls through to the heuristic

    def validate_cfg(self, cfg: RingAttentionConfig, args: RingAttentionArgs, device: DeviceInfo) -> None:
        impl = self._inner_or_raise(args, device)
        for probe in block_probes(args):
            impl.validate_cfg(self._flash_cfg(cfg, impl), probe, device)

    def resources(self, cfg: RingAttentionConfig, args: RingAttentionArgs, device: DeviceInfo) -> list[Need]:
        """The blocks' implementation's needs for each kind of block the ring runs."""
        impl = self._inner_or_raise(args, device)
        return [n for probe in block_probes(args) for n in impl.resources(self._flash_cfg(cfg, impl), probe, device)]

    def run(self, args: RingAttentionArgs, cfg: RingAttentionConfig) -> jax.Array:
        op = "ring_attention"
        # axis_name=None: the sequence is not sharded (earlier releases' default): a ring of one.
        n = 1 if args.axis_name is None else bound_axis_size(args.axis_name)
        if n is None:
            raise ValueError(
                f"{op}: axis_name {args.axis_name!r} is not bound: call it inside jax.shard_map over a mesh with that "
                "axis, or pass mesh= and in_specs="
            )
        for name, x in (("bias", args.bias), ("mask_info attention_mask", args.attention_mask)):
            if x is not None and x.shape[3] not in (1, n * args.seq_k):
                raise ValueError(
                    f"{op}: the last axis of {name} {describe_array(x)} must span every key of the ring: "
                    f"{n} devices × {args.seq_k} keys = {n * args.seq_k} (or be 1)"
                )
        device = device_for_arrays(jax.tree.leaves(args))
        impl = self._inner_or_raise(args, device)
        log.debug("ejkernel: ring_attention/%s runs its blocks with flash_attention/%s", self.name, impl.name)
        plan = RingPlan(
            axis_name=args.axis_name,
            axis_size=n,
            layout=args.layout,
            mode=args.mode,
            seq_q=args.seq_q,
            seq_k=args.seq_k,
            causal=args.causal,
            window=args.sliding_window,
            scale=args.softmax_scale,
            soft_cap=args.logits_soft_cap,
            impl=impl,
            cfg=self._flash_cfg(cfg, impl),
            sinks=args.attention_sink_size,
        )
        return ring(
            plan,
            args.query,
            args.key,
            args.value,
            args.bias,
            args.softmax_aux,
            args.q_segment_ids,
            args.kv_segment_ids,
            args.attention_mask,
        )
