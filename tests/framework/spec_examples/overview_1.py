"""Spec example overview.rst:89 (a ``python`` block), run as documented."""

# spec: overview.rst:89
# edit: none
# scaffolding: query, key, value (random; seq_len 256 so the 128-token window matters)

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp

# query [batch, seq_len, num_heads, head_dim]; key/value with 2 kv heads (GQA), random (never all ones)
_kq, _kk, _kv = jax.random.split(jax.random.PRNGKey(0), 3)
query = jax.random.normal(_kq, (2, 256, 4, 32))
key = jax.random.normal(_kk, (2, 256, 2, 32))
value = jax.random.normal(_kv, (2, 256, 2, 32))

# ---- spec example (verbatim but for the edits above) ----
import jax.numpy as jnp
from ejkernel.modules import flash_attention

# Basic usage - automatic configuration selection
output = flash_attention(
    query, key, value,
    causal=True,
    dropout_prob=0.1
)

# With advanced features
output = flash_attention(
    query, key, value,
    causal=True,
    sliding_window=128,        # Local attention window
    logits_soft_cap=30.0,      # Gemma-2 style soft capping
)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close

close(output, attention(query, key, value, causal=True, window=(128, 128), softcap=30.0))
