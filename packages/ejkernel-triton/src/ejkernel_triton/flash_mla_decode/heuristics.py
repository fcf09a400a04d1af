"""Tiles of the Triton paged latent decode (``_kernel``): pure functions of the shapes and the device.

- Query rows per program (``block_h``): all ``seq_q × heads`` rows of a sequence up to 64 (every
  latent tile then serves 64 rows: FlashMLA's tile), 16 at least (the smallest ``tl.dot``).
- Key step (``block_n``): 64 latent rows for 16-bit inputs, 32 (3 stages) when the accumulator
  fills the registers (64 rows × 512 lanes) and for float32 (three-pass products keep two copies
  of each tile), fewer where shared memory runs out (``fit``).
- Warps: 8 when the float32 accumulator ``[block_h, kv_lora_rank]`` would take more than 128
  registers a thread with 4 (64 × 512 floats: 256 with 4 warps, 128 with 8), else 4.
- Splits: the fewest that fill the GPU's resident-program slots at least :data:`FILL` full
  (FlashDecoding's split-K; batch 64 × 2 head blocks fill an H200's 132 SMs with one), each
  attending at least :data:`MIN_SPLIT_BLOCKS` key steps.
"""

from __future__ import annotations

import dataclasses

from ejkernel.ops import DeviceInfo, Need, profile_for
from ejkernel.ops.flash_mla_decode import FlashMLADecodeArgs, FlashMLADecodeConfig
from ejkernel.ops.resources import warpgroup_mma

