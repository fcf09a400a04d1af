"""The benchmark of the delta-rule ops (``ejkernel bench kernel_delta_attention``, ``... gated_delta_rule``).

Cost model (chunked WY algorithm, chunk ``C = 64``, per value head and token): the state work
``W S``, ``Kgᵀ V'`` and ``Qg S`` (``6·K·V`` FLOPs) and the intra-chunk matmuls ``K Kᵀ``, ``Q Kᵀ``,
``T (exp(γ) ⊙ K)`` (``2·C·K`` each) and ``T V``, ``Aqk V'`` (``2·C·V`` each): forward
``2·b·t·hv·(3·K·V + C·(3·K + 2·V))``; backward 2.5× forward. The peers (fla-core's
``chunk_kda`` / ``chunk_gated_delta_rule``, PyTorch) are timed by
``benchmarks/linear_delta_vs_fla.py`` on the same inputs (``ejkernel bench`` times JAX functions
only); ``ejkernel bench`` times the plain-JAX chunked WY form
(:func:`ejkernel.testing.plain_jax.delta_rule_chunked`) beside them and takes the ratios against
it. Each output is checked against the float32 reference on one batch row and one value head.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..benchmark import BenchCase, OpBench, Peer
from .reference import delta_rule_reference

__all__ = ["BENCH", "DeltaRuleBench", "DeltaShape", "delta_inputs", "delta_rule_flops", "plain_jax_peer"]

CHUNK = 64
PEER = "plain jax chunked"


@dataclasses.dataclass(frozen=True)
class DeltaShape:
    b: int
    t: int
    h: int
    hv: int
    d: int
    dv: int

    def label(self) -> str:
        heads = f"h{self.h}" if self.hv == self.h else f"h{self.h}/v{self.hv}"
        return f"b{self.b} t{self.t} {heads} d{self.d}" + (f" dv{self.dv}" if self.dv != self.d else "")


def parse_delta_shape(text: str) -> DeltaShape:
    """``B,T,H,D`` or ``B,T,H,HV,D,DV``; ``ValueError`` naming ``--shape``."""
    try:
        nums = [int(x) for x in text.replace("x", ",").split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"bad --shape {text!r}: expected B,T,H,D or B,T,H,HV,D,DV") from None
    if len(nums) == 4:
        s = DeltaShape(nums[0], nums[1], nums[2], nums[2], nums[3], nums[3])
    elif len(nums) == 6:
        s = DeltaShape(*nums)
    else:
        raise ValueError(f"bad --shape {text!r}: expected B,T,H,D or B,T,H,HV,D,DV")
    if min(dataclasses.astuple(s)) < 1:
        raise ValueError(f"bad --shape {text!r}: every size must be positive")
    if s.hv % s.h:
        raise ValueError(f"bad --shape {text!r}: value heads ({s.hv}) must be a multiple of heads ({s.h})")
    return s


def delta_rule_flops(s: DeltaShape) -> float:
    return 2.0 * s.b * s.t * s.hv * (3 * s.d * s.dv + CHUNK * (3 * s.d + 2 * s.dv))


def delta_inputs(s: DeltaShape, dtype: Any, per_channel: bool, seed: int = 0) -> tuple[Any, ...]:
    """``(q, k, v, beta, gate)`` as the models feed them: L2-normalized inside the op, sigmoid
    betas, log-sigmoid gates (per channel or per head)."""
    rng = np.random.default_rng(seed)
    normal = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    q = jnp.asarray(normal(s.b, s.t, s.h, s.d), dtype)
    k = jnp.asarray(normal(s.b, s.t, s.h, s.d), dtype)
    v = jnp.asarray(normal(s.b, s.t, s.hv, s.dv), dtype)
    beta = jnp.asarray(jax.nn.sigmoid(normal(s.b, s.t, s.hv)), dtype)
    gshape = (s.b, s.t, s.hv, s.d) if per_channel else (s.b, s.t, s.hv)
    gate = jnp.asarray(jax.nn.log_sigmoid(normal(*gshape)), dtype)
    return q, k, v, beta, gate


def plain_jax_peer(op: str, arrays: tuple[Any, ...]) -> Peer:
    """The plain-JAX peer on the op's positional arrays (the op's order), GQA heads repeated, its
    output in the op's dtype."""
    from ...testing.plain_jax import delta_rule_chunked
    from ..families.delta_rule_math import product_precision

    def peer(q: Any, k: Any, v: Any, beta: Any, gate: Any) -> Any:
        rep = v.shape[2] // q.shape[2]
        q, k = jnp.repeat(q, rep, axis=2), jnp.repeat(k, rep, axis=2)
        p = product_precision(v.dtype)
        return delta_rule_chunked(q, k, v, beta, gate, scale=q.shape[-1] ** -0.5, precision=p).astype(v.dtype)

    if op == "kernel_delta_attention":
        return Peer(PEER, peer, arrays)
    return Peer(PEER, lambda q, k, v, g, b: peer(q, k, v, b, g), arrays)


class DeltaRuleBench(OpBench):
    """``--shape B,T,H,D`` (or ``B,T,H,HV,D,DV``), repeatable; default the issue's 4,4096,16,128."""

    metric = "tflops"
    backward_factor = 2.5
    peer = PEER

    def __init__(self, op: str):
        self.op = op

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--shape", action="append", help="B,T,H,D or B,T,H,HV,D,DV (repeatable)")

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        shapes = [parse_delta_shape(t) for t in (getattr(ns, "shape", None) or ["4,4096,16,128"])]
        kda = self.op == "kernel_delta_attention"
        out = []
        for s in shapes:
            q, k, v, beta, gate = delta_inputs(s, jnp.dtype(dtype), per_channel=kda)
            arrays = (q, k, v, beta, gate) if kda else (q, k, v, gate, beta)
            opts = {"use_qk_l2norm": True} if kda else {"use_qk_l2norm_in_kernel": True}
            check_fn = None
            if check:
                from ...testing.conformance import LOW_PRECISION
                from ..flash_attention.bench import make_check

                grp = s.hv // s.h
                sl, vsl = (slice(0, 1), slice(None), slice(0, 1)), (slice(0, 1), slice(None), slice(0, grp))
                ref_args = (q[sl], k[sl], v[vsl], beta[vsl], gate[vsl])
                ref32 = delta_rule_reference(*ref_args, use_qk_l2norm=True)
                ref_low = delta_rule_reference(
                    *ref_args, use_qk_l2norm=True, dtype=jnp.dtype(dtype), precision=LOW_PRECISION
                )
                check_fn = make_check(dtype, ref32, ref_low.astype(jnp.dtype(dtype)), lambda o, g=grp: o[:1, :, :g])
            out.append(
                BenchCase(
                    label=s.label(),
                    fields=dataclasses.asdict(s),
                    arrays=arrays,
                    options=opts,
                    cost=delta_rule_flops(s),
                    peers=[plain_jax_peer(self.op, arrays)] if peers else [],
                    check=check_fn,
                )
            )
        return out


BENCH = DeltaRuleBench("kernel_delta_attention")
