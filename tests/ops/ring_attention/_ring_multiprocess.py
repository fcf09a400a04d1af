"""One process of the multi-process ring attention test (started by ``test_ring_attention.py``).

    python -m tests.ops.ring_attention._ring_multiprocess COORDINATOR NUM_PROCESSES PROCESS_ID CASE [CASE ...]

Each process has ``RING_LOCAL_DEVICES`` (default 4) CPU devices; ``jax.distributed.initialize``
joins them into one global mesh over which every named case of :mod:`._ring_cases` must match
the reference. Prints ``RING-OK <case>`` per case; any failure raises (non-zero exit).
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    coordinator, num_processes, process_id, *names = argv
    local = int(os.environ.get("RING_LOCAL_DEVICES", "4"))
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={local}"
    os.environ["JAX_PLATFORMS"] = "cpu"

    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=int(num_processes),
        process_id=int(process_id),
        initialization_timeout=60,
    )
    import numpy as np
    from jax.sharding import Mesh

    from tests.ops.ring_attention._ring_cases import CASES_BY_NAME, check_case

    devices = jax.devices()
    assert len(devices) == local * int(num_processes), devices
    assert len(jax.local_devices()) == local
    mesh = Mesh(np.array(devices), ("sp",))
    for name in names:
        check_case(CASES_BY_NAME[name], mesh)
        print(f"RING-OK {name} process={jax.process_index()} devices={len(devices)}", flush=True)
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
