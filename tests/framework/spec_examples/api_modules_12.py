"""Spec example api-modules.md:277 (a ``python`` block), run as documented."""

# spec: api-modules.md:277
# edit: none
# needs-op: lightning_attention
# scaffolding: query, key, value (random) and decay_factor, one decay rate per head

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp

# query [batch, seq_len, num_heads, head_dim]; key/value with 2 kv heads (GQA), random (never all ones)
_kq, _kk, _kv = jax.random.split(jax.random.PRNGKey(0), 3)
query = jax.random.normal(_kq, (2, 24, 4, 32))
key = jax.random.normal(_kk, (2, 24, 4, 32))
value = jax.random.normal(_kv, (2, 24, 4, 32))

decay_factor = jnp.array([0.5, 0.25, 0.125, 0.0625])

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import lightning_attention

output = lightning_attention(
    query, key, value,
    decay=decay_factor,
)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
assert output.shape == (2, 24, 4, 32)
