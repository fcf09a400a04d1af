"""The benchmark of ``grouped_matmul`` (``ejkernel bench grouped_matmul``).

Cost model: forward ``2·rows·k·n`` FLOPs with ``rows = sum(group_sizes)``; the backward is two
products of the same size (``dlhs`` and the transposed ``drhs``), so forward+backward counts 3×.
Group sizes are a multinomial draw over equally likely experts (``--dist multinomial``) or over
Zipf-skewed ones (``--dist zipf``: expert ``i`` has weight ``1/(i+1)``, shuffled). Peers on the
same inputs: ``jax.lax.ragged_dot`` and a dense matmul of the same FLOPs (``lhs @ rhs[0]``, the
bar: ratios are taken against it; its output is in the inputs' dtype). Outputs are float32, the
op's default ``preferred_element_type``, unless ``--out-dtype`` names others (``input``: the
inputs' dtype; or a comma list such as ``float32,input``: each shape runs with each, and the
summary gives each implementation's rate with the first against its rate with the second). The check compares the
first rows (up to 512) with the float32 reference.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..benchmark import BenchCase, OpBench, Peer
from ..flash_attention.bench import make_check
from .reference import grouped_matmul_reference

__all__ = ["BENCH", "GroupedMatmulBench", "GroupedShape", "group_sizes_for"]

DENSE_PEER = "dense matmul"
RAGGED_PEER = "lax.ragged_dot"
CHECK_ROWS = 512
OUT_DTYPES = ("input", "float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class GroupedShape:
    m: int
    k: int
    n: int
    g: int
    dist: str = "multinomial"
    transpose_rhs: bool = False
    out_dtype: str = "float32"  # the op's default preferred_element_type

    def label(self) -> str:
        out = "" if self.out_dtype == "float32" else f" out={self.out_dtype}"
        return f"m{self.m} k{self.k} n{self.n} g{self.g} {self.dist}" + (" rhsT" if self.transpose_rhs else "") + out


def group_sizes_for(m: int, g: int, dist: str, seed: int = 0) -> np.ndarray:
    """``g`` sizes summing to ``m``: multinomial over equal experts, or Zipf-skewed ones."""
    rng = np.random.default_rng(seed)
    if dist == "zipf":
        p = 1.0 / np.arange(1, g + 1)
        p = rng.permutation(p / p.sum())
    else:
        p = np.full(g, 1.0 / g)
    return rng.multinomial(m, p).astype(np.int32)


def _ragged_dot(lhs: Any, rhs: Any, sizes: Any, transpose: bool = False) -> Any:
    rhs = jnp.swapaxes(rhs, 1, 2) if transpose else rhs
    return jax.lax.ragged_dot(lhs, rhs, sizes, preferred_element_type=lhs.dtype)


def _dense(lhs: Any, b: Any) -> Any:
    return jnp.dot(lhs, b, preferred_element_type=lhs.dtype)


class GroupedMatmulBench(OpBench):
    metric = "tflops"
    backward_factor = 2.0
    peer = DENSE_PEER

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--shape", action="append", help="M,K,N,G (repeatable; default 16384,4096,2048,8)")
        p.add_argument("--dist", default="multinomial", help="group sizes: multinomial or zipf (or a comma list)")
        p.add_argument("--transpose-rhs", action="store_true", help="rhs as [g, n, k]")
        p.add_argument("--no-dense", action="store_true", help="leave out the dense matmul peer")
        p.add_argument("--no-ragged-dot", action="store_true", help="leave out the lax.ragged_dot peer")
        p.add_argument(
            "--out-dtype",
            default="float32",
            help="preferred_element_type: float32 (the op's default), input (the inputs' dtype), bfloat16, float16, "
            "or a comma list "
            "(the summary compares the first with the second)",
        )

    @staticmethod
    def out_dtypes(ns: argparse.Namespace) -> list[str]:
        names = [d.strip() for d in getattr(ns, "out_dtype", "float32").split(",") if d.strip()]
        bad = [d for d in names if d not in OUT_DTYPES]
        if bad or not names or len(set(names)) != len(names):
            raise ValueError(f"bad --out-dtype {ns.out_dtype!r}: distinct names among {', '.join(OUT_DTYPES)}")
        return names

    def shapes(self, ns: argparse.Namespace) -> list[GroupedShape]:
        dists = [d.strip() for d in ns.dist.split(",") if d.strip()]
        bad = [d for d in dists if d not in ("multinomial", "zipf")]
        if bad or not dists:
            raise ValueError(f"bad --dist {ns.dist!r}: multinomial, zipf, or a comma list of them")
        out = []
        for text in ns.shape or ["16384,4096,2048,8"]:
            try:
                m, k, n, g = (int(x) for x in text.replace("x", ",").split(","))
            except ValueError:
                raise ValueError(f"bad --shape {text!r}: expected M,K,N,G") from None
            if min(m, k, n, g) < 1:
                raise ValueError(f"bad --shape {text!r}: sizes must be positive")
            out += [GroupedShape(m, k, n, g, d, bool(ns.transpose_rhs), o) for d in dists for o in self.out_dtypes(ns)]
        return out

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        jdt = jnp.dtype(dtype)
        out = []
        for s in self.shapes(ns):
            sizes_np = group_sizes_for(s.m, s.g, s.dist)
            # Drawn on the device: the largest expert weights are gigabytes (e.g. 256 x 7168 x 2048).
            k_lhs, k_rhs = jax.random.split(jax.random.key(0))
            lhs = jax.random.normal(k_lhs, (s.m, s.k), jnp.float32).astype(jdt)
            rhs_shape = (s.g, s.n, s.k) if s.transpose_rhs else (s.g, s.k, s.n)
            rhs = (jax.random.normal(k_rhs, rhs_shape, jdt) / np.sqrt(s.k)).astype(jdt)
            sizes = jnp.asarray(sizes_np)
            out_dtype = jdt if s.out_dtype == "input" else jnp.dtype(s.out_dtype)
            opts = {"transpose_rhs": s.transpose_rhs, "preferred_element_type": out_dtype}
            case_peers = []
            # The dense matmul (the bar's reference) before lax.ragged_dot, which is slow on many
            # groups (80+ ms a call): a run cut by its time limit keeps the ratio.
            if peers and not getattr(ns, "no_dense", False):
                b0 = rhs[0].T if s.transpose_rhs else rhs[0]
                case_peers.append(Peer(DENSE_PEER, _dense, (lhs, b0), to_op=lambda o: None))
            if peers and not getattr(ns, "no_ragged_dot", False):
                case_peers.append(
                    Peer(RAGGED_PEER, lambda a, b, c, t=s.transpose_rhs: _ragged_dot(a, b, c, t), (lhs, rhs, sizes))
                )
            check_fn = None
            if check:
                check_fn = self._check(lhs, rhs, sizes_np, s, dtype)
            fields = dataclasses.asdict(s)
            fields["out_dtype"] = out_dtype.name
            fields["max_group"] = int(sizes_np.max())
            fields["empty_groups"] = int((sizes_np == 0).sum())
            out.append(
                BenchCase(
                    label=s.label(),
                    fields=fields,
                    arrays=(lhs, rhs, sizes),
                    options=opts,
                    cost=2.0 * float(sizes_np.sum()) * s.k * s.n,
                    peers=case_peers,
                    check=check_fn,
                )
            )
        return out

    @staticmethod
    def _check(lhs: Any, rhs: Any, sizes: np.ndarray, s: GroupedShape, dtype: str) -> Any:
        """The first ``CHECK_ROWS`` rows against the reference (only the groups they touch)."""
        from ...testing.conformance import LOW_PRECISION

        rows = min(s.m, CHECK_ROWS)
        ends = np.minimum(np.cumsum(sizes), rows)
        clipped = np.diff(np.concatenate([[0], ends])).astype(np.int32)
        used = np.flatnonzero(clipped)
        kw = dict(transpose_rhs=s.transpose_rhs)
        args = (lhs[:rows], rhs[used], jnp.asarray(clipped[used]))
        ref32 = grouped_matmul_reference(*args, **kw)
        ref_low = grouped_matmul_reference(*args, **kw, dtype=lhs.dtype, precision=LOW_PRECISION)
        check = make_check(dtype, ref32, ref_low.astype(lhs.dtype), lambda o: o[:rows])

        def run(out: Any) -> tuple[str, float]:
            return ("-", float("nan")) if out is None else check(out)

        return run

    def summary(self, records: list[dict[str, Any]], ns: argparse.Namespace) -> list[str]:
        """With two or more ``--out-dtype``: each implementation's rate with the first against
        its rate with the second, per shape (forward, and forward+backward when timed)."""
        names = self.out_dtypes(ns)
        if len(names) < 2:
            return []
        first, second = names[:2]
        by_key: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
        for r in records:
            key = (r["impl"], r["m"], r["k"], r["n"], r["g"], r["dist"], r["transpose_rhs"])
            by_key.setdefault(key, {})[r["out_dtype"]] = r
        lines = []
        for (impl, m, k, n, g, dist, t), recs in by_key.items():
            dtype = next(iter(recs.values()))["dtype"]
            a, b = (recs.get(dtype if name == "input" else name) for name in (first, second))
            if a is None or b is None or impl in (DENSE_PEER, RAGGED_PEER):  # peers ignore --out-dtype
                continue
            parts = []
            for key, what in (("fwd_tflops", "fwd"), ("fwdbwd_tflops", "fwd+bwd")):
                if a.get(key) and b.get(key):
                    parts.append(f"{what} {a[key] / b[key]:.3f} ({a[key]:.4g} / {b[key]:.4g} TFLOP/s)")
            shape = GroupedShape(m, k, n, g, dist, t).label()
            lines.append(f"{impl} {shape}: out={first} / out={second}: " + (", ".join(parts) or "not timed"))
        return lines


BENCH = GroupedMatmulBench()
