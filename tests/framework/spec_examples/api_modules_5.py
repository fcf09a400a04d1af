"""Spec example api-modules.md:115 (a ``python`` block), run as documented."""

# spec: api-modules.md:115
# edit: none
# devices: 8
# scaffolding: 8 simulated CPU devices; query, key, value (seq_len 64, divisible by the 8-device ring)

# ---- scaffolding (not in the spec) ----
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # the example's mesh: 8 devices

import jax
import jax.numpy as jnp

# query [batch, seq_len, num_heads, head_dim]; key/value with 2 kv heads (GQA), random (never all ones)
_kq, _kk, _kv = jax.random.split(jax.random.PRNGKey(0), 3)
query = jax.random.normal(_kq, (2, 64, 4, 32))
key = jax.random.normal(_kk, (2, 64, 2, 32))
value = jax.random.normal(_kv, (2, 64, 2, 32))

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import ring_attention
import jax

# Setup device mesh for distributed execution
devices = jax.devices()
mesh = jax.sharding.Mesh(devices, axis_names=('sp',))

# Execute ring attention
with mesh:
    output = ring_attention(
        query, key, value,
        axis_name='sp',  # Required: name of sequence-parallel axis
        causal=True,
    )
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close

close(output, attention(query, key, value, causal=True))
