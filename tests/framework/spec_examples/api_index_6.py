"""Spec example api-index.md:129 (a ``python`` block), run as documented."""

# spec: api-index.md:129
# edit: none
# devices: 8
# scaffolding: 8 simulated CPU devices; q, k, v (seq_len 64, divisible by the 8-device ring)

# ---- scaffolding (not in the spec) ----
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # the example's mesh: 8 devices

import jax
import jax.numpy as jnp

q, k, v = (jax.random.normal(s, (2, 64, 4, 32)) for s in jax.random.split(jax.random.PRNGKey(0), 3))

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import ring_attention
from jax.sharding import Mesh

# Distribute very long sequences across devices
mesh = Mesh(jax.devices(), axis_names=('sp',))

with mesh:
    output = ring_attention(
        q, k, v,
        axis_name='sp',
        causal=True,
    )
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close

close(output, attention(q, k, v, causal=True))
