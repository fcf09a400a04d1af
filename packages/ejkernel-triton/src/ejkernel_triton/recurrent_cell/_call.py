"""Host side of the Triton ``recurrent_cell``: the input projection (XLA), the persistent kernel's
launch, and the custom VJP whose backward is XLA's (the ``lax.scan`` form, differentiated)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from ejkernel.ops.recurrent_cell import RecurrentCellArgs, RecurrentCellConfig
from ejkernel.ops.recurrent_cell.scan import input_projection, recurrent_scan

from .._launch import launch
from ._kernel import recurrent_fwd_kernel

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class Spec:
    """What the kernel is compiled for (hashable: the custom VJP's static argument)."""

    block_b: int
    block_h: int
    num_warps: int


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _forward(spec: Spec, a: RecurrentCellArgs):
    if a.seq == 0:  # nothing to launch: no outputs, the final state is the initial one
        return recurrent_scan(a)
    dirs, batch, seq, hd = a.num_dirs, a.batch, a.seq, a.hidden_dim
    gx = input_projection(a)  # [dirs, seq, batch, G * H] float32
    hn_bias = jnp.zeros((dirs, hd), F32)
    if a.cell_type == "gru" and a.b_hh is not None:
        hn_bias = a.b_hh[:, 2 * hd :].astype(F32)
    h0 = a.hidden.astype(F32)
    c0 = a.cell.astype(F32) if a.cell is not None else jnp.zeros_like(h0)
    ys, h_buf, c_buf = launch(
        recurrent_fwd_kernel,
        gx, a.w_hh, hn_bias, h0, c0, seq, batch,
        out_shape=[
            jax.ShapeDtypeStruct((dirs, seq, batch, hd), a.dtype),
            jax.ShapeDtypeStruct((dirs, 2, batch, hd), F32),
            jax.ShapeDtypeStruct((dirs, batch, hd), F32),
        ],
        grid=(_cdiv(batch, spec.block_b), dirs),
        num_warps=spec.num_warps,
        num_stages=1,
        name="ejkernel_recurrent_cell_fwd",
        H=hd,
        CELL=a.cell_type,
        G=a.num_gates,
        ACT=a.activation,
        BLOCK_B=spec.block_b,
        BLOCK_H=spec.block_h,
        W_RESIDENT=hd <= spec.block_h,
        PREC="ieee",  # float32 weights: no TF32 in the recurrence (16-bit weights ignore it)
    )  # fmt: skip
    ys = jnp.transpose(ys, (0, 2, 1, 3))  # [dirs, batch, seq, H]
    outs = [ys[0]] + ([jnp.flip(ys[1], 1)] if a.bidirectional else [])
    h = h_buf[:, seq % 2]
    return jnp.concatenate(outs, axis=-1), a.final_state(h.astype(a.dtype), c_buf.astype(a.dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _cell(spec: Spec, a: RecurrentCellArgs):
    return _forward(spec, a)


def _cell_fwd(spec: Spec, a: RecurrentCellArgs):
    return _forward(spec, a), a


def _cell_bwd(spec: Spec, a: RecurrentCellArgs, g):
    # The backward is XLA's: the scan form recomputed and differentiated (no Triton backward yet).
    _, vjp = jax.vjp(recurrent_scan, a)
    return vjp(g)


_cell.defvjp(_cell_fwd, _cell_bwd)


def recurrent_cell(args: RecurrentCellArgs, cfg: RecurrentCellConfig):
    assert cfg.block_batch and cfg.block_hidden and cfg.num_warps
    return _cell(Spec(cfg.block_batch, cfg.block_hidden, cfg.num_warps), args)
