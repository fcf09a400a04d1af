"""The benchmark of ``ragged_decode_attention`` (``ejkernel bench ragged_decode_attention``).

Decode is memory-bound: every sequence attends ``[0, --context)`` of its cache; bytes = K and V
rows read + query read + output written, reported as GB/s next to ``peak_gbps``, a
device-to-device copy measured in the same run. Peer: ``jax.nn.dot_product_attention`` decode
over the same cache with ``key_value_seq_lengths`` (``"cudnn"`` on GPU and ``"xla"``).
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
from .reference import ragged_decode_attention_reference

__all__ = ["BENCH", "RaggedDecodeAttentionBench", "RaggedDecodeShape"]


@dataclasses.dataclass(frozen=True)
class RaggedDecodeShape:
    b: int
    h: int
    hk: int
    d: int
    context: int

    def label(self) -> str:
        return f"b{self.b} h{self.h}/{self.hk} d{self.d} ctx{self.context}"


def _dense_decode(implementation: str, q: Any, k: Any, v: Any, lens: Any) -> Any:
    return jax.nn.dot_product_attention(q[:, None], k, v, key_value_seq_lengths=lens, implementation=implementation)[
        :, 0
    ]


class RaggedDecodeAttentionBench(OpBench):
    metric = "gbps"

    @staticmethod
    def peer(platform: str) -> str:
        return "jax.nn[cudnn] dense decode" if platform == "gpu" else "jax.nn[xla] dense decode"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--b", type=int, default=8, help="batch (sequences)")
        p.add_argument("--h", type=int, default=8, help="query heads")
        p.add_argument("--hk", type=int, default=None, help="key/value heads (default: h)")
        p.add_argument("--d", type=int, default=64, help="head dim")
        p.add_argument("--context", type=int, action="append", help="context length (repeatable; default 1024)")

    def shapes(self, ns: argparse.Namespace) -> list[RaggedDecodeShape]:
        shapes = [
            RaggedDecodeShape(b=ns.b, h=ns.h, hk=ns.hk or ns.h, d=ns.d, context=c) for c in (ns.context or [1024])
        ]
        for s in shapes:
            bad = [k for k in ("b", "h", "hk", "d", "context") if getattr(s, k) < 1]
            if bad:
                raise ValueError(f"bad {', '.join('--' + k for k in bad)}: must be positive")
            if s.h % s.hk:
                raise ValueError(f"bad --hk {s.hk}: heads ({s.h}) must be a multiple of kv heads")
        return shapes

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        on_gpu = device_for_arrays([]).platform == "gpu"
        jdt = jnp.dtype(dtype)
        out, peak = [], None
        for s in self.shapes(ns):
            rng = np.random.default_rng(0)
            k = jnp.asarray(rng.standard_normal((s.b, s.context, s.hk, s.d)), jdt)
            v = jnp.asarray(rng.standard_normal((s.b, s.context, s.hk, s.d)), jdt)
            q = jnp.asarray(rng.standard_normal((s.b, s.h, s.d)), jdt)
            start = jnp.zeros((s.b,), jnp.int32)
            end = jnp.full((s.b,), s.context, jnp.int32)
            nbytes = 2 * k.nbytes + 2 * q.nbytes
            if peak is None:
                peak = measure_copy_gbps(min(2 * k.nbytes, 2**31), getattr(ns, "repeats", 10))
            case_peers = []
            if peers:
                for name in (["cudnn"] if on_gpu else []) + ["xla"]:
                    case_peers.append(
                        Peer(f"jax.nn[{name}] dense decode", functools.partial(_dense_decode, name), (q, k, v, end))
                    )
            check_fn = None
            if check:
                from ...testing.conformance import LOW_PRECISION

                n = min(s.b, 4)
                ref32 = ragged_decode_attention_reference(q[:n], k[:n], v[:n], start[:n], end[:n])
                ref_low = ragged_decode_attention_reference(
                    q[:n], k[:n], v[:n], start[:n], end[:n], dtype=jdt, precision=LOW_PRECISION
                ).astype(jdt)
                check_fn = make_check(dtype, ref32, ref_low, lambda o, n=n: o[:n])
            out.append(
                BenchCase(
                    label=s.label(),
                    fields=dataclasses.asdict(s),
                    arrays=(q, k, v, start, end),
                    options={},
                    cost=nbytes,
                    peers=case_peers,
                    check=check_fn,
                    extra={"peak_gbps": peak},
                )
            )
        return out


BENCH = RaggedDecodeAttentionBench()
