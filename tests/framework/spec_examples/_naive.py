"""Naive float64 NumPy attention, written from the math, for the spec examples' checks.

Not part of any spec example: the examples' files import it in their "checks" section only.
"""

from __future__ import annotations

import numpy as np


def attention(q, k, v, *, mask=None, causal=False, window=None, bias=None, softcap=None, scale=None):
    """``softmax(q kᵀ · scale [+ bias], masked) v`` per head, GQA by repeating kv heads.

    q ``[b, sq, h, d]``, k/v ``[b, sk, hkv, d]``; ``mask`` broadcastable to ``[b, h, sq, sk]`` (True = attend);
    causal aligned bottom-right; ``window`` = ``(left, right)``. Rows that attend nothing give zeros.
    """
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    b, sq, h, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    k = np.repeat(k, h // hkv, axis=2)
    v = np.repeat(v, h // hkv, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * (scale if scale is not None else d**-0.5)
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    if bias is not None:
        s = s + np.asarray(bias, np.float64)
    allowed = np.ones((b, h, sq, sk), bool)
    if mask is not None:
        allowed &= np.broadcast_to(np.asarray(mask, bool), (b, h, sq, sk))
    i = np.arange(sq)[:, None] + (sk - sq)
    j = np.arange(sk)[None, :]
    if causal:
        allowed &= j <= i
    if window is not None:
        left, right = window
        allowed &= (j >= i - left) & (j <= i + right)
    s = np.where(allowed, s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.where(allowed, np.exp(s - np.where(np.isfinite(m), m, 0.0)), 0.0)
    denom = p.sum(-1, keepdims=True)
    p = p / np.where(denom == 0, 1.0, denom)
    return np.einsum("bhqk,bkhd->bqhd", p, v)


def segment_mask(q_ids, kv_ids=None):
    """``[b, 1, sq, sk]``: equal ids ≥ 0 attend each other (-1 = padding)."""
    q_ids = np.asarray(q_ids)
    kv_ids = q_ids if kv_ids is None else np.asarray(kv_ids)
    return ((q_ids[:, :, None] == kv_ids[:, None, :]) & (q_ids[:, :, None] >= 0))[:, None]


def close(a, b, tol=2e-4):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    err = float(np.abs(a - b).max()) if a.size else 0.0
    assert err <= tol, f"max abs error {err:.3g} > {tol}"
