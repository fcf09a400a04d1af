"""The Mosaic GPU (Hopper) flash-attention forward: ``[b, sq, h, d]`` queries against
``[b, sk, hk, d]`` keys and values, 16-bit, output and the log-sum-exp.

One program (CTA) per ``2 x block_q`` query rows of one (batch, head): three warpgroups, two that
compute (each its own ``block_q`` rows: the tile ``wgmma`` wants) and one that only issues TMA
copies of the K/V tiles into ``stages`` shared-memory slots (FlashAttention-3 §3.1's producer /
consumer split). A slot's ``k_ready``/``v_ready`` barrier completes when its copy lands; its
``k_used``/``v_used`` barrier when both compute warpgroups are done with it, and only then is it
refilled. Each compute warpgroup runs the online softmax in base 2 (``exp2``, the running max kept
scaled by ``log2 e``) over its key tiles: the unmasked ones first, then those that need the causal
or the key-tail mask. Under causal masking the first warpgroup needs fewer key tiles than the
second, which the producer loads for; it still waits for and releases those tiles so that every
barrier sees every phase (the GPU interpreter checks it, and the producer's refills depend on it).

Causal masking is aligned bottom-right (``diag = sk - sq``), as the op's reference. Lengths: the
host pads queries to ``2 x block_q`` rows (their rows are dropped) and keys to ``block_kv``
(``seq_k`` masks the padding in the last tile). Rows that see no key give zeros and ``-inf``.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

LOG2E = math.log2(math.e)
LN2 = math.log(2.0)
COMPUTE_WGS = 2
# 16-bit tiles that wgmma reads: 8x64 tiles, 128-byte swizzle.
TILED = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))


@dataclasses.dataclass(frozen=True)
class Spec:
    """Static facts of one launch (padded lengths, tiles, options): the forward's, or the backward's
    with its own tiles over the same padding."""

    seq_q: int  # true lengths
    seq_k: int
    seq_q_padded: int  # a multiple of 2 * block_q
    seq_k_padded: int  # a multiple of block_kv
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_q: int
    block_kv: int
    stages: int
    causal: bool
    scale: float
    soft_cap: float | None
    interpret: bool = False

    @property
    def groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def kv_steps(self) -> int:
        return self.seq_k_padded // self.block_kv


def _rem(j, n: int):
    return lax.rem(j, jnp.int32(n))


def _key_steps(spec: Spec, row0):
    """``(full, total)`` key tiles of the ``block_q`` rows from ``row0``: the first ``full`` need
    no mask, the rest up to ``total`` need the causal or the key-tail mask."""
    bk = spec.block_kv
    tail_free = spec.seq_k // bk  # tiles wholly inside the true key length
    if not spec.causal:
        return jnp.int32(tail_free), jnp.int32(spec.kv_steps if spec.seq_k % bk else tail_free)
    diag = spec.seq_k - spec.seq_q
    seen = jnp.clip(row0 + spec.block_q + diag, 0, spec.seq_k)  # keys the last row sees
    total = (seen + bk - 1) // bk
    full = jnp.minimum(jnp.clip(row0 + diag + 1, 0, spec.seq_k) // bk, total)  # the first row's
    return full.astype(jnp.int32), total.astype(jnp.int32)


def _mma(spec: Spec, shape, lhs, rhs, stage=None):
    """``lhs @ rhs`` into a fresh float32 accumulator. A register ``lhs`` goes through ``stage``
    (shared memory) under the interpreter, whose ``wgmma`` reads its left operand from there."""
    if spec.interpret and stage is not None:
        stage[...] = lhs
        plgpu.commit_smem()
        lhs = stage

    def run(acc_ref):
        plgpu.wgmma(acc_ref, lhs, rhs)
        return acc_ref[...]

    return pl.run_scoped(run, plgpu.ACC(shape, jnp.float32))


def _accumulate(spec: Spec, acc, lhs, rhs, stage=None):
    """``acc + lhs @ rhs`` (in place on the GPU; a fresh accumulator under the interpreter)."""
    if spec.interpret:
        return acc + _mma(spec, acc.shape, lhs, rhs, stage)

    def run(acc_ref):
        plgpu.wgmma(acc_ref, lhs, rhs)

    return pl.run_state(run)(plgpu.ACC.init(acc))


def _capped(spec: Spec, s):
    """Log2-scaled logits of the raw products ``s``, and the soft cap's ``tanh`` (``None``
    without a cap: its derivative ``1 - tanh²`` scales dS in the backward)."""
    if spec.soft_cap is None:
        return s * (spec.scale * LOG2E), None
    t = jnp.tanh(s * (spec.scale / spec.soft_cap))
    return t * (spec.soft_cap * LOG2E), t


def _mask(spec: Spec, x, rows, keys):
    ok = keys < spec.seq_k
    if spec.causal:
        ok = ok & (keys <= rows + (spec.seq_k - spec.seq_q))
    return jnp.where(ok, x, -jnp.inf)


def _iota(shape, axis: int, start):
    return plgpu.broadcasted_iota(jnp.int32, shape, axis, layout=plgpu.Layout.WGMMA) + start


def forward(spec: Spec, q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Padded ``q [b, sq_p, h, d]``, ``k``/``v [b, sk_p, hk, d]`` → output ``[b, sq_p, h, d]`` (the
    inputs' dtype) and log-sum-exp ``[b, h, sq_p]`` (float32, natural log, -inf: no key)."""
    b = q.shape[0]
    bq, bk, d, stages, dtype = spec.block_q, spec.block_kv, spec.head_dim, spec.stages, q.dtype

    def compute(wg, q_ref, k_ref, v_ref, out_ref, lse_ref, scratch, barriers):
        batch, head = lax.axis_index("batch"), lax.axis_index("heads")
        qo_smem, k_smem, v_smem, lse_smem, p_smem = scratch
        k_ready, v_ready, q_ready, k_used, v_used = barriers
        qo_smem, lse_smem = qo_smem.at[wg], lse_smem.at[wg]
        row0 = lax.axis_index("q_seq") * (COMPUTE_WGS * bq) + wg * bq
        full, total = _key_steps(spec, row0)
        _, cta_total = _key_steps(spec, lax.axis_index("q_seq") * (COMPUTE_WGS * bq) + (COMPUTE_WGS - 1) * bq)

        plgpu.copy_gmem_to_smem(q_ref.at[batch, pl.ds(row0, bq), head], qo_smem, q_ready.at[wg])
        plgpu.barrier_wait(q_ready.at[wg])

        m_i = plgpu.layout_cast(jnp.full((bq,), -jnp.inf, jnp.float32), plgpu.Layout.WGMMA.reduce(1))
        l_i = plgpu.layout_cast(jnp.full((bq,), 0.0, jnp.float32), plgpu.Layout.WGMMA.reduce(1))
        acc = plgpu.layout_cast(jnp.full((bq, d), 0.0, jnp.float32), plgpu.Layout.WGMMA)

        def step(j, carry, masked: bool):
            acc, m_i, l_i = carry
            slot = _rem(j, stages)
            plgpu.barrier_wait(k_ready.at[slot])
            s, _ = _capped(spec, _mma(spec, (bq, bk), qo_smem, k_smem.at[slot].transpose((1, 0))))
            plgpu.barrier_arrive(k_used.at[slot])
            if masked:
                s = _mask(spec, s, _iota((bq, bk), 0, row0), _iota((bq, bk), 1, j * bk))
            m_new = jnp.maximum(m_i, s.max(axis=1))
            m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)  # a row with no key yet: p = 0, not NaN
            alpha = jnp.exp2(m_i - m_safe)
            p = jnp.exp2(s - lax.broadcast_in_dim(m_safe, s.shape, [0]))
            l_i = l_i * alpha + p.sum(axis=1)
            acc = acc * lax.broadcast_in_dim(alpha, acc.shape, [0])
            plgpu.barrier_wait(v_ready.at[slot])
            acc = _accumulate(spec, acc, p.astype(dtype), v_smem.at[slot], p_smem.at[wg] if spec.interpret else None)
            plgpu.barrier_arrive(v_used.at[slot])
            return acc, m_new, l_i

        def skip(j, _):  # tiles the other warpgroup needs: observed and released
            slot = _rem(j, stages)
            plgpu.barrier_wait(k_ready.at[slot])
            plgpu.barrier_arrive(k_used.at[slot])
            plgpu.barrier_wait(v_ready.at[slot])
            plgpu.barrier_arrive(v_used.at[slot])

        carry = (acc, m_i, l_i)
        carry = lax.fori_loop(0, full, lambda j, c: step(j, c, False), carry)
        acc, m_i, l_i = lax.fori_loop(full, total, lambda j, c: step(j, c, True), carry)
        lax.fori_loop(total, cta_total, skip, None)

        seen = l_i > 0
        l_safe = jnp.where(seen, l_i, 1.0)
        acc = acc / lax.broadcast_in_dim(l_safe, acc.shape, [0])
        qo_smem[...] = acc.astype(dtype)
        lse_smem[...] = jnp.where(seen, (m_i + jnp.log2(l_safe)) * LN2, -jnp.inf)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(qo_smem, out_ref.at[batch, pl.ds(row0, bq), head])
        plgpu.copy_smem_to_gmem(lse_smem, lse_ref.at[batch, head, pl.ds(row0, bq)])
        plgpu.wait_smem_to_gmem(0)

    def produce(q_ref, k_ref, v_ref, scratch, barriers):
        batch, head = lax.axis_index("batch"), lax.axis_index("heads")
        _, k_smem, v_smem, _, _ = scratch
        k_ready, v_ready, _, k_used, v_used = barriers
        kv_head = lax.div(head, jnp.int32(spec.groups))
        _, cta_total = _key_steps(spec, lax.axis_index("q_seq") * (COMPUTE_WGS * bq) + (COMPUTE_WGS - 1) * bq)

        @pl.loop(0, cta_total)
        def _(j):
            slot = _rem(j, stages)

            @pl.when(j >= stages)
            def _():
                plgpu.barrier_wait(k_used.at[slot])

            tile = (batch, pl.ds(j * bk, bk), kv_head)
            plgpu.copy_gmem_to_smem(k_ref.at[tile], k_smem.at[slot], k_ready.at[slot])

            @pl.when(j >= stages)
            def _():
                plgpu.barrier_wait(v_used.at[slot])

            plgpu.copy_gmem_to_smem(v_ref.at[tile], v_smem.at[slot], v_ready.at[slot])

        # The last uses of each slot: observed, so every barrier phase is seen before they are freed.
        @pl.loop(jnp.maximum(cta_total - stages, 0), cta_total)
        def _(j):
            slot = _rem(j, stages)
            plgpu.barrier_wait(k_used.at[slot])
            plgpu.barrier_wait(v_used.at[slot])

    def entry(q_ref, k_ref, v_ref, out_ref, lse_ref):
        scratch = [
            plgpu.SMEM((COMPUTE_WGS, bq, d), dtype, transforms=TILED),
            plgpu.SMEM((stages, bk, d), dtype, transforms=TILED),
            plgpu.SMEM((stages, bk, d), dtype, transforms=TILED),
            plgpu.SMEM((COMPUTE_WGS, bq), jnp.float32),
            plgpu.SMEM((COMPUTE_WGS, bq, bk), dtype, transforms=TILED) if spec.interpret else None,
        ]
        barriers = (
            plgpu.Barrier(num_barriers=stages),  # k_ready
            plgpu.Barrier(num_barriers=stages),  # v_ready
            plgpu.Barrier(num_barriers=COMPUTE_WGS),  # q_ready
            plgpu.Barrier(num_arrivals=COMPUTE_WGS, num_barriers=stages),  # k_used
            plgpu.Barrier(num_arrivals=COMPUTE_WGS, num_barriers=stages),  # v_used
        )

        def body(*refs):
            scratch_refs, barrier_refs = refs[: len(scratch)], refs[len(scratch) :]
            wg = lax.axis_index("wg")

            @pl.when(wg < COMPUTE_WGS)
            def _():
                if not spec.interpret:
                    plgpu.set_max_registers(232, action="increase")
                compute(wg, q_ref, k_ref, v_ref, out_ref, lse_ref, scratch_refs, barrier_refs)

            @pl.when(wg == COMPUTE_WGS)
            def _():
                if not spec.interpret:
                    plgpu.set_max_registers(40, action="decrease")
                produce(q_ref, k_ref, v_ref, scratch_refs, barrier_refs)

        pl.run_scoped(body, *scratch, *barriers, collective_axes="wg")

    sq_p = spec.seq_q_padded
    out_type = (jax.ShapeDtypeStruct(q.shape, dtype), jax.ShapeDtypeStruct((b, spec.num_heads, sq_p), jnp.float32))
    return launch(spec, entry, out_type, ("q_seq", sq_p // (COMPUTE_WGS * bq)), b, COMPUTE_WGS + 1)(q, k, v)


def launch(spec: Spec, entry, out_type, tiles: tuple[str, int], batch: int, threads: int):
    """``entry`` as a Mosaic GPU kernel over ``(tiles, heads, batch)`` programs of ``threads``
    warpgroups (axis ``"wg"``), in the GPU interpreter when ``spec.interpret``."""
    return plgpu.kernel(
        entry,
        out_type=out_type,
        grid=(tiles[1], spec.num_heads, batch),
        grid_names=(tiles[0], "heads", "batch"),
        num_threads=threads,
        thread_name="wg",
        compiler_params=plgpu.CompilerParams(approx_math=True),
        interpret=plgpu.InterpretGPUParams() if spec.interpret else None,
    )
