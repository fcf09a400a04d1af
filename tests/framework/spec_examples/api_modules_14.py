"""Spec example api-modules.md:309 (a ``python`` block), run as documented."""

# spec: api-modules.md:309
# edit: none
# xfail-raises: ValueError
# xfail: spec bug, fails with any release: the documented signature (signatures.md: grouped_matmul(lhs[m, k], rhs[g, k, n], group_sizes[g], ...)) takes group sizes of rows sorted by group, not per-token group_ids; the _fixed variant sorts the tokens and passes jnp.bincount(group_ids, length=num_experts)
# needs-op: grouped_matmul
# scaffolding: inputs [total_tokens, hidden], weights [num_experts, hidden, output], group_ids [total_tokens] (random)

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp

inputs = jax.random.normal(jax.random.PRNGKey(0), (24, 16))
weights = jax.random.normal(jax.random.PRNGKey(1), (4, 16, 8))
group_ids = jax.random.randint(jax.random.PRNGKey(2), (24,), 0, 4)  # which expert each token uses

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import grouped_matmul

output = grouped_matmul(
    inputs,     # [total_tokens, hidden]
    weights,    # [num_experts, hidden, output]
    group_ids,  # [total_tokens] - which expert each token uses
)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import close

close(output, jnp.einsum("th,tho->to", inputs, weights[group_ids]), tol=1e-3)
