"""The benchmark of ``prefill_page_attention`` (``ejkernel bench prefill_page_attention``).

One prefill step of one sequence: the last ``--chunk`` tokens of a ``--context`` over randomly
permuted pages. Reported as TFLOP/s of the attention the chunk does (4 · heads · head dim per
attended (query, key) pair, under the causal mask). Peers, on the same values: the gather + dense
``jax.nn.dot_product_attention`` of ``ragged_page_attention_v2``'s bench
(:func:`~ejkernel.ops.ragged_page_attention_v2.bench.dense_peers`: cuDNN on a GPU, XLA) over the
context gathered from the pages to one dense sequence, the chunk's queries under the causal mask
aligned to the context's end (ratios against cuDNN on a GPU where it accepts, else XLA); a chunk that is the
whole prompt (``--chunk == --context``) also beside ``flash_attention`` varlen. The gathering
happens once, outside the timed calls.
"""

from __future__ import annotations

import argparse
import dataclasses

import jax.numpy as jnp
import numpy as np

from ..benchmark import BenchCase, OpBench
from ..flash_attention.bench import make_check
from ..ragged_page_attention_v2.bench import ServingStep, dense_peer_names, step_peers
from .reference import prefill_page_attention_reference

__all__ = ["BENCH", "PrefillChunk", "PrefillPageAttentionBench"]


@dataclasses.dataclass(frozen=True)
class PrefillChunk:
    chunk: int
    context: int
    h: int
    hk: int
    d: int
    page_size: int

    def label(self) -> str:
        return f"{self.chunk}@{self.context} h{self.h}/{self.hk} d{self.d} ps{self.page_size}"

    def attended_pairs(self) -> int:
        """(query, key) pairs under the causal mask: row j attends context - chunk + j + 1 keys."""
        first = self.context - self.chunk + 1
        return self.chunk * first + self.chunk * (self.chunk - 1) // 2


class PrefillPageAttentionBench(OpBench):
    metric = "tflops"

    peer = staticmethod(dense_peer_names)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--chunk", type=int, default=512, help="query tokens of the chunk")
        p.add_argument("--context", type=int, default=4096, help="the sequence's context (>= --chunk)")
        p.add_argument("--h", type=int, default=8, help="query heads")
        p.add_argument("--hk", type=int, default=None, help="key/value heads (default: h)")
        p.add_argument("--d", type=int, default=64, help="head dim")
        p.add_argument("--page-size", type=int, default=16, help="tokens per page")

    def shape(self, ns: argparse.Namespace) -> PrefillChunk:
        s = PrefillChunk(chunk=ns.chunk, context=ns.context, h=ns.h, hk=ns.hk or ns.h, d=ns.d, page_size=ns.page_size)
        bad = [k for k in ("chunk", "h", "hk", "d", "page_size") if getattr(s, k) < 1]
        if bad:
            raise ValueError(f"bad {', '.join('--' + k.replace('_', '-') for k in bad)}")
        if s.h % s.hk:
            raise ValueError(f"bad --hk {s.hk}: heads ({s.h}) must be a multiple of kv heads")
        if s.context < s.chunk:
            raise ValueError(f"bad --context {s.context}: must be >= --chunk ({s.chunk})")
        return s

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        s = self.shape(ns)
        jdt = jnp.dtype(dtype)
        rng = np.random.default_rng(0)
        num_pages = -(-s.context // s.page_size)
        pages = rng.permutation(num_pages).astype(np.int32)
        kc, vc = (jnp.asarray(rng.standard_normal((s.hk, num_pages, s.page_size, s.d)), jdt) for _ in range(2))
        q = jnp.asarray(rng.standard_normal((s.chunk, s.h, s.d)), jdt)
        arrays = (q, kc, vc, jnp.array([s.context], jnp.int32), jnp.asarray(pages))
        check_fn = None
        if check:
            from ...testing.conformance import LOW_PRECISION

            ref32 = prefill_page_attention_reference(*arrays)
            ref_low = prefill_page_attention_reference(*arrays, dtype=jdt, precision=LOW_PRECISION).astype(jdt)
            check_fn = make_check(dtype, ref32, ref_low, lambda o: o)
        case_peers = []
        if peers:  # the same pages as [pages, page_size, hk, d] caches of one sequence
            step = ServingStep(
                0, 0, 1, chunk=s.chunk, chunk_context=s.context, h=s.h, hk=s.hk, d=s.d, page_size=s.page_size
            )
            caches = (jnp.moveaxis(c, 0, 2) for c in (kc, vc))
            qsl = jnp.asarray([0, s.chunk], jnp.int32)
            case_peers = step_peers(step, q, *caches, arrays[3], arrays[4][None], qsl)
        return [
            BenchCase(
                label=s.label(),
                fields=dataclasses.asdict(s),
                arrays=arrays,
                options={},
                cost=4.0 * s.h * s.d * s.attended_pairs(),
                peers=case_peers,
                check=check_fn,
            )
        ]


BENCH = PrefillPageAttentionBench()
