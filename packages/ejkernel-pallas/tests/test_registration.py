"""Registration, declines, block-size rules and the block plan: no kernel runs here."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import ejkernel
from ejkernel.errors import UnsupportedError
from ejkernel.ops import Backend, BwdParams, DeviceInfo, FwdParams, Platform, kernel_registry, record_dispatches
from ejkernel.ops.flash_attention import FlashAttentionConfig
from ejkernel.ops.flash_attention.cases import AttentionCase
from ejkernel.ops.page_attention import PageAttentionConfig
from ejkernel.ops.page_attention.cases import PageAttentionCase
from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Config
from ejkernel.ops.ragged_page_attention_v2.cases import RaggedPageCase
from ejkernel.testing import conformance as C
from ejkernel_pallas.tpu.blocksparse_attention import PallasTpuBlockSparseAttention
from ejkernel_pallas.tpu.flash_attention import PallasTpuFlashAttention
from ejkernel_pallas.tpu.flash_attention import heuristics as FH
from ejkernel_pallas.tpu.flash_attention._plan import plan_blocks, row_bounds
from ejkernel_pallas.tpu.flash_attention.impl import (
    NO_BIAS,
    NO_DROPOUT,
    NO_PAIRWISE,
    NO_POSITION_OFFSET,
    NO_VARLEN,
)
from ejkernel_pallas.tpu.page_attention import PallasTpuPageAttention
from ejkernel_pallas.tpu.page_attention import heuristics as PH
from ejkernel_pallas.tpu.ragged_page_attention_v2 import PallasTpuRaggedPageAttentionv2
from ejkernel_pallas.tpu.ragged_page_attention_v2 import heuristics as RH
from ejkernel_pallas.tpu.ragged_page_attention_v2._plan import plan_ragged

# The pretend TPU of the interpret-mode op tests (tests/ops/_pallas_support.py): declarations are
# checked against it without a TPU.
TPU = DeviceInfo(platform="tpu", kind="TPU v5 lite", runtime="interpret")


def registered(op: str):
    """The Pallas implementation of ``op`` as the entry point registered it."""
    return kernel_registry.get(op, platform="pallas")


FLASH, PAGE = registered("flash_attention"), registered("page_attention")
RAGGED = registered("ragged_page_attention_v2")
check = kernel_registry.check


@pytest.mark.parametrize(
    ("op", "cls"),
    [
        ("blocksparse_attention", PallasTpuBlockSparseAttention),
        ("flash_attention", PallasTpuFlashAttention),
        ("page_attention", PallasTpuPageAttention),
        ("ragged_page_attention_v2", PallasTpuRaggedPageAttentionv2),
    ],
)
def test_registered_through_the_entry_point(op, cls):
    impl = kernel_registry.get(op, platform="pallas")
    assert isinstance(impl, cls)
    assert (impl.platform, impl.backend, impl.plugin, impl.name) == (Platform.PALLAS, Backend.TPU, "pallas", "pallas")
    assert impl.op_name == op
    assert impl.priority > kernel_registry.get(op, platform="xla").priority
    info = {b.name: b for b in kernel_registry.backends()}["pallas"]
    assert info.status == "loaded", info.error
    assert f"{op}/pallas" in info.implementations


def test_no_ring_attention_without_the_lse_protocol():
    """The Pallas flash kernels return no log-sum-exp to combine: no ring attention over them."""
    assert not FLASH.supports_lse
    assert "pallas" not in [i.name for i in kernel_registry.implementations("ring_attention")]
    info = {b.name: b for b in kernel_registry.backends()}["pallas"]
    assert sorted(info.implementations) == [
        "blocksparse_attention/pallas",
        "flash_attention/pallas",
        "flash_attention/pallas_gpu",
        "grouped_matmul/pallas",
        "page_attention/pallas",
        "ragged_page_attention_v2/pallas",
    ]


def test_registration_does_not_import_pallas():
    code = (
        "import sys, ejkernel; ejkernel.kernel_registry.implementations('flash_attention'); "
        "assert 'ejkernel_pallas' in sys.modules; "
        "print(sorted(m for m in sys.modules if m.startswith('jax.experimental.pallas')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _attention_inputs(dtype="float32"):
    return AttentionCase("cpu", b=1, sq=24, sk=24, h=2, hk=1, dtype=dtype, causal=True).inputs()


def _page_inputs(**kw):
    return PageAttentionCase("cpu", context_lens=(5, 17), h=4, hk=2, **kw).inputs()


def test_declines_on_this_machine_and_auto_picks_another():
    """Without a TPU the explicit platform is an error carrying the reason; "auto" skips it."""
    kw = _attention_inputs()
    with pytest.raises(UnsupportedError, match="needs a TPU; this call runs on cpu"):
        ejkernel.flash_attention(**kw, platform="pallas")
    pw = _page_inputs()
    with pytest.raises(UnsupportedError, match="needs a TPU; this call runs on cpu"):
        ejkernel.page_attention(**pw, platform="pallas")
    with record_dispatches() as log:
        ejkernel.flash_attention(**kw)
        ejkernel.page_attention(**pw)
    assert [d.impl for d in log] == ["xla", "xla"]


def test_declarations():
    """What each implementation refuses is declared (the conformance suite reads it); neither
    keeps a ``decline()`` of its own."""
    assert tuple(FLASH.dtypes) == ("float32", "bfloat16")
    assert dict(FLASH.max_sizes) == {"head_dim": 256, "value_head_dim": 256}
    assert dict(FLASH.allowed_sizes) == {}
    assert dict(FLASH.unsupported) == {
        "bias": NO_BIAS,
        "dropout": NO_DROPOUT,
        "varlen": NO_VARLEN,
        "attention_mask": NO_PAIRWISE,
        "position_offset": NO_POSITION_OFFSET,
    }
    assert "decline" not in vars(PallasTpuFlashAttention)
    assert FLASH.test_configs == {
        "tiles16x128-bwd32x128": FlashAttentionConfig(
            fwd_params=FwdParams(q_blocksize=16, kv_blocksize=128),
            bwd_params=BwdParams(q_blocksize=32, kv_blocksize=128),
        )
    }
    assert tuple(PAGE.dtypes) == ("float32", "bfloat16")
    assert set(PAGE.allowed_sizes) == {"block_size", "head_dim", "value_head_dim"}
    assert "decline" not in vars(PallasTpuPageAttention)
    assert dict(PAGE.unsupported) == {}
    assert PAGE.test_configs == {"step32tokens": PageAttentionConfig(tokens_per_block=32)}
    assert tuple(RAGGED.dtypes) == ("float32", "bfloat16")
    assert dict(RAGGED.allowed_sizes) == {} and dict(RAGGED.max_sizes) == {}
    assert dict(RAGGED.unsupported) == {}
    assert "decline" not in vars(PallasTpuRaggedPageAttentionv2)


def test_device_declines():
    args = C.bind("flash_attention", **_attention_inputs())
    assert FLASH.available(TPU) is None and check(FLASH, args, TPU) is None
    assert check(FLASH, args, DeviceInfo(platform="tpu", kind="TPU7x")) is None
    assert "TPU v4 or newer" in check(FLASH, args, DeviceInfo(platform="tpu", kind="TPU v3"))
    gpu = DeviceInfo(platform="gpu", kind="NVIDIA H200")
    assert check(FLASH, args, gpu) == "needs a TPU; this call runs on gpu (NVIDIA H200)"
    pargs = C.bind("page_attention", **_page_inputs())
    assert PAGE.available(TPU) is None and check(PAGE, pargs, TPU) is None
    assert "TPU v4 or newer" in check(PAGE, pargs, DeviceInfo(platform="tpu", kind="TPU v2"))
    rargs = C.bind("ragged_page_attention_v2", **_ragged_inputs())
    assert RAGGED.available(TPU) is None and check(RAGGED, rargs, TPU) is None
    assert "TPU v4 or newer" in check(RAGGED, rargs, DeviceInfo(platform="tpu", kind="TPU v3"))
    assert check(RAGGED, rargs, gpu) == "needs a TPU; this call runs on gpu (NVIDIA H200)"
    f16 = C.bind("ragged_page_attention_v2", **_ragged_inputs("float16"))
    assert check(RAGGED, f16, TPU) == "supports float32, bfloat16 inputs, got float16"


def test_flash_feature_declines():
    f16 = C.bind("flash_attention", **_attention_inputs("float16"))
    assert check(FLASH, f16, TPU) == "supports float32, bfloat16 inputs, got float16"
    kw = _attention_inputs()
    big = {
        **kw,
        "query": jnp.zeros((1, 8, 2, 320)),
        "key": jnp.zeros((1, 8, 1, 320)),
        "value": jnp.zeros((1, 8, 1, 320)),
    }
    assert check(FLASH, C.bind("flash_attention", **big), TPU) == "supports head_dim up to 256, got 320"
    wide_v = {**kw, "value": jnp.zeros((1, 24, 1, 384))}
    assert check(FLASH, C.bind("flash_attention", **wide_v), TPU) == "supports value_head_dim up to 256, got 384"


def test_flash_declines_a_ring_position_offset():
    args = C.bind("flash_attention", **_attention_inputs())
    shifted = dataclasses.replace(args, position_offset=jnp.asarray(5, jnp.int32))
    assert check(FLASH, shifted, TPU) == NO_POSITION_OFFSET


def test_page_declines():
    kw = _page_inputs()
    with pytest.raises(TypeError, match="must have the dtype of query"):  # the op refuses mixed dtypes itself
        C.bind("page_attention", **{**kw, "query": kw["query"].astype(jnp.bfloat16)})
    f16 = C.bind("page_attention", **_page_inputs(dtype="float16"))
    assert check(PAGE, f16, TPU) == "supports float32, bfloat16 inputs, got float16"
    odd = C.bind("page_attention", **PageAttentionCase("odd", context_lens=(5,), h=2, hk=1, d=192).inputs())
    assert check(PAGE, odd, TPU) == "supports head_dim at most 128 or a multiple of 128, got 192"
    wide = C.bind("page_attention", **PageAttentionCase("wide", context_lens=(5,), h=2, hk=1, d=256).inputs())
    assert check(PAGE, wide, TPU) is None


SHAPES = list(itertools.product((1, 17, 200, 1000, 8192), (1, 130, 4096), ((64, 64), (128, 128), (256, 256), (80, 32))))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_flash_heuristics_follow_the_tiling_rules(dtype):
    sub = 8 if dtype == "float32" else 16
    for (sq, sk, (d, dv)), segments in itertools.product(SHAPES, (False, True)):
        shape = (sq, sk, d, dv, dtype, segments)
        for p in (FH.heuristic_fwd(*shape), FH.heuristic_bwd(*shape)):
            assert p.q_blocksize % sub == 0 and p.kv_blocksize % 128 == 0, (shape, p)
            assert p.q_blocksize <= max(sub, -(-sq // sub) * sub) and p.kv_blocksize <= max(128, -(-sk // 128) * 128)
        fwd, bwd = FH.fwd_candidates(*shape), FH.bwd_candidates(*shape)
        assert fwd and bwd and len(set(fwd)) == len(fwd) and len(set(bwd)) == len(bwd)
        assert FH.heuristic_fwd(*shape) in fwd or sq > 1024 or sk > 2048
    # Long sequences and wide heads: the heuristic shrinks the blocks to fit the VMEM budget.
    p = FH.heuristic_bwd(8192, 8192, 256, 256, dtype, True)
    assert FH.bwd_vmem_bytes(p.q_blocksize, p.kv_blocksize, 256, 256, 2, True) <= 12 << 20


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("pairwise", [False, True])
def test_blocksparse_heuristic_fits_and_follows_the_tiling_rules(dtype, d, pairwise):
    """The heuristic tiles (the flash kernels' 512 x 512 / 256 x 512, halved to fit) pass the
    implementation's own validation (tile rules, the VMEM budget) on a long sequence."""
    impl = registered("blocksparse_attention")
    x = jnp.zeros((1, 2, 4096, d), dtype)
    kw = dict(query=x, key=x, value=x, causal=True)
    if pairwise:
        kw["attention_mask"] = jnp.ones((1, 1, 4096, 4096), bool)
    args = C.bind("blocksparse_attention", **kw)
    cfg = impl.heuristic_cfg(args, TPU)
    impl.validate_cfg(cfg, args, TPU)
    for p in (cfg.fwd_params, cfg.bwd_params):
        assert p.q_blocksize % (16 if dtype == "bfloat16" else 8) == 0 and p.kv_blocksize % 128 == 0
    if d <= 128 and not pairwise:
        assert (cfg.fwd_params.q_blocksize, cfg.fwd_params.kv_blocksize) == (512, 512)
    bad = dataclasses.replace(cfg, fwd_params=FwdParams(q_blocksize=1024, kv_blocksize=8192))
    with pytest.raises(ValueError, match="VMEM"):
        impl.validate_cfg(bad, args, TPU)


def test_flash_validate_cfg():
    args = C.bind("flash_attention", **AttentionCase("v", sq=300, sk=700, h=2, hk=2, d=128).inputs())
    good = FLASH.heuristic_cfg(args, TPU)
    FLASH.validate_cfg(good, args, TPU)
    for cand in FLASH.candidate_cfgs(args, TPU):
        FLASH.validate_cfg(cand, args, TPU)
    bad = {
        "multiple of 8": FwdParams(q_blocksize=12, kv_blocksize=128),
        "multiple of 128": FwdParams(q_blocksize=16, kv_blocksize=192),
        "needs fwd_params": FwdParams(q_blocksize=16),
    }
    for message, fwd in bad.items():
        with pytest.raises(ValueError, match=message):
            FLASH.validate_cfg(FlashAttentionConfig(fwd_params=fwd, bwd_params=good.bwd_params), args, TPU)
    bf16 = C.bind("flash_attention", **AttentionCase("v", sq=64, sk=64, dtype="bfloat16").inputs())
    with pytest.raises(ValueError, match="multiple of 16 for bfloat16"):
        FLASH.validate_cfg(FlashAttentionConfig(fwd_params=FwdParams(8, 128), bwd_params=BwdParams(16, 128)), bf16, TPU)
    long = C.bind(
        "flash_attention",
        query=jnp.zeros((1, 4096, 1, 256)),
        key=jnp.zeros((1, 4096, 1, 256)),
        value=jnp.zeros((1, 4096, 1, 256)),
    )
    with pytest.raises(ValueError, match="VMEM"):
        FLASH.validate_cfg(
            FlashAttentionConfig(fwd_params=FwdParams(2048, 2048), bwd_params=BwdParams(128, 128)), long, TPU
        )


def test_page_configs():
    args = C.bind("page_attention", **_page_inputs())
    cfg = PAGE.heuristic_cfg(args, TPU)
    PAGE.validate_cfg(cfg, args, TPU)
    assert cfg.tokens_per_block % args.block_size == 0
    for cand in PAGE.candidate_cfgs(args, TPU):
        PAGE.validate_cfg(cand, args, TPU)
    with pytest.raises(
        ValueError, match=r"tokens_per_block \(24\) must be a positive multiple of the cache's block_size"
    ):
        PAGE.validate_cfg(PageAttentionConfig(tokens_per_block=24), args, TPU)
    with pytest.raises(ValueError, match="needs tokens_per_block"):
        PAGE.validate_cfg(PageAttentionConfig(num_splits=1), args, TPU)
    with pytest.raises(ValueError, match="num_splits"):
        PAGE.validate_cfg(PageAttentionConfig(tokens_per_block=16, num_splits=2), args, TPU)
    # Up to 512 tokens per step, as many pages as fit the VMEM slots (halving when not).
    budget = 6 << 20
    for bs, hk, d, dtype in itertools.product(
        (8, 16, 64, 128), (1, 8, 32), (64, 128, 256), (jnp.float32, jnp.bfloat16)
    ):
        pages = PH.heuristic(bs, 1024, hk, d, d, dtype) // bs
        assert pages * bs <= max(512, bs)
        assert pages == 1 or PH.buffer_bytes(pages, bs, hk, d, d, dtype) <= budget
        assert pages * bs * 2 > 512 or PH.buffer_bytes(2 * pages, bs, hk, d, d, dtype) > budget
    assert PH.heuristic(16, 3, 8, 128, 128, jnp.bfloat16) == 48  # no more pages than the table has
    # A page in VMEM keeps the cache's layout: its two minor dims are padded to the (sublanes,
    # 128) tile, kv heads in this library's layout, tokens in the earlier one.
    assert PH.buffer_bytes(1, 16, 2, 128, 128, jnp.bfloat16) == 2 * 16 * 16 * 256 * 2
    assert PH.buffer_bytes(1, 16, 2, 128, 128, jnp.bfloat16, heads_major=True) == 2 * 2 * 16 * 256 * 2
    assert PH.buffer_bytes(1, 8, 16, 64, 64, jnp.float32, heads_major=True) == 2 * 16 * 8 * 256 * 4


def _ragged_inputs(dtype: str = "float32") -> dict:
    return RaggedPageCase("r", seqs=((5, 29), (1, 17)), dtype=dtype).inputs()


def test_ragged_configs():
    args = C.bind("ragged_page_attention_v2", **_ragged_inputs())
    cfg = RAGGED.heuristic_cfg(args, TPU)
    RAGGED.validate_cfg(cfg, args, TPU)
    assert cfg.num_queries_per_block % 8 == 0
    for cand in RAGGED.candidate_cfgs(args, TPU):
        RAGGED.validate_cfg(cand, args, TPU)
    # More pages than the table holds are clamped to it, not refused.
    RAGGED.validate_cfg(RaggedPageAttentionv2Config(num_kv_pages_per_block=500, num_queries_per_block=8), args, TPU)
    with pytest.raises(ValueError, match="num_queries_per_block must be a positive multiple of 8, got 12"):
        RAGGED.validate_cfg(RaggedPageAttentionv2Config(num_kv_pages_per_block=1, num_queries_per_block=12), args, TPU)
    with pytest.raises(ValueError, match="needs num_kv_pages_per_block and num_queries_per_block"):
        RAGGED.validate_cfg(RaggedPageAttentionv2Config(num_kv_pages_per_block=1), args, TPU)
    big = C.bind(
        "ragged_page_attention_v2",
        **RaggedPageCase("big", seqs=((1, 4096),), h=64, hk=32, d=256, page_size=16).inputs(),
    )
    with pytest.raises(ValueError, match="MiB budget"):
        RAGGED.validate_cfg(RaggedPageAttentionv2Config(num_kv_pages_per_block=64, num_queries_per_block=256), big, TPU)
    # Decode batches (a token per sequence) get the smallest query block, prefill batches larger
    # ones; every heuristic fits the budget.
    shape = dict(page_size=16, num_heads=32, num_kv_heads=8, d=128, dtype=jnp.bfloat16)
    assert RH.heuristic(64, 64, 512, *shape.values()) == (32, 8)
    assert RH.heuristic(16384, 8, 128, *shape.values())[1] == 128
    for tokens, seqs, hk, d, dtype in itertools.product(
        (1, 64, 2108, 16384), (1, 8, 64), (1, 8, 32), (64, 128, 256), (jnp.float32, jnp.bfloat16)
    ):
        pages, block_q = RH.heuristic(tokens, seqs, 512, 16, 4 * hk, hk, d, dtype)
        assert block_q % 8 == 0 and block_q <= max(8, -(-tokens // 8) * 8)
        RH.check(pages, block_q, 16, 4 * hk, hk, d, dtype)


RAGGED_PLAN_CASES = [
    # (q_len, context) per live sequence, max_num_seqs, total tokens, block_q
    (((1, 17), (5, 40), (1, 1), (12, 12), (1, 33)), 5, 20, 8),
    (((3, 10), (0, 5), (2, 2)), 6, 9, 8),
    (((0, 4), (0, 9)), 3, 4, 8),
    (((20, 20), (0, 3), (7, 7)), 4, 27, 16),
    (((1, 5),) * 10, 12, 16, 8),
]


@pytest.mark.parametrize("case", RAGGED_PLAN_CASES)
def test_ragged_plan_lists_exactly_the_sequences_of_each_query_block(case):
    seqs, m, total, block_q = case
    n = len(seqs)
    qsl = np.zeros(m + 1, np.int32)
    qsl[1 : n + 1] = np.cumsum([q for q, _ in seqs])
    qsl[n + 1 :] = qsl[n]
    lens = np.zeros(m, np.int32)
    lens[:n] = [c for _, c in seqs]
    tables = np.arange(m * 8, dtype=np.int32).reshape(m, 8) * 3 - 5  # some out of the cache: clipped
    plan, nq = plan_ragged(
        jnp.asarray(qsl), jnp.asarray(lens), jnp.asarray(tables), jnp.asarray(n, jnp.int32),
        total_tokens=total, block_q=block_q, num_pages=100,
    )  # fmt: skip
    p = {k: np.asarray(v) for k, v in dataclasses.asdict(plan).items()}
    assert nq == -(-total // block_q)
    busy = []
    for b in range(nq):
        rows = set(range(b * block_q, min((b + 1) * block_q, total)))
        want = [i for i in range(n) if rows & set(range(qsl[i], qsl[i + 1]))]
        got = [int(p["seq"][e]) for e in range(p["seq_lo"][b], p["seq_hi"][b])]
        assert got == want, (b, got, want)
        for e in range(p["seq_lo"][b], p["seq_hi"][b]):
            i = int(p["seq"][e])
            assert (p["q_start"][e], p["q_end"][e], p["kv_len"][e]) == (qsl[i], qsl[i + 1], lens[i])
        busy.append(bool(want))
    for b in range(nq):
        later = [c for c in range(b + 1, nq) if busy[c]]
        assert p["next_blk"][b] == (later[0] if later else nq)
    assert p["first"][0] == (busy.index(True) if any(busy) else nq)
    assert p["tables"].min() >= 0 and p["tables"].max() <= 99


PLAN_CASES = [
    # seq_q, seq_k, block_q, block_k, causal, window, segments
    (17, 17, 8, 128, False, None, False),
    (200, 200, 16, 128, True, None, False),
    (17, 700, 8, 128, True, None, False),
    (700, 17, 64, 128, True, None, False),
    (300, 1000, 32, 128, True, (100, 0), False),
    (513, 600, 64, 256, False, (50, 20), False),
    (1000, 1000, 128, 128, False, (0, 0), False),
    (260, 300, 16, 128, True, (150, 0), True),
]


@pytest.mark.parametrize("case", PLAN_CASES)
def test_block_plan_visits_exactly_the_attended_blocks(case):
    sq, sk, bq, bk, causal, window, segments = case
    plan = plan_blocks(sq, sk, bq, bk, causal=causal, window=window, always_mask=segments)
    lo, hi = row_bounds(sq, sk, causal, window)
    nq, nk = -(-sq // bq), -(-sk // bk)
    attended = np.zeros((sq, nk * bk), bool)
    keys = np.arange(nk * bk)
    attended[:] = (keys[None, :] >= lo[:, None]) & (keys[None, :] < hi[:, None])
    attended = np.pad(attended, ((0, nq * bq - sq), (0, 0)))
    tiles = attended.reshape(nq, bq, nk, bk)
    some = tiles.any(axis=(1, 3))  # [nq, nk]
    valid = np.arange(nq * bq).reshape(nq, bq) < sq
    every = np.all(tiles | ~valid[:, :, None, None], axis=(1, 3))  # every valid row sees every key
    for i in range(nq):
        visited = np.zeros(nk, bool)
        visited[plan.kv_lo[i] : plan.kv_hi[i]] = True
        assert (visited == some[i]).all(), (i, plan.kv_lo[i], plan.kv_hi[i], some[i])
        full = np.zeros(nk, bool)
        full[plan.full_lo[i] : plan.full_hi[i]] = True
        assert not (full & ~every[i]).any(), i  # unmasked blocks really need no mask
        if segments:
            assert not full.any()
        else:
            assert (full == (every[i] & some[i])).all(), i  # and every such block skips the mask
    for j in range(nk):
        visited = np.zeros(nq, bool)
        visited[plan.q_lo[j] : plan.q_hi[j]] = True
        assert (visited == some[:, j]).all(), j
    assert plan.kv_steps == max(1, int((plan.kv_hi - plan.kv_lo).max()))
    if window is not None and sk > 4 * bk:
        assert plan.kv_steps < nk  # the band is narrower than the key axis: blocks are skipped
