"""The benchmark of ``ring_attention`` (``ejkernel bench ring_attention``).

``flash_attention``'s shapes, options (``--shape``, ``--causal``, ``--window``; no ``--varlen``)
cost model (forward ``4·b·h·sq·sk·d`` FLOPs, half when causal; backward 2.5× forward), peers and
check. On one device (``--devices 1``, the default) the ring is one device holding the whole
sequence, and the peers are dense ``jax.nn.dot_product_attention`` on the same arrays (``"cudnn"``
on GPU, ``"xla"``; ratios against cuDNN on GPU, XLA elsewhere). With ``--devices N`` the
sequence is sharded over a mesh axis of the first ``N`` devices: the op runs the ring under
``shard_map`` (``mesh=``, ``in_specs=``) on inputs already placed sequence-sharded, and the peers
are the same ``jax.nn.dot_product_attention`` jitted on those sharded inputs, which XLA
partitions itself (gathering the keys and values it needs). Times are the wall time of the whole
mesh, and TFLOP/s the whole attention's FLOPs over it: the mesh's throughput, not one device's.
"""

from __future__ import annotations

import argparse
import dataclasses

import jax
import numpy as np

from ..benchmark import BenchCase
from ..flash_attention.bench import AttentionShape, DenseAttentionBench

__all__ = ["BENCH", "RingAttentionBench"]

#: The mesh axis the sequence is sharded over (``--devices`` > 1).
AXIS = "sp"


class RingAttentionBench(DenseAttentionBench):
    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        super().add_arguments(p)
        p.add_argument("--devices", type=int, default=1, help="shard the sequence over the first N devices (a ring)")

    def shapes(self, ns: argparse.Namespace) -> list[AttentionShape]:
        if ns.varlen:
            raise ValueError(f"bad --varlen {ns.varlen}: ring_attention takes no packed sequences")
        shapes = super().shapes(ns)
        n = getattr(ns, "devices", 1)
        if not 1 <= n <= len(jax.devices()):
            raise ValueError(f"bad --devices {n}: between 1 and the {len(jax.devices())} devices here")
        for s in shapes:
            if s.sq % n or s.sk % n:
                raise ValueError(f"bad --devices {n}: the sequence lengths ({s.sq}, {s.sk}) must split evenly")
        return shapes

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        cases = super().cases(ns, dtype, peers=peers, check=check)
        n = getattr(ns, "devices", 1)
        if n == 1:
            return cases
        from jax.sharding import Mesh, NamedSharding
        from jax.sharding import PartitionSpec as P

        mesh = Mesh(np.array(jax.devices()[:n]), (AXIS,))
        spec = P(None, AXIS, None, None)
        sharded = NamedSharding(mesh, spec)
        out = []
        for case in cases:
            # Without --varlen the peers take the op's own arrays: placing those places both.
            placed = {id(x): jax.device_put(x, sharded) for x in case.arrays}
            case_peers = [
                dataclasses.replace(p, arrays=tuple(placed.get(id(x), x) for x in p.arrays)) for p in case.peers
            ]
            out.append(
                dataclasses.replace(
                    case,
                    label=f"{case.label} ring{n}",
                    arrays=tuple(placed[id(x)] for x in case.arrays),
                    options={**case.options, "mesh": mesh, "in_specs": (spec,) * 3},
                    fields={**case.fields, "devices": n},
                    peers=case_peers,
                )
            )
        return out


BENCH = RingAttentionBench()
