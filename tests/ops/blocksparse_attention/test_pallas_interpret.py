"""The TPU ``blocksparse_attention`` kernels (forward, dK/dV, dQ) in Pallas' TPU interpreter, on the CPU.

Every conformance case runs through the shared suite (``check_impl`` on a pretend TPU: output and
the gradients of query, key, value and sinks against the float32 reference; the interpreter
fills memory a kernel never wrote with NaN), with the heuristic config (one tile per sequence on
these shapes) and with the small-tile ``test_configs`` (16/32 query rows, 128 keys). Longer cases
span several 128-key tiles, so the schedule skips empty tiles and mixes full and partial ones,
and one poisons the key/value tiles nobody visits with NaN: a kernel that fetched and masked
them instead of skipping them would return NaN.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops import BwdParams, FwdParams, run_impl
from ejkernel.ops.blocksparse_attention import BlockSparseAttentionConfig, block_mask
from ejkernel.ops.blocksparse_attention.cases import CASES, BlockSparseCase
from ejkernel.ops.blocksparse_attention.reference import blocksparse_attention_reference
from ejkernel.testing import conformance as C
from ejkernel_pallas.tpu import interpret_mode
from ejkernel_pallas.tpu.blocksparse_attention import PallasTpuBlockSparseAttention

from .._pallas_support import TPU, TPU_KINDS, lower_for_tpu, on_tpu, pallas_kernel_names, registered

pytestmark = pytest.mark.interpret

OP = "blocksparse_attention"
IMPL = registered(OP)
KERNELS = ["ejkernel_blocksparse_fwd", "ejkernel_blocksparse_bwd_dkv", "ejkernel_blocksparse_bwd_dq"]
SMALL_TILES = "tiles16x128-bwd32x128"
CONFIGS = {"heuristic": None, **IMPL.test_configs}

# Several 128-key tiles (with the small tiles): a causal window with GQA skips the tiles left of
# the band; documents make per-example schedules; a block mask leaves whole tiles empty; a
# per-head pairwise mask with sinks and a soft cap in bfloat16.
LONG_CASES = (
    BlockSparseCase("long-window-gqa-odd", b=1, sq=130, sk=300, h=2, hk=1, window=(100, 0)),
    BlockSparseCase("long-documents", b=2, sq=200, sk=200, h=2, hk=1, segments="packed"),
    BlockSparseCase("long-block-mask-cross", b=1, sq=64, sk=300, h=2, hk=2, blocks=(32, 128), causal=False),
    BlockSparseCase(
        "long-pairwise-sinks-softcap-bf16",
        b=1,
        sq=48,
        sk=260,
        h=2,
        hk=1,
        pairwise=True,
        sinks=1,
        soft_cap=6.0,
        causal=False,
        dtype="bfloat16",
    ),
)


def test_the_registered_implementation_and_its_small_tiles():
    assert isinstance(IMPL, PallasTpuBlockSparseAttention)
    assert set(CONFIGS) == {"heuristic", SMALL_TILES}


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_conformance(case, cfg_id):
    declined = C.expected_decline(IMPL, C.bind(OP, **case.inputs()), TPU)
    with interpret_mode():
        outcome = C.check_impl(IMPL, case, CONFIGS[cfg_id], device=TPU)
    assert outcome == ("declined" if declined else "ok")


@pytest.mark.parametrize("case", LONG_CASES, ids=lambda c: c.name)
def test_several_key_tiles(case):
    with interpret_mode():
        assert C.check_impl(IMPL, case, CONFIGS[SMALL_TILES], device=TPU) == "ok"


def test_unvisited_tiles_are_never_read():
    """Key tiles 1 and 3 (of 4) are visible to no query: NaN there must not reach the output or
    the gradients (the index maps never fetch them), which match the reference on clean inputs."""
    bm = np.array([[True, False, True, False]] * 2)
    sq, sk, bk = 64, 512, 128
    rng = np.random.default_rng(1)
    q, k, v = (
        jnp.asarray(rng.standard_normal(s), jnp.float32) for s in ((1, 2, sq, 32), (1, 2, sk, 32), (1, 2, sk, 32))
    )
    unseen = (jnp.arange(sk) // bk % 2 == 1)[None, None, :, None]
    kw = dict(causal=False, mask_builder=lambda: block_mask(bm, (32, bk)))
    fn = on_tpu(IMPL, CONFIGS[SMALL_TILES])

    def loss(q, k, v):
        return jnp.sum(fn(query=q, key=k, value=v, **kw) ** 2)

    def ref_loss(q, k, v):
        return jnp.sum(blocksparse_attention_reference(q, k, v, **kw) ** 2)

    poisoned = (jnp.where(unseen, jnp.nan, k), jnp.where(unseen, jnp.nan, v))
    with interpret_mode():
        out = fn(query=q, key=poisoned[0], value=poisoned[1], **kw)
        grads = jax.grad(loss, argnums=(0, 1, 2))(q, *poisoned)
    np.testing.assert_allclose(out, blocksparse_attention_reference(q, k, v, **kw), rtol=2e-5, atol=2e-5)
    ref_grads = jax.grad(ref_loss, argnums=(0, 1, 2))(q, k, v)
    for name, g, r in zip("qkv", grads, ref_grads, strict=True):
        g = g if name == "q" else jnp.where(unseen, 0.0, g)  # the unseen rows' gradients are zero
        np.testing.assert_allclose(g, r, rtol=2e-4, atol=2e-4, err_msg=f"d{name}")


def test_the_pallas_kernels_are_what_runs():
    """The traced program is the three Pallas kernels, so a fallback to XLA cannot pass."""
    kw = BlockSparseCase("kernels", b=1, sq=40, sk=40, h=4, hk=2, segments="packed").inputs()
    qkv = (kw["query"], kw["key"], kw["value"])
    fn = on_tpu(IMPL)

    def loss(q, k, v):
        return jnp.sum(fn(**{**kw, "query": q, "key": k, "value": v}) ** 2)

    assert pallas_kernel_names(lambda q, k, v: fn(**{**kw, "query": q, "key": k, "value": v}), *qkv) == KERNELS[:1]
    assert sorted(pallas_kernel_names(jax.grad(loss, argnums=(0, 1, 2)), *qkv)) == sorted(KERNELS)


@pytest.mark.parametrize("kind", TPU_KINDS)
def test_lowers_to_mosaic_for_tpu(kind):
    """Pallas lowers forward and backward to Mosaic for real TPUs (block shapes checked against the
    TPU tiling there) with every supported feature on: one TPU custom call per kernel."""
    case = BlockSparseCase(
        "lower", b=2, sq=40, sk=300, h=4, hk=2, dtype="bfloat16", window=(200, 3), blocks=(8, 64),
        segments="packed", pairwise=True, sinks=2, soft_cap=5.0,
    )  # fmt: skip
    kw = case.inputs()
    fn = on_tpu(IMPL, CONFIGS[SMALL_TILES])

    def loss(q, k, v):
        return jnp.sum(fn(**{**kw, "query": q, "key": k, "value": v}).astype(jnp.float32) ** 2)

    module = lower_for_tpu(jax.grad(loss, argnums=(0, 1, 2)), kw["query"], kw["key"], kw["value"], kind=kind)
    assert module.count("stablehlo.custom_call @tpu_custom_call") == 3
    for name in KERNELS:
        assert name in module


@pytest.mark.parametrize(
    ("fwd", "match"),
    [((16, 64), "kv_blocksize must be a positive multiple of 128"), ((12, 128), "q_blocksize must be a positive")],
)
def test_misaligned_tiles_are_refused(fwd, match):
    kw = BlockSparseCase("cfg", sq=40, sk=40).inputs()
    cfg = BlockSparseAttentionConfig(
        fwd_params=FwdParams(q_blocksize=fwd[0], kv_blocksize=fwd[1]),
        bwd_params=BwdParams(q_blocksize=32, kv_blocksize=128),
    )
    with pytest.raises(ValueError, match=match):
        run_impl(IMPL, C.bind(OP, **kw), cfg, device=TPU)
