"""Spec example api-index.md:36 (a ``python`` block), run as documented."""

# spec: api-index.md:36
# edit: none
# scaffolding: imports and q, k, v (the Quick Start block's, at seq_len 6, the length of this block's segment_ids)

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp
from ejkernel.modules import flash_attention

q, k, v = (jax.random.normal(s, (1, 6, 8, 64)) for s in jax.random.split(jax.random.PRNGKey(0), 3))

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.types import MaskInfo

# Create mask from segment IDs
segment_ids = jnp.array([[1, 1, 2, 2, -1, -1]])  # -1 = padding
mask_info = MaskInfo.from_segments(segment_ids)

# Use with attention
output = flash_attention(q, k, v, mask_info=mask_info)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close, segment_mask

close(output, attention(q, k, v, mask=segment_mask(segment_ids)))
assert float(jnp.abs(output[:, 4:]).max()) == 0.0  # padding rows attend nothing: zeros (docs/pages/migrating.md)
