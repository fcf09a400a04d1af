"""The Mosaic GPU (Hopper) flash-attention backward: two kernels, FlashAttention-2's split.

- ``dQ``: one program per ``block_q`` query rows of one (batch, head). Its queries, output
  gradient, log-sum-exp and ``D = rowsum(dO ∘ O)`` stay in shared memory; a producer warpgroup
  streams the K/V tiles the rows see (the forward's key ranges) through ``stages`` slots.
- ``dK/dV``: one program per ``block_kv`` keys of one (batch, query head), K and V resident, the
  query-side tiles (Q, dO, log-sum-exp, D) streamed over the query tiles that see those keys. It
  works on transposed tiles (``Sᵀ = K Qᵀ``, ``dPᵀ = V dOᵀ``) so both products accumulate into
  ``[block_kv, d]``. Per-query-head dK/dV (the inputs' dtype, staged through the K/V tiles'
  shared memory) are summed in float32 over each group of query heads on the host (GQA).

Recomputed probabilities come from the forward's log-sum-exp (``exp2(s·log2 e - lse·log2 e)``);
rows that saw no key carry ``+inf`` there, so their probabilities are exactly 0. The soft cap's
derivative ``1 - tanh²`` multiplies ``dS``; the softmax scale multiplies dQ and dK once at the end.
Barrier protocol as in the forward (``_fwd``): every phase of every barrier is observed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from ._fwd import TILED, Spec, _accumulate, _capped, _iota, _key_steps, _mask, _mma, _rem, launch


def _produce(lo, hi, stages: int, load, used) -> None:
    """Issue ``load(j, slot)`` for the tiles ``[lo, hi)``, refilling a slot once its previous
    tile is ``used``; then observe the last uses."""

    @pl.loop(lo, hi)
    def _(j):
        slot = _rem(j - lo, stages)

        @pl.when(j - lo >= stages)
        def _():
            plgpu.barrier_wait(used.at[slot])

        load(j, slot)

    @pl.loop(jnp.maximum(hi - stages, lo), hi)
    def _(j):
        plgpu.barrier_wait(used.at[_rem(j - lo, stages)])


def dq(spec: Spec, q, k, v, do, lse2, delta) -> jax.Array:
    """``dQ [b, sq_p, h, d]`` (the queries' dtype). ``lse2``: the log-sum-exp times ``log2 e``
    with ``+inf`` for rows that saw no key; ``delta``: ``rowsum(dO ∘ O)``; both ``[b, h, sq_p]``."""
    b = q.shape[0]
    bq, bk, d, stages, dtype = spec.block_q, spec.block_kv, spec.head_dim, spec.stages, q.dtype

    def compute(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, scratch, barriers):
        batch, head, tile = lax.axis_index("batch"), lax.axis_index("heads"), lax.axis_index("q_seq")
        q_smem, do_smem, lse_smem, delta_smem, k_smem, v_smem, stage = scratch
        resident, k_ready, v_ready, used = barriers
        row0 = tile * bq
        rows = (batch, pl.ds(row0, bq), head)
        plgpu.copy_gmem_to_smem(q_ref.at[rows], q_smem, resident.at[0])
        plgpu.copy_gmem_to_smem(do_ref.at[rows], do_smem, resident.at[1])
        plgpu.copy_gmem_to_smem(lse_ref.at[batch, head, pl.ds(row0, bq)], lse_smem, resident.at[2])
        plgpu.copy_gmem_to_smem(delta_ref.at[batch, head, pl.ds(row0, bq)], delta_smem, resident.at[3])
        for i in range(4):
            plgpu.barrier_wait(resident.at[i])
        lse = plgpu.load(lse_smem, layout=plgpu.Layout.WGMMA.reduce(1))
        dlt = plgpu.load(delta_smem, layout=plgpu.Layout.WGMMA.reduce(1))
        full, total = _key_steps(spec, row0)

        def step(j, acc, masked: bool):
            slot = _rem(j, stages)
            plgpu.barrier_wait(k_ready.at[slot])
            s, tanh = _capped(spec, _mma(spec, (bq, bk), q_smem, k_smem.at[slot].transpose((1, 0))))
            if masked:
                s = _mask(spec, s, _iota((bq, bk), 0, row0), _iota((bq, bk), 1, j * bk))
            p = jnp.exp2(s - lax.broadcast_in_dim(lse, s.shape, [0]))
            plgpu.barrier_wait(v_ready.at[slot])
            dp = _mma(spec, (bq, bk), do_smem, v_smem.at[slot].transpose((1, 0)))
            ds = p * (dp - lax.broadcast_in_dim(dlt, dp.shape, [0]))
            if tanh is not None:
                ds = ds * (1.0 - tanh * tanh)
            acc = _accumulate(spec, acc, ds.astype(dtype), k_smem.at[slot], stage)
            plgpu.barrier_arrive(used.at[slot])
            return acc

        acc = plgpu.layout_cast(jnp.full((bq, d), 0.0, jnp.float32), plgpu.Layout.WGMMA)
        acc = lax.fori_loop(0, full, lambda j, a: step(j, a, False), acc)
        acc = lax.fori_loop(full, total, lambda j, a: step(j, a, True), acc)
        q_smem[...] = (acc * spec.scale).astype(dtype)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(q_smem, dq_ref.at[rows])
        plgpu.wait_smem_to_gmem(0)

    def produce(k_ref, v_ref, scratch, barriers):
        batch, head = lax.axis_index("batch"), lax.axis_index("heads")
        k_smem, v_smem = scratch[4], scratch[5]
        _, k_ready, v_ready, used = barriers
        kv_head = lax.div(head, jnp.int32(spec.groups))
        _, total = _key_steps(spec, lax.axis_index("q_seq") * bq)

        def load(j, slot):
            keys = (batch, pl.ds(j * bk, bk), kv_head)
            plgpu.copy_gmem_to_smem(k_ref.at[keys], k_smem.at[slot], k_ready.at[slot])
            plgpu.copy_gmem_to_smem(v_ref.at[keys], v_smem.at[slot], v_ready.at[slot])

        _produce(0, total, stages, load, used)

    def entry(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref):
        scratch = [
            plgpu.SMEM((bq, d), dtype, transforms=TILED),
            plgpu.SMEM((bq, d), dtype, transforms=TILED),
            plgpu.SMEM((bq,), jnp.float32),
            plgpu.SMEM((bq,), jnp.float32),
            plgpu.SMEM((stages, bk, d), dtype, transforms=TILED),
            plgpu.SMEM((stages, bk, d), dtype, transforms=TILED),
            plgpu.SMEM((bq, bk), dtype, transforms=TILED) if spec.interpret else None,
        ]
        barriers = (
            plgpu.Barrier(num_barriers=4),
            plgpu.Barrier(num_barriers=stages),
            plgpu.Barrier(num_barriers=stages),
            plgpu.Barrier(num_barriers=stages),
        )

        def body(*refs):
            s, bars = refs[: len(scratch)], refs[len(scratch) :]
            wg = lax.axis_index("wg")
            pl.when(wg == 0)(lambda: compute(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, s, bars))
            pl.when(wg == 1)(lambda: produce(k_ref, v_ref, s, bars))

        pl.run_scoped(body, *scratch, *barriers, collective_axes="wg")

    out_type = jax.ShapeDtypeStruct(q.shape, dtype)
    return launch(spec, entry, out_type, ("q_seq", spec.seq_q_padded // bq), b, 2)(q, k, v, do, lse2, delta)


def _query_tiles(spec: Spec, key0):
    """``(first, unmasked, count)``: the query tiles that see the ``block_kv`` keys from ``key0``
    are ``[first, count)``; those from ``unmasked`` on need no mask."""
    bq, bk = spec.block_q, spec.block_kv
    n_q = spec.seq_q_padded // bq
    tail = key0 + bk > spec.seq_k  # the last tile of keys beyond seq_k: every query tile masks it
    if not spec.causal:
        return jnp.int32(0), jnp.where(tail, n_q, 0).astype(jnp.int32), jnp.int32(n_q)
    diag = spec.seq_k - spec.seq_q
    first = jnp.clip((key0 - diag) // bq, 0, n_q)  # rows r see keys <= r + diag
    unmasked = jnp.clip(-(-(key0 + bk - 1 - diag) // bq), first, n_q)  # every row sees every key
    unmasked = jnp.where(tail, n_q, unmasked)
    return first.astype(jnp.int32), unmasked.astype(jnp.int32), jnp.int32(n_q)


def dkdv(spec: Spec, q, k, v, do, lse2, delta) -> tuple[jax.Array, jax.Array]:
    """Per query head ``dK``, ``dV`` ``[b, sk_p, h, d]`` in the keys' dtype (sum each group for GQA)."""
    b = q.shape[0]
    bq, bk, d, stages, dtype = spec.block_q, spec.block_kv, spec.head_dim, spec.stages, q.dtype

    def compute(k_ref, v_ref, dk_ref, dv_ref, scratch, barriers):
        batch, head, tile = lax.axis_index("batch"), lax.axis_index("heads"), lax.axis_index("kv_seq")
        k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, stage = scratch
        resident, q_ready, do_ready, lse_ready, delta_ready, used = barriers
        key0 = tile * bk
        keys = (batch, pl.ds(key0, bk), lax.div(head, jnp.int32(spec.groups)))
        plgpu.copy_gmem_to_smem(k_ref.at[keys], k_smem, resident.at[0])
        plgpu.copy_gmem_to_smem(v_ref.at[keys], v_smem, resident.at[1])
        plgpu.barrier_wait(resident.at[0])
        plgpu.barrier_wait(resident.at[1])
        first, unmasked, count = _query_tiles(spec, key0)

        def step(i, carry, masked: bool):
            dk_acc, dv_acc = carry
            slot = _rem(i - first, stages)
            plgpu.barrier_wait(q_ready.at[slot])
            plgpu.barrier_wait(lse_ready.at[slot])
            st, tanh = _capped(spec, _mma(spec, (bk, bq), k_smem, q_smem.at[slot].transpose((1, 0))))
            if masked:
                st = _mask(spec, st, _iota((bk, bq), 1, i * bq), _iota((bk, bq), 0, key0))
            lse = plgpu.load(lse_smem.at[slot], layout=plgpu.Layout.WGMMA.reduce(0))
            pt = jnp.exp2(st - lax.broadcast_in_dim(lse, st.shape, [1]))
            plgpu.barrier_wait(do_ready.at[slot])
            plgpu.barrier_wait(delta_ready.at[slot])
            dv_acc = _accumulate(spec, dv_acc, pt.astype(dtype), do_smem.at[slot], stage)
            dpt = _mma(spec, (bk, bq), v_smem, do_smem.at[slot].transpose((1, 0)))
            dlt = plgpu.load(delta_smem.at[slot], layout=plgpu.Layout.WGMMA.reduce(0))
            dst = pt * (dpt - lax.broadcast_in_dim(dlt, dpt.shape, [1]))
            if tanh is not None:
                dst = dst * (1.0 - tanh * tanh)
            dk_acc = _accumulate(spec, dk_acc, dst.astype(dtype), q_smem.at[slot], stage)
            plgpu.barrier_arrive(used.at[slot])
            return dk_acc, dv_acc

        zero = plgpu.layout_cast(jnp.full((bk, d), 0.0, jnp.float32), plgpu.Layout.WGMMA)
        carry = lax.fori_loop(first, unmasked, lambda i, c: step(i, c, True), (zero, zero))
        dk_acc, dv_acc = lax.fori_loop(unmasked, count, lambda i, c: step(i, c, False), carry)
        k_smem[...] = (dk_acc * spec.scale).astype(dtype)  # K and V are no longer read
        v_smem[...] = dv_acc.astype(dtype)
        plgpu.commit_smem()
        out = (batch, pl.ds(key0, bk), head)
        plgpu.copy_smem_to_gmem(k_smem, dk_ref.at[out])
        plgpu.copy_smem_to_gmem(v_smem, dv_ref.at[out])
        plgpu.wait_smem_to_gmem(0)

    def produce(q_ref, do_ref, lse_ref, delta_ref, scratch, barriers):
        batch, head = lax.axis_index("batch"), lax.axis_index("heads")
        q_smem, do_smem, lse_smem, delta_smem = scratch[2:6]
        _, q_ready, do_ready, lse_ready, delta_ready, used = barriers
        first, _, count = _query_tiles(spec, lax.axis_index("kv_seq") * bk)

        def load(i, slot):
            rows = (batch, pl.ds(i * bq, bq), head)
            plgpu.copy_gmem_to_smem(q_ref.at[rows], q_smem.at[slot], q_ready.at[slot])
            plgpu.copy_gmem_to_smem(lse_ref.at[batch, head, pl.ds(i * bq, bq)], lse_smem.at[slot], lse_ready.at[slot])
            plgpu.copy_gmem_to_smem(do_ref.at[rows], do_smem.at[slot], do_ready.at[slot])
            plgpu.copy_gmem_to_smem(
                delta_ref.at[batch, head, pl.ds(i * bq, bq)], delta_smem.at[slot], delta_ready.at[slot]
            )

        _produce(first, count, stages, load, used)

    def entry(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref):
        scratch = [
            plgpu.SMEM((bk, d), dtype, transforms=TILED),
            plgpu.SMEM((bk, d), dtype, transforms=TILED),
            plgpu.SMEM((stages, bq, d), dtype, transforms=TILED),
            plgpu.SMEM((stages, bq, d), dtype, transforms=TILED),
            plgpu.SMEM((stages, bq), jnp.float32),
            plgpu.SMEM((stages, bq), jnp.float32),
            plgpu.SMEM((bk, bq), dtype, transforms=TILED) if spec.interpret else None,
        ]
        barriers = (
            plgpu.Barrier(num_barriers=2),
            *(plgpu.Barrier(num_barriers=stages) for _ in range(5)),
        )

        def body(*refs):
            s, bars = refs[: len(scratch)], refs[len(scratch) :]
            wg = lax.axis_index("wg")
            pl.when(wg == 0)(lambda: compute(k_ref, v_ref, dk_ref, dv_ref, s, bars))
            pl.when(wg == 1)(lambda: produce(q_ref, do_ref, lse_ref, delta_ref, s, bars))

        pl.run_scoped(body, *scratch, *barriers, collective_axes="wg")

    kv_shape = jax.ShapeDtypeStruct((b, spec.seq_k_padded, spec.num_heads, d), dtype)
    return launch(spec, entry, (kv_shape, kv_shape), ("kv_seq", spec.seq_k_padded // bk), b, 2)(
        q, k, v, do, lse2, delta
    )
