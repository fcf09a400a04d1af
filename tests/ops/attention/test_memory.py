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


def _gpu_tiles(seq: int, causal: bool, b: int = 1, h: int = 4):
    """The XLA implementation's GPU heuristic tiles for a ``[b, seq, h, 64]`` call."""
    from ejkernel.ops.executor import bind
    from ejkernel_xla.flash_attention import heuristics as H

    picked = []

    def trace(x):  # bound from a tracer: the shapes are never allocated
        picked.append(H.heuristic(bind("flash_attention", query=x, key=x, value=x, causal=causal), "gpu"))
        return x

    jax.eval_shape(trace, jax.ShapeDtypeStruct((b, seq, h, 64), jnp.bfloat16))
    return picked[0]


def test_xla_gpu_tiles_take_every_key_within_the_budget():
    """Unmasked: every key in one tile, as many query rows as the 1 GiB logits budget allows;
    masked calls keep short key tiles; past the budget the short tiles come back."""
    cfg = _gpu_tiles(8192, False, b=2, h=16)
    assert (cfg.fwd_params.q_blocksize, cfg.fwd_params.kv_blocksize) == (1024, 8192)
    assert (cfg.bwd_params.q_blocksize, cfg.bwd_params.kv_blocksize) == (1024, 8192)
    assert _gpu_tiles(1000, False).fwd_params.kv_blocksize == 1000
    assert _gpu_tiles(8192, True, b=2, h=16).fwd_params.kv_blocksize == 1024
    huge = _gpu_tiles(1 << 18, False, b=8, h=32)  # 128 rows x 262144 keys x 256 heads: 32 GiB
    assert (huge.fwd_params.q_blocksize, huge.fwd_params.kv_blocksize) == (1024, 1024)


@pytest.mark.slow
def test_xla_gpu_tiles_memory_is_bounded_by_the_budget():
    """Where the budget binds (b16 h16 s8192: 128 query rows x 8192 keys), the GPU tiles' forward+
    backward (compiled here for the CPU: the loop structure is the same) needs a few logits tiles
    of temporary memory, nowhere near the 64 GiB of the ``[b, h, s, s]`` logits."""
    from ejkernel_xla.flash_attention import heuristics as H

    b, s, h = 16, 8192, 16
    cfg = _gpu_tiles(s, False, b=b, h=h)
    assert cfg.fwd_params.q_blocksize == 128
    spec = jax.ShapeDtypeStruct((b, s, h, 64), jnp.bfloat16)

    def loss(q, k, v):
        return jnp.sum(ejkernel.flash_attention(q, k, v, platform="xla", cfg=cfg).astype(jnp.float32))

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(spec, spec, spec).compile()
    temp = int(compiled.memory_analysis().temp_size_in_bytes)
    assert temp <= 6 * H.GPU_WHOLE_KEYS_BYTES, f"{temp / 2**30:.2f} GiB"
