"""Tiles of the Triton paged attention (``_kernel``), shared by ``ragged_page_attention_v2`` and
``page_attention``: pure functions of the shapes and the device.

- Key step: ``BLOCK_N`` cached tokens (a power of two >= 16): 64 up to head dim 128, 32 above.
- Decode rows: sequences with at most ``decode_q`` queries (``16 // groups``, at least one) take
  the split-K path, their query heads and tokens as the 16+ rows of one tile. ``num_splits``
  aims at :data:`PROGRAMS_PER_SM` decode programs per SM over every sequence that may decode,
  each attending at least :data:`MIN_SPLIT_BLOCKS` key steps.
- Prefill rows: tiles of ``BLOCK_Q`` query tokens, ``BLOCK_Q * groups`` rows near 256 with 8
  warps (two warpgroups of 128) on Hopper up to head dim 128 in 16-bit dtypes, else near 128 (64
  above head dim 128 or before Hopper) with 4 warps. The prefill tiles and the decode splits
  (always :data:`DECODE_WARPS`) are two launches, each compiled alone. On one H200 (bf16, h32/8,
  d128, page 16; ``STAGES=servetiles benchmarks/h200/gpu_suites.sh``) the 256-row tiles ran 8
  prompts of 2048 in 0.930 ms against 1.038 for 128 rows, 64 decodes at 8k in 0.535 against 0.597
  and the mixed step in 1.106 against 1.156.
- Stages: 3, fewer where shared memory runs out (``fit``).
"""

from __future__ import annotations

import dataclasses

from ejkernel.ops import DeviceInfo, Need, profile_for


def _pow2(n: int, least: int = 16) -> int:
    return max(least, 1 << (max(int(n), 1) - 1).bit_length())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class Tiles:
    """The launch parameters of one call (``heuristics`` chooses them)."""

    block_n: int  # key tokens per step (a power of two, >= 16)
    block_q: int  # query tokens per prefill tile
    decode_q: int  # sequences with at most this many queries take the split-K decode path
    num_splits: int  # programs per decode sequence and kv head
    num_warps: int
    num_stages: int


