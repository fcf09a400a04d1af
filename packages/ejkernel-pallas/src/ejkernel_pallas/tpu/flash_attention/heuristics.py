"""Block sizes of the TPU flash attention: rules, VMEM estimates, heuristics, autotune space.

Pure functions of shapes, dtype and TPU generation (no TPU needed). ``FwdParams``/``BwdParams``
``q_blocksize`` is the query tile (rows: sublanes), ``kv_blocksize`` the key tile (it becomes the
lane axis of the ``[bq, bk]`` logits). The backward uses one pair of sizes for both its kernels.

Rules (TPU tiling): ``q_blocksize`` is a multiple of 8 for float32 and of 16 for bfloat16
(packed rows), ``kv_blocksize`` a multiple of 128. Blocks larger than the padded sequence are
clamped to it; ``num_warps``/``num_stages`` are GPU knobs and are ignored.
"""

from __future__ import annotations

import itertools
from typing import Any

import jax.numpy as jnp

from ejkernel.ops import BwdParams, FwdParams

from .._tiling import NUM_LANES, NUM_SUBLANES, VMEM_BUDGET, round_up, sublanes
from ._spec import kernel_head_dim

_F32 = 4

# Candidate tiles for autotuning. 128 is the smallest tile the MXU takes at full width; past
# 1024 query rows (2048 keys) the [bq, bk] float32 logits alone outgrow VMEM.
_FWD_Q = (128, 256, 512, 1024)
_FWD_K = (128, 256, 512, 1024, 2048)
_BWD_Q = (128, 256, 512)
_BWD_K = (128, 256, 512, 1024)


def effective_blocks(block_q: int, block_k: int, seq_q: int, seq_k: int, dtype: Any) -> tuple[int, int]:
    """Blocks no larger than the (tile-rounded) sequences: a bigger one would only add padding."""
    return min(block_q, round_up(seq_q, sublanes(dtype))), min(block_k, round_up(seq_k, NUM_LANES))


def _segments_bytes(block_q: int, block_k: int, segments: bool) -> int:
    # Lane-replicated query ids [bq, 128] and sublane-replicated key ids [8, bk], int32.
    return (block_q * NUM_LANES + NUM_SUBLANES * block_k) * _F32 if segments else 0


def fwd_vmem_bytes(block_q: int, block_k: int, d: int, dv: int, itemsize: int, segments: bool = False) -> int:
    """VMEM of one forward grid step: double-buffered input/output tiles, the m/l/acc scratch
    and about four ``[bq, bk]`` float32 temporaries (logits, probabilities, mask, exp)."""
    d, dv = kernel_head_dim(d), kernel_head_dim(dv)
    tiles = (block_q * d + block_k * (d + dv)) * itemsize + _segments_bytes(block_q, block_k, segments)
    outs = block_q * dv * itemsize + block_q * NUM_LANES * _F32
    scratch = (block_q * dv + 2 * block_q * NUM_LANES) * _F32
    return 2 * (tiles + outs) + scratch + 4 * block_q * block_k * _F32


def bwd_vmem_bytes(block_q: int, block_k: int, d: int, dv: int, itemsize: int, segments: bool = False) -> int:
    """VMEM of one dK/dV grid step (the larger of the two backward kernels): Q, K, V, dO and the
    lane-replicated lse and D tiles double-buffered, dK/dV outputs and accumulators, and about
    five ``[bq, bk]`` float32 temporaries (S, P, dP, dS, mask)."""
    d, dv = kernel_head_dim(d), kernel_head_dim(dv)
    tiles = (block_q * (d + dv) + block_k * (d + dv)) * itemsize + 2 * block_q * NUM_LANES * _F32
    tiles += _segments_bytes(block_q, block_k, segments)
    outs = block_k * (d + dv) * itemsize
    scratch = block_k * (d + dv) * _F32
    return 2 * (tiles + outs) + scratch + 5 * block_q * block_k * _F32


