"""Spec example api-index.md:21 (a ``python`` block), run as documented."""

# spec: api-index.md:21
# edit: none

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import flash_attention
import jax.numpy as jnp

# Create query, key, value tensors
q = jnp.ones((2, 128, 8, 64))  # (batch, seq_len, heads, head_dim)
k = jnp.ones((2, 128, 8, 64))
v = jnp.ones((2, 128, 8, 64))

# Run flash attention
output = flash_attention(q, k, v, causal=True)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
assert output.shape == (2, 128, 8, 64)
assert float(jnp.abs(output - 1.0).max()) < 1e-6  # all-ones values: every output is 1
