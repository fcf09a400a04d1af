"""The benchmark of ``unified_attention`` (``ejkernel bench unified_attention``).

One continuous-batching step, described as ``ragged_page_attention_v2``'s (the same options):
``--decodes`` sequences decoding one token at ``--context`` plus ``--chunks`` prefill chunks of
``--chunk`` tokens at the end of ``--chunk-context``, on randomly permuted blocks of separate key
and value caches. Reported as GB/s of the cache rows the step must read (each sequence's context
once) + queries read + output written, next to ``peak_gbps``, a device-to-device copy measured in
the same run. Peers: ``ragged_page_attention_v2``'s
(:func:`~ejkernel.ops.ragged_page_attention_v2.bench.step_peers`) on the same caches: the gather +
dense ``jax.nn.dot_product_attention`` on every step, ``page_attention`` beside a decode-only step,
``flash_attention`` varlen beside whole prompts; ratios as there.
"""

from __future__ import annotations

import argparse
import dataclasses

import jax.numpy as jnp
import numpy as np

from ..benchmark import BenchCase
from ..flash_attention.bench import make_check
from ..ragged_page_attention_v2.bench import RaggedPageAttentionv2Bench, step_peers
from ..timing import measure_copy_gbps
from .reference import unified_attention_reference

__all__ = ["BENCH", "UnifiedAttentionBench"]


class UnifiedAttentionBench(RaggedPageAttentionv2Bench):
    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        s = self.shape(ns)
        jdt = jnp.dtype(dtype)
        rng = np.random.default_rng(0)
        seqs = s.seqs()
        lens = np.asarray([c for _, c in seqs], np.int32)
        blocks_per_seq = int(-(-lens.max() // s.page_size))
        num_blocks = len(seqs) * blocks_per_seq
        tables = rng.permutation(num_blocks).reshape(len(seqs), blocks_per_seq).astype(np.int32)
        qsl = np.concatenate([[0], np.cumsum([q for q, _ in seqs])]).astype(np.int32)
        kc, vc = (jnp.asarray(rng.standard_normal((num_blocks, s.page_size, s.hk, s.d)), jdt) for _ in range(2))
        q = jnp.asarray(rng.standard_normal((int(qsl[-1]), s.h, s.d)), jdt)
        arrays = (q, kc, vc, jnp.asarray(lens), jnp.asarray(tables), jnp.asarray(qsl))
        nbytes = int(lens.sum()) * 2 * s.hk * s.d * jdt.itemsize + 2 * q.nbytes
        check_fn = None
        if check:
            from ...testing.conformance import LOW_PRECISION

            ref32 = unified_attention_reference(*arrays)
            ref_low = unified_attention_reference(*arrays, dtype=jdt, precision=LOW_PRECISION).astype(jdt)
            check_fn = make_check(dtype, ref32, ref_low, lambda o: o)
        peak = measure_copy_gbps(min(4 * kc.nbytes, 2**31), getattr(ns, "repeats", 10))
        case_peers = step_peers(s, q, kc, vc, *arrays[3:]) if peers else []
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


BENCH = UnifiedAttentionBench()
