"""Spec example api-modules.md:420 (a ``python`` block), run as documented."""

# spec: api-modules.md:420
# edit: none
# scaffolding: imports; query, key, value (random); segment_ids (3 packed sequences); attention_mask [batch, seq] padding

# ---- scaffolding (not in the spec) ----
from ejkernel.modules import flash_attention

import jax
import jax.numpy as jnp

# query [batch, seq_len, num_heads, head_dim]; key/value with 2 kv heads (GQA), random (never all ones)
_kq, _kk, _kv = jax.random.split(jax.random.PRNGKey(0), 3)
query = jax.random.normal(_kq, (2, 16, 4, 32))
key = jax.random.normal(_kk, (2, 16, 2, 32))
value = jax.random.normal(_kv, (2, 16, 2, 32))

segment_ids = jnp.array([[0] * 5 + [1] * 7 + [2] * 4, [0] * 9 + [1] * 5 + [-1] * 2])
attention_mask = jnp.array([[1] * 16, [1] * 11 + [0] * 5])  # 1 = real token

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.types import MaskInfo

# From segment IDs (packed sequences)
mask_info = MaskInfo.from_segments(segment_ids)

# From attention mask
mask_info = MaskInfo.from_attention_mask(attention_mask)

# Use with attention
output = flash_attention(query, key, value, mask_info=mask_info)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
import numpy as np
from _naive import attention, close

pad = np.asarray(attention_mask, bool)
close(output, attention(query, key, value, mask=(pad[:, :, None] & pad[:, None, :])[:, None]))
by_segments = flash_attention(query, key, value, mask_info=MaskInfo.from_segments(segment_ids))
ids = np.asarray(segment_ids)
close(by_segments, attention(query, key, value, mask=((ids[:, :, None] == ids[:, None, :]) & (ids[:, :, None] >= 0))[:, None]))
