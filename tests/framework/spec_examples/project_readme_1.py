"""Spec example project-readme.md:76 (a ``python`` block), run as documented."""

# spec: project-readme.md:76
# edit: none

# ---- spec example (verbatim but for the edits above) ----
import jax
import jax.numpy as jnp
from ejkernel.modules import FlashAttention, create_default_executor

# Initialize
executor = create_default_executor()
attention = FlashAttention()

# Create inputs
batch, seq_len, num_heads, head_dim = 2, 1024, 8, 64
key = jax.random.PRNGKey(0)
q = k = v = jax.random.normal(key, (batch, seq_len, num_heads, head_dim))

# Execute attention
output = executor(attention, q, k, v, causal=True, dropout_prob=0.1)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
assert output.shape == (2, 1024, 8, 64)
assert bool(jnp.isfinite(output).all())
