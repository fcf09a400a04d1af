"""Spec example api-modules.md:349 (a ``python`` block), run as documented."""

# spec: api-modules.md:349
# edit: devices = jax.devices() => devices = np.array(jax.devices())
# devices: 8
# variant: the spec block with its jax.devices() bug fixed (the one edit below)
# scaffolding: 8 simulated CPU devices; query, key, value (random; 8 query and kv heads for the 4-way 'tp')

# ---- scaffolding (not in the spec) ----
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # the example's mesh: 8 devices

import jax
import jax.numpy as jnp

# query [batch, seq_len, num_heads, head_dim]; key/value with 2 kv heads (GQA), random (never all ones)
_kq, _kk, _kv = jax.random.split(jax.random.PRNGKey(0), 3)
query = jax.random.normal(_kq, (2, 128, 8, 32))
key = jax.random.normal(_kk, (2, 128, 8, 32))
value = jax.random.normal(_kv, (2, 128, 8, 32))
import numpy as np

# ---- spec example (verbatim but for the edits above) ----
from ejkernel.modules import flash_attention
from jax.sharding import Mesh, PartitionSpec as P
import jax

# Setup mesh
devices = np.array(jax.devices())
mesh = Mesh(devices.reshape(2, 4), axis_names=('dp', 'tp'))

# Distributed attention with sharding specs
output = flash_attention(
    query, key, value,
    mesh=mesh,
    in_specs=(
        P('dp', None, 'tp', None),  # query sharding
        P('dp', None, 'tp', None),  # key sharding
        P('dp', None, 'tp', None),  # value sharding
    ),
    out_specs=P('dp', None, 'tp', None),
)
# ---- end of the spec example ----

# ---- checks (not in the spec) ----
from _naive import attention, close

close(output, attention(query, key, value))
assert output.sharding.spec == P("dp", None, "tp", None)
