"""Spec example api-index.md:158 (a ``python`` block), run as documented."""

# spec: api-index.md:158
# edit: platform="triton")  # GPU => platform="xla")  # GPU
# edit: platform="pallas")  # TPU => platform="xla")  # TPU
# scaffolding: imports and q, k, v (random)

# ---- scaffolding (not in the spec) ----
import jax
from ejkernel.modules import flash_attention

q, k, v = (jax.random.normal(s, (2, 128, 8, 64)) for s in jax.random.split(jax.random.PRNGKey(0), 3))

# ---- spec example (verbatim but for the edits above) ----
output = flash_attention(q, k, v, platform="xla")  # GPU
output = flash_attention(q, k, v, platform="xla")  # TPU
output = flash_attention(q, k, v, platform="xla")     # Fallback
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close

close(output, attention(q, k, v))
