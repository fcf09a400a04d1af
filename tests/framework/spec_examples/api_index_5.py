"""Spec example api-index.md:115 (a ``python`` block), run as documented."""

# spec: api-index.md:115
# edit: none
# scaffolding: the arrays the example's comments describe (random, 3 sequences of 1, 17 and 64 tokens)

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp
import numpy as np

# decode: 3 sequences, 8 query heads, 2 kv heads, head_dim 64, pages of 16 tokens
_rng = np.random.default_rng(0)
batch, heads, kv_heads, dim, block_size, num_blocks, max_blocks = 3, 8, 2, 64, 16, 12, 4
query = jnp.asarray(_rng.standard_normal((batch, 1, heads, dim)), jnp.float32)
key_cache = jnp.asarray(_rng.standard_normal((num_blocks, block_size, kv_heads, dim)), jnp.float32)
value_cache = jnp.asarray(_rng.standard_normal((num_blocks, block_size, kv_heads, dim)), jnp.float32)
context_lens = jnp.array([1, 17, 64], jnp.int32)
block_tables = jnp.asarray(_rng.permutation(num_blocks).reshape(batch, max_blocks), jnp.int32)

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import page_attention

output = page_attention(
    query,         # (batch, 1, heads, dim) - single token
    key_cache,     # (num_blocks, block_size, kv_heads, dim)
    value_cache,
    context_lens,  # (batch,) - current context length
    block_tables,  # (batch, max_blocks) - page table
)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
assert output.shape == query.shape  # one token per sequence: [batch, 1, heads, dim] in, the same out

import numpy as np
from _naive import attention, close

for b in range(batch):
    n = int(context_lens[b])
    k_b = np.asarray(key_cache)[np.asarray(block_tables[b])].reshape(-1, kv_heads, dim)[:n]
    v_b = np.asarray(value_cache)[np.asarray(block_tables[b])].reshape(-1, kv_heads, dim)[:n]
    ref = attention(np.asarray(query[b : b + 1]), k_b[None], v_b[None])
    close(np.asarray(output).reshape(batch, 1, heads, dim)[b : b + 1], ref)
