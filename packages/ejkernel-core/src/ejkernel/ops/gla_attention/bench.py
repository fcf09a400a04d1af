"""The benchmark of the gated linear-attention ops (``ejkernel bench gla_attention``, ``...
lightning_attention``, ``... recurrent_attention``, ``... state_space_v2``).

Cost model (the chunked algorithm, chunk ``C = 64``, per head and token): the state products
``kᵀv`` and ``q S`` (``4·dk·dv`` FLOPs) and the causal half of the intra-chunk ``q kᵀ`` and
``A v`` (``C·(dk + dv)``): forward ``b·t·h·(4·dk·dv + C·(dk + dv))``; backward 2× forward. The
peers (fla-core's ``chunk_gla`` / ``chunk_simple_gla`` / ``chunk_lightning_attn``, PyTorch) are
timed side by side by ``benchmarks/linear_delta_vs_fla.py`` on the same inputs (``ejkernel
bench`` times JAX functions only). Outputs are checked against the float32 reference on one batch
row (``--check``). ``ejkernel bench`` times the plain-JAX peer (:mod:`ejkernel.testing.plain_jax`)
beside the implementations: Mamba-2's SSD chunked form for the scalar decays (``state_space_v2``,
``lightning_attention``), the chunked GLA form for the per-channel ones (``gla_attention``,
``recurrent_attention``); the ratios are taken against it.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..benchmark import BenchCase, OpBench, Peer

__all__ = ["BENCH", "LinearAttentionBench", "LinearShape", "linear_flops", "linear_inputs", "plain_jax_peer"]

CHUNK = 64
PEER = "plain jax chunked"


@dataclasses.dataclass(frozen=True)
class LinearShape:
    b: int
    t: int
    h: int
    d: int
    dv: int

    def label(self) -> str:
        return f"b{self.b} t{self.t} h{self.h} d{self.d}" + (f" dv{self.dv}" if self.dv != self.d else "")


def parse_shape(text: str) -> LinearShape:
    """``B,T,H,D`` or ``B,T,H,D,DV``; ``ValueError`` naming ``--shape``."""
    try:
        nums = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"bad --shape {text!r}: expected B,T,H,D or B,T,H,D,DV") from None
    if len(nums) not in (4, 5) or min(nums) < 1:
        raise ValueError(f"bad --shape {text!r}: expected B,T,H,D or B,T,H,D,DV, every size positive")
    return LinearShape(*nums) if len(nums) == 5 else LinearShape(*nums, nums[3])


def linear_flops(s: LinearShape) -> float:
    return float(s.b * s.t * s.h * (4 * s.d * s.dv + CHUNK * (s.d + s.dv)))


def linear_inputs(op: str, s: LinearShape, dtype: Any, seed: int = 0) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The op's positional arrays and options as models feed them (log-sigmoid gates, negative
    ``A``, softplus ``dt``); SSD: ``x [b, t, h, dv]``, ``B``/``C`` of one group of size ``d``."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int, s: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * s).astype(np.float32)

    b, t, h, d, dv = s.b, s.t, s.h, s.d, s.dv
    if op == "state_space_v2":
        arrays = (
            jnp.asarray(normal(b, t, h, dv), dtype),
            jnp.asarray(-np.exp(normal(h, s=0.5))),
            jnp.asarray(normal(b, t, 1, d, s=d**-0.5), dtype),
            jnp.asarray(normal(b, t, 1, d), dtype),
            jnp.asarray(normal(h)),
            jnp.asarray(jax.nn.softplus(normal(b, t, h) - 2.0)),
        )
        return arrays, {}
    q = jnp.asarray(normal(b, t, h, d), dtype)
    k = jnp.asarray(normal(b, t, h, d, s=d**-0.5), dtype)
    v = jnp.asarray(normal(b, t, h, dv), dtype)
    if op == "lightning_attention":
        return (q, k, v), {"layer_idx": 5, "num_layers": 24}
    g = jnp.asarray(jax.nn.log_sigmoid(normal(b, t, h, d) + 2.0))
    return (q, k, v, g), {}


def plain_jax_peer(op: str, arrays: tuple[Any, ...], opts: dict[str, Any]) -> Peer:
    """The op's plain-JAX peer on :func:`linear_inputs`' arrays (module docstring), its output in
    the op's layout and dtype."""
    from ...testing import plain_jax as P
    from ..families.delta_rule_math import product_precision
    from ..families.linear_attention import lightning_decay

    if op == "state_space_v2":

        def ssd(x: Any, A: Any, B: Any, C: Any, D: Any, dt: Any) -> Any:
            b, t, h, p = x.shape
            f32 = jnp.float32
            rep = lambda a: jnp.repeat(a, h // a.shape[2], axis=2)  # noqa: E731
            dtf = dt.astype(f32)
            prec = product_precision(x.dtype)
            y = P.ssd_chunked(rep(C), rep(B), x.astype(f32) * dtf[..., None], A.astype(f32) * dtf, precision=prec)
            y = y + D.astype(f32)[:, None] * x.astype(f32)
            return y.reshape(b, t, h * p).astype(x.dtype)

        return Peer(PEER, ssd, arrays, to_op=lambda y: (y,))
    q = arrays[0]
    scale = q.shape[-1] ** -0.5
    if op == "lightning_attention":
        gamma = jnp.asarray(lightning_decay(q.shape[2], opts["layer_idx"], opts["num_layers"]))

        def lightning(q: Any, k: Any, v: Any) -> Any:
            a = jnp.broadcast_to(gamma, q.shape[:3])
            return P.ssd_chunked(q, k, v, a, scale=scale, precision=product_precision(q.dtype)).astype(q.dtype)

        return Peer(PEER, lightning, arrays)

    def gla(q: Any, k: Any, v: Any, g: Any) -> Any:
        return P.gla_chunked(q, k, v, g, scale=scale, precision=product_precision(q.dtype)).astype(q.dtype)

    return Peer(PEER, gla, arrays)


class LinearAttentionBench(OpBench):
    """``--shape B,T,H,D`` (or ``B,T,H,D,DV``), repeatable; default the issue's 4,4096,16,128."""

    metric = "tflops"
    backward_factor = 2.0
    peer = PEER

    def __init__(self, op: str):
        self.op = op

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--shape", action="append", help="B,T,H,D or B,T,H,D,DV (repeatable)")

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        from ..op import op_class

        shapes = [parse_shape(x) for x in (getattr(ns, "shape", None) or ["4,4096,16,128"])]
        out = []
        for s in shapes:
            arrays, opts = linear_inputs(self.op, s, jnp.dtype(dtype))
            check_fn = None
            if check:
                from ...testing.conformance import LOW_PRECISION
                from ..flash_attention.bench import make_check

                reference = op_class(self.op).get_reference()
                one = tuple(x[:1] if x.ndim > 1 else x for x in arrays)
                first = (lambda o: o[0]) if self.op == "state_space_v2" else (lambda o: o)
                ref32 = first(reference(*one, **opts))
                ref_low = first(reference(*one, **opts, dtype=jnp.dtype(dtype), precision=LOW_PRECISION))
                check_fn = make_check(dtype, ref32, ref_low.astype(jnp.dtype(dtype)), lambda o, f=first: f(o)[:1])
            out.append(
                BenchCase(
                    label=s.label(),
                    fields=dataclasses.asdict(s),
                    arrays=arrays,
                    options=opts,
                    cost=linear_flops(s),
                    peers=[plain_jax_peer(self.op, arrays, opts)] if peers else [],
                    check=check_fn,
                )
            )
        return out


BENCH = LinearAttentionBench("gla_attention")
