"""The benchmark of ``deepseek_attn`` (``ejkernel bench deepseek_attn``).

Cost: the useful forward FLOPs of sparse attention, ``min(topk, visible)`` kept keys per query
in the absorbed form (``2·(r + rope)`` for the scores and ``2·r`` for the output per head and
kept key) plus the indexer's ``2·index_heads·index_dim`` per query-key pair. Peer: dense causal
DSA in plain JAX: the same kept-key mask, then ``jax.nn.dot_product_attention`` with it on keys
and values materialized per head (the projections included).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..benchmark import BenchCase, OpBench, Peer
from ..device import device_for_arrays
from ..families.latent_attention import index_mask, materialized_kv
from ..flash_attention.bench import make_check
from .reference import deepseek_attn_reference

__all__ = ["BENCH", "DeepSeekAttnBench", "DeepSeekAttnShape"]


def _plain_dsa(
    implementation: str, topk: int, q: Any, c: Any, w_kc: Any, w_vc: Any, qi: Any, ki: Any, wi: Any, b_k: Any
) -> Any:
    mask = index_mask(qi, ki, wi, topk=topk, scale=qi.shape[-1] ** -0.5, causal=True)
    qq, k, v = materialized_kv(q, c, w_kc, w_vc, None, b_k, dtype=q.dtype, precision=None)
    dv = v.shape[-1]  # jax.nn needs the keys' head dim: zero columns pad the values
    v = jnp.pad(v, [(0, 0)] * 3 + [(0, max(0, k.shape[-1] - dv))])
    return jax.nn.dot_product_attention(qq, k, v, mask=mask, implementation=implementation)[..., :dv]


@dataclasses.dataclass(frozen=True)
class DeepSeekAttnShape:
    b: int
    s: int
    h: int
    r: int
    dn: int
    dr: int
    dv: int
    ih: int
    idim: int
    topk: int

    def label(self) -> str:
        return f"b{self.b} s{self.s} h{self.h} r{self.r}+{self.dr} top{self.topk}"

    def flops(self) -> float:
        kept = sum(min(self.topk, i + 1) for i in range(self.s))  # causal: query i sees i + 1 keys
        attn = 2 * self.h * kept * (2 * self.r + self.dr)
        index = 2 * self.ih * self.idim * self.s * (self.s + 1) / 2
        return float(self.b * (attn + index))


class DeepSeekAttnBench(OpBench):
    metric = "tflops"

    @staticmethod
    def peer(platform: str) -> str:
        return "jax.nn[cudnn] masked" if platform == "gpu" else "jax.nn[xla] masked"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--b", type=int, default=1, help="batch")
        p.add_argument("--s", type=int, action="append", help="sequence length (repeatable; default 512)")
        p.add_argument("--h", type=int, default=8, help="query heads (= projection heads)")
        p.add_argument("--r", type=int, default=128, help="kv_lora_rank")
        p.add_argument("--dn", type=int, default=64, help="qk_nope_head_dim")
        p.add_argument("--dr", type=int, default=32, help="qk_rope_head_dim")
        p.add_argument("--dv", type=int, default=64, help="value_head_dim")
        p.add_argument("--ih", type=int, default=4, help="indexer heads")
        p.add_argument("--idim", type=int, default=32, help="indexer head dim")
        p.add_argument("--topk", type=int, default=128, help="keys kept per query")

    def shapes(self, ns: argparse.Namespace) -> list[DeepSeekAttnShape]:
        keys = ("b", "h", "r", "dn", "dr", "dv", "ih", "idim", "topk")
        shapes = [DeepSeekAttnShape(s=s, **{k: getattr(ns, k) for k in keys}) for s in (ns.s or [512])]
        for sh in shapes:
            bad = [k for k in ("s", *keys) if getattr(sh, k) < 1]
            if bad:
                raise ValueError(f"bad {', '.join('--' + k for k in bad)}: must be positive")
        return shapes

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        on_gpu = device_for_arrays([]).platform == "gpu"
        jdt = jnp.dtype(dtype)
        out = []
        for s in self.shapes(ns):
            rng = np.random.default_rng(0)

            def normal(*shape: int, std: float = 1.0, rng: Any = rng) -> Any:
                return jnp.asarray(rng.standard_normal(shape) * std, jdt)

            q = normal(s.b, s.s, s.h, s.dn + s.dr)
            c = normal(s.b, s.s, s.r)
            w_kc = normal(s.r, s.h, s.dn, std=s.r**-0.5)
            w_vc = normal(s.r, s.h, s.dv, std=s.r**-0.5)
            b_k = normal(s.b, s.s, s.dr)
            qi, ki, wi = normal(s.b, s.s, s.ih, s.idim), normal(s.b, s.s, s.idim), normal(s.b, s.s, s.ih)
            arrays = (q, c, w_kc, w_vc, qi, ki, wi)
            options = {"index_topk": s.topk, "b_k": b_k}
            case_peers = []
            if peers:
                for name in (["cudnn"] if on_gpu else []) + ["xla"]:
                    case_peers.append(
                        Peer(
                            f"jax.nn[{name}] masked",
                            functools.partial(_plain_dsa, name, s.topk),
                            (q, c, w_kc, w_vc, qi, ki, wi, b_k),
                        )
                    )
            check_fn = None
            if check:
                from ...testing.conformance import LOW_PRECISION

                ref32 = deepseek_attn_reference(*arrays, **options)
                ref_low = deepseek_attn_reference(*arrays, **options, dtype=jdt, precision=LOW_PRECISION).astype(jdt)
                check_fn = make_check(dtype, ref32, ref_low, lambda o: o)
            out.append(
                BenchCase(
                    label=s.label(),
                    fields=dataclasses.asdict(s),
                    arrays=arrays,
                    options=options,
                    cost=s.flops(),
                    peers=case_peers,
                    check=check_fn,
                )
            )
        return out


BENCH = DeepSeekAttnBench()
