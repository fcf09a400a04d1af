"""The benchmark of ``state_space_v1`` (``ejkernel bench state_space_v1``).

Cost model: the recurrence does about ``FLOPS_PER_ELEMENT`` = 9 operations per (token, channel,
state) element (the decay's multiply and exponential, two multiplies for the input, the state
update, the output's multiply-add), ``9 · b · s · d · n`` forward FLOPs; backward counted 2.5×.
Exponentials run on the special-function units, so this is a yardstick for comparing runs, not a
ceiling. Peer: the whole-sequence ``lax.associative_scan`` formulation in XLA (float32
``[b, s, d, n]`` intermediates), forward and ``jax.grad``. The check compares the first
``CHECK_CHANNELS`` channels (channels are independent) with the float32 reference.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from ..benchmark import BenchCase, OpBench, Peer
from .reference import state_space_v1_reference

__all__ = ["BENCH", "SSMShape", "StateSpaceV1Bench", "associative_scan_formulation", "ssm1_inputs"]

FLOPS_PER_ELEMENT = 9
CHECK_CHANNELS = 64
F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class SSMShape:
    b: int
    s: int
    d: int
    n: int
    gate: bool = False

    def label(self) -> str:
        return f"b{self.b} s{self.s} d{self.d} n{self.n}" + (" gate" if self.gate else "")


def _combine(left: tuple[Any, Any], right: tuple[Any, Any]) -> tuple[Any, Any]:
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


def ssm1_inputs(b: int, s: int, d: int, n: int, dtype: Any, *, gate: bool = False, seed: int = 0) -> tuple[Any, ...]:
    """Random ``(x, A, B, C, D, dt[, z])`` of a Mamba-1 layer (``A < 0`` and ``D`` in float32,
    ``dt = softplus(N(-1, 1))``), drawn on the device: the benchmark's inputs, shared with the
    tile sweeps."""
    ks = jax.random.split(jax.random.key(seed), 7)
    x = jax.random.normal(ks[0], (b, s, d), dtype)
    A = -jnp.exp(0.5 * jax.random.normal(ks[1], (d, n), F32))
    B = jax.random.normal(ks[2], (b, s, n), dtype)
    C = jax.random.normal(ks[3], (b, s, n), dtype)
    D = jax.random.normal(ks[4], (d,), F32)
    dt = jax.nn.softplus(jax.random.normal(ks[5], (b, s, d), F32) - 1.0).astype(dtype)
    arrays: tuple[Any, ...] = (x, A, B, C, D, dt)
    if gate:
        arrays += (jax.random.normal(ks[6], (b, s, d), dtype),)
    return arrays


def associative_scan_formulation(x: Any, A: Any, B: Any, C: Any, D: Any, dt: Any, gate: Any = None) -> Any:
    """The selective scan as one ``lax.associative_scan`` over the whole sequence (XLA)."""
    dtf, xf = dt.astype(F32), x.astype(F32)
    da = jnp.exp(dtf[..., None] * A.astype(F32))
    dbx = (dtf * xf)[..., None] * B.astype(F32)[:, :, None, :]
    _, hs = jax.lax.associative_scan(_combine, (da, dbx), axis=1)
    y = jnp.sum(hs * C.astype(F32)[:, :, None, :], axis=-1) + D.astype(F32) * xf
    if gate is not None:
        y = y * jax.nn.silu(gate.astype(F32))
    return y.astype(x.dtype)


class StateSpaceV1Bench(OpBench):
    metric = "tflops"
    backward_factor = 2.5
    peer = "xla associative_scan"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--b", type=int, default=1, help="batch")
        p.add_argument("--s", type=int, action="append", help="sequence length (repeatable; default 4096)")
        p.add_argument("--d", type=int, default=4096, help="intermediate size (channels)")
        p.add_argument("--n", type=int, default=16, help="state size")
        p.add_argument("--gate", action="store_true", help="with a SiLU gate")

    def shapes(self, ns: argparse.Namespace) -> list[SSMShape]:
        shapes = [SSMShape(b=ns.b, s=s, d=ns.d, n=ns.n, gate=ns.gate) for s in (ns.s or [4096])]
        for sh in shapes:
            bad = [k for k in ("b", "s", "d", "n") if getattr(sh, k) < 1]
            if bad:
                raise ValueError(f"bad {', '.join('--' + k for k in bad)}: must be positive")
        return shapes

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        jdt = jnp.dtype(dtype)
        out = []
        for sh in self.shapes(ns):
            b, s, d, n = sh.b, sh.s, sh.d, sh.n
            arrays = ssm1_inputs(b, s, d, n, jdt, gate=sh.gate)
            case_peers = [Peer(self.peer, associative_scan_formulation, arrays)] if peers else []
            out.append(
                BenchCase(
                    label=sh.label(),
                    fields=dataclasses.asdict(sh),
                    arrays=arrays,
                    options={},
                    cost=float(FLOPS_PER_ELEMENT) * b * s * d * n,
                    peers=case_peers,
                    check=_check(dtype, arrays) if check else None,
                )
            )
        return out


def _check(dtype: str, arrays: tuple[Any, ...]) -> Any:
    from ...testing import conformance as C

    k = min(CHECK_CHANNELS, arrays[0].shape[-1])
    x, A, B, Cm, D, dt, *rest = arrays
    sub = (x[..., :k], A[:k], B, Cm, D[:k], dt[..., :k], *(g[..., :k] for g in rest))
    ref32 = state_space_v1_reference(*sub)
    ref_low = state_space_v1_reference(*sub, dtype=jnp.dtype(dtype)).astype(x.dtype)

    def check(out: Any) -> tuple[str, float]:
        o = out[..., :k]
        err = float(jnp.max(jnp.abs(o.astype(F32) - ref32)))
        try:
            C.assert_close("bench", o, ref32, ref_low, dtype, C.ATOL)
        except AssertionError as e:
            return f"FAIL ({str(e).split(': ', 2)[-1][:60]})", err
        return "ok", err

    return check


BENCH = StateSpaceV1Bench()
