"""Spec example api-modules.md:151 (a ``python`` block), run as documented."""

# spec: api-modules.md:151
# edit: none
# scaffolding: imports, query/key/value (one row of 256 tokens, 4 query heads over 2 kv heads),
# block_indices (16 random blocks of 64 tokens per token and kv head, the default block size) and
# cu_seqlens (two packed sequences)

# ---- scaffolding (not in the spec) ----
import jax.numpy as jnp
import numpy as np

rng = np.random.default_rng(0)
query = jnp.asarray(rng.standard_normal((1, 256, 4, 32)), jnp.float32)
key = jnp.asarray(rng.standard_normal((1, 256, 2, 32)), jnp.float32)
value = jnp.asarray(rng.standard_normal((1, 256, 2, 32)), jnp.float32)
block_indices = jnp.asarray(rng.integers(0, 4, (1, 256, 2, 16)), jnp.int32)
cu_seqlens = jnp.asarray([0, 100, 256], jnp.int32)

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import native_sparse_attention

# With explicit block indices
output = native_sparse_attention(
    query, key, value,
    block_indices=block_indices,  # Which key blocks each query attends to
    block_counts=16,  # Number of key blocks per query
)

# With variable-length sequences
output = native_sparse_attention(
    query, key, value,
    cu_seqlens=cu_seqlens,
    block_indices=block_indices,
)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from ejkernel.ops.native_sparse_attention.reference import native_sparse_attention_reference

want = native_sparse_attention_reference(query, key, value, block_indices=block_indices, cu_seqlens=cu_seqlens)
np.testing.assert_allclose(np.asarray(output), np.asarray(want), rtol=1e-4, atol=1e-5)
