"""Spec example api-modules.md:42 (a ``python`` block), run as documented."""

# spec: api-modules.md:42
# edit: platform="triton")  # Force Triton => platform="xla")  # Force Triton
# scaffolding: imports and query, key, value (random)

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
output = flash_attention(query, key, value, platform="xla")  # Force XLA
output = flash_attention(query, key, value, platform="xla")  # Force Triton
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close

close(output, attention(query, key, value))
