"""Chunk length of the XLA ``state_space_v1``: pure functions of the shapes and the device.

Two forms (``_kernel.selective_scan``): one chunk spanning the sequence is the whole-sequence
``lax.associative_scan`` plain JAX writes (its ``[batch, seq, intermediate, state]`` float32
intermediates recomputed once in the backward); shorter chunks scan chunk after chunk, each
chunk's ``[batch, chunk, intermediate, state]`` intermediates recomputed in the backward, memory
linear in the sequence. (Saving the whole-sequence intermediates instead of recomputing them
crashed XLA:CPU's compiler under a batch-sharded eager ``jax.grad``, jax 0.11.2.)

Crossover:

- GPU: the whole-sequence form while its state (``b·s·d·n`` float32) fits ``GPU_WHOLE_BYTES``,
  256-token chunks beyond it. H200, bf16, forward / forward+backward (gradient of x) ms, plain
  ``lax.associative_scan`` peer, whole-sequence form, 256- and 64-token chunks: b1 s1024 d4096
  n16 (256 MiB of state) 0.85/0.64, 0.67/0.81, 0.85/0.97, 1.14/1.15; b1 s4096 d4096 n16 (1 GiB)
  2.25/2.24, 2.90/2.53, 2.62/3.06, 3.70/3.95; b2 s4096 d4096 n16 (2 GiB) 3.97/3.99, 3.84/5.04,
  5.44/6.31, 5.72/7.10. The budget stops at the largest measured size: the backward holds a few
  such arrays at once, and more would crowd a model's memory.
- CPU: 64-token chunks at every size measured (shared 2-core machine, float32, forward /
  forward+backward ms, the whole-sequence form with its intermediates saved vs 64-token
  chunks): b1 s512 d256 n16 (8 MiB of state) 28.4/26.9 vs 6.0/9.2; b1 s2048 d256 n16 (32 MiB)
  145/177 vs 53/58; b1 s4096 d512 n16 (128 MiB) 988/538 vs 189/222; at 0.5-2 MiB the two were
  within the machine's noise. The associative scan's strided levels miss the caches; the
  64-token chunks stay in them.
- Other devices: unmeasured, the memory-linear chunks.

A sequence no longer than a chunk is one chunk either way.
"""

from __future__ import annotations

from ejkernel.ops import DeviceInfo
from ejkernel.ops.state_space_v1 import StateSpaceV1Args, StateSpaceV1Config

CHUNK = 64
CANDIDATE_CHUNKS = (16, 32, 64, 128, 256)
GPU_WHOLE_BYTES = 2 << 30
GPU_CHUNK = 256


def _whole(seq: int) -> int:
    """The power-of-two chunk that spans ``seq`` tokens (the config's tiles are powers of two)."""
    return 1 << max(0, seq - 1).bit_length()


def state_bytes(args: StateSpaceV1Args) -> int:
    return 4 * args.batch * args.seq * args.intermediate * args.state


def heuristic(args: StateSpaceV1Args, device: DeviceInfo) -> StateSpaceV1Config:
    if device.platform != "gpu":
        return StateSpaceV1Config(block_e=CHUNK)
    if state_bytes(args) <= GPU_WHOLE_BYTES:
        return StateSpaceV1Config(block_e=_whole(args.seq))
    return StateSpaceV1Config(block_e=GPU_CHUNK)


def candidates(args: StateSpaceV1Args, device: DeviceInfo) -> list[StateSpaceV1Config]:
    chunks = [c for c in CANDIDATE_CHUNKS if c < args.seq] or [CHUNK]
    if device.platform != "cpu" and state_bytes(args) <= GPU_WHOLE_BYTES:
        chunks.append(_whole(args.seq))
    return [StateSpaceV1Config(block_e=c) for c in chunks]
