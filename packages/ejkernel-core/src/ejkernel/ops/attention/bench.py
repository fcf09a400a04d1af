"""The benchmark of ``attention`` (``ejkernel bench attention``).

``flash_attention``'s shapes, options (``--shape``, ``--causal``, ``--window``; no ``--varlen``:
``attention`` takes no packed sequences) and cost model (forward ``4·b·h·sq·sk·d`` FLOPs, half
when causal; backward 2.5× forward). The op returns ``(output, weights [b, h, sq, sk])``, both in
the inputs' dtype here (``dtype=``; its default is bfloat16). Peer on the same inputs:
``plain softmax`` (:func:`ejkernel.testing.plain_jax.softmax_attention`): every logit of ``q kᵀ``
materialized, masked, softmaxed in float32, the weights times ``v``, returning the same pair. The
output and the weights are both checked against the float32 reference on one batch element and
one head group.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from typing import Any

import jax.numpy as jnp

from ...testing.plain_jax import softmax_attention
from ..benchmark import BenchCase, Peer
from ..flash_attention.bench import AttentionShape, DenseAttentionBench, make_check
from .reference import reference

__all__ = ["BENCH", "AttentionWeightsBench"]


def weights_check(dtype: str, q: Any, k: Any, v: Any, options: dict[str, Any], group: int) -> Any:
    """``check(out) -> (status, max_error)`` of the output and the weights of one batch element
    and one head group (the first failure's status, the larger error)."""
    from ...testing.conformance import LOW_PRECISION

    jdt = jnp.dtype(dtype)
    sl, kv = (slice(0, 1), slice(None), slice(0, group)), (slice(0, 1), slice(None), slice(0, 1))
    ref32 = reference(q[sl], k[kv], v[kv], **options)
    ref_low = reference(q[sl], k[kv], v[kv], **options, dtype=jdt, precision=LOW_PRECISION)
    checks = [
        make_check(dtype, ref32[0], ref_low[0].astype(jdt), lambda o: o[0][:1, :, :group]),
        make_check(dtype, ref32[1], ref_low[1].astype(jdt), lambda o: o[1][:1, :group]),
    ]

    def check(out: Any) -> tuple[str, float]:
        results = [c(out) for c in checks]
        status = next((s for s, _ in results if s != "ok"), "ok")
        return status, max(e for _, e in results)

    return check


class AttentionWeightsBench(DenseAttentionBench):
    peer = "plain softmax"

    def shapes(self, ns: argparse.Namespace) -> list[AttentionShape]:
        if ns.varlen:
            raise ValueError(f"bad --varlen {ns.varlen}: attention takes no packed sequences")
        return super().shapes(ns)

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        out = []
        base = super().cases(ns, dtype, peers=False, check=False)
        for shape, case in zip(self.shapes(ns), base, strict=True):
            q, k, v = case.arrays
            opts = {"causal": shape.causal, "sliding_window": shape.window}
            case_peers = []
            if peers:
                fn = functools.partial(softmax_attention, causal=shape.causal, window=shape.window)
                case_peers.append(Peer("plain softmax", fn, (q, k, v)))
            check_fn = weights_check(dtype, q, k, v, opts, shape.h // shape.hk) if check else None
            out.append(
                dataclasses.replace(case, options={**opts, "dtype": jnp.dtype(dtype)}, peers=case_peers, check=check_fn)
            )
        return out


BENCH = AttentionWeightsBench()
