"""Memory: XLA flash_attention forward+backward grows linearly with the sequence length.

Measured from the compiled program (``memory_analysis().temp_size_in_bytes``), nothing runs. From
seq 2048 to 8192 (4x), linear growth is 4x; the naive reference materializes the logits and
grows ~16x.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import ejkernel
from ejkernel.testing import attention_reference

SHORT, LONG = 2048, 8192
LINEAR_BOUND = 4 * 1.25  # 4x plus slack for fixed-size buffers
QUADRATIC_FLOOR = 12.0


def temp_bytes(attention, seq: int, causal: bool) -> int:
    spec = jax.ShapeDtypeStruct((1, seq, 4, 64), jnp.float32)

    def loss(q, k, v):
        return jnp.sum(attention(q, k, v, causal=causal))

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(spec, spec, spec).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_memory_is_linear(causal):
    flash = {n: temp_bytes(ejkernel.flash_attention, n, causal) for n in (SHORT, LONG)}
    naive = {n: temp_bytes(attention_reference, n, causal) for n in (SHORT, LONG)}
    flash_ratio = flash[LONG] / flash[SHORT]
    naive_ratio = naive[LONG] / naive[SHORT]
    assert flash_ratio <= LINEAR_BOUND, f"flash temp memory grew {flash_ratio:.1f}x: {flash}"
    assert naive_ratio >= QUADRATIC_FLOOR, f"naive temp memory grew only {naive_ratio:.1f}x: {naive}"
    # And in absolute terms, far below the [heads, seq, seq] logits at the long length.
    logits_bytes = 4 * LONG * LONG * 4
    assert flash[LONG] < logits_bytes / 8
