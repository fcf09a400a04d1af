"""Spec example api-modules.md:67 (a ``python`` block), run as documented."""

# spec: api-modules.md:67
# edit: none
# scaffolding: one packed batch of 512 tokens (the comment's cu_seqlens [0, 128, 300, 512]), random query/key/value, attention_bias, segment_ids

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp

# query [batch, seq_len, num_heads, head_dim]; key/value with 2 kv heads (GQA), random (never all ones)
_kq, _kk, _kv = jax.random.split(jax.random.PRNGKey(0), 3)
query = jax.random.normal(_kq, (1, 512, 4, 32))
key = jax.random.normal(_kk, (1, 512, 2, 32))
value = jax.random.normal(_kv, (1, 512, 2, 32))

import numpy as np

attention_bias = jax.random.normal(jax.random.PRNGKey(1), (1, 4, 512, 512))
cu_seqlens_q = cu_seqlens_k = jnp.array([0, 128, 300, 512], jnp.int32)
segment_ids = jnp.asarray(np.repeat([[0, 1, 2, -1]], [128, 172, 200, 12], axis=1))

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import flash_attention

# Basic usage
output = flash_attention(query, key, value)

# With causal masking (for autoregressive models)
output = flash_attention(query, key, value, causal=True)

# With sliding window (local attention)
output = flash_attention(query, key, value, sliding_window=256)

# With attention bias
output = flash_attention(query, key, value, bias=attention_bias)

# Variable-length sequences (packed batching)
output = flash_attention(
    query, key, value,
    cum_seqlens_q=cu_seqlens_q,  # [0, 128, 300, 512]
    cum_seqlens_k=cu_seqlens_k,
)

# With MaskInfo for complex masking
from ejkernel.types import MaskInfo
mask_info = MaskInfo.from_segments(segment_ids)
output = flash_attention(query, key, value, mask_info=mask_info)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close, segment_mask

ids = np.repeat([[0, 1, 2]], [128, 172, 212], axis=1)
close(flash_attention(query, key, value), attention(query, key, value))
close(flash_attention(query, key, value, causal=True), attention(query, key, value, causal=True))
close(flash_attention(query, key, value, sliding_window=256), attention(query, key, value, window=(256, 256)))
close(flash_attention(query, key, value, bias=attention_bias), attention(query, key, value, bias=attention_bias))
varlen = flash_attention(query, key, value, cum_seqlens_q=cu_seqlens_q, cum_seqlens_k=cu_seqlens_k)
close(varlen, attention(query, key, value, mask=segment_mask(ids)))
close(output, attention(query, key, value, mask=segment_mask(segment_ids)))
