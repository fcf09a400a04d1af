"""Spec example api-modules.md:205 (a ``python`` block), run as documented."""

# spec: api-modules.md:205
# edit: none
# xfail-raises: TypeError
# xfail: spec bug, fails with any release: the documented signature (signatures.md: ragged_page_attention_v3(queries, keys, values, kv_cache, kv_lens, block_tables, query_start_loc, distribution, ...)) takes the step's new keys and values and one packed cache, not key_pages/value_pages with cu_seqlens_q/cu_seqlens_k/page_indices keywords
# needs-op: ragged_page_attention_v3
# scaffolding: query [tokens, heads, dim], key_pages/value_pages [pages, page_size, kv heads, dim], cu_q, cu_k, page_indices (random)

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp

query = jax.random.normal(jax.random.PRNGKey(0), (5, 4, 32))
key_pages = jax.random.normal(jax.random.PRNGKey(1), (8, 8, 2, 32))
value_pages = jax.random.normal(jax.random.PRNGKey(2), (8, 8, 2, 32))
cu_q = jnp.array([0, 1, 5], jnp.int32)
cu_k = jnp.array([0, 9, 29], jnp.int32)
page_indices = jnp.arange(8, dtype=jnp.int32).reshape(2, 4)

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import ragged_page_attention_v3

output = ragged_page_attention_v3(
    query,
    key_pages,
    value_pages,
    cu_seqlens_q=cu_q,
    cu_seqlens_k=cu_k,
    page_indices=page_indices,
)
# ---- end of the spec example ----
