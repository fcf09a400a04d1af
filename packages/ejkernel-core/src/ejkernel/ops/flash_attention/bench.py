"""The benchmark of the dense attention ops (``ejkernel bench flash_attention``, ``... scaled_dot_product_attention``).

Cost model (DESIGN.md): forward ``4·b·h·sq·sk·d`` FLOPs (``2·b·h·sq·sk·(d + dv)`` when
``dv != d``; the sum over sequences for varlen), half when causal; backward 2.5× forward. Peers on
the same inputs: ``jax.nn.dot_product_attention`` with ``implementation="xla"`` and, on GPU,
``"cudnn"`` (ratios are taken against cuDNN on GPU, XLA elsewhere); varlen peers take the packed
sequences as a padded batch. Each output is checked against the float32 reference on one batch
element and one head group.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...types.mask_info import canonical_window
from ..benchmark import BenchCase, OpBench, Peer
from ..device import device_for_arrays
from .reference import attention_reference

__all__ = ["BENCH", "AttentionShape", "DenseAttentionBench", "parse_attention_shape"]


@dataclasses.dataclass(frozen=True)
class AttentionShape:
    b: int
    sq: int
    sk: int
    h: int
    hk: int
    d: int
    dv: int
    causal: bool = False
    window: tuple[int, int] | None = None
    varlen: int = 0  # > 0: that many sequences of random lengths packed in b*sq tokens

    def label(self) -> str:
        s = f"b{self.b} sq{self.sq} sk{self.sk} h{self.h}/{self.hk} d{self.d}"
        if self.dv != self.d:
            s += f" dv{self.dv}"
        if self.causal:
            s += " causal"
        if self.window:
            s += f" win{self.window[0]},{self.window[1]}"
        if self.varlen:
            s += f" varlen{self.varlen}"
        return s


def parse_attention_shape(text: str, causal: bool, window: tuple[int, int] | None, varlen: int) -> AttentionShape:
    """``B,SQ,H,D`` or ``B,SQ,SK,H,HK,D`` (or ``...,DV``); ``ValueError`` naming ``--shape``."""
    try:
        nums = [int(x) for x in text.replace("x", ",").split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"bad --shape {text!r}: expected B,SQ,H,D or B,SQ,SK,H,HK,D[,DV]") from None
    if len(nums) == 4:
        b, sq, h, d = nums
        sk, hk, dv = sq, h, d
    elif len(nums) in (6, 7):
        b, sq, sk, h, hk, d = nums[:6]
        dv = nums[6] if len(nums) == 7 else d
    else:
        raise ValueError(f"bad --shape {text!r}: expected B,SQ,H,D or B,SQ,SK,H,HK,D[,DV]")
    shape = AttentionShape(b=b, sq=sq, sk=sk, h=h, hk=hk, d=d, dv=dv, causal=causal, window=window, varlen=varlen)
    _check_shape(shape, f"--shape {text}")
    return shape


def _check_shape(s: AttentionShape, what: str) -> None:
    sizes = {"b": s.b, "sq": s.sq, "sk": s.sk, "h": s.h, "hk": s.hk, "d": s.d, "dv": s.dv}
    bad = [k for k, v in sizes.items() if v < 1]
    if bad:
        raise ValueError(f"bad {what}: {', '.join(bad)} must be positive")
    if s.h % s.hk:
        raise ValueError(f"bad {what}: heads ({s.h}) must be a multiple of kv heads ({s.hk})")
    if s.varlen and not 1 <= s.varlen <= s.b * s.sq:
        raise ValueError(f"bad --varlen {s.varlen}: between 1 and b*sq = {s.b * s.sq} sequences")


def _varlen_lengths(total: int, n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, total), size=n - 1, replace=False)) if n > 1 else np.array([], int)
    return list(np.diff(np.concatenate([[0], cuts, [total]])).astype(int))


def attention_flops(shape: AttentionShape, lengths: list[int] | None) -> float:
    pairs = sum(n * n for n in lengths) if lengths else shape.b * shape.sq * shape.sk
    flops = 2.0 * pairs * shape.h * (shape.d + shape.dv)
    return flops / 2 if shape.causal else flops


def _pad_batch(x: Any, lengths: list[int]) -> Any:
    """Packed ``[1, total, ...]`` → padded ``[n, max_len, ...]``."""
    n, m = len(lengths), max(lengths)
    out = jnp.zeros((n, m, *x.shape[2:]), x.dtype)
    start = 0
    for i, ln in enumerate(lengths):
        out = out.at[i, :ln].set(x[0, start : start + ln])
        start += ln
    return out


def _unpad_batch(x: Any, lengths: list[int]) -> Any:
    return jnp.concatenate([x[i, :ln] for i, ln in enumerate(lengths)], axis=0)[None]


def _peer_fn(shape: AttentionShape, implementation: str, lengths: list[int] | None) -> Any:
    def fn(q: Any, k: Any, v: Any) -> Any:
        kwargs: dict[str, Any] = {"is_causal": shape.causal, "implementation": implementation}
        if shape.window is not None:
            kwargs["local_window_size"] = shape.window
        if lengths is not None:
            seq = jnp.asarray(lengths, jnp.int32)
            kwargs["query_seq_lengths"] = seq
            kwargs["key_value_seq_lengths"] = seq
        return jax.nn.dot_product_attention(q, k, v, **kwargs)

    return fn


def make_check(dtype: str, ref32: Any, ref_low: Any, select: Any) -> Any:
    """``check(out) -> (status, max_error)`` of ``select(out)`` against the references."""
    from ...testing import conformance as C

    def check(out: Any) -> tuple[str, float]:
        o = select(out)
        err = float(jnp.max(jnp.abs(o.astype(jnp.float32) - ref32)))
        try:
            C.assert_close("bench", o, ref32, ref_low, dtype, C.ATOL)
        except AssertionError as e:
            return f"FAIL ({str(e).split(': ', 2)[-1][:60]})", err
        return "ok", err

    return check


class DenseAttentionBench(OpBench):
    metric = "tflops"
    backward_factor = 2.5

    def __init__(self, boundaries: str = "cum_seqlens_q") -> None:
        self.boundaries = boundaries  # the op's keyword for packed sequence boundaries (--varlen)

    @staticmethod
    def peer(platform: str) -> str:
        return "jax.nn[cudnn]" if platform == "gpu" else "jax.nn[xla]"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--shape", action="append", help="B,SQ,H,D or B,SQ,SK,H,HK,D[,DV] (repeatable)")
        p.add_argument("--b", type=int, default=1, help="batch")
        p.add_argument("--sq", type=int, default=1024, help="query length")
        p.add_argument("--sk", type=int, default=None, help="key length (default: sq)")
        p.add_argument("--h", type=int, default=8, help="query heads")
        p.add_argument("--hk", type=int, default=None, help="key/value heads (default: h)")
        p.add_argument("--d", type=int, default=64, help="head dim")
        p.add_argument("--dv", type=int, default=None, help="value head dim (default: d)")
        p.add_argument("--causal", default="no", choices=("no", "yes", "both"))
        p.add_argument("--window", default=None, help="sliding window W or LEFT,RIGHT")
        p.add_argument("--varlen", type=int, default=0, help="pack N sequences of random lengths in b*sq tokens")

    def shapes(self, ns: argparse.Namespace) -> list[AttentionShape]:
        window = None
        if ns.window is not None:
            try:
                parts = [int(x) for x in ns.window.split(",")]
                window = canonical_window(parts[0] if len(parts) == 1 else tuple(parts), "--window")
            except (ValueError, TypeError) as e:
                raise ValueError(
                    f"bad --window {ns.window!r}: expected W or LEFT,RIGHT of non-negative ints ({e})"
                ) from None
        causal_values = {"no": [False], "yes": [True], "both": [False, True]}[ns.causal]
        texts = ns.shape or [f"{ns.b},{ns.sq},{ns.sk or ns.sq},{ns.h},{ns.hk or ns.h},{ns.d},{ns.dv or ns.d}"]
        return [parse_attention_shape(t, c, window, ns.varlen) for t in texts for c in causal_values]

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        on_gpu = device_for_arrays([]).platform == "gpu"
        out = []
        for shape in self.shapes(ns):
            rng = np.random.default_rng(0)
            lengths = _varlen_lengths(shape.b * shape.sq, shape.varlen) if shape.varlen else None
            b_in = 1 if lengths else shape.b
            sq_in = shape.b * shape.sq if lengths else shape.sq
            sk_in = shape.b * shape.sk if lengths else shape.sk
            jdt = jnp.dtype(dtype)
            q = jnp.asarray(rng.standard_normal((b_in, sq_in, shape.h, shape.d)), jdt)
            k = jnp.asarray(rng.standard_normal((b_in, sk_in, shape.hk, shape.d)), jdt)
            v = jnp.asarray(rng.standard_normal((b_in, sk_in, shape.hk, shape.dv)), jdt)
            opts: dict[str, Any] = {"causal": shape.causal, "sliding_window": shape.window}
            if lengths:
                opts["cum_seqlens_q"] = jnp.asarray(np.cumsum([0, *lengths]), jnp.int32)
            case_peers = []
            if peers:
                for name in (["cudnn"] if on_gpu else []) + ["xla"]:
                    arrays = (q, k, v) if lengths is None else tuple(_pad_batch(x, lengths) for x in (q, k, v))
                    to_op = None if lengths is None else (lambda o, ls=lengths: _unpad_batch(o, ls))
                    case_peers.append(Peer(f"jax.nn[{name}]", _peer_fn(shape, name, lengths), arrays, to_op))
            check_fn = None
            if check:  # one batch element and one head group against the reference
                from ...testing.conformance import LOW_PRECISION

                g = shape.h // shape.hk
                sl, kv_sl = (slice(0, 1), slice(None), slice(0, g)), (slice(0, 1), slice(None), slice(0, 1))
                ref32 = attention_reference(q[sl], k[kv_sl], v[kv_sl], **opts)
                ref_low = attention_reference(
                    q[sl], k[kv_sl], v[kv_sl], **opts, dtype=jdt, precision=LOW_PRECISION
                ).astype(jdt)
                check_fn = make_check(dtype, ref32, ref_low, lambda o, g=g: o[:1, :, :g])
            fields = dataclasses.asdict(shape)
            fields["window"] = list(shape.window) if shape.window else None
            out.append(
                BenchCase(
                    label=shape.label(),
                    fields=fields,
                    arrays=(q, k, v),
                    options={self.boundaries if n == "cum_seqlens_q" else n: x for n, x in opts.items()},
                    cost=attention_flops(shape, lengths),
                    peers=case_peers,
                    check=check_fn,
                )
            )
        return out


BENCH = DenseAttentionBench()
