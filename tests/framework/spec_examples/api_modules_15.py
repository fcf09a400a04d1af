"""Spec example api-modules.md:331 (a ``python`` block), run as documented."""

# spec: api-modules.md:331
# edit: none
# needs-op: mean_pooling
# scaffolding: hidden_states [batch, seq_len, hidden] (random) and attention_mask [batch, seq_len] (1 = valid)

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp

hidden_states = jax.random.normal(jax.random.PRNGKey(0), (3, 10, 16))
attention_mask = (jnp.arange(10)[None, :] < jnp.array([[10], [4], [1]])).astype(jnp.int32)

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import mean_pooling

# With attention mask
pooled = mean_pooling(
    hidden_states,  # [batch, seq_len, hidden]
    attention_mask,  # [batch, seq_len]
)

# Result: [batch, hidden] - mean of valid tokens per sequence
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import close

assert pooled.shape == (3, 16)  # Result: [batch, hidden]
m = attention_mask[..., None]
close(pooled, (hidden_states * m).sum(1) / m.sum(1), tol=1e-5)  # mean of valid tokens per sequence