# Warps of the decode splits beside prefill tiles (their own launch; decode-only calls take the tiles').
DECODE_WARPS = 4
# Decode programs per SM the split count aims at (several resident per SM hide memory latency,
# and many small ones shorten the last wave).
PROGRAMS_PER_SM = 8
# Key steps one split attends at least: below that the partials cost more than they save.
MIN_SPLIT_BLOCKS = 4
MAX_SPLITS = 64
SPLIT_CANDIDATES = (1, 2, 4, 8, 16, 32)
# The pipeline's mbarriers and what else Triton allocates beside the tiles.
BARRIERS = 1024


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the tiles depend on."""

    tokens: int  # packed query tokens
    max_seqs: int
    kv_heads: int
    groups: int
    head_dim: int
    value_head_dim: int
    page_size: int
    max_context: int  # pages_per_seq * page_size
    itemsize: int
    prefill: bool  # some sequence may have more than decode_q queries


def decode_q(groups: int) -> int:
    """Queries per sequence the decode path takes: its tile's rows are ``queries × groups``,
    16 at least (the smallest ``tl.dot``), so up to ``16 // groups`` queries come for free."""
    return max(1, 16 // max(1, groups))


def smem_limit(cc: tuple[int, int] | None) -> int:
    """Shared memory a block may use (sm_86's 99 KiB where unknown)."""
    profile = profile_for(DeviceInfo(platform="gpu", kind="", compute_capability=cc or (8, 6)))
    assert profile is not None
    return profile.shared_memory_per_block


def _sm_count(cc: tuple[int, int] | None) -> int:
    profile = profile_for(DeviceInfo(platform="gpu", kind="", compute_capability=cc or (9, 0)))
    return profile.sm_count if profile is not None else 132


def block_m(s: Shape, block_q: int) -> int:
    return _pow2(block_q * s.groups)


def smem(s: Shape, t: Tiles) -> int:
    """Shared memory of the kernel: ``num_stages`` K/V steps (with their page indices), the
    resident query tile of the larger path (prefill's, or the decode tile's; twice for float32's
    three-pass products) and 1 KiB of barriers. The two paths' buffers are never live together
    (Triton 3.6 allocates the larger: 98304 B at sm_90, d 128, bf16, 64-key steps, 2 stages,
    128-row prefill tiles)."""
    d, dv = _pow2(s.head_dim), _pow2(s.value_head_dim)
    copies = 2 if s.itemsize == 4 else 1
    stream = t.num_stages * t.block_n * ((d + dv) * s.itemsize + 4)
    rows = max(_pow2(t.decode_q * s.groups), block_m(s, t.block_q) if s.prefill else 0)
    return stream + copies * rows * d * s.itemsize + BARRIERS


def needs(s: Shape, t: Tiles) -> list[Need]:
    return [Need("paged attention", smem(s, t), 32 * t.num_warps)]


def fit(s: Shape, t: Tiles, cc: tuple[int, int] | None) -> Tiles:
    """Shrink ``t`` until it fits: fewer stages (down to 1), then fewer keys per step (16), then
    fewer query tokens per prefill tile."""
    while smem(s, t) > smem_limit(cc):
        if t.num_stages > 1:
            t = dataclasses.replace(t, num_stages=t.num_stages - 1)
        elif t.block_n > 16:
            t = dataclasses.replace(t, block_n=t.block_n // 2)
        elif t.block_q > 1 and s.prefill:
            t = dataclasses.replace(t, block_q=max(1, t.block_q // 2))
        else:
            break
    return t


def heuristic_splits(s: Shape, block_n: int, cc: tuple[int, int] | None) -> int:
    decoding = min(s.max_seqs, s.tokens) * s.kv_heads  # programs per split, if every sequence decodes
    by_sms = _cdiv(PROGRAMS_PER_SM * _sm_count(cc), max(1, decoding))
    by_len = max(1, _cdiv(s.max_context, block_n) // MIN_SPLIT_BLOCKS)
    return max(1, min(by_sms, by_len, MAX_SPLITS))


def heuristic(s: Shape, cc: tuple[int, int] | None) -> Tiles:
    dmax = max(s.head_dim, s.value_head_dim)
    block_n = 64 if dmax <= 128 else 32
    wide = s.prefill and dmax <= 128 and s.itemsize <= 2 and _hopper(cc)
    rows = 256 if wide else 128 if dmax <= 128 and _hopper(cc) else 64
    t = Tiles(
        block_n=block_n,
        block_q=max(1, rows // s.groups),
        decode_q=decode_q(s.groups),
        num_splits=heuristic_splits(s, block_n, cc),
        num_warps=8 if wide else DECODE_WARPS,
        num_stages=3,
    )
    return fit(s, t, cc)


def _hopper(cc: tuple[int, int] | None) -> bool:
    return cc is not None and cc >= (9, 0)


def candidates(s: Shape, cc: tuple[int, int] | None) -> list[Tiles]:
    """The autotuning space: key steps, prefill tiles, warps and stages around the heuristic, and
    the split counts that leave a split at least one step."""
    base = heuristic(s, cc)
    out = {base}
    for block_n in (32, 64, 128):
        for warps in (4, 8):
            for stages in (2, 3, 4):
                block_qs = {base.block_q, *(max(1, r // s.groups) for r in (64, 128))} if s.prefill else {base.block_q}
                for block_q in block_qs:
                    t = dataclasses.replace(base, block_n=block_n, num_warps=warps, num_stages=stages, block_q=block_q)
                    if smem(s, t) <= smem_limit(cc):
                        out.add(t)
    if s.prefill and max(s.head_dim, s.value_head_dim) <= 128 and _hopper(cc):
        for stages in (2, 3):  # two warpgroups of 128 prefill rows
            t = dataclasses.replace(base, block_q=max(1, 256 // s.groups), num_warps=8, num_stages=stages)
            if smem(s, t) <= smem_limit(cc):
                out.add(t)
    for splits in SPLIT_CANDIDATES:
        if splits <= max(1, _cdiv(s.max_context, base.block_n)):
            out.add(dataclasses.replace(base, num_splits=splits))
    return sorted(out, key=lambda t: (t != base, dataclasses.astuple(t)))


def check(t: Tiles) -> None:
    """Raise ``ValueError`` for tiles the kernel cannot run."""
    if t.block_n < 16 or t.block_n & (t.block_n - 1):
        raise ValueError(f"triton paged attention: the key step must be a power of two >= 16 tokens, got {t.block_n}")
    if t.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"triton paged attention: num_warps must be 1, 2, 4, 8 or 16, got {t.num_warps}")
    if not 1 <= t.num_stages <= 8:
        raise ValueError(f"triton paged attention: num_stages must be in [1, 8], got {t.num_stages}")
