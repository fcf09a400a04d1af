"""The benchmark of ``blocksparse_attention`` (``ejkernel bench blocksparse_attention``).

Causal masks with an optional local window (``--window``), chunks (``--chunk``) and a document
mask of ``--documents`` random-length documents per example (segment ids), BHSD. Cost model:
``4·b·h·d`` FLOPs per visible (query, key) pair (counted exactly), backward 2.5× forward; each
record carries ``density``, the fraction of (128 × 128) tiles the mask leaves visible. Peers on
the same mask: ``ejkernel.flash_attention`` (BSHD, segment ids and window: the dense kernel that
skips only the tiles outside the causal/window band), the ratio peer, and the plain-JAX
``jax.nn.dot_product_attention`` (``"xla"``; ``"cudnn"`` on GPU) with the dense boolean mask when
it fits in 2 GiB.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...types.mask_info import MaskInfo
from ..benchmark import BenchCase, OpBench, Peer
from ..device import device_for_arrays
from ..flash_attention.bench import make_check
from .mask import causal_mask, chunked_mask, compile_static, local_mask
from .reference import blocksparse_attention_reference

__all__ = ["BENCH", "BlockSparseAttentionBench", "BlockSparseShape"]


@dataclasses.dataclass(frozen=True)
class BlockSparseShape:
    b: int
    s: int
    h: int
    hk: int
    d: int
    window: int | None = None
    chunk: int | None = None
    documents: int = 0

    def label(self) -> str:
        out = f"b{self.b} s{self.s} h{self.h}/{self.hk} d{self.d} causal"
        if self.window:
            out += f" local{self.window}"
        if self.chunk:
            out += f" chunk{self.chunk}"
        if self.documents:
            out += f" docs{self.documents}"
        return out


def _segments(shape: BlockSparseShape) -> np.ndarray | None:
    """``[b, s]`` document ids: ``documents`` random-length documents per example."""
    if not shape.documents:
        return None
    rng = np.random.default_rng(0)
    out = np.zeros((shape.b, shape.s), np.int32)
    for r in range(shape.b):
        cuts = np.sort(rng.choice(np.arange(1, shape.s), size=shape.documents - 1, replace=False))
        for c in cuts:
            out[r, c:] += 1
    return out


def _visible_pairs(shape: BlockSparseShape, seg: np.ndarray | None) -> int:
    """Pairs ``(i, j <= i)`` the mask leaves visible: row ``i`` sees ``[lo(i), i]``."""
    i = np.arange(shape.s)
    lo = np.zeros((shape.b, shape.s), np.int64)
    if shape.window:
        lo = np.maximum(lo, i - shape.window)
    if shape.chunk:
        lo = np.maximum(lo, (i // shape.chunk) * shape.chunk)
    if seg is not None:
        starts = np.stack([np.searchsorted(seg[r], seg[r], side="left") for r in range(shape.b)])
        lo = np.maximum(lo, starts)
    return int((i - lo + 1).sum())


def _options(shape: BlockSparseShape, seg: np.ndarray | None) -> dict[str, Any]:
    opts: dict[str, Any] = {"causal": True}
    if shape.window:
        opts["sliding_window"] = (shape.window, 0)
    if shape.chunk:
        opts["chunk_size"] = shape.chunk
    if seg is not None:
        opts["mask_info"] = MaskInfo.from_segments(jnp.asarray(seg))
    return opts


def _flash_peer(shape: BlockSparseShape, seg: Any) -> Any:
    from ..flash_attention import flash_attention

    def fn(q: Any, k: Any, v: Any) -> Any:
        mi = None if seg is None else MaskInfo.from_segments(seg)
        w = (shape.window, 0) if shape.window else None
        t = (0, 2, 1, 3)
        out = flash_attention(
            q.transpose(t), k.transpose(t), v.transpose(t), mask_info=mi, causal=True, sliding_window=w
        )
        return out.transpose(t)

    return fn


def _dense_peer(shape: BlockSparseShape, implementation: str) -> Any:
    def fn(q: Any, k: Any, v: Any, mask: Any) -> Any:
        t = (0, 2, 1, 3)
        out = jax.nn.dot_product_attention(
            q.transpose(t), k.transpose(t), v.transpose(t), mask=mask, implementation=implementation
        )
        return out.transpose(t)

    return fn


class BlockSparseAttentionBench(OpBench):
    metric = "tflops"
    backward_factor = 2.5
    peer = "ejkernel.flash_attention"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--b", type=int, default=1, help="batch")
        p.add_argument("--s", type=int, action="append", help="sequence length (repeatable; default 1024)")
        p.add_argument("--h", type=int, default=8, help="query heads")
        p.add_argument("--hk", type=int, default=None, help="key/value heads (default: h)")
        p.add_argument("--d", type=int, default=64, help="head dim")
        p.add_argument("--window", type=int, default=None, help="local window: each query sees the last W+1 keys")
        p.add_argument("--chunk", type=int, default=None, help="chunked attention: chunks of C positions")
        p.add_argument("--documents", type=int, default=0, help="random-length documents per example (segment ids)")

    def shapes(self, ns: argparse.Namespace) -> list[BlockSparseShape]:
        out = []
        for s in ns.s or [1024]:
            shape = BlockSparseShape(
                b=ns.b, s=s, h=ns.h, hk=ns.hk or ns.h, d=ns.d, window=ns.window, chunk=ns.chunk, documents=ns.documents
            )
            bad = [k for k in ("b", "s", "h", "hk", "d") if getattr(shape, k) < 1]
            bad += [k for k in ("window", "chunk") if getattr(shape, k) is not None and getattr(shape, k) < 1]
            if shape.documents < 0 or shape.documents > shape.s:
                bad.append("documents")
            if bad:
                raise ValueError(f"bad {', '.join('--' + k for k in bad)}: out of range")
            if shape.h % shape.hk:
                raise ValueError(f"bad --hk {shape.hk}: heads ({shape.h}) must be a multiple of kv heads")
            out.append(shape)
        return out

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        on_gpu = device_for_arrays([]).platform == "gpu"
        jdt = jnp.dtype(dtype)
        out = []
        for shape in self.shapes(ns):
            rng = np.random.default_rng(0)
            q = jnp.asarray(rng.standard_normal((shape.b, shape.h, shape.s, shape.d)), jdt)
            k = jnp.asarray(rng.standard_normal((shape.b, shape.hk, shape.s, shape.d)), jdt)
            v = jnp.asarray(rng.standard_normal((shape.b, shape.hk, shape.s, shape.d)), jdt)
            seg_np = _segments(shape)
            seg = None if seg_np is None else jnp.asarray(seg_np)
            opts = _options(shape, seg_np)
            static = causal_mask()
            if shape.window:
                static = static & local_mask((shape.window, 0))
            if shape.chunk:
                static = static & chunked_mask(shape.chunk)
            density = compile_static(static, shape.s, shape.s, 128, 128).density
            case_peers = []
            if peers and shape.chunk is None:
                case_peers.append(Peer("ejkernel.flash_attention", _flash_peer(shape, seg), (q, k, v)))
            if peers and shape.b * shape.s * shape.s <= 2**31:
                i, j = np.arange(shape.s)[:, None], np.arange(shape.s)[None, :]
                dense = np.broadcast_to(j <= i, (shape.b, 1, shape.s, shape.s))
                if shape.window:
                    dense = dense & (j >= i - shape.window)
                if shape.chunk:
                    dense = dense & (i // shape.chunk == j // shape.chunk)
                if seg_np is not None:
                    dense = dense & (seg_np[:, None, :, None] == seg_np[:, None, None, :])
                mask = jnp.asarray(dense)
                for name in (["cudnn"] if on_gpu else []) + ["xla"]:
                    case_peers.append(Peer(f"jax.nn[{name}] dense mask", _dense_peer(shape, name), (q, k, v, mask)))
            check_fn = None
            if check:  # one example and one head group against the reference
                from ...testing.conformance import LOW_PRECISION

                g = shape.h // shape.hk
                ref_opts = dict(opts)
                if seg_np is not None:
                    ref_opts["mask_info"] = MaskInfo.from_segments(jnp.asarray(seg_np[:1]))
                sl = (slice(0, 1), slice(0, g))
                ref32 = blocksparse_attention_reference(q[sl], k[:1, :1], v[:1, :1], **ref_opts)
                ref_low = blocksparse_attention_reference(
                    q[sl], k[:1, :1], v[:1, :1], **ref_opts, dtype=jdt, precision=LOW_PRECISION
                ).astype(jdt)
                check_fn = make_check(dtype, ref32, ref_low, lambda o, g=g: o[:1, :g])
            fields = dataclasses.asdict(shape)
            out.append(
                BenchCase(
                    label=shape.label(),
                    fields=fields,
                    arrays=(q, k, v),
                    options=opts,
                    cost=4.0 * shape.h * shape.d * _visible_pairs(shape, seg_np),
                    peers=case_peers,
                    check=check_fn,
                    extra={"density": density},
                )
            )
        return out


BENCH = BlockSparseAttentionBench()
