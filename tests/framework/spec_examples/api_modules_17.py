"""Spec example api-modules.md:377 (a ``python`` block), run as documented."""

# spec: api-modules.md:377
# edit: platform="triton", => platform="xla",
# scaffolding: the flash_attention import (the example uses it) and query, key, value (random)

# ---- scaffolding (not in the spec) ----
from ejkernel.modules import flash_attention

import jax
import jax.numpy as jnp

# query [batch, seq_len, num_heads, head_dim]; key/value with 2 kv heads (GQA), random (never all ones)
_kq, _kk, _kv = jax.random.split(jax.random.PRNGKey(0), 3)
query = jax.random.normal(_kq, (2, 128, 4, 32))
key = jax.random.normal(_kk, (2, 128, 2, 32))
value = jax.random.normal(_kv, (2, 128, 2, 32))

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import FlashAttentionConfig
from ejkernel.ops import FwdParams, BwdParams

# Create custom configuration
config = FlashAttentionConfig(
    fwd_params=FwdParams(
        q_blocksize=128,
        kv_blocksize=256,
        num_warps=4,
        num_stages=2,
    ),
    bwd_params=BwdParams(
        q_blocksize=64,
        kv_blocksize=128,
    ),
    platform="xla",
    backend="gpu",
)

# Use custom config
output = flash_attention(query, key, value, cfg=config)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close

close(output, attention(query, key, value))
