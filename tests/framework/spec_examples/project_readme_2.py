"""Spec example project-readme.md:96 (a ``python`` block), run as documented."""

# spec: project-readme.md:96
# edit: platform=Platform.TRITON, => platform=Platform.XLA,
# scaffolding: query, key, value (random)

# ---- scaffolding (not in the spec) ----
import jax
import jax.numpy as jnp

# query [batch, seq_len, num_heads, head_dim]; key/value with 2 kv heads (GQA), random (never all ones)
_kq, _kk, _kv = jax.random.split(jax.random.PRNGKey(0), 3)
query = jax.random.normal(_kq, (2, 128, 4, 32))
key = jax.random.normal(_kk, (2, 128, 2, 32))
value = jax.random.normal(_kv, (2, 128, 2, 32))

# ---- spec example (verbatim but for the edits above) ----
from ejkernel import kernel_registry, Platform, Backend

# Get specific implementation
flash_attn_gpu = kernel_registry.get(
    algorithm="flash_attention",
    platform=Platform.XLA,
    backend=Backend.GPU
)

# Execute kernel
output = flash_attn_gpu(query, key, value, causal=True)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close

close(output, attention(query, key, value, causal=True))
