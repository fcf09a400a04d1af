"""Spec example api-index.md:102 (a ``python`` block), run as documented."""

# spec: api-index.md:102
# edit: none
# scaffolding: imports and q, k, v at seq_len 10 (the length of this block's segment_ids)

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp
from ejkernel.modules import flash_attention
from ejkernel.types import MaskInfo

q, k, v = (jax.random.normal(s, (1, 10, 8, 64)) for s in jax.random.split(jax.random.PRNGKey(0), 3))

# ---- spec example (verbatim but for the edits above) ----
# Pack multiple sequences into one batch
segment_ids = jnp.array([
    [1, 1, 1, 2, 2, 3, 3, 3, 3, -1]  # 3 sequences, 1 padding
])
mask_info = MaskInfo.from_segments(segment_ids)

# Each sequence only attends within itself
output = flash_attention(q, k, v, mask_info=mask_info)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close, segment_mask

close(output, attention(q, k, v, mask=segment_mask(segment_ids)))  # each sequence only attends within itself
assert float(jnp.abs(output[:, 9:]).max()) == 0.0  # the padding row attends nothing: zeros
