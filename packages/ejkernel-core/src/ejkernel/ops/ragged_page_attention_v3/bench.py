"""The benchmark of ``ragged_page_attention_v3`` (``ejkernel bench ragged_page_attention_v3``).

One continuous-batching step: ``--decodes`` sequences decoding one token at ``--context`` plus
``--chunks`` prefill chunks of ``--chunk`` tokens at the end of ``--chunk-context``, on randomly
permuted pages of the packed cache. Reported as GB/s of the cache rows the step must read (each
sequence's context once) + the new keys and values read and written into the cache + queries read +
output written, next to ``peak_gbps``, a device-to-device copy measured in the same run. Peers:
``ragged_page_attention_v2``'s (:func:`~ejkernel.ops.ragged_page_attention_v2.bench.step_peers`: the
gather + dense ``jax.nn.dot_product_attention`` on every step, ``page_attention`` beside a
decode-only step, ``flash_attention`` varlen beside whole prompts; ratios as there) on the cache
this step writes: the new keys and values are written, and the cache is unpacked to key and value
pages, once, outside the timed calls, so a peer's time is the attention alone, while the op's
includes writing the step's keys and values into the cache (its bytes count them). The timing loop
passes each call's updated cache to the next, as a serving loop that donates it does: the cache is
updated in place, never copied (each step rewrites the same slots with the same values, so every
call does the same work).
"""

from __future__ import annotations

import argparse
import dataclasses

import jax.numpy as jnp
import numpy as np

from ..benchmark import BenchCase, OpBench
from ..flash_attention.bench import make_check
from ..ragged_page_attention_v2.bench import BENCH as V2
from ..ragged_page_attention_v2.bench import ServingStep, step_peers
from ..timing import measure_copy_gbps
from .kv_cache import ragged_page_attention_v3_cache_shape, ragged_page_attention_v3_unpack_cache
from .reference import ragged_page_attention_v3_reference

__all__ = ["BENCH", "RaggedPageAttentionv3Bench"]


class RaggedPageAttentionv3Bench(OpBench):
    metric = "gbps"
    peer = staticmethod(V2.peer)

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        V2.add_arguments(p)  # the same serving step as v2's

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        s: ServingStep = V2.shape(ns)
        jdt = jnp.dtype(dtype)
        rng = np.random.default_rng(0)
        seqs = s.seqs()
        lens = np.asarray([c for _, c in seqs], np.int32)
        pages_per_seq = int(-(-lens.max() // s.page_size))
        num_pages = len(seqs) * pages_per_seq
        tables = rng.permutation(num_pages).astype(np.int32)
        qsl = np.concatenate([[0], np.cumsum([q for q, _ in seqs])]).astype(np.int32)
        shape = ragged_page_attention_v3_cache_shape(num_pages, s.page_size, s.hk, s.d, jdt)
        cache = jnp.asarray(rng.standard_normal(shape), jdt)
        tokens = int(qsl[-1])
        q = jnp.asarray(rng.standard_normal((tokens, s.h, s.d)), jdt)
        k, v = (jnp.asarray(rng.standard_normal((tokens, s.hk, s.d)), jdt) for _ in range(2))
        decode_end = s.decodes  # the decodes come first, then the chunks (mixed)
        dist = np.asarray([decode_end, decode_end, len(seqs)], np.int32)
        arrays = (q, k, v, cache, *(jnp.asarray(x) for x in (lens, tables, qsl, dist)))
        row = int(np.prod(shape[2:])) * jdt.itemsize  # one token's packed keys and values
        nbytes = int(lens.sum()) * row + tokens * row + 2 * k.nbytes + 2 * q.nbytes
        options = {"softmax_scale": s.d**-0.5}
        # (the float32 output, the cache with the step's keys and values written)
        ref32 = ragged_page_attention_v3_reference(*arrays, **options) if (check or peers) else None
        check_fn = None
        if check:
            from ...testing.conformance import LOW_PRECISION

            ref_low = ragged_page_attention_v3_reference(*arrays, **options, dtype=jdt, precision=LOW_PRECISION)[0]
            check_fn = make_check(dtype, ref32[0], ref_low.astype(jdt), lambda o: o[0])
        peak = measure_copy_gbps(min(2 * cache.nbytes, 2**31), getattr(ns, "repeats", 10))
        case_peers = []
        if peers:
            kp, vp = ragged_page_attention_v3_unpack_cache(ref32[1], s.hk, s.d)
            step = (jnp.asarray(lens), jnp.asarray(tables.reshape(len(seqs), -1)), jnp.asarray(qsl))
            # The op returns (output, cache): a peer's output is checked as the op's first.
            case_peers = [
                dataclasses.replace(p, to_op=lambda o, f=p.to_op: ((f(o) if f else o),))
                for p in step_peers(s, q, kp, vp, *step)
            ]
        return [
            BenchCase(
                label=s.label(),
                fields=dataclasses.asdict(s),
                arrays=arrays,
                options=options,
                cost=nbytes,
                peers=case_peers,
                check=check_fn,
                extra={"peak_gbps": peak},
                feedback={3: 1},  # kv_cache <- the updated cache
            )
        ]


BENCH = RaggedPageAttentionv3Bench()
