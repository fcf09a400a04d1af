"""Where the time of the wave-2 Triton ops goes: each kernel launch timed alone, on one GPU.

    python3 benchmarks/wave2_breakdown.py --jsonl out.jsonl [--only linear,ssm1,pool]

The op-level benchmarks (``ejkernel bench``, ``benchmarks/linear_delta_vs_fla.py``) say how far an
op is from its bar; this says which kernel to work on, and how its time moves with the tiles:

- ``linear`` (gla_attention / lightning / recurrent / state_space_v2 share these kernels), B4 T4096
  H16 D128 bf16: the chunk-state recurrence (``fwd_states``), the output (``fwd_output``: the
  intra-chunk scores, then each value tile), the reverse state recurrence (``bwd_states``) and the
  input gradients (``bwd_inputs``: a dv kernel and a dq/dk/dg kernel per key tile), for 16-, 32-
  and 64-token chunks, 64- or 128-column value tiles and 4 or 8 warps; plus the whole op, forward
  and forward+backward.
- ``linear_scalar``: the same kernels under a scalar gate (``[tokens, heads]``, one product for the
  intra-chunk scores at any decay), as ``lightning_attention`` at layer 5 of 24 calls them.
- ``delta`` (gated_delta_rule), B4 T4096 H16 D128 bf16: the JAX layout and intra-chunk WY
  transform, the Triton inter-chunk kernels, the whole op; forward and forward+backward.
- ``delta_tiles``, ``delta_intra_warps``: gated_delta_rule's inter-chunk kernels' tiles, the
  intra-chunk kernels' warps: the op (and the inter part) per variant.
- ``kda``: kernel_delta_attention kernel by kernel (layout, intra-chunk forward and backward
  kernels, inter-chunk part, the op).
- ``kda_tiles``: kernel_delta_attention's per-channel intra-chunk kernels' key tiles and warps:
  the intra part and the op per variant.
- ``delta_varlen``: gated_delta_rule and kernel_delta_attention on the issue's varlen batch, the
  state walks in LPT order or not. ``lightning_chunks``: lightning_attention at B1 T32768 under
  64- and 128-token chunks.
- ``ssm1`` (state_space_v1), b1 T4096 d_inner 4096 d_state 16 bf16: the forward (storing the chunk
  states, as under differentiation) and the backward kernel, for several tiles and backward warps.
- ``pool`` (mean_pooling), (262144, 4096) bf16: the read bandwidth XLA's own row reduction reaches
  (``jnp.sum(x, 0)``: the practical ceiling of a one-pass read) beside the Triton op.

Timing: ``ejkernel.ops.timing.device_ms`` (the slope between two fori_loop programs). One JSON
line per measurement, written as it is taken. CPU check of the script (tiny shapes, Triton's
interpreter; times mean nothing): ``TRITON_INTERPRET=1 python benchmarks/wave2_breakdown.py --tiny
--interpret --jsonl /tmp/b.jsonl`` (in an environment with torch).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops.timing import device_ms


class Recorder:
    def __init__(self, path: str, repeats: int) -> None:
        self.path, self.repeats = path, repeats

    def time(self, op: str, what: str, fn: Callable[..., Any], args: tuple[Any, ...], **fields: Any) -> None:
        t0 = time.time()
        rec: dict[str, Any] = {"op": op, "what": what, **fields}
        try:
            jax.block_until_ready(jax.jit(fn)(*args))
            rec["ms"] = device_ms(fn, args, self.repeats)
        except Exception as e:  # a tile that fails to compile or run is recorded, not fatal
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        rec["wall_s"] = round(time.time() - t0, 1)
        line = json.dumps(rec)
        print(line, flush=True)
        with open(self.path, "a") as f:
            f.write(line + "\n")


def _fwd_bwd(fn: Callable[..., Any], n: int) -> Callable[..., Any]:
    """``fn``'s forward+backward as the sections time it: ``fb(*args, do)`` is the value and the
    gradient of ``sum(fn(*args) * do)`` in the first ``n`` arguments (the rest, e.g. ``cu_seqlens``,
    passed through)."""

    def fb(*args: Any) -> Any:
        *args, do = args
        loss = lambda *a: jnp.sum(fn(*a).astype(jnp.float32) * do)  # noqa: E731
        return jax.value_and_grad(loss, argnums=tuple(range(n)))(*args)

    return fb


def _lightning(q: Any, k: Any, v: Any, cfg: Any = None) -> Any:
    """``lightning_attention`` as the sections time it: Triton, layer 5 of 24."""
    import ejkernel

    return ejkernel.lightning_attention(q, k, v, layer_idx=5, num_layers=24, platform="triton", cfg=cfg)


def _kda(q: Any, k: Any, v: Any, beta: Any, g: Any, cu: Any = None) -> Any:
    """``kernel_delta_attention`` as the sections time it: Triton, keys and queries normalized inside."""
    import ejkernel

    return ejkernel.kernel_delta_attention(q, k, v, beta, g, None, cu, platform="triton")


def _linear_case(tiny: bool, shape: tuple[int, int, int, int] = (4, 4096, 16, 128)) -> tuple[Any, ...]:
    """``(b, t, h, d, q, k, v, do, h0, cu)`` of the linear sections: bf16 inputs, zero states,
    equal-length rows."""
    b, t, h, d = (1, 40, 2, 16) if tiny else shape
    ks = jax.random.split(jax.random.key(0), 5)
    q = jax.random.normal(ks[0], (b, t, h, d), jnp.bfloat16)
    k = (jax.random.normal(ks[1], (b, t, h, d), jnp.float32) / np.sqrt(d)).astype(jnp.bfloat16)
    v = jax.random.normal(ks[2], (b, t, h, d), jnp.bfloat16)
    do = jax.random.normal(ks[4], (b, t, h, d), jnp.bfloat16)
    h0 = jnp.zeros((b, h, d, d), jnp.float32)
    cu = jnp.arange(b + 1, dtype=jnp.int32) * t
    return b, t, h, d, q, k, v, do, h0, cu


def _linear_spec(L: Any, b: int, t: int, h: int, d: int, chunk: int, block_v: int, warps: int, **kw: Any) -> Any:
    """``_linear._call.Spec`` of ``b`` rows of ``t`` tokens (``kw``: the gate kind, precisions)."""
    return L.Spec(
        tokens=b * t, batch=b, seq=t, num_seqs=b, n_chunks=b * -(-t // chunk), heads=h, kv_heads=h,
        head_dim=d, value_head_dim=d, chunk=chunk, block_v=block_v, warps=warps, stages=2,
        scale=d**-0.5, varlen=False, **kw,
    )  # fmt: skip


def linear(rec: Recorder, tiny: bool) -> None:
    import ejkernel
    from ejkernel.ops.gla_attention import GLAttentionConfig
    from ejkernel_triton._linear import _call as L

    b, t, h, d, q, k, v, do, h0, cu = _linear_case(tiny)
    g = jax.nn.log_sigmoid(jax.random.normal(jax.random.key(3), (b, t, h, d), jnp.float32) + 3.0) / 16
    qf, kf, vf, gf, dof = (x.reshape(b * t, h, d) for x in (q, k, v, g, do))
    shape = f"b{b} t{t} h{h} d{d}"
    # (chunk, value tile, warps): the heuristic's first.
    for chunk, block_v, warps in ((32, 64, 4), (16, 64, 4), (32, 64, 8), (32, 128, 8), (64, 64, 8), (16, 128, 4)):
        spec = _linear_spec(L, b, t, h, d, chunk, block_v, warps, factor_prec="tf32")
        choff, cstart, cend = L.chunk_tables(cu, spec)
        tiles = {"shape": shape, "chunk": chunk, "block_v": block_v, "warps": warps}
        hs, _ = jax.jit(lambda *a, spec=spec: L.fwd_states(spec, *a, jnp.bfloat16))(kf, vf, gf, h0, cu, choff)
        dhs = hs  # any array of the right shape and dtype: the kernels' cost does not depend on it
        rec.time(
            "linear", "fwd_states", lambda *a, spec=spec: L.fwd_states(spec, *a, jnp.bfloat16),
            (kf, vf, gf, h0, cu, choff), **tiles,
        )  # fmt: skip
        rec.time(
            "linear", "fwd_output", lambda *a, spec=spec: L.fwd_output(spec, *a),
            (qf, kf, vf, gf, hs, cstart, cend), **tiles,
        )  # fmt: skip
        rec.time(
            "linear", "bwd_states", lambda *a, spec=spec: L.bwd_states(spec, *a),
            (qf, gf, dof, h0, cu, choff), **tiles,
        )  # fmt: skip
        if (chunk, block_v, warps) == (32, 64, 4):  # the state kernels with 32x32 state tiles: 4x the programs
            small = dataclasses.replace(spec, state_block=32)
            rec.time(
                "linear", "fwd_states", lambda *a, spec=small: L.fwd_states(spec, *a, jnp.bfloat16),
                (kf, vf, gf, h0, cu, choff), **tiles, state_block=32,
            )  # fmt: skip
            rec.time(
                "linear", "bwd_states", lambda *a, spec=small: L.bwd_states(spec, *a),
                (qf, gf, dof, h0, cu, choff), **tiles, state_block=32,
            )  # fmt: skip
        rec.time(
            "linear", "bwd_inputs", lambda *a, spec=spec: L.bwd_inputs(spec, *a),
            (qf, kf, vf, gf, dof, hs, dhs, cstart, cend), **tiles,
        )  # fmt: skip
        cfg = GLAttentionConfig(chunk_size=chunk, block_v=block_v, num_warps=warps, num_stages=2)

        def op(q, k, v, g, cfg=cfg):
            return ejkernel.gla_attention(q, k, v, g, platform="triton", cfg=cfg)

        rec.time("linear", "gla_attention fwd", op, (q, k, v, g), **tiles)
        rec.time("linear", "gla_attention fwd+bwd", _fwd_bwd(op, 4), (q, k, v, g, do), **tiles)


def linear_scalar(rec: Recorder, tiny: bool) -> None:
    """The same kernels under a scalar gate (``Spec.scalar_gate``: lightning, Mamba2's SSD):
    ``lightning_attention`` (layer 5 of 24), whole op and per kernel, over chunk sizes and tiles."""
    from ejkernel.ops.lightning_attention import LightningAttentionConfig
    from ejkernel_triton._linear import _call as L

    b, t, h, d, q, k, v, do, h0, cu = _linear_case(tiny)
    g = -jnp.broadcast_to(jnp.linspace(0.01, 5.9, h, dtype=jnp.float32), (b * t, h))
    qf, kf, vf, dof = (x.reshape(b * t, h, d) for x in (q, k, v, do))
    shape = f"b{b} t{t} h{h} d{d}"
    for chunk, block_v, warps in ((32, 64, 4), (64, 64, 4), (64, 64, 8), (64, 128, 8), (32, 64, 8), (16, 64, 4)):
        spec = _linear_spec(L, b, t, h, d, chunk, block_v, warps, scalar_gate=True)
        choff, cstart, cend = L.chunk_tables(cu, spec)
        tiles = {"shape": shape, "chunk": chunk, "block_v": block_v, "warps": warps, "gate": "scalar"}
        hs, _ = jax.jit(lambda *a, spec=spec: L.fwd_states(spec, *a, jnp.bfloat16))(kf, vf, g, h0, cu, choff)
        for what, fn, args in (
            ("fwd_states", lambda *a, spec=spec: L.fwd_states(spec, *a, jnp.bfloat16), (kf, vf, g, h0, cu, choff)),
            ("fwd_output", lambda *a, spec=spec: L.fwd_output(spec, *a), (qf, kf, vf, g, hs, cstart, cend)),
            ("bwd_states", lambda *a, spec=spec: L.bwd_states(spec, *a), (qf, g, dof, h0, cu, choff)),
            ("bwd_inputs", lambda *a, spec=spec: L.bwd_inputs(spec, *a), (qf, kf, vf, g, dof, hs, hs, cstart, cend)),
        ):
            rec.time("linear_scalar", what, fn, args, **tiles)
        cfg = LightningAttentionConfig(chunk_size=chunk, block_v=block_v, num_warps=warps, num_stages=2)

        op = functools.partial(_lightning, cfg=cfg)
        rec.time("linear_scalar", "lightning_attention fwd", op, (q, k, v), **tiles)
        rec.time("linear_scalar", "lightning_attention fwd+bwd", _fwd_bwd(op, 3), (q, k, v, do), **tiles)


def linear_long(rec: Recorder, tiny: bool) -> None:
    """B1 T32768 H16 D128 (one sequence: the state kernels' grid is sequences x heads x tiles, 64
    programs of 64x64 tiles on 132 SMs): the state recurrences at 64- and 32-wide tiles
    (``Spec.state_block``), scalar and per-channel gates, and ``lightning_attention`` as the
    heuristic runs it."""
    from ejkernel_triton._linear import _call as L

    b, t, h, d, q, k, v, do, h0, cu = _linear_case(tiny, (1, 32768, 16, 128))
    qf, kf, vf, dof = (x.reshape(b * t, h, d) for x in (q, k, v, do))
    shape = f"b{b} t{t} h{h} d{d}"
    gs = -jnp.broadcast_to(jnp.linspace(0.01, 5.9, h, dtype=jnp.float32), (b * t, h))
    gk = jax.nn.log_sigmoid(jax.random.normal(jax.random.key(3), (b * t, h, d), jnp.float32) + 3.0)
    for gate, chunk, g in (("scalar", 64, gs), ("channel", 32, gk)):
        for block in (64, 32):
            spec = _linear_spec(L, b, t, h, d, chunk, 64, 4, scalar_gate=gate == "scalar", state_block=block)
            choff, _, _ = L.chunk_tables(cu, spec)
            f = {"shape": shape, "chunk": chunk, "gate": gate, "state_block": block}
            fwd = lambda *a, spec=spec: L.fwd_states(spec, *a, jnp.bfloat16)  # noqa: E731
            rec.time("linear_long", "fwd_states", fwd, (kf, vf, g, h0, cu, choff), **f)
            rec.time(
                "linear_long",
                "bwd_states",
                lambda *a, spec=spec: L.bwd_states(spec, *a),
                (qf, g, dof, h0, cu, choff),
                **f,
            )

    rec.time("linear_long", "lightning_attention fwd (heuristic)", _lightning, (q, k, v), shape=shape)
    rec.time(
        "linear_long", "lightning_attention fwd+bwd (heuristic)", _fwd_bwd(_lightning, 3), (q, k, v, do), shape=shape
    )


def _delta_inputs(tiny: bool) -> tuple[int, str, tuple[Any, ...]]:
    """``(d, shape, (q, k, v, beta, g, do))`` of the delta sections: bf16, B4 T4096 H16 D128."""
    b, t, h, d = (1, 40, 2, 16) if tiny else (4, 4096, 16, 128)
    ks = jax.random.split(jax.random.key(0), 6)
    q = jax.random.normal(ks[0], (b, t, h, d), jnp.bfloat16)
    k = jax.random.normal(ks[1], (b, t, h, d), jnp.bfloat16)
    v = jax.random.normal(ks[2], (b, t, h, d), jnp.bfloat16)
    beta = jax.nn.sigmoid(jax.random.normal(ks[3], (b, t, h), jnp.float32)).astype(jnp.bfloat16)
    g = jax.nn.log_sigmoid(jax.random.normal(ks[4], (b, t, h), jnp.float32) + 4.0)
    do = jax.random.normal(ks[5], (b, t, h, d), jnp.bfloat16)
    return d, f"b{b} t{t} h{h} d{d}", (q, k, v, beta, g, do)


def _gdn(q: Any, k: Any, v: Any, g: Any, beta: Any) -> Any:
    """The op as the delta sections time it: Triton, keys and queries normalized inside."""
    import ejkernel

    return ejkernel.gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, platform="triton")


_gdn_fb = _fwd_bwd(_gdn, 5)


def _inter(c: Any, x: Any) -> Any:
    """The Triton inter-chunk part on chunks ``c`` and intra-chunk quantities ``x`` (bf16)."""
    from ejkernel_triton._delta._call import triton_delta_rule

    return triton_delta_rule(c, x, jnp.dtype(jnp.bfloat16), block_v=32, num_warps=4, num_stages=2)


def _inter_fb(c: Any, x: Any) -> Any:
    return jax.value_and_grad(lambda x: jnp.sum(_inter(c, x)[0].astype(jnp.float32)))(x)


def delta_tiles(rec: Recorder, tiny: bool, group: str = "inter") -> None:
    """``gated_delta_rule``'s kernels under other tiles (``_delta._call``'s module constants, set
    for one trace each). ``inter``: the output kernel's value block and warps, the reverse state
    walk's stages, the backward products' key block and warps (the inter part forward and
    forward+backward, and the op's forward+backward, per variant). ``intra``: the intra-chunk
    kernels' warps (the op's forward and forward+backward)."""
    from ejkernel.ops.families import delta_rule_math as M
    from ejkernel_triton._delta import _call as D

    d, shape, (q, k, v, beta, g, do) = _delta_inputs(tiny)
    c = M.to_chunks(q, k, v, beta, g[..., None], None, None, scale=d**-0.5, use_qk_l2norm=True, chunk=64)
    x0 = jax.jit(lambda c: M.intra_chunk(c, None))(c)

    if group == "inter":
        base = {n: getattr(D, n) for n in ("O_BLOCK_V", "O_WARPS", "DH_STAGES_MANY", "DQKW_BLOCK_K", "DQKW_WARPS")}
        variants = [{}, {"O_BLOCK_V": 32}, {"O_BLOCK_V": 128}, {"O_BLOCK_V": 128, "O_WARPS": 8}]
        variants += [{"DH_STAGES_MANY": 2}, {"DQKW_WARPS": 8}, {"DQKW_BLOCK_K": 128, "DQKW_WARPS": 8}]
        variants += [{"DQKW_BLOCK_K": 32}]
    else:  # the intra-chunk kernels at 4 warps (two programs per SM where no spills: sm90_registers.py)
        w = dict(D.INTRA_WARPS)
        base = {"INTRA_WARPS": w}
        variants = [{}] + [
            {"INTRA_WARPS": {**w, **four}}
            for four in ({"inverse": 4}, {"fwd": 4}, {"inverse": 4, "fwd": 4}, {"bwd_a": 4}, {"bwd_qk": 4})
        ]
    for var in variants:
        for name, value in {**base, **var}.items():
            setattr(D, name, value)
        tag = ",".join(f"{n}={val}" for n, val in var.items()) or "default"
        f = {"shape": shape, "tiles": {**base, **var}}
        # fresh closures: each variant traces anew
        if group == "inter":
            rec.time("delta_tiles", f"inter fwd [{tag}]", lambda x: _inter(c, x), (x0,), **f)
            rec.time("delta_tiles", f"inter fwd+bwd [{tag}]", lambda x: _inter_fb(c, x), (x0,), **f)
        else:
            rec.time("delta_tiles", f"gated_delta_rule fwd [{tag}]", lambda *a: _gdn(*a), (q, k, v, g, beta), **f)
        rec.time(
            "delta_tiles", f"gated_delta_rule fwd+bwd [{tag}]", lambda *a: _gdn_fb(*a), (q, k, v, g, beta, do), **f
        )
    for name, value in base.items():
        setattr(D, name, value)


def kda(rec: Recorder, tiny: bool) -> None:
    """``kernel_delta_attention`` (B4 T4096 H16 D128 bf16, the per-channel gate of ``kda_tiles``)
    kernel by kernel: the layout, each intra-chunk kernel forward (gate sums, pair sums + inverse,
    W/U/Qg/Kg) and backward (through W/U/T, through the pair sums), the inter-chunk part, the op."""
    from ejkernel.ops.families import delta_rule_math as M
    from ejkernel_triton._delta import _call as D

    d, shape, (q, k, v, beta, _, do) = _delta_inputs(tiny)
    g = jax.nn.log_sigmoid(jax.random.normal(jax.random.key(7), q.shape, jnp.float32))
    bf = jnp.dtype(jnp.bfloat16)
    f = {"shape": shape}

    def layout(q, k, v, beta, g):
        return M.to_chunks(q, k, v, beta, g, None, None, scale=d**-0.5, use_qk_l2norm=True, chunk=64, dtype=bf)

    rec.time("kda", "layout (to_chunks)", lambda *a: tuple(layout(*a)[:6]), (q, k, v, beta, g), **f)
    c = jax.jit(layout)(q, k, v, beta, g)
    r, hv, nc, size, kd = c.k.shape
    n = r * hv * nc
    spec = D.IntraSpec(
        n=n, c=size, k=kd, v=c.v.shape[-1], has_g=True, per_channel=True, ops=D._intra_operands(bf), out=bf.name
    )  # fmt: skip
    flat = (
        c.q.reshape(n, size, kd), c.k.reshape(n, size, kd), c.v.reshape(n, size, -1), c.beta.reshape(n, size),
        c.g.reshape(n, size, kd),
    )  # fmt: skip
    outs, (gs, m, se) = jax.jit(lambda *a: D._intra_forward(spec, *a))(*flat)
    bk = spec.pc_block_k
    rec.time(
        "kda", "intra: gate sums", lambda g: D.launch(
            D.delta_intra_gate_pc_kernel, g, out_shape=[jax.ShapeDtypeStruct(g.shape, jnp.float32)],
            grid=(n, -(-kd // bk)), num_warps=4, num_stages=1, C=size, K=kd, BK=bk,
        ), (flat[4],), **f,
    )  # fmt: skip
    rec.time("kda", "intra forward (3 kernels)", lambda *a: D._intra_forward(spec, *a), flat, **f)
    cts = tuple(jax.random.normal(jax.random.key(i), o.shape, jnp.float32).astype(o.dtype) for i, o in enumerate(outs))
    res = (*flat[:4], gs, m, se)
    rec.time("kda", "intra backward (2 kernels)", lambda res, cts: D._intra_bwd_pc(spec, res, cts), (res, cts), **f)
    x = D.triton_intra_chunk(c, bf)
    rec.time("kda", "inter forward", lambda x: _inter(c, x), (x,), **f)
    rec.time("kda", "inter fwd+bwd", lambda x: _inter_fb(c, x), (x,), **f)

    rec.time("kda", "op forward", _kda, (q, k, v, beta, g), **f)
    rec.time("kda", "op fwd+bwd", _fwd_bwd(_kda, 5), (q, k, v, beta, g, do), **f)


def kda_tiles(rec: Recorder, tiny: bool) -> None:
    """``kernel_delta_attention`` (per-channel gate, log-sigmoid of a standard normal as
    ``ejkernel bench`` feeds it) under other tiles of its intra-chunk kernels (``_delta._call``'s
    ``PC_BLOCK_K``, ``PC_WARPS``): the intra part alone and the op, forward and forward+backward."""
    from ejkernel.ops.families import delta_rule_math as M
    from ejkernel_triton._delta import _call as D

    d, shape, (q, k, v, beta, _, do) = _delta_inputs(tiny)
    g = jax.nn.log_sigmoid(jax.random.normal(jax.random.key(7), q.shape, jnp.float32))
    bf = jnp.dtype(jnp.bfloat16)

    def intra(q, k, v, beta, g):
        c = M.to_chunks(q, k, v, beta, g, None, None, scale=d**-0.5, use_qk_l2norm=True, chunk=64, dtype=bf)
        return D.triton_intra_chunk(c, bf)

    def intra_fb(q, k, v, beta, g):
        f = lambda *a: sum(jnp.sum(x.astype(jnp.float32)) for x in intra(*a))  # noqa: E731
        return jax.value_and_grad(f, argnums=(0, 1, 2, 3, 4))(q, k, v, beta, g)

    base = {"PC_BLOCK_K": D.PC_BLOCK_K, "PC_WARPS": dict(D.PC_WARPS)}
    w = base["PC_WARPS"]
    variants = [{}, {"PC_BLOCK_K": 16}, {"PC_WARPS": {**w, "inverse": 8, "bwd_qk": 8}}]
    variants += [{"PC_BLOCK_K": 16, "PC_WARPS": {**w, "bwd_qk": 8}}, {"PC_BLOCK_K": 64, "PC_WARPS": {n: 8 for n in w}}]
    for var in variants:
        for name, value in {**base, **var}.items():
            setattr(D, name, value)
        tag = ",".join(f"{n}={val}" for n, val in var.items()) or "default"
        f = {"shape": shape, "tiles": {**base, **var}}
        args = (q, k, v, beta, g)
        rec.time("kda_tiles", f"intra fwd [{tag}]", lambda *a: intra(*a), args, **f)
        rec.time("kda_tiles", f"intra fwd+bwd [{tag}]", lambda *a: intra_fb(*a), args, **f)
        rec.time("kda_tiles", f"kernel_delta_attention fwd [{tag}]", lambda *a: _kda(*a), args, **f)
        rec.time("kda_tiles", f"kernel_delta_attention fwd+bwd [{tag}]", _fwd_bwd(_kda, 5), (*args, do), **f)
    for name, value in base.items():
        setattr(D, name, value)


def lightning_chunks(rec: Recorder, tiny: bool) -> None:
    """``lightning_attention`` at B1 T32768 H16 D128 (the long row of issue 18) under 64- and
    128-token chunks (half the serial steps of the state walks), value tiles and warps: the op,
    forward and forward+backward (the backward's chunk kernels at >= ``_linear._call.WIDE_CHUNK_WARPS``
    warps at 128-token chunks), and as the heuristic runs it."""
    from ejkernel.ops import get_op

    b, t, h, d, q, k, v, do, _, _ = _linear_case(tiny, (1, 32768, 16, 128))
    cls = get_op("lightning_attention").config_cls
    shape = f"b{b} t{t} h{h} d{d}"
    for chunk, bv, warps in ((64, 64, 4), (128, 64, 4), (128, 64, 8), (128, 32, 4)):
        cfg = cls(chunk_size=chunk, block_v=bv, num_warps=warps, num_stages=2)

        op = functools.partial(_lightning, cfg=cfg)
        f = {"shape": shape, "chunk": chunk, "block_v": bv, "warps": warps}
        rec.time("lightning_chunks", "lightning_attention fwd", op, (q, k, v), **f)
        rec.time("lightning_chunks", "lightning_attention fwd+bwd", _fwd_bwd(op, 3), (q, k, v, do), **f)
    rec.time("lightning_chunks", "lightning_attention fwd (heuristic)", _lightning, (q, k, v), shape=shape)
    rec.time(
        "lightning_chunks", "lightning_attention fwd+bwd (heuristic)", _fwd_bwd(_lightning, 3), (q, k, v, do),
        shape=shape,
    )  # fmt: skip


def delta_varlen(rec: Recorder, tiny: bool) -> None:
    """The delta rule's varlen row of issue 18 (one packed row of 7 sequences, 16384 tokens, H16
    D128 bf16): ``gated_delta_rule`` and ``kernel_delta_attention`` with the state walks launched
    longest sequence first (``_delta._call.VARLEN_LPT``) or in sequence order."""
    import ejkernel
    from ejkernel_triton._delta import _call as D

    lens = [5, 1, 0, 17, 9] if tiny else [4096, 1000, 3000, 17, 2048, 5000, 1223]
    t = sum(lens)
    h, d = (2, 16) if tiny else (16, 128)
    cu = jnp.asarray(np.concatenate([[0], np.cumsum(lens)]), jnp.int32)
    ks = jax.random.split(jax.random.key(1), 7)
    q, k, v, do = (jax.random.normal(ks[i], (1, t, h, d), jnp.bfloat16) for i in range(4))
    beta = jax.nn.sigmoid(jax.random.normal(ks[4], (1, t, h), jnp.float32)).astype(jnp.bfloat16)
    g = jax.nn.log_sigmoid(jax.random.normal(ks[5], (1, t, h), jnp.float32) + 4.0)
    gk = jax.nn.log_sigmoid(jax.random.normal(ks[6], (1, t, h, d), jnp.float32))
    shape = f"varlen {len(lens)} seqs {t} tokens h{h} d{d}"

    def gdn(q, k, v, g, beta, cu):
        return ejkernel.gated_delta_rule(q, k, v, g, beta, None, cu, use_qk_l2norm_in_kernel=True, platform="triton")

    def kda(q, k, v, g, beta, cu):
        return _kda(q, k, v, beta, g, cu)

    base = D.VARLEN_LPT
    for lpt in (True, False):
        D.VARLEN_LPT = lpt
        for name, fn, gate in (("gated_delta_rule", gdn, g), ("kernel_delta_attention", kda, gk)):
            f = {"shape": shape, "lpt": lpt}
            rec.time("delta_varlen", f"{name} fwd", lambda *a, fn=fn: fn(*a), (q, k, v, gate, beta, cu), **f)
            rec.time("delta_varlen", f"{name} fwd+bwd", _fwd_bwd(fn, 5), (q, k, v, gate, beta, cu, do), **f)
    D.VARLEN_LPT = base


def delta(rec: Recorder, tiny: bool) -> None:
    """``gated_delta_rule`` (Triton), B4 T4096 H16 D128 bf16: the layout, the intra-chunk WY
    transform in JAX (``delta_rule_math``) and in Triton (``_delta._intra``), the Triton
    inter-chunk part, each forward and forward+backward, and the whole op."""
    from ejkernel.ops.families import delta_rule_math as M
    from ejkernel_triton._delta._call import triton_delta_rule, triton_intra_chunk

    d, shape, (q, k, v, beta, g, do) = _delta_inputs(tiny)

    def chunks(q, k, v, beta, g, dtype=jnp.float32):
        return M.to_chunks(
            q, k, v, beta, g[..., None], None, None, scale=d**-0.5, use_qk_l2norm=True, chunk=64, dtype=dtype
        )

    def intra(q, k, v, beta, g, precision=M.HIGHEST):
        return M.intra_chunk(chunks(q, k, v, beta, g), precision)

    def tintra(q, k, v, beta, g):
        return triton_intra_chunk(chunks(q, k, v, beta, g, jnp.bfloat16), jnp.bfloat16)

    x0 = jax.jit(intra)(q, k, v, beta, g)
    cot = jax.tree.map(lambda a: jnp.ones_like(a) * 0.5, x0)

    def intra_fb(q, k, v, beta, g, precision=M.HIGHEST):
        loss = lambda *a: sum(jnp.sum(x * c) for x, c in zip(intra(*a, precision), cot, strict=True))  # noqa: E731
        return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))(q, k, v, beta, g)

    def tintra_fb(q, k, v, beta, g):
        loss = lambda *a: sum(jnp.sum(x * c) for x, c in zip(tintra(*a), cot, strict=True))  # noqa: E731
        return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))(q, k, v, beta, g)

    c0 = chunks(q, k, v, beta, g)
    f = {"shape": shape}
    rec.time("delta", "to_chunks (layout)", lambda *a: tuple(chunks(*a))[:6], (q, k, v, beta, g), **f)
    bf16_layout = lambda *a: tuple(chunks(*a, jnp.bfloat16))[:6]  # noqa: E731
    rec.time("delta", "to_chunks (layout, bf16 q k v)", bf16_layout, (q, k, v, beta, g), **f)
    rec.time("delta", "to_chunks + intra_chunk fwd", intra, (q, k, v, beta, g), **f)
    rec.time("delta", "to_chunks + intra_chunk fwd+bwd", intra_fb, (q, k, v, beta, g), **f)
    tf32 = functools.partial(intra, precision=None)
    rec.time("delta", "to_chunks + intra_chunk fwd (default precision)", tf32, (q, k, v, beta, g), **f)
    tf32_fb = functools.partial(intra_fb, precision=None)
    rec.time("delta", "to_chunks + intra_chunk fwd+bwd (default precision)", tf32_fb, (q, k, v, beta, g), **f)
    rec.time("delta", "to_chunks + triton intra fwd", tintra, (q, k, v, beta, g), **f)
    rec.time("delta", "to_chunks + triton intra fwd+bwd", tintra_fb, (q, k, v, beta, g), **f)
    rec.time("delta", "triton inter fwd", functools.partial(_inter, c0), (x0,), **f)
    rec.time("delta", "triton inter fwd+bwd", functools.partial(_inter_fb, c0), (x0,), **f)
    rec.time("delta", "gated_delta_rule fwd", _gdn, (q, k, v, g, beta), **f)
    rec.time("delta", "gated_delta_rule fwd+bwd", _gdn_fb, (q, k, v, g, beta, do), **f)
    # The op composed by hand with either intra-chunk transform (the JAX one: the Triton path
    # before the intra kernels), same run, same inputs
    from ejkernel_triton._delta import impl as DI

    def composed(q, k, v, g, beta, do=None, *, triton_intra):
        def f(q, k, v, g, beta):
            c = chunks(q, k, v, beta, g, jnp.bfloat16 if triton_intra else jnp.float32)
            x = triton_intra_chunk(c, jnp.bfloat16) if triton_intra else M.intra_chunk(c, None)
            o, _ = triton_delta_rule(
                c, x, jnp.dtype(jnp.bfloat16), block_v=DI.BLOCK_V, num_warps=DI.NUM_WARPS, num_stages=DI.NUM_STAGES
            )
            return M.from_chunks(c, o).astype(v.dtype)

        if do is None:
            return f(q, k, v, g, beta)
        loss = lambda *a: jnp.sum(f(*a).astype(jnp.float32) * do)  # noqa: E731
        return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))(q, k, v, g, beta)

    for name, flag in (("JAX intra", False), ("Triton intra", True)):
        fn = functools.partial(composed, triton_intra=flag)
        rec.time("delta", f"composed fwd ({name})", fn, (q, k, v, g, beta), **f)
        rec.time("delta", f"composed fwd+bwd ({name})", fn, (q, k, v, g, beta, do), **f)


def ssm1(rec: Recorder, tiny: bool) -> None:
    from ejkernel.ops.state_space_v1.bench import ssm1_inputs
    from ejkernel_triton.state_space_v1 import _call as S

    b, s, d, n = (1, 64, 32, 4) if tiny else (1, 4096, 4096, 16)
    x, A, B, C, D, dt = ssm1_inputs(b, s, d, n, jnp.bfloat16)
    dy = jax.random.normal(jax.random.key(1), (b, s, d), jnp.bfloat16)
    dhT = jnp.zeros((b, d, n), jnp.float32)
    nb = max(2, 1 << (n - 1).bit_length())
    shape = f"b{b} s{s} d{d} n{n}"
    # (block_d, block_t, fwd warps, bwd warps): the heuristic's (8, 32, 4, 8) first (its backward
    # uses 246 registers at 8 warps: one program per SM); tiles whose backward fits two per SM
    # (benchmarks/sm90_registers.py), and 4-warp backwards
    for bd, bt, w, bw in (
        (8, 32, 4, 8),
        (8, 16, 4, 8),
        (8, 8, 4, 8),
        (4, 16, 4, 8),
        (4, 32, 4, 8),
        (8, 16, 4, 4),
        (16, 16, 4, 8),
    ):
        spec = S.Spec(
            batch=b, seqlen=s, dim=d, dstate=n, block_t=bt, block_d=bd, block_n=nb, num_warps=w, bwd_warps=bw,
            num_stages=2,
        )  # fmt: skip
        tiles = {"shape": shape, "block_d": bd, "block_t": bt, "warps": w, "bwd_warps": bw}
        fwd = lambda *a, spec=spec: S.forward(spec, *a, None, store_states=True)  # noqa: E731
        _, _, states = jax.jit(fwd)(x, A, B, C, D, dt)
        rec.time("ssm1", "forward (storing states)", fwd, (x, A, B, C, D, dt), **tiles)
        rec.time(
            "ssm1", "backward", lambda *a, spec=spec: S.backward(spec, *a),
            (x, A, B, C, D, dt, states, dy, dhT), **tiles,
        )  # fmt: skip


def ssm1_bwd(rec: Recorder, tiny: bool) -> None:
    """state_space_v1's chunk-parallel backward under its own channel block, warps and channel
    groups (``Spec.bwd_block_d``, ``bwd_warps``, ``bwd_groups``; the forward's states at the
    heuristic's tiles: 8 channels, 32 tokens, 2 warps), its carry kernels alone, and the forward."""
    from ejkernel.ops.state_space_v1.bench import ssm1_inputs
    from ejkernel_triton.state_space_v1 import _call as S

    b, s, d, n = (1, 64, 32, 4) if tiny else (1, 4096, 4096, 16)
    x, A, B, C, D, dt = ssm1_inputs(b, s, d, n, jnp.bfloat16)
    dy = jax.random.normal(jax.random.key(1), (b, s, d), jnp.bfloat16)
    dhT = jnp.zeros((b, d, n), jnp.float32)
    nb = max(2, 1 << (n - 1).bit_length())
    shape = f"b{b} s{s} d{d} n{n}"
    base = S.Spec(
        batch=b, seqlen=s, dim=d, dstate=n, block_t=32, block_d=8, block_n=nb, num_warps=2, bwd_warps=1,
        num_stages=2, bwd_block_d=2,
    )  # fmt: skip
    _, _, states = jax.jit(lambda *a: S.forward(base, *a, None, store_states=True))(x, A, B, C, D, dt)
    rec.time("ssm1_bwd", "chunk sums", lambda *a: S.chunk_sums(base, *a), (A, C, dt, dy), shape=shape)
    rec.time("ssm1_bwd", "carries (chunk sums + recurrence)", lambda *a: S.carries(base, *a), (A, C, dt, dy, dhT),
             shape=shape)  # fmt: skip
    for bd, bw, groups in (
        (2, 2, None), (2, 2, 2), (2, 2, 4), (2, 2, 32), (2, 2, 64), (1, 1, None), (1, 2, None), (2, 4, None),
        (4, 8, None),
    ):  # fmt: skip
        spec = dataclasses.replace(base, bwd_block_d=bd, bwd_warps=bw, bwd_groups=groups)
        rec.time(
            "ssm1_bwd", "backward", lambda *a, spec=spec: S.backward(spec, *a),
            (x, A, B, C, D, dt, states, dy, dhT), shape=shape, bwd_block_d=bd, bwd_warps=bw,
            bwd_groups=spec.bwd_group()[1],
        )  # fmt: skip
    for store in (False, True):
        rec.time(
            "ssm1_bwd", "forward" + (" (storing states)" if store else ""),
            lambda *a, store=store: S.forward(base, *a, None, store_states=store),
            (x, A, B, C, D, dt), shape=shape, block_d=base.block_d, warps=base.num_warps,
        )  # fmt: skip


def pool(rec: Recorder, tiny: bool) -> None:
    import ejkernel

    tokens, hidden = (4096, 256) if tiny else (262144, 4096)
    x = jax.random.normal(jax.random.key(2), (tokens, hidden), jnp.bfloat16)
    rng = np.random.default_rng(0)
    cu = jnp.asarray(np.concatenate([[0], np.sort(rng.choice(np.arange(1, tokens), 63, replace=False)), [tokens]]))
    cu = cu.astype(jnp.int32)
    fields = {"shape": f"tokens{tokens} hidden{hidden}", "bytes": x.nbytes}
    rec.time("pool", "xla jnp.sum(x, 0) in float32", lambda x: jnp.sum(x, 0, dtype=jnp.float32), (x,), **fields)
    rec.time(
        "pool", "triton mean_pooling", lambda x, cu: ejkernel.mean_pooling(x, cu, platform="triton"), (x, cu), **fields
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jsonl", required=True)
    p.add_argument("--only", default="linear,ssm1,pool")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a CPU check of the script)")
    p.add_argument("--interpret", action="store_true", help="Triton's interpreter (TRITON_INTERPRET=1)")
    ns = p.parse_args()
    rec = Recorder(ns.jsonl, ns.repeats)
    ctx: Any = contextlib.nullcontext()
    if ns.interpret:
        from ejkernel_triton._launch import interpreted

        ctx = interpreted()
    with ctx:
        for name in ns.only.split(","):
            {
                "linear": linear,
                "linear_scalar": linear_scalar,
                "linear_long": linear_long,
                "delta": delta,
                "delta_tiles": delta_tiles,
                "delta_intra_warps": functools.partial(delta_tiles, group="intra"),
                "kda_tiles": kda_tiles,
                "kda": kda,
                "delta_varlen": delta_varlen,
                "lightning_chunks": lightning_chunks,
                "ssm1": ssm1,
                "ssm1_bwd": ssm1_bwd,
                "pool": pool,
            }[name](rec, ns.tiny)


if __name__ == "__main__":
    main()
