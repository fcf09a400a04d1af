"""The benchmark of ``mean_pooling`` (``ejkernel bench mean_pooling``).

Memory-bound: bytes = ``x`` read once + the output written + ``cu_seqlens``; reported as GB/s next
to ``peak_gbps``, a device-to-device copy measured in the same run. Inputs: ``--tokens`` rows of
``--hidden`` packed into ``--seqs`` sequences of random lengths (``--seqs 0``: a dense
``[tokens // 512, 512, hidden]`` batch). Peer: the XLA segment-sum formulation (``jax.ops.segment_sum``
of the rows in float32 over precomputed row → sequence ids, times ``1 / length``).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..benchmark import BenchCase, OpBench, Peer
from ..timing import measure_copy_gbps
from .reference import mean_pooling_reference

__all__ = ["BENCH", "MeanPoolingBench", "PoolShape"]

DENSE_SEQ = 512


@dataclasses.dataclass(frozen=True)
class PoolShape:
    tokens: int
    hidden: int
    seqs: int

    def label(self) -> str:
        form = f"seqs{self.seqs}" if self.seqs else f"dense b{self.tokens // DENSE_SEQ}x{DENSE_SEQ}"
        return f"tokens{self.tokens} hidden{self.hidden} {form}"


def _segment_sum_peer(n: int):
    def peer(x: Any, seg: Any, inv_len: Any) -> Any:
        sums = jax.ops.segment_sum(x.astype(jnp.float32), seg, num_segments=n, indices_are_sorted=True)
        return (sums * inv_len[:, None]).astype(x.dtype)

    return peer


class MeanPoolingBench(OpBench):
    metric = "gbps"
    peer = "xla segment_sum"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--tokens", type=int, action="append", help="rows (repeatable; default 262144)")
        p.add_argument("--hidden", type=int, default=4096, help="hidden size")
        p.add_argument("--seqs", type=int, default=64, help="packed sequences of random lengths (0: dense batch)")

    def shapes(self, ns: argparse.Namespace) -> list[PoolShape]:
        shapes = [PoolShape(tokens=t, hidden=ns.hidden, seqs=ns.seqs) for t in (ns.tokens or [262144])]
        for s in shapes:
            if s.tokens < 1 or s.hidden < 1 or s.seqs < 0:
                raise ValueError("bad --tokens/--hidden/--seqs: tokens and hidden must be positive, seqs >= 0")
            if s.seqs == 0 and s.tokens % DENSE_SEQ:
                raise ValueError(f"bad --tokens {s.tokens}: --seqs 0 (dense) needs a multiple of {DENSE_SEQ}")
            if s.seqs > s.tokens:
                raise ValueError(f"bad --seqs {s.seqs}: more sequences than --tokens {s.tokens}")
        return shapes

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        jdt = jnp.dtype(dtype)
        out, peak = [], None
        for s in self.shapes(ns):
            rng = np.random.default_rng(0)
            x = jax.random.normal(jax.random.key(0), (s.tokens, s.hidden), jdt)
            if s.seqs:
                cuts = np.sort(rng.choice(np.arange(1, s.tokens), s.seqs - 1, replace=False))
                cu = np.concatenate([[0], cuts, [s.tokens]]).astype(np.int32)
                arrays: tuple[Any, ...] = (x, jnp.asarray(cu))
                n = s.seqs
            else:
                n = s.tokens // DENSE_SEQ
                cu = np.arange(n + 1, dtype=np.int32) * DENSE_SEQ
                arrays = (x.reshape(n, DENSE_SEQ, s.hidden),)
            nbytes = x.nbytes + n * s.hidden * jdt.itemsize + cu.nbytes
            if peak is None:
                peak = measure_copy_gbps(min(2 * x.nbytes, 2**31), getattr(ns, "repeats", 10))
            case_peers = []
            if peers:
                seg = jnp.asarray(np.repeat(np.arange(n, dtype=np.int32), np.diff(cu)))
                inv = jnp.asarray(1.0 / np.maximum(np.diff(cu), 1), jnp.float32)
                case_peers.append(Peer("xla segment_sum", _segment_sum_peer(n), (x, seg, inv), to_op=None))
            check_fn = None
            if check:
                check_fn = _check(dtype, x, cu, n)
            out.append(
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
            )
        return out


def _check(dtype: str, x: Any, cu: np.ndarray, n: int) -> Any:
    """Compare the first 8 sequences (all rows of the output are the same computation)."""
    from ...testing import conformance as C

    k = min(n, 8)
    sub_cu = cu[: k + 1]
    xs = x[: int(sub_cu[-1])]
    ref32 = mean_pooling_reference(xs, sub_cu)
    ref_low = mean_pooling_reference(xs, sub_cu, dtype=jnp.dtype(dtype)).astype(x.dtype)

    def check(out: Any) -> tuple[str, float]:
        o = out.reshape(-1, out.shape[-1])[:k]
        err = float(jnp.max(jnp.abs(o.astype(jnp.float32) - ref32)))
        try:
            C.assert_close("bench", o, ref32, ref_low, dtype, C.ATOL)
        except AssertionError as e:
            return f"FAIL ({str(e).split(': ', 2)[-1][:60]})", err
        return "ok", err

    return check


BENCH = MeanPoolingBench()