def _fit(vmem_bytes, bq: int, bk: int, seq_q: int, seq_k: int, d: int, dv: int, dtype: Any, segments: bool):
    """Halve the key block (down to a lane row), then the query block (down to a sublane tile),
    until ``vmem_bytes`` fits the budget; then fit the blocks to the sequences."""
    itemsize = _itemsize(dtype)
    while vmem_bytes(bq, bk, d, dv, itemsize, segments) > VMEM_BUDGET and bk > NUM_LANES:
        bk //= 2
    while vmem_bytes(bq, bk, d, dv, itemsize, segments) > VMEM_BUDGET and bq > sublanes(dtype):
        bq //= 2
    return effective_blocks(bq, bk, seq_q, seq_k, dtype)


def heuristic_fwd(seq_q: int, seq_k: int, d: int, dv: int, dtype: Any, segments: bool) -> FwdParams:
    # 512×512: large enough that the per-step overhead (~0.35 µs a grid step, the figure of JAX's
    # Pallas TPU guides) and the re-reads of K/V per query block stay small against the MXU work,
    # small enough to double-buffer in 16 MiB of VMEM with head dims up to 256 (the block sizes
    # MaxText's splash attention uses on v5e/v6e).
    bq, bk = _fit(fwd_vmem_bytes, 512, 512, seq_q, seq_k, d, dv, dtype, segments)
    return FwdParams(q_blocksize=bq, kv_blocksize=bk)


def heuristic_bwd(seq_q: int, seq_k: int, d: int, dv: int, dtype: Any, segments: bool) -> BwdParams:
    # The backward holds twice the tiles and five logits-sized temporaries: 256 query rows
    # against 512 resident keys keeps a d=256 bfloat16 step under the budget, and the resident
    # key block amortizes the dK/dV accumulators over many query steps.
    bq, bk = _fit(bwd_vmem_bytes, 256, 512, seq_q, seq_k, d, dv, dtype, segments)
    return BwdParams(q_blocksize=bq, kv_blocksize=bk)


def _candidates(qs, ks, seq_q, seq_k, d, dv, dtype, segments, vmem) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    for bq, bk in itertools.product(qs, ks):
        eff = effective_blocks(bq, bk, seq_q, seq_k, dtype)
        if eff in seen:  # larger than the sequence: the same tiles as a smaller candidate
            continue
        if vmem(*eff, d, dv, _itemsize(dtype), segments) > VMEM_BUDGET:
            continue
        seen.append(eff)
    return seen


def fwd_candidates(seq_q: int, seq_k: int, d: int, dv: int, dtype: Any, segments: bool) -> list[FwdParams]:
    pairs = _candidates(_FWD_Q, _FWD_K, seq_q, seq_k, d, dv, dtype, segments, fwd_vmem_bytes)
    return [FwdParams(q_blocksize=bq, kv_blocksize=bk) for bq, bk in pairs]


def bwd_candidates(seq_q: int, seq_k: int, d: int, dv: int, dtype: Any, segments: bool) -> list[BwdParams]:
    pairs = _candidates(_BWD_Q, _BWD_K, seq_q, seq_k, d, dv, dtype, segments, bwd_vmem_bytes)
    return [BwdParams(q_blocksize=bq, kv_blocksize=bk) for bq, bk in pairs]


def check_blocks(name: str, params: FwdParams | BwdParams | None, dtype: Any) -> tuple[int, int]:
    """Raise ``ValueError`` unless ``params`` has tile-aligned block sizes; return them."""
    if params is None or params.q_blocksize is None or params.kv_blocksize is None:
        raise ValueError(f"pallas flash_attention needs {name} with q_blocksize and kv_blocksize")
    sub = sublanes(dtype)
    if params.q_blocksize % sub:
        raise ValueError(
            f"pallas flash_attention: {name}.q_blocksize must be a multiple of {sub} for {_name(dtype)} "
            f"(TPU sublane tiling), got {params.q_blocksize}"
        )
    if params.kv_blocksize % NUM_LANES:
        raise ValueError(
            f"pallas flash_attention: {name}.kv_blocksize must be a multiple of {NUM_LANES} (TPU lanes), "
            f"got {params.kv_blocksize}"
        )
    return params.q_blocksize, params.kv_blocksize


def _itemsize(dtype: Any) -> int:
    return jnp.dtype(dtype).itemsize


def _name(dtype: Any) -> str:
    return jnp.dtype(dtype).name
