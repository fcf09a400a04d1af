"""Spec example api-index.md:49 (a ``python`` block), run as documented."""

# spec: api-index.md:49
# edit: devices = jax.devices() => devices = np.array(jax.devices())
# devices: 8
# variant: the spec block with its jax.devices() bug fixed (the one edit below)
# scaffolding: 8 simulated CPU devices; imports and q, k, v (the Quick Start block's shapes, random)

# ---- scaffolding (not in the spec) ----
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # the example's mesh: 8 devices

import jax
import jax.numpy as jnp
from ejkernel.modules import flash_attention

q, k, v = (jax.random.normal(s, (2, 128, 8, 64)) for s in jax.random.split(jax.random.PRNGKey(0), 3))
import numpy as np

# ---- spec example (verbatim but for the edits above) ----
from jax.sharding import Mesh, PartitionSpec as P
import jax

devices = np.array(jax.devices())
mesh = Mesh(devices.reshape(2, 4), axis_names=('dp', 'tp'))

with mesh:
    output = flash_attention(
        q, k, v,
        mesh=mesh,
        in_specs=(P('dp', None, 'tp', None),) * 3,
        out_specs=P('dp', None, 'tp', None),
    )
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close

close(output, attention(q, k, v))
assert output.sharding.spec == P("dp", None, "tp", None)
