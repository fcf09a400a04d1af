"""gla_attention at T = 65536 (the inputs of ``tests/conformance/test_linear_attention.py``'s long
test) against a float64 NumPy recurrence: the Triton kernels at three configs, and the float32
token-by-token reference as XLA runs it on the device. On a GPU (repository root):

    python3 benchmarks/linear_long_f64.py [nofactor]

``nofactor`` sets ``_linear._kernel.SPAN`` below zero before any kernel compiles, so that every
chunk is built column by column (use a fresh ``TRITON_CACHE_DIR``: a cached kernel keeps the
value it was compiled with).
"""

from __future__ import annotations

import os
import sys

import jax
import numpy as np
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "conformance"))

import test_linear_attention as T

import ejkernel
from ejkernel.ops.gla_attention import GLAttentionConfig
from ejkernel.testing import reference_of
from ejkernel_triton._linear import _kernel as LK


def reference64(q, k, v, g, h0):
    """The GLA recurrence in float64 (scale ``1/sqrt(dk)``): ``out [1, t, h, dv]``, final state."""
    q, k, v, g, h0 = (np.asarray(x, np.float64) for x in (q, k, v, g, h0))
    _, t, h, dk = q.shape
    out = np.zeros((1, t, h, v.shape[3]))
    state = h0[0].copy()
    for i in range(t):
        state = np.exp(g[0, i])[:, :, None] * state + k[0, i][:, :, None] * v[0, i][:, None, :]
        out[0, i] = np.einsum("hk,hkv->hv", q[0, i] * dk**-0.5, state)
    return out, state[None]


def main() -> None:
    label = "factored"
    if "nofactor" in sys.argv:
        LK.SPAN = tl.constexpr(-1.0)
        label = "nofactor"
    args, _ = T._long_call("gla_attention", 65536, "triton")
    q, k, v, g, _, h0 = args
    r_out, r_state = reference64(q, k, v, g, h0)
    x_out, x_state = reference_of("gla_attention")(*args, return_state=True)
    print(
        "device float32 reference: out err", np.abs(np.asarray(x_out) - r_out).max(),
        "state err", np.abs(np.asarray(x_state) - r_state).max(), "scale", np.abs(r_out).max(), flush=True,
    )  # fmt: skip
    for chunk, warps in ((16, 4), (32, 4), (32, 8)):
        cfg = GLAttentionConfig(chunk_size=chunk, block_v=64, num_warps=warps, num_stages=2)
        run = jax.jit(lambda *a, cfg=cfg: ejkernel.gla_attention(*a, return_state=True, platform="triton", cfg=cfg))
        out, state = run(*args)
        print(
            label, chunk, warps, "out err", np.abs(np.asarray(out) - r_out).max(),
            "state err", np.abs(np.asarray(state) - r_state).max(), flush=True,
        )  # fmt: skip


if __name__ == "__main__":
    main()
