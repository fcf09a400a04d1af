"""The benchmark of ``ragged_page_attention_v2`` (``ejkernel bench ragged_page_attention_v2``).

One continuous-batching step: ``--decodes`` sequences decoding one token at ``--context`` plus
``--chunks`` prefill chunks of ``--chunk`` tokens at the end of ``--chunk-context``, on randomly
permuted pages. Reported as GB/s of the cache rows the step must read (each sequence's context
once) + queries read + output written, next to ``peak_gbps``, a device-to-device copy measured in
the same run.

Peers, on the same values: every step beside the gather + dense ``jax.nn.dot_product_attention``
(cuDNN on a GPU, XLA; :func:`dense_peers`) over the contexts gathered from the pages, a plain
decode for a decode-only step, the padded query rows under the causal mask otherwise; a
decode-only step (``--chunks 0``) also beside ``page_attention`` (the default implementation,
over the cache's K and V halves as separate caches); a prefill-only step whose chunks are whole
prompts (``--decodes 0``, ``--chunk == --chunk-context``) also beside ``flash_attention`` varlen
(causal, ``cum_seqlens_q``) on the same tokens with a dense cache. The gathering, splitting and
padding happen once, outside the timed calls (a kernel's bar), but for the plain JAX a user would
write, ``jax.nn[xla] gather + dense`` (``... dense decode`` for a decode-only step), which gathers
the pages and the query rows inside them (the XLA path's peer). Ratios are against
``page_attention`` beside a decode-only step, else the gather + dense peer: cuDNN's beside the
pre-gathered cache on a GPU (where it accepts), the timed gather's on a CPU.
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
from ..page_attention.bench import _dense_decode, _gather_dense_decode, gather_pages_dense
from ..timing import measure_copy_gbps
from .reference import ragged_page_attention_v2_reference

__all__ = ["BENCH", "RaggedPageAttentionv2Bench", "ServingStep", "dense_peer_names", "dense_peers", "step_peers"]


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


GATHERED = "gather + dense"


def dense_peer_names(platform: str) -> tuple[str, ...]:
    """The ratio peers among :func:`dense_peers`' masked forms on ``platform``, in order of
    preference: cuDNN's and XLA's over the pre-gathered cache on a GPU, the timed gather on a CPU."""
    if platform == "gpu":
        return ("jax.nn[cudnn] dense", "jax.nn[xla] dense")
    return (f"jax.nn[xla] {GATHERED}",)


def _dense_step(implementation: str, q: Any, k: Any, v: Any, mask: Any) -> Any:
    return jax.nn.dot_product_attention(q, k, v, mask=mask, implementation=implementation)


def _gather_dense_step(
    ctx: int, q: Any, k_cache: Any, v_cache: Any, tables: Any, rows: Any, valid: Any, mask: Any
) -> Any:
    qp = jnp.where(valid[..., None, None], q[rows], 0)
    return _dense_step("xla", qp, *gather_pages_dense(ctx, k_cache, v_cache, tables), mask)


def dense_peers(q: Any, k_cache: Any, v_cache: Any, lens: Any, tables: Any, qsl: Any) -> list[Peer]:
    """The gather + dense peers of a serving step: ``jax.nn.dot_product_attention`` (``"cudnn"``
    on a GPU, where it accepts the shapes, and ``"xla"``) over each sequence's context gathered
    from its pages to a dense ``[seqs, max context, hk, d]`` batch. ``q`` is the packed query rows
    ``[tokens, h, d]``, ``k_cache``/``v_cache`` ``[pages, page_size, hk, d]``, ``tables``
    ``[seqs, pages_per_seq]``, ``lens`` each sequence's context (its new tokens included) and
    ``qsl`` its first query row. A step of decodes at one context is a plain decode (one query per
    sequence, no mask, ``jax.nn[...] dense decode``); any other step pads each sequence's query
    rows to ``[seqs, max rows, h, d]`` under a mask where row ``j`` of a sequence of ``n`` rows
    at context ``c`` attends keys ``<= c - n + j`` (causal, aligned to the context's end),
    ``jax.nn[...] dense``. The gather, the padding and the mask are made here, outside the timed
    calls; the padded rows are dropped when the output is checked."""
    lens, tables, qsl = (np.asarray(x) for x in (lens, tables, qsl))
    qlens = np.diff(qsl)
    n, ctx = len(lens), int(lens.max())
    impls = (["cudnn"] if device_for_arrays([]).platform == "gpu" else []) + ["xla"]
    tables_d = jnp.asarray(tables)
    kd, vd = gather_pages_dense(ctx, k_cache, v_cache, tables_d)
    if (qlens == 1).all() and (lens == ctx).all():
        return [
            *(
                Peer(f"jax.nn[{name}] dense decode", functools.partial(_dense_decode, name), (q, kd, vd))
                for name in impls
            ),
            Peer(
                f"jax.nn[xla] {GATHERED} decode",
                functools.partial(_gather_dense_decode, ctx),
                (q, k_cache, v_cache, tables_d),
            ),
        ]
    mq = int(qlens.max())
    valid = np.arange(mq) < qlens[:, None]  # [seqs, max rows]
    rows = np.where(valid, qsl[:-1, None] + np.arange(mq), 0)
    qp = jnp.where(jnp.asarray(valid)[..., None, None], q[jnp.asarray(rows)], 0)
    last = lens[:, None] - qlens[:, None] + np.arange(mq)  # each row's position: its last key
    mask = jnp.asarray((np.arange(ctx) <= last[..., None])[:, None])  # [seqs, 1, max rows, ctx]
    live = jnp.asarray(np.flatnonzero(valid))  # the packed rows, in order
    h = q.shape[1]

    def to_op(o: Any) -> Any:
        return o.reshape(n * mq, h, -1)[live]

    return [
        *(
            Peer(f"jax.nn[{name}] dense", functools.partial(_dense_step, name), (qp, kd, vd, mask), to_op=to_op)
            for name in impls
        ),
        Peer(
            f"jax.nn[xla] {GATHERED}",
            functools.partial(_gather_dense_step, ctx),
            (q, k_cache, v_cache, tables_d, jnp.asarray(rows), jnp.asarray(valid), mask),
            to_op=to_op,
        ),
    ]


def step_peers(s: ServingStep, q: Any, k_cache: Any, v_cache: Any, lens: Any, tables: Any, qsl: Any) -> list[Peer]:
    """The peers of a step on these values (module docstring): ``k_cache``/``v_cache`` are
    ``[pages, page_size, hk, d]``, ``tables`` ``[seqs, pages_per_seq]``; :func:`dense_peers` on
    every step, ``page_attention`` beside a decode-only step, ``flash_attention`` varlen beside a
    step of whole prompts."""
    peers = dense_peers(q, k_cache, v_cache, lens, tables, qsl)
    if s.chunks == 0:
        peers.insert(0, Peer("page_attention", _page_attention, (q, k_cache, v_cache, lens, tables)))
    elif s.decodes == 0 and s.chunk == s.chunk_context:
        pages = -(-s.chunk // s.page_size)
        kd, vd = (c[tables].reshape(s.chunks * pages, s.page_size, s.hk, s.d) for c in (k_cache, v_cache))
        kd, vd = (x.reshape(s.chunks, -1, s.hk, s.d)[:, : s.chunk].reshape(1, -1, s.hk, s.d) for x in (kd, vd))
        peers.append(Peer("flash_attention varlen", _flash_varlen, (q[None], kd, vd, qsl), to_op=lambda o: o[0]))
    return peers


class RaggedPageAttentionv2Bench(OpBench):
    metric = "gbps"

    @staticmethod
    def peer(platform: str) -> tuple[str, ...]:
        # page_attention beside a decode-only step; the gather + dense peer beside any other.
        return ("page_attention", *dense_peer_names(platform))

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
