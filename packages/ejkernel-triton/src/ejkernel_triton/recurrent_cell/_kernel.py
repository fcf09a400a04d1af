"""The Triton forward of ``recurrent_cell``: a persistent kernel that runs every timestep.

One program owns ``BLOCK_B`` batch rows of one direction and loops over time inside the kernel
(the sequence is one launch, not one launch per step). The input projection of every step,
``x_t @ w_ih`` plus the biases that add to it, is one matmul before the kernel
(``ejkernel.ops.recurrent_cell.scan.input_projection``); the kernel adds ``h_{t-1} @ w_hh`` and
applies the cell. With ``hidden_dim <= BLOCK_H`` (``W_RESIDENT``) the recurrent weights are loaded
once, before the time loop, and stay on chip (Triton keeps the dots' operand tiles in shared
memory) for the whole sequence; otherwise each step streams them in ``BLOCK_H``-square tiles
(from L2 after the first step).

The float32 state lives in a two-slot buffer ``h_buf[dirs, 2, batch, H]``: step ``t`` reads slot
``t % 2`` whole (every column block needs all of ``h_{t-1}``) and writes slot ``(t + 1) % 2``; a
barrier after each step makes the program's writes visible to its next step. The cell state is
read and written only at the element's own position (``c_buf``), which needs no barrier.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _act(x, ACT: tl.constexpr):
    if ACT == "relu":
        y = tl.maximum(x, 0.0)
    else:  # tanh(x) = 2 sigmoid(2x) - 1 (tl has no tanh in every release)
        y = 2.0 * tl.sigmoid(2.0 * x) - 1.0
    return y


@triton.jit
def _w_tile(w_ptr, k0, gate, j0, H, G: tl.constexpr, BLOCK_H: tl.constexpr):
    """``w_hh[k0 : k0 + BLOCK_H, gate * H + j0 : ... + BLOCK_H]`` of one direction, zero past ``H``."""
    o_k = k0 + tl.arange(0, BLOCK_H)
    o_j = j0 + tl.arange(0, BLOCK_H)
    m = (o_k[:, None] < H) & (o_j[None, :] < H)
    return tl.load(w_ptr + o_k[:, None].to(tl.int64) * (G * H) + gate * H + o_j[None, :], mask=m, other=0.0)


@triton.jit
def recurrent_fwd_kernel(
    gx_ptr,  # [dirs, seq, batch, G * H] float32: the input projection, biases folded in
    w_ptr,  # [dirs, H, G * H]: w_hh
    hn_bias_ptr,  # [dirs, H] float32: a gru's n-block b_hh (zeros otherwise)
    h0_ptr,  # [dirs, batch, H] float32
    c0_ptr,  # [dirs, batch, H] float32
    seq,
    batch,
    ys_ptr,  # out: [dirs, seq, batch, H] (the inputs' dtype)
    h_buf_ptr,  # out: [dirs, 2, batch, H] float32; slot seq % 2 holds the final h
    c_buf_ptr,  # out: [dirs, batch, H] float32: the final c
    H: tl.constexpr,
    CELL: tl.constexpr,  # "lstm", "gru" or "rnn"
    G: tl.constexpr,  # gate blocks: 4, 3, 1
    ACT: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_H: tl.constexpr,
    W_RESIDENT: tl.constexpr,
    PREC: tl.constexpr,
):
    i_b = tl.program_id(0)
    i_d = tl.program_id(1)
    o_b = i_b * BLOCK_B + tl.arange(0, BLOCK_B)
    m_b = o_b < batch
    w_base = w_ptr + i_d.to(tl.int64) * H * G * H
    state = i_d.to(tl.int64) * batch * H
    # Slot 0 of h starts as h0 (step 0 reads it), c as c0.
    for j0 in range(0, H, BLOCK_H):
        o_j = j0 + tl.arange(0, BLOCK_H)
        m = m_b[:, None] & (o_j[None, :] < H)
        off = o_b[:, None] * H + o_j[None, :]
        tl.store(h_buf_ptr + 2 * state + off, tl.load(h0_ptr + state + off, mask=m, other=0.0), mask=m)
        tl.store(c_buf_ptr + state + off, tl.load(c0_ptr + state + off, mask=m, other=0.0), mask=m)
    tl.debug_barrier()

    if W_RESIDENT:  # the whole w_hh of this direction in registers, one [BLOCK_H, BLOCK_H] tile per gate
        w0 = _w_tile(w_base, 0, 0, 0, H, G, BLOCK_H)
        if G > 1:
            w1 = _w_tile(w_base, 0, 1, 0, H, G, BLOCK_H)
            w2 = _w_tile(w_base, 0, 2, 0, H, G, BLOCK_H)
        if G > 3:
            w3 = _w_tile(w_base, 0, 3, 0, H, G, BLOCK_H)

    for t in range(0, seq):
        src = h_buf_ptr + (2 * i_d.to(tl.int64) + t % 2) * batch * H
        dst = h_buf_ptr + (2 * i_d.to(tl.int64) + (t + 1) % 2) * batch * H
        gx_row = gx_ptr + ((i_d.to(tl.int64) * seq + t) * batch + o_b[:, None]) * (G * H)
        for j0 in range(0, H, BLOCK_H):
            o_j = j0 + tl.arange(0, BLOCK_H)
            m_j = o_j < H
            m = m_b[:, None] & m_j[None, :]
            # [BLOCK_B, BLOCK_H] per gate: the input part, then h_{t-1} @ w_hh
            a0 = tl.load(gx_row + o_j[None, :], mask=m, other=0.0)
            if G > 1:
                a1 = tl.load(gx_row + H + o_j[None, :], mask=m, other=0.0)
                a2 = tl.zeros([BLOCK_B, BLOCK_H], dtype=tl.float32)  # a gru keeps its n parts apart
                x2 = tl.load(gx_row + 2 * H + o_j[None, :], mask=m, other=0.0)
                if CELL == "lstm":
                    a2 += x2
            if G > 3:
                a3 = tl.load(gx_row + 3 * H + o_j[None, :], mask=m, other=0.0)
            for k0 in range(0, H, BLOCK_H):
                o_k = k0 + tl.arange(0, BLOCK_H)
                b_h = tl.load(src + o_b[:, None] * H + o_k[None, :], mask=m_b[:, None] & (o_k[None, :] < H), other=0.0)
                b_h = b_h.to(w_ptr.dtype.element_ty)
                if W_RESIDENT:
                    a0 += tl.dot(b_h, w0, input_precision=PREC)
                    if G > 1:
                        a1 += tl.dot(b_h, w1, input_precision=PREC)
                        a2 += tl.dot(b_h, w2, input_precision=PREC)
                    if G > 3:
                        a3 += tl.dot(b_h, w3, input_precision=PREC)
                else:
                    a0 += tl.dot(b_h, _w_tile(w_base, k0, 0, j0, H, G, BLOCK_H), input_precision=PREC)
                    if G > 1:
                        a1 += tl.dot(b_h, _w_tile(w_base, k0, 1, j0, H, G, BLOCK_H), input_precision=PREC)
                        a2 += tl.dot(b_h, _w_tile(w_base, k0, 2, j0, H, G, BLOCK_H), input_precision=PREC)
                    if G > 3:
                        a3 += tl.dot(b_h, _w_tile(w_base, k0, 3, j0, H, G, BLOCK_H), input_precision=PREC)
            off = o_b[:, None] * H + o_j[None, :]
            if CELL == "lstm":
                c = tl.load(c_buf_ptr + state + off, mask=m, other=0.0)
                c = tl.sigmoid(a1) * c + tl.sigmoid(a0) * _act(a2, ACT)
                h = tl.sigmoid(a3) * _act(c, ACT)
                tl.store(c_buf_ptr + state + off, c, mask=m)
            elif CELL == "gru":
                hn = a2 + tl.load(hn_bias_ptr + i_d * H + o_j, mask=m_j, other=0.0)[None, :]
                r = tl.sigmoid(a0)
                z = tl.sigmoid(a1)
                n = _act(x2 + r * hn, ACT)
                h_prev = tl.load(src + off, mask=m, other=0.0)
                h = (1.0 - z) * n + z * h_prev
            else:
                h = _act(a0, ACT)
            tl.store(dst + off, h, mask=m)
            y_off = ((i_d.to(tl.int64) * seq + t) * batch + o_b[:, None]) * H + o_j[None, :]
            tl.store(ys_ptr + y_off, h.to(ys_ptr.dtype.element_ty), mask=m)
        tl.debug_barrier()
