"""Spec example api-modules.md:230 (a ``python`` block), run as documented."""

# spec: api-modules.md:230
# edit: none
# scaffolding: query, key, value (random) and mask, a random [batch, 1, seq_q, seq_k] bool mask (diagonal kept)

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp

# query [batch, seq_len, num_heads, head_dim]; key/value with 2 kv heads (GQA), random (never all ones)
_kq, _kk, _kv = jax.random.split(jax.random.PRNGKey(0), 3)
query = jax.random.normal(_kq, (2, 128, 4, 32))
key = jax.random.normal(_kk, (2, 128, 2, 32))
value = jax.random.normal(_kv, (2, 128, 2, 32))

mask = jax.random.bernoulli(jax.random.PRNGKey(1), 0.5, (2, 1, 128, 128)) | jnp.eye(128, dtype=bool)

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import scaled_dot_product_attention

output = scaled_dot_product_attention(
    query, key, value,
    attention_mask=mask,
    causal=True,
)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close

close(output, attention(query, key, value, mask=mask, causal=True))
