"""Spec example api-modules.md:292 (a ``python`` block), run as documented."""

# spec: api-modules.md:292
# edit: none
# needs-op: recurrent_attention
# scaffolding: query, key, value (random) and previous_state [batch, heads, head_dim_k, head_dim_v] (random)

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp

# query [batch, seq_len, num_heads, head_dim]; key/value with 2 kv heads (GQA), random (never all ones)
_kq, _kk, _kv = jax.random.split(jax.random.PRNGKey(0), 3)
query = jax.random.normal(_kq, (2, 24, 4, 32))
key = jax.random.normal(_kk, (2, 24, 4, 32))
value = jax.random.normal(_kv, (2, 24, 4, 32))

previous_state = jax.random.normal(jax.random.PRNGKey(1), (2, 4, 32, 32))

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import recurrent_attention

output, new_state = recurrent_attention(
    query, key, value,
    state=previous_state,  # Carries information from previous steps
)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
import numpy as np
from _naive import close

q, k, v = (np.asarray(x, np.float64) for x in (query, key, value))
h = np.asarray(previous_state, np.float64)
ref = np.zeros_like(v)
for t in range(q.shape[1]):  # h_t = h_{t-1} + k_t v_tᵀ, o_t = h_tᵀ q_t / sqrt(d)
    h = h + k[:, t, :, :, None] * v[:, t, :, None, :]
    ref[:, t] = np.einsum("bhk,bhkv->bhv", q[:, t], h) * 32**-0.5
close(output, ref, tol=1e-3)
close(new_state, h, tol=1e-3)
