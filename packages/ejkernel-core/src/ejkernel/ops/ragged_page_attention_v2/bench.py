"""The benchmark of ``ragged_page_attention_v2`` (``ejkernel bench ragged_page_attention_v2``).

One continuous-batching step: ``--decodes`` sequences decoding one token at ``--context`` plus
``--chunks`` prefill chunks of ``--chunk`` tokens at the end of ``--chunk-context``, on randomly
permuted pages. Reported as GB/s of the cache rows the step must read (each sequence's context
once) + queries read + output written, next to ``peak_gbps``, a device-to-device copy measured in
the same run.

Peers, on the same values: a decode-only step (``--chunks 0``) beside ``page_attention`` (the
default implementation, over the cache's K and V halves as separate caches) and the dense decode
of ``jax.nn.dot_product_attention`` (cuDNN on a GPU, XLA) over the gathered contexts; a
prefill-only step whose chunks are whole prompts (``--decodes 0``, ``--chunk == --chunk-context``)
beside ``flash_attention`` varlen (causal, ``cum_seqlens_q``) on the same tokens with a dense
cache. The gathering and splitting happen once, outside the timed calls.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..benchmark import BenchCase, OpBench, Peer
from ..device import device_for_arrays
from ..flash_attention.bench import make_check
from ..page_attention.bench import _dense_decode
from ..timing import measure_copy_gbps
from .reference import ragged_page_attention_v2_reference

__all__ = ["BENCH", "RaggedPageAttentionv2Bench", "ServingStep"]


@dataclasses.dataclass(frozen=True)
class ServingStep:
    decodes: int
    context: int
    chunks: int
    chunk: int
    chunk_context: int
    h: int
    hk: int
    d: int
    page_size: int

    def label(self) -> str:
        parts = [f"{self.decodes}x dec@{self.context}"] if self.decodes else []
        parts += [f"{self.chunks}x {self.chunk}@{self.chunk_context}"] if self.chunks else []
        return f"{' + '.join(parts)} h{self.h}/{self.hk} d{self.d} ps{self.page_size}"

    def seqs(self) -> list[tuple[int, int]]:
        return [(1, self.context)] * self.decodes + [(self.chunk, self.chunk_context)] * self.chunks


def _page_attention(q: Any, k_cache: Any, v_cache: Any, lens: Any, tables: Any) -> Any:
    from ... import page_attention

    return page_attention(q, k_cache, v_cache, lens, tables)


def _flash_varlen(q: Any, k: Any, v: Any, cu: Any) -> Any:
    from ... import flash_attention

    return flash_attention(q, k, v, causal=True, cum_seqlens_q=cu)


def step_peers(s: ServingStep, q: Any, k_cache: Any, v_cache: Any, lens: Any, tables: Any, qsl: Any) -> list[Peer]:
    """The peers of a step on these values (module docstring): ``k_cache``/``v_cache`` are
    ``[pages, page_size, hk, d]``, ``tables`` ``[seqs, pages_per_seq]``."""
    if s.chunks == 0:
        kd, vd = (c[tables].reshape(s.decodes, -1, s.hk, s.d)[:, : s.context] for c in (k_cache, v_cache))
        on_gpu = device_for_arrays([]).platform == "gpu"
        return [
            Peer("page_attention", _page_attention, (q, k_cache, v_cache, lens, tables)),
            *(
                Peer(f"jax.nn[{name}] dense decode", functools.partial(_dense_decode, name), (q, kd, vd))
                for name in (["cudnn"] if on_gpu else []) + ["xla"]
            ),
        ]
    if s.decodes == 0 and s.chunk == s.chunk_context:
        pages = -(-s.chunk // s.page_size)
        kd, vd = (c[tables].reshape(s.chunks * pages, s.page_size, s.hk, s.d) for c in (k_cache, v_cache))
        kd, vd = (x.reshape(s.chunks, -1, s.hk, s.d)[:, : s.chunk].reshape(1, -1, s.hk, s.d) for x in (kd, vd))
        return [
            Peer("flash_attention varlen", _flash_varlen, (q[None], kd, vd, qsl), to_op=lambda o: o[0]),
        ]
    return []


class RaggedPageAttentionv2Bench(OpBench):
    metric = "gbps"

    @staticmethod
    def peer(platform: str) -> str:
        # Ratios are taken against the decode peer; a prefill row's peer is in its own records.
        return "page_attention"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--decodes", type=int, default=8, help="decoding sequences (one token each)")
        p.add_argument("--context", type=int, default=1024, help="the decoding sequences' context")
        p.add_argument("--chunks", type=int, default=1, help="prefill chunks")
        p.add_argument("--chunk", type=int, default=128, help="tokens per prefill chunk")
        p.add_argument("--chunk-context", type=int, default=1024, help="the chunks' context (>= --chunk)")
        p.add_argument("--h", type=int, default=8, help="query heads")
        p.add_argument("--hk", type=int, default=None, help="key/value heads (default: h)")
        p.add_argument("--d", type=int, default=64, help="head dim")
        p.add_argument("--page-size", type=int, default=16, help="tokens per page")

    def shape(self, ns: argparse.Namespace) -> ServingStep:
        s = ServingStep(
            decodes=ns.decodes,
            context=ns.context,
            chunks=ns.chunks,
            chunk=ns.chunk,
            chunk_context=ns.chunk_context,
            h=ns.h,
            hk=ns.hk or ns.h,
            d=ns.d,
            page_size=ns.page_size,
        )
        bad = [k for k in ("h", "hk", "d", "page_size") if getattr(s, k) < 1]
        bad += [k for k in ("decodes", "chunks") if getattr(s, k) < 0]
        if s.decodes + s.chunks == 0:
            bad.append("decodes")
        if bad:
            raise ValueError(f"bad {', '.join('--' + k.replace('_', '-') for k in bad)}")
        if s.h % s.hk:
            raise ValueError(f"bad --hk {s.hk}: heads ({s.h}) must be a multiple of kv heads")
        if (s.chunks and not 1 <= s.chunk <= s.chunk_context) or (s.decodes and s.context < 1):
            raise ValueError("bad --chunk/--chunk-context/--context: need 1 <= chunk <= chunk-context, context >= 1")
        return s

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        s = self.shape(ns)
        jdt = jnp.dtype(dtype)
        rng = np.random.default_rng(0)
        seqs = s.seqs()
        lens = np.asarray([c for _, c in seqs], np.int32)
        pages_per_seq = int(-(-lens.max() // s.page_size))
        num_pages = len(seqs) * pages_per_seq
        tables = rng.permutation(num_pages).reshape(len(seqs), pages_per_seq).astype(np.int32)
        qsl = np.concatenate([[0], np.cumsum([q for q, _ in seqs])]).astype(np.int32)
        kv = jnp.asarray(rng.standard_normal((num_pages, s.page_size, 2 * s.hk, s.d)), jdt)
        q = jnp.asarray(rng.standard_normal((int(qsl[-1]), s.h, s.d)), jdt)
        arrays = (q, kv, jnp.asarray(lens), jnp.asarray(tables), jnp.asarray(qsl), jnp.asarray(len(seqs), jnp.int32))
        nbytes = int(lens.sum()) * 2 * s.hk * s.d * jdt.itemsize + 2 * q.nbytes
        check_fn = None
        if check:
            from ...testing.conformance import LOW_PRECISION

            ref32 = ragged_page_attention_v2_reference(*arrays)
            ref_low = ragged_page_attention_v2_reference(*arrays, dtype=jdt, precision=LOW_PRECISION).astype(jdt)
            check_fn = make_check(dtype, ref32, ref_low, lambda o: o)
        peak = measure_copy_gbps(min(2 * kv.nbytes, 2**31), getattr(ns, "repeats", 10))
        case_peers = []
        if peers:
            case_peers = step_peers(
                s, q, kv[:, :, 0::2], kv[:, :, 1::2], jnp.asarray(lens), jnp.asarray(tables), jnp.asarray(qsl)
            )
        return [
            BenchCase(
                label=s.label(),
                fields=dataclasses.asdict(s),
                arrays=arrays,
                options={},
                cost=nbytes,
                peers=case_peers,
                check=check_fn,
                extra={"peak_gbps": peak},
            )
        ]


BENCH = RaggedPageAttentionv2Bench()
