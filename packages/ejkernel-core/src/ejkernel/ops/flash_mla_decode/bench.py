"""The benchmark of ``flash_mla_decode`` (``ejkernel bench flash_mla_decode``; bfloat16 by default).

The default is the issue's shape: DeepSeek-V3 decode, batch 64, 128 heads, 8k context, latent 512 +
rope 64, 64-token pages (randomly permuted), one query token. Bytes = the latent rows read (once for
all heads) + the queries read + the latent output written; FLOPs = ``2·b·h·seq_q·context·(head_dim
+ kv_lora_rank)`` (the 576-wide logits and the 512-wide values). At 128 heads the step is about
240 FLOPs per byte read, above an H200's ridge point (989 TFLOP/s dense 16-bit over ~4.8 TB/s,
~206): it is bound by the tensor cores before HBM, so the table's GB/s (against ``peak_gbps``, a
device-to-device copy measured in the same run) is read next to the summary's TFLOP/s (against the
datasheet's dense 16-bit peak, ``--peak-tflops`` to override) and the roofline, the larger of the
two times.

Peer: plain JAX, the pages gathered to a dense ``[b, context, head_dim]`` latent (timed: it is
what a JAX model without the kernel does) and ``jax.nn.dot_product_attention`` (``"xla"``: the
cuDNN path takes no head dim above 256) with one kv head, the values being the latent's first
``kv_lora_rank`` lanes.
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
from ..flash_attention.bench import make_check
from ..timing import measure_copy_gbps
from .reference import flash_mla_decode_reference

__all__ = ["BENCH", "DENSE_PEAK_TFLOPS", "FlashMLADecodeBench", "MLADecodeShape", "peak_tflops"]

PEER = "jax.nn[xla] gathered"

#: Dense 16-bit tensor-core peaks (TFLOP/s, no sparsity) from the vendors' datasheets, by a
#: substring of the device kind; the first match wins.
DENSE_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989.4),
    ("H100 PCIe", 756.0),
    ("H100", 989.4),
    ("H800", 989.4),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L4", 121.0),
)


def peak_tflops(device_kind: str, dtype: str) -> float | None:
    """The datasheet's dense peak for 16-bit inputs on ``device_kind`` (``None``: unknown, or
    float32, whose three-pass products have no single peak)."""
    if dtype == "float32":
        return None
    return next((peak for name, peak in DENSE_PEAK_TFLOPS if name in device_kind), None)


@dataclasses.dataclass(frozen=True)
class MLADecodeShape:
    b: int
    sq: int
    h: int
    r: int
    dr: int
    context: int
    page_size: int

    def label(self) -> str:
        return f"b{self.b} sq{self.sq} h{self.h} ctx{self.context} r{self.r}+{self.dr} page{self.page_size}"

    def flops(self) -> float:
        return 2.0 * self.b * self.h * self.sq * self.context * (2 * self.r + self.dr)

    def nbytes(self, itemsize: int) -> float:
        d = self.r + self.dr
        return float(self.b * (self.context * d + self.sq * self.h * (d + self.r)) * itemsize)


def _gathered_dense(r: int, q: Any, cache: Any, tables: Any, context: int) -> Any:
    b, sq, _, d = q.shape
    rows = cache[tables].reshape(b, -1, 1, d)[:, :context]  # [b, context, 1, d]
    # The queries are the last sq tokens of every context (bottom-right causal).
    mask = jnp.arange(context)[None, :] <= jnp.arange(sq)[:, None] + (context - sq)
    out = jax.nn.dot_product_attention(q, rows, rows, mask=mask[None, None], implementation="xla")
    return out[..., :r]


class FlashMLADecodeBench(OpBench):
    metric = "gbps"
    default_dtype = "bfloat16"
    peer = PEER

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--b", type=int, default=64, help="batch (sequences)")
        p.add_argument("--sq", type=int, default=1, help="query tokens per sequence (1: decode; more: MTP)")
        p.add_argument("--h", type=int, default=128, help="query heads")
        p.add_argument("--r", type=int, default=512, help="kv_lora_rank (the latent lanes, the values' width)")
        p.add_argument("--dr", type=int, default=64, help="rope lanes after the latent")
        p.add_argument("--context", type=int, action="append", help="context length (repeatable; default 8192)")
        p.add_argument("--page-size", type=int, default=64, help="tokens per page")
        p.add_argument("--peak-tflops", type=float, default=None, help="the device's dense peak (default: datasheet)")

    def shapes(self, ns: argparse.Namespace) -> list[MLADecodeShape]:
        shapes = [
            MLADecodeShape(b=ns.b, sq=ns.sq, h=ns.h, r=ns.r, dr=ns.dr, context=c, page_size=ns.page_size)
            for c in (ns.context or [8192])
        ]
        for s in shapes:
            bad = [k for k in ("b", "sq", "h", "r", "context", "page_size") if getattr(s, k) < 1]
            if s.dr < 0:
                bad.append("dr")
            if bad:
                raise ValueError(f"bad {', '.join('--' + k.replace('_', '-') for k in bad)}: must be positive")
        return shapes

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        jdt = jnp.dtype(dtype)
        kind = jax.devices()[0].device_kind
        tflops_peak = getattr(ns, "peak_tflops", None) or peak_tflops(kind, dtype)
        out, peak = [], None
        for s in self.shapes(ns):
            rng = np.random.default_rng(0)
            d = s.r + s.dr
            pages = -(-s.context // s.page_size)
            num_pages = s.b * pages
            cache = jnp.asarray(rng.standard_normal((num_pages, s.page_size, d)), jdt)
            q = jnp.asarray(rng.standard_normal((s.b, s.sq, s.h, d)), jdt)
            tables = jnp.asarray(rng.permutation(num_pages).reshape(s.b, pages), jnp.int32)
            lens = jnp.full((s.b,), s.context, jnp.int32)
            nbytes = s.nbytes(jdt.itemsize)
            if peak is None:
                peak = measure_copy_gbps(min(cache.nbytes, 2**31), getattr(ns, "repeats", 10))
            case_peers = []
            if peers:
                fn = functools.partial(_gathered_dense, s.r, context=s.context)
                case_peers.append(Peer(PEER, fn, (q, cache, tables)))
            check_fn = None
            if check:
                from ...testing.conformance import LOW_PRECISION

                n = min(s.b, 2)
                sub = (q[:n], cache, lens[:n], tables[:n])
                ref32 = flash_mla_decode_reference(*sub, kv_lora_rank=s.r)
                ref_low = flash_mla_decode_reference(*sub, kv_lora_rank=s.r, dtype=jdt, precision=LOW_PRECISION).astype(
                    jdt
                )
                check_fn = make_check(dtype, ref32, ref_low, lambda o, n=n: o[:n])
            roofline_ms = max(nbytes / (peak * 1e9), s.flops() / (tflops_peak * 1e12) if tflops_peak else 0.0) * 1e3
            out.append(
                BenchCase(
                    label=s.label(),
                    fields=dataclasses.asdict(s),
                    arrays=(q, cache, lens, tables),
                    options={"kv_lora_rank": s.r},
                    cost=nbytes,
                    peers=case_peers,
                    check=check_fn,
                    extra={
                        "peak_gbps": peak,
                        "flops": s.flops(),
                        "peak_tflops": tflops_peak,
                        "flops_per_byte": s.flops() / nbytes,
                        "roofline_ms": roofline_ms,
                    },
                )
            )
        return out

    def summary(self, records: list[dict[str, Any]], ns: argparse.Namespace) -> list[str]:
        lines = []
        for r in records:
            ms = r.get("ms")
            if not ms:
                continue
            tflops = r["flops"] / (ms * 1e-3) / 1e12
            of_peak = f", {tflops / r['peak_tflops']:.0%} of {r['peak_tflops']:g}" if r.get("peak_tflops") else ""
            lines.append(
                f"{r['label']} {r['impl']}: {ms:.3f} ms, {r['gbps']:.0f} GB/s ({r['fraction_of_peak']:.0%} of copy), "
                f"{tflops:.0f} TFLOP/s{of_peak}; roofline {r['roofline_ms']:.3f} ms "
                f"({r['flops_per_byte']:.0f} FLOP/B): {r['roofline_ms'] / ms:.0%} of it"
            )
        return lines


BENCH = FlashMLADecodeBench()
