"""The benchmark of ``native_sparse_attention`` (``ejkernel bench native_sparse_attention``).

NSA with all three branches at ``--s`` tokens: the selection computed from the compressed
branch (``--count`` blocks of ``--bs``), a ``--window`` sliding window, gates on each. Cost: the
FLOPs of the attention each token actually does, ``4·b·hq·d`` per (query, key) pair over its
selected keys (``count·bs``), its window and half the compressed blocks (causal). Peer: the same
NSA in plain JAX, each branch a dense attention under its mask
(:func:`ejkernel.testing.plain_jax.nsa_dense`, checked like the op). Beside it, timed and not
checked: dense causal attention on the same ``q, k, v`` (``jax.nn.dot_product_attention``,
``"cudnn"`` on GPU, and ``"xla"``), the attention NSA replaces.
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

__all__ = ["BENCH", "NSABench", "NSAShape"]

PEER = "plain jax dense-masked NSA"


@dataclasses.dataclass(frozen=True)
class NSAShape:
    b: int
    s: int
    h: int
    hk: int
    d: int
    bs: int
    count: int
    window: int

    def label(self) -> str:
        return f"b{self.b} s{self.s} h{self.h}/{self.hk} d{self.d} bs{self.bs} n{self.count} w{self.window}"


def _dense(implementation: str, q: Any, k: Any, v: Any) -> Any:
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=implementation)


class NSABench(OpBench):
    metric = "tflops"

    peer = PEER

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--b", type=int, default=1, help="batch")
        p.add_argument("--s", type=int, action="append", help="tokens (repeatable; default 4096)")
        p.add_argument("--h", type=int, default=16, help="query heads")
        p.add_argument("--hk", type=int, default=1, help="key/value heads")
        p.add_argument("--d", type=int, default=64, help="head dim")
        p.add_argument("--bs", type=int, default=64, help="block size (compression and selection)")
        p.add_argument("--count", type=int, default=16, help="selected blocks per token")
        p.add_argument("--window", type=int, default=512, help="sliding window")

    def shapes(self, ns: argparse.Namespace) -> list[NSAShape]:
        shapes = [
            NSAShape(b=ns.b, s=s, h=ns.h, hk=ns.hk, d=ns.d, bs=ns.bs, count=ns.count, window=ns.window)
            for s in (ns.s or [4096])
        ]
        for sh in shapes:
            bad = [k for k in ("b", "s", "h", "hk", "d", "bs", "count", "window") if getattr(sh, k) < 1]
            if bad:
                raise ValueError(f"bad {', '.join('--' + k for k in bad)}: must be positive")
            if sh.h % sh.hk:
                raise ValueError(f"bad --hk {sh.hk}: heads ({sh.h}) must be a multiple of kv heads")
        return shapes

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        on_gpu = device_for_arrays([]).platform == "gpu"
        jdt = jnp.dtype(dtype)
        out = []
        for sh in self.shapes(ns):
            rng = np.random.default_rng(0)
            q = jnp.asarray(rng.standard_normal((sh.b, sh.s, sh.h, sh.d)), jdt)
            k = jnp.asarray(rng.standard_normal((sh.b, sh.s, sh.hk, sh.d)), jdt)
            v = jnp.asarray(rng.standard_normal((sh.b, sh.s, sh.hk, sh.d)), jdt)
            g = [jnp.asarray(rng.random((sh.b, sh.s, sh.h)), jdt) for _ in range(3)]
            keys = min(sh.count * sh.bs, sh.s) + min(sh.window, sh.s) + sh.s // sh.bs // 2
            cost = 4.0 * sh.b * sh.h * sh.s * sh.d * keys
            case_peers = []
            if peers:
                dense_nsa = functools.partial(_nsa_dense, block_count=sh.count, block_size=sh.bs, window=sh.window)
                case_peers.append(Peer(PEER, dense_nsa, (q, k, v, *g)))
                kr, vr = (jnp.repeat(x, sh.h // sh.hk, axis=2) for x in (k, v))
                for name in (["cudnn"] if on_gpu else []) + ["xla"]:
                    # Dense attention computes something else: timed, not checked (_not_compared).
                    peer = Peer(f"jax.nn[{name}] dense causal", functools.partial(_dense, name), (q, kr, vr))
                    case_peers.append(dataclasses.replace(peer, to_op=_not_compared))
            check_fn = None
            if check:
                check_fn = _check(dtype, q, k, v, g, sh)
            out.append(
                BenchCase(
                    label=sh.label(),
                    fields=dataclasses.asdict(sh),
                    arrays=(q, k, v, g[0], g[1]),
                    options={"block_counts": sh.count, "block_size": sh.bs, "window_size": sh.window, "g_swa": g[2]},
                    cost=cost,
                    peers=case_peers,
                    check=check_fn,
                )
            )
        return out


def _nsa_dense(q: Any, k: Any, v: Any, g_cmp: Any, g_slc: Any, g_swa: Any, **kw: Any) -> Any:
    from ...testing.plain_jax import nsa_dense

    return nsa_dense(q, k, v, g_cmp, g_slc, g_swa, **kw)


def _not_compared(out: Any) -> None:
    return None


def _check(dtype: str, q: Any, k: Any, v: Any, g: list[Any], sh: NSAShape) -> Any:
    """Compare the first 512 tokens of batch row 0 (a prefix is its own causal problem)."""
    from ...testing.conformance import LOW_PRECISION
    from ..flash_attention.bench import make_check
    from .reference import native_sparse_attention_reference as ref

    n = min(sh.s, 512)
    sl = lambda x: x[:1, :n]  # noqa: E731
    kw = dict(block_counts=sh.count, block_size=sh.bs, window_size=sh.window)
    args = (sl(q), sl(k), sl(v), sl(g[0]), sl(g[1]), None)
    ref32 = ref(*args, g_swa=sl(g[2]), **kw)
    ref_low = ref(*args, g_swa=sl(g[2]), **kw, dtype=jnp.dtype(dtype), precision=LOW_PRECISION).astype(q.dtype)
    inner = make_check(dtype, ref32, ref_low, sl)

    def check(out: Any) -> tuple[str, float]:
        return ("not compared (dense attention)", float("nan")) if out is None else inner(out)

    return check


BENCH = NSABench()
