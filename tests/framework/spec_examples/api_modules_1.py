"""Spec example api-modules.md:17 (a ``python`` block), run as documented."""

# spec: api-modules.md:17
# edit: none
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
# Function API - simple and direct
from ejkernel.modules import flash_attention

output = flash_attention(query, key, value, causal=True)

# Module API - for advanced control
from ejkernel.modules import FlashAttention
from ejkernel.ops import Executor, ConfigSelectorChain, ConfigCache

executor = Executor(ConfigSelectorChain(cache=ConfigCache()))
attn_module = FlashAttention()
output = executor(attn_module, query=query, key=key, value=value, causal=True)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close

close(output, attention(query, key, value, causal=True))
