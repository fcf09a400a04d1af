"""Spec example api-modules.md:309 (a ``python`` block), run as documented."""

# spec: api-modules.md:309
# edit: group_ids,  # [total_tokens] => jnp.bincount(group_ids, length=4),  # [total_tokens]
# needs-op: grouped_matmul
# variant: the spec block with its bug fixed (the one edit above): group sizes, not per-token ids
# scaffolding: inputs [total_tokens, hidden] sorted by expert, weights [num_experts, hidden, output], group_ids [total_tokens] (random, sorted)

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp

inputs = jax.random.normal(jax.random.PRNGKey(0), (24, 16))
weights = jax.random.normal(jax.random.PRNGKey(1), (4, 16, 8))
group_ids = jnp.sort(jax.random.randint(jax.random.PRNGKey(2), (24,), 0, 4))  # tokens sorted by expert

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import grouped_matmul

output = grouped_matmul(
    inputs,     # [total_tokens, hidden]
    weights,    # [num_experts, hidden, output]
    jnp.bincount(group_ids, length=4),  # [total_tokens] - which expert each token uses
)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import close

close(output, jnp.einsum("th,tho->to", inputs, weights[group_ids]), tol=1e-3)
