"""The benchmark of ``page_attention`` (``ejkernel bench page_attention``).

Paged decode is memory-bound: every sequence at full ``--context`` on randomly permuted pages;
bytes = K and V rows read + query read + output written, reported as GB/s next to ``peak_gbps``,
a device-to-device copy measured in the same run. Peers: ``jax.nn.dot_product_attention`` decode
over the same cache gathered to a dense ``[b, context, hk, d]`` layout (the gather is outside the
timed region: a kernel's bar), ``"cudnn"`` on GPU and ``"xla"``; and the plain JAX a user would
write, ``jax.nn[xla] gather + dense decode``: the gather inside the timed region (the XLA path's
peer, the ratio's on a CPU). ``--cache-layout`` picks the cache's layout
(``both``: a row per layout on the same values, to compare them; each row has its own peers, so
each has its ratio).
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
from ..flash_attention.bench import make_check
from ..timing import measure_copy_gbps
from .op import CACHE_LAYOUTS, DEFAULT_CACHE_LAYOUT
from .reference import page_attention_reference

__all__ = ["BENCH", "GATHER_PEER", "PageAttentionBench", "PageShape", "gather_pages_dense"]

#: The plain-JAX peer of the XLA path: the pages gathered, then the dense decode, both timed.
GATHER_PEER = "jax.nn[xla] gather + dense decode"


@dataclasses.dataclass(frozen=True)
class PageShape:
    b: int
    h: int
    hk: int
    d: int
    context: int
    block_size: int

    def label(self) -> str:
        return f"b{self.b} h{self.h}/{self.hk} d{self.d} ctx{self.context} bs{self.block_size}"


def _dense_decode(implementation: str, q: Any, k: Any, v: Any) -> Any:
    return jax.nn.dot_product_attention(q[:, None], k, v, implementation=implementation)[:, 0]


def gather_pages_dense(context: int, key_cache: Any, value_cache: Any, tables: Any) -> tuple[Any, Any]:
    """Each sequence's first ``context`` keys and values from its pages (``tables [seqs, pages]``,
    caches ``[pages, page_size, hk, d]``): ``[seqs, context, hk, d]`` each."""
    n = tables.shape[0]
    return tuple(c[tables].reshape(n, -1, *c.shape[2:])[:, :context] for c in (key_cache, value_cache))


def _gather_dense_decode(context: int, q: Any, key_cache: Any, value_cache: Any, tables: Any) -> Any:
    """Every sequence's pages gathered, then the dense decode (the plain-JAX peer)."""
    return _dense_decode("xla", q, *gather_pages_dense(context, key_cache, value_cache, tables))


class PageAttentionBench(OpBench):
    metric = "gbps"

    @staticmethod
    def peer(platform: str) -> str:
        return "jax.nn[cudnn] dense decode" if platform == "gpu" else GATHER_PEER

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--b", type=int, default=1, help="batch (sequences)")
        p.add_argument("--h", type=int, default=8, help="query heads")
        p.add_argument("--hk", type=int, default=None, help="key/value heads (default: h)")
        p.add_argument("--d", type=int, default=64, help="head dim")
        p.add_argument("--context", type=int, action="append", help="context length (repeatable; default 1024)")
        p.add_argument("--block-size", type=int, default=16, help="tokens per page")
        p.add_argument(
            "--cache-layout",
            choices=[*CACHE_LAYOUTS, "both"],
            default=DEFAULT_CACHE_LAYOUT,
            help=f"the caches' layout (default {DEFAULT_CACHE_LAYOUT}); both: one row per layout",
        )

    def shapes(self, ns: argparse.Namespace) -> list[PageShape]:
        shapes = [
            PageShape(b=ns.b, h=ns.h, hk=ns.hk or ns.h, d=ns.d, context=c, block_size=ns.block_size)
            for c in (ns.context or [1024])
        ]
        for s in shapes:
            bad = [k for k in ("b", "h", "hk", "d", "context", "block_size") if getattr(s, k) < 1]
            if bad:
                raise ValueError(f"bad {', '.join('--' + k.replace('_', '-') for k in bad)}: must be positive")
            if s.h % s.hk:
                raise ValueError(f"bad --hk {s.hk}: heads ({s.h}) must be a multiple of kv heads")
        return shapes

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        on_gpu = device_for_arrays([]).platform == "gpu"
        jdt = jnp.dtype(dtype)
        out, peak = [], None
        for s in self.shapes(ns):
            rng = np.random.default_rng(0)
            pages = -(-s.context // s.block_size)
            num_blocks = s.b * pages
            kc = jnp.asarray(rng.standard_normal((num_blocks, s.block_size, s.hk, s.d)), jdt)
            vc = jnp.asarray(rng.standard_normal((num_blocks, s.block_size, s.hk, s.d)), jdt)
            q = jnp.asarray(rng.standard_normal((s.b, s.h, s.d)), jdt)
            tables = jnp.asarray(rng.permutation(num_blocks).reshape(s.b, pages), jnp.int32)
            lens = jnp.full((s.b,), s.context, jnp.int32)
            nbytes = 2 * s.b * s.context * s.hk * s.d * jdt.itemsize + 2 * q.nbytes
            if peak is None:
                peak = measure_copy_gbps(min(2 * kc.nbytes, 2**31), getattr(ns, "repeats", 10))
            layout_opt = getattr(ns, "cache_layout", DEFAULT_CACHE_LAYOUT)
            layouts = list(CACHE_LAYOUTS) if layout_opt == "both" else [layout_opt]
            case_peers = []
            if peers:
                kd, vd = gather_pages_dense(s.context, kc, vc, tables)
                for name in (["cudnn"] if on_gpu else []) + ["xla"]:
                    case_peers.append(
                        Peer(f"jax.nn[{name}] dense decode", functools.partial(_dense_decode, name), (q, kd, vd))
                    )
                gathered = functools.partial(_gather_dense_decode, s.context)
                case_peers.append(Peer(GATHER_PEER, gathered, (q, kc, vc, tables)))
            check_fn = None
            if check:
                from ...testing.conformance import LOW_PRECISION

                n = min(s.b, 4)
                ref32 = page_attention_reference(q[:n], kc, vc, lens[:n], tables[:n])
                ref_low = page_attention_reference(
                    q[:n], kc, vc, lens[:n], tables[:n], dtype=jdt, precision=LOW_PRECISION
                ).astype(jdt)
                check_fn = make_check(dtype, ref32, ref_low, lambda o, n=n: o[:n])
            for layout in layouts:
                if layout == DEFAULT_CACHE_LAYOUT:
                    caches = (kc, vc)
                else:  # the same values, [num_blocks, num_kv_heads, block_size, d]
                    caches = (jnp.swapaxes(kc, 1, 2), jnp.swapaxes(vc, 1, 2))
                out.append(
                    BenchCase(
                        label=s.label() if len(layouts) == 1 else f"{s.label()} {layout}",
                        fields={**dataclasses.asdict(s), "cache_layout": layout},
                        arrays=(q, *caches, lens, tables),
                        options={"cache_layout": layout},
                        cost=nbytes,
                        peers=case_peers,
                        check=check_fn,
                        extra={"peak_gbps": peak},
                    )
                )
            del kc, vc  # only the layouts asked for stay alive while they are timed
        return out


BENCH = PageAttentionBench()
