"""Spec example project-readme.md:112 (a ``python`` block), run as documented."""

# spec: project-readme.md:112
# edit: none
# note: ejkernel.kernels._<backend>.<op> is synthesized by the compat package ejkernel.kernels
# scaffolding: the undefined num_blocks, num_heads, head_dim, query (random one-token queries)

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp

num_blocks, num_heads, head_dim = 8, 4, 32
query = jax.random.normal(jax.random.PRNGKey(0), (2, num_heads, head_dim))

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.kernels._xla.page_attention import page_attention

# Setup KV cache
max_blocks, block_size = 256, 16
key_cache = jnp.zeros((num_blocks, num_heads, block_size, head_dim))
value_cache = jnp.zeros((num_blocks, num_heads, block_size, head_dim))

# Block tables for sequence mapping
block_tables = jnp.array([[0, 1, 2, 3], [4, 5, 6, 7]])
context_lens = jnp.array([48, 32])

# Run paged attention
output = page_attention(
    query, key_cache, value_cache,
    context_lens, block_tables,
    scale=0.125, block_size=block_size
)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
import numpy as np

from _naive import attention

assert output.shape == query.shape
assert np.all(np.asarray(output) == 0)  # zero caches: every value is 0

# The same call with random caches, against naive attention over each sequence's pages.
kc = jax.random.normal(jax.random.PRNGKey(1), key_cache.shape)
vc = jax.random.normal(jax.random.PRNGKey(2), value_cache.shape)
out = page_attention(query, kc, vc, context_lens, block_tables, scale=0.125, block_size=block_size)
for b in range(query.shape[0]):
    n = int(context_lens[b])
    pages = np.asarray(block_tables[b])
    keys = np.concatenate([np.asarray(kc)[p].transpose(1, 0, 2) for p in pages])[:n]  # [tokens, heads, dim]
    vals = np.concatenate([np.asarray(vc)[p].transpose(1, 0, 2) for p in pages])[:n]
    want = attention(np.asarray(query)[b][None, None], keys[None], vals[None], scale=0.125)[0, 0]
    np.testing.assert_allclose(np.asarray(out)[b], want, rtol=2e-4, atol=2e-4)