from ..ragged_page_attention_v2.heuristics import _pow2


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class Tiles:
    """The launch parameters of one call (complete)."""

    block_h: int
    block_n: int
    num_splits: int
    num_warps: int
    num_stages: int


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the tiles depend on."""

    batch: int
    rows: int  # seq_q * num_heads
    lora: int
    rope: int
    max_context: int
    itemsize: int

    @classmethod
    def of(cls, a: FlashMLADecodeArgs) -> Shape:
        import jax.numpy as jnp

        return cls(
            batch=a.batch,
            rows=a.seq_q * a.num_heads,
            lora=a.kv_lora_rank,
            rope=a.rope_dim,
            max_context=a.max_pages * a.page_size,
            itemsize=jnp.dtype(a.dtype).itemsize,
        )


# Fraction of the resident-program slots the grid must fill before a further split is not worth it.
FILL = 0.9
MIN_SPLIT_BLOCKS = 4
MAX_SPLITS = 64
# Accumulator floats one thread may hold before the heuristic takes 8 warps.
ACC_PER_THREAD = 128
# The pipeline's mbarriers and what else Triton allocates beside the tiles.
BARRIERS = 1024


def _profile(cc: tuple[int, int] | None):
    profile = profile_for(DeviceInfo(platform="gpu", kind="", compute_capability=cc or (8, 6)))
    assert profile is not None
    return profile


def smem(s: Shape, t: Tiles, cc: tuple[int, int] | None) -> int:
    """Shared memory of the kernel: the resident query tile, the latent tiles in flight (with
    their page indices) and the probabilities' tile, twice for float32's three-pass products.
    Warpgroup MMAs (sm_90) stage ``num_stages`` latent tiles (Triton 3.6: 221184 B at 64 rows,
    64-token steps, 2 stages, 512 + 64 lanes: the query tile and two latent tiles exactly); the
    warp-level MMA of sm_80/86/89 keeps two latent tiles whatever the stages (204800 B with one
    stage, 155648 B with two at the same tiles)."""
    width = _pow2(s.lora) + _pow2(s.rope)
    copies = 2 if s.itemsize == 4 else 1
    in_flight = t.num_stages if warpgroup_mma(cc) else max(t.num_stages, 2)
    tiles = t.block_h * width + in_flight * t.block_n * width + t.block_h * t.block_n
    return copies * tiles * s.itemsize + in_flight * t.block_n * 8 + BARRIERS


def needs(s: Shape, t: Tiles, cc: tuple[int, int] | None) -> list[Need]:
    return [Need("mla decode", smem(s, t, cc), 32 * t.num_warps)]


def fit(s: Shape, t: Tiles, cc: tuple[int, int] | None) -> Tiles:
    """Shrink ``t`` until it fits: fewer stages (down to 1), then shorter key steps, then fewer
    query rows per program (16 each at least)."""
    limit = _profile(cc).shared_memory_per_block
    while smem(s, t, cc) > limit:
        if t.num_stages > 1:
            t = dataclasses.replace(t, num_stages=t.num_stages - 1)
        elif t.block_n > 16:
            t = dataclasses.replace(t, block_n=t.block_n // 2)
        elif t.block_h > 16:
            t = dataclasses.replace(t, block_h=t.block_h // 2)
        else:
            break
    return t


def warps_for(s: Shape, block_h: int) -> int:
    return 8 if block_h * _pow2(s.lora) > ACC_PER_THREAD * 4 * 32 else 4


def splits_for(s: Shape, t: Tiles, cc: tuple[int, int] | None) -> int:
    profile = _profile(cc)
    programs = s.batch * _cdiv(s.rows, t.block_h)
    slots = profile.sm_count * max(1, profile.blocks_per_sm(needs(s, t, cc)[0]))
    most = max(1, min(MAX_SPLITS, _cdiv(s.max_context, t.block_n) // MIN_SPLIT_BLOCKS))

    def filled(n: int) -> float:
        return programs * n / (_cdiv(programs * n, slots) * slots)

    for n in range(1, most + 1):
        if filled(n) >= FILL:
            return n
    return max(range(1, most + 1), key=filled)


def heuristic(s: Shape, cc: tuple[int, int] | None) -> Tiles:
    block_h = min(64, _pow2(s.rows))
    # A full accumulator leaves no registers for the addresses of 64-row latent tiles (ptxas for
    # sm_90, 64 rows x 512 + 64 lanes, 8 warps: 140 B spilled a thread with 64-token steps and 2
    # stages, 16 B with 32-token steps and 3): shorter steps, one more in flight.
    full_acc = block_h * _pow2(s.lora) >= ACC_PER_THREAD * 8 * 32
    t = Tiles(
        block_h=block_h,
        block_n=32 if full_acc or s.itemsize == 4 else 64,
        num_splits=1,
        num_warps=warps_for(s, block_h),
        num_stages=3 if full_acc else 2,
    )
    t = fit(s, t, cc)
    t = dataclasses.replace(t, num_warps=warps_for(s, t.block_h))
    return dataclasses.replace(t, num_splits=splits_for(s, t, cc))


def candidates(s: Shape, cc: tuple[int, int] | None) -> list[Tiles]:
    """The autotuning space: key steps, the heuristic's row block and half of it, warps and stages
    that fit, each with its split count, and the heuristic's tiles at other split counts."""
    base = heuristic(s, cc)
    out = {base}
    limit = _profile(cc).shared_memory_per_block
    for block_h in sorted({base.block_h, max(16, base.block_h // 2)}):
        for block_n in (16, 32, 64):
            for warps in (4, 8):
                if block_h * _pow2(s.lora) > 2 * ACC_PER_THREAD * warps * 32:
                    continue  # an accumulator of more than 256 floats a thread: spilled
                for stages in (1, 2, 3, 4):
                    t = Tiles(block_h, block_n, 1, warps, stages)
                    if smem(s, t, cc) <= limit:
                        out.add(dataclasses.replace(t, num_splits=splits_for(s, t, cc)))
    for splits in (1, 2, 4, 8, 16):
        if splits <= max(1, _cdiv(s.max_context, base.block_n)):
            out.add(dataclasses.replace(base, num_splits=splits))
    return sorted(out, key=lambda t: (t != base, dataclasses.astuple(t)))


def tiles_of(cfg: FlashMLADecodeConfig) -> Tiles:
    assert cfg.block_h and cfg.block_n and cfg.num_splits and cfg.num_warps and cfg.num_stages
    return Tiles(cfg.block_h, cfg.block_n, cfg.num_splits, cfg.num_warps, cfg.num_stages)


def config_of(t: Tiles) -> FlashMLADecodeConfig:
    return FlashMLADecodeConfig(
        block_n=t.block_n, block_h=t.block_h, num_splits=t.num_splits, num_warps=t.num_warps, num_stages=t.num_stages
    )


def check(t: Tiles) -> None:
    """Raise ``ValueError`` for tiles the kernel cannot run."""
    for name in ("block_h", "block_n"):
        n = getattr(t, name)
        if n < 16 or n & (n - 1):
            raise ValueError(f"triton flash_mla_decode: {name} must be a power of two >= 16, got {n}")
    if t.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"triton flash_mla_decode: num_warps must be 1, 2, 4, 8 or 16, got {t.num_warps}")
    if not 1 <= t.num_stages <= 8:
        raise ValueError(f"triton flash_mla_decode: num_stages must be in [1, 8], got {t.num_stages}")
