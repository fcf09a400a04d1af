"""The benchmark of ``flash_mla`` (``ejkernel bench flash_mla``).

Decode (``--sq 1``, the default) is memory-bound: bytes = the latent rows read once for all
heads (``kv_lora_rank + rope``), the queries and projections read, the output written, reported
as GB/s next to ``peak_gbps``, a device-to-device copy measured in the same run. (Serving decode
over a paged latent cache, DeepSeek-V3's batch 64 × 128 heads × 8k, is ``ejkernel bench
flash_mla_decode``.) Peer: the non-absorbed form in plain
JAX, ``jax.nn.dot_product_attention`` on keys and values materialized per head (``"cudnn"`` on
GPU and ``"xla"``), the projections included in its time.
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
from ..families.latent_attention import materialized_kv
from ..flash_attention.bench import make_check
from ..timing import measure_copy_gbps
from .reference import flash_mla_reference

__all__ = ["BENCH", "FlashMLABench", "FlashMLAShape"]


@dataclasses.dataclass(frozen=True)
class FlashMLAShape:
    b: int
    sq: int
    context: int
    h: int
    r: int
    dn: int
    dr: int
    dv: int

    def label(self) -> str:
        return f"b{self.b} sq{self.sq} ctx{self.context} h{self.h} r{self.r}+{self.dr}"


def _materialized(implementation: str, q: Any, c: Any, w_kc: Any, w_vc: Any, b_k: Any) -> Any:
    qq, k, v = materialized_kv(q, c, w_kc, w_vc, None, b_k, dtype=q.dtype, precision=None)
    sq, sk = q.shape[1], c.shape[1]
    # Bottom-right causal as a bias-free mask: decode (sq = 1) sees every key.
    mask = jnp.arange(sk)[None, :] <= jnp.arange(sq)[:, None] + (sk - sq)
    # jax.nn needs the value head dim of the keys: zero columns pad it, sliced off after.
    dv = v.shape[-1]
    v = jnp.pad(v, [(0, 0)] * 3 + [(0, max(0, k.shape[-1] - dv))])
    out = jax.nn.dot_product_attention(qq, k, v, mask=mask[None, None], implementation=implementation)
    return out[..., :dv]


class FlashMLABench(OpBench):
    metric = "gbps"

    @staticmethod
    def peer(platform: str) -> str:
        return "jax.nn[cudnn] materialized" if platform == "gpu" else "jax.nn[xla] materialized"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--b", type=int, default=4, help="batch")
        p.add_argument("--sq", type=int, default=1, help="queries per row (1: decode)")
        p.add_argument("--h", type=int, default=16, help="query heads (= projection heads)")
        p.add_argument("--r", type=int, default=512, help="kv_lora_rank")
        p.add_argument("--dn", type=int, default=128, help="qk_nope_head_dim")
        p.add_argument("--dr", type=int, default=64, help="qk_rope_head_dim")
        p.add_argument("--dv", type=int, default=128, help="value_head_dim")
        p.add_argument("--context", type=int, action="append", help="latent rows (repeatable; default 1024)")

    def shapes(self, ns: argparse.Namespace) -> list[FlashMLAShape]:
        shapes = [
            FlashMLAShape(b=ns.b, sq=ns.sq, context=c, h=ns.h, r=ns.r, dn=ns.dn, dr=ns.dr, dv=ns.dv)
            for c in (ns.context or [1024])
        ]
        for s in shapes:
            bad = [k for k in ("b", "sq", "context", "h", "r", "dn", "dv") if getattr(s, k) < 1]
            if s.dr < 0:
                bad.append("dr")
            if bad:
                raise ValueError(f"bad {', '.join('--' + k for k in bad)}: must be positive")
            if s.sq > s.context:
                raise ValueError(f"bad --sq {s.sq}: more queries than latent rows ({s.context})")
        return shapes

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        on_gpu = device_for_arrays([]).platform == "gpu"
        jdt = jnp.dtype(dtype)
        out, peak = [], None
        for s in self.shapes(ns):
            rng = np.random.default_rng(0)

            def normal(*shape: int, std: float = 1.0, rng: Any = rng) -> Any:
                return jnp.asarray(rng.standard_normal(shape) * std, jdt)

            q = normal(s.b, s.sq, s.h, s.dn + s.dr)
            c = normal(s.b, s.context, s.r)
            w_kc = normal(s.r, s.h, s.dn, std=s.r**-0.5)
            w_vc = normal(s.r, s.h, s.dv, std=s.r**-0.5)
            b_k = normal(s.b, s.context, s.dr) if s.dr else None
            arrays = (q, c, w_kc, w_vc, None, b_k)
            item = jdt.itemsize
            nbytes = (s.b * s.context * (s.r + s.dr) + q.size + w_kc.size + w_vc.size + s.b * s.sq * s.h * s.dv) * item
            if peak is None:
                peak = measure_copy_gbps(min(2 * c.nbytes, 2**31), getattr(ns, "repeats", 10))
            case_peers = []
            if peers and b_k is not None:
                for name in (["cudnn"] if on_gpu else []) + ["xla"]:
                    case_peers.append(
                        Peer(
                            f"jax.nn[{name}] materialized",
                            functools.partial(_materialized, name),
                            (q, c, w_kc, w_vc, b_k),
                        )
                    )
            check_fn = None
            if check:
                from ...testing.conformance import LOW_PRECISION

                n = min(s.b, 2)
                sub = (q[:n], c[:n], w_kc, w_vc, None, None if b_k is None else b_k[:n])
                ref32 = flash_mla_reference(*sub, causal=True)
                ref_low = flash_mla_reference(*sub, causal=True, dtype=jdt, precision=LOW_PRECISION).astype(jdt)
                check_fn = make_check(dtype, ref32, ref_low, lambda o, n=n: o[:n])
            out.append(
                BenchCase(
                    label=s.label(),
                    fields=dataclasses.asdict(s),
                    arrays=arrays,
                    options={"causal": True},
                    cost=nbytes,
                    peers=case_peers,
                    check=check_fn,
                    extra={"peak_gbps": peak},
                )
            )
        return out


BENCH = FlashMLABench()
