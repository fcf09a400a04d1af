"""Device profiles, declared needs, and the check of every config tier against them."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.errors import ConfigResolutionError
from ejkernel.modules import FlashAttentionConfig
from ejkernel.ops import (
    BwdParams,
    ConfigCache,
    ConfigSelectorChain,
    DeviceInfo,
    FwdParams,
    KernelImpl,
    KernelRegistry,
    Need,
    Tier,
    bind,
    get_op,
    policy,
    profile_for,
)
from ejkernel.ops.autotune import Autotuner, TuneResult
from ejkernel.ops.resources import PROFILES, check_fits, unfit

H100 = DeviceInfo(platform="gpu", kind="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), sm_count=132)
A100 = DeviceInfo(platform="gpu", kind="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0))
L4 = DeviceInfo(platform="gpu", kind="NVIDIA L4", compute_capability=(8, 9))
A10 = DeviceInfo(platform="gpu", kind="NVIDIA A10", compute_capability=(8, 6), sm_count=72)
CPU = DeviceInfo(platform="cpu", kind="cpu")


def test_profiles_of_the_architectures():
    """Opt-in shared memory per block (the CUDA programming guide's table)."""
    expected = {(8, 0): 166912, (8, 6): 101376, (8, 9): 101376, (9, 0): 232448}
    for device in (A100, A10, L4, H100):
        p = profile_for(device)
        assert p.shared_memory_per_block == expected[device.compute_capability]
        assert p.name == f"sm_{device.compute_capability[0]}{device.compute_capability[1]}"
        assert p.example == device.kind
    assert profile_for(CPU) is None
    assert profile_for(A10).sm_count == 72  # the device's own count
    assert profile_for(A100).sm_count == PROFILES[(8, 0)].sm_count  # the reference part's


def test_profile_of_an_architecture_not_in_the_table():
    p = profile_for(DeviceInfo(platform="gpu", kind="X", compute_capability=(9, 1)))
    assert (p.name, p.shared_memory_per_block) == ("sm_91", 232448)  # sm_90's limits
    p = profile_for(DeviceInfo(platform="gpu", kind="X", compute_capability=(11, 0)))
    assert (p.name, p.shared_memory_per_block) == ("sm_110", 101376)  # the smallest sm_80+ limit
    assert "limits of sm_89" in p.describe()


def test_unfit_names_the_kernel_the_need_and_the_limit():
    sm86 = profile_for(A10)
    assert unfit([Need("fwd", 101376, 256)], sm86) is None
    why = unfit([Need("fwd", 1024, 128), Need("bwd", 101377, 256)], sm86)
    assert "'bwd'" in why and "101377 B" in why and "101376 B" in why and "sm_86 (NVIDIA A10)" in why
    assert "2048 threads" in unfit([Need("k", 0, 2048)], sm86)
    assert "255" in unfit([Need("k", 0, 128, registers=256)], sm86)
    assert "per SM" in unfit([Need("k", 0, 1024, registers=128)], sm86)


def test_blocks_per_sm():
    sm90 = profile_for(H100)
    # 1 KiB per block is kept by the system: two 113 KiB blocks fit, two 114 KiB ones do not.
    assert sm90.blocks_per_sm(Need("k", 113 * 1024, 256)) == 2
    assert sm90.blocks_per_sm(Need("k", 114 * 1024, 256)) == 1
    assert sm90.blocks_per_sm(Need("k", 0, 1024)) == 2  # by threads
    assert sm90.blocks_per_sm(Need("k", 0, 256, registers=128)) == 2  # by registers
    assert sm90.blocks_per_sm(Need("k", 300_000, 256)) == 0


# A fake implementation whose forward needs q_blocksize KiB of shared memory: 128 does not fit an
# sm_86 part (99 KiB per block), 64 does.
def _cfg(q: int) -> FlashAttentionConfig:
    return FlashAttentionConfig(fwd_params=FwdParams(q, 16, 4, 1), bwd_params=BwdParams(16, 16, 4, 1))


class Tiles(KernelImpl):
    heuristic_q = 64

    def heuristic_cfg(self, args, device):
        return _cfg(self.heuristic_q)

    def candidate_cfgs(self, args, device):
        return [_cfg(32), _cfg(128), _cfg(64)]

    def resources(self, cfg, args, device):
        p = cfg.fwd_params
        return [Need("forward", p.q_blocksize * 1024, 32 * p.num_warps)]

    def run(self, args, cfg):
        raise AssertionError("nothing runs in these tests")


class Recorder(Autotuner):
    """Keeps the candidates it is handed; the first one "wins" without running."""

    def tune(self, op, impl, args, device, candidates, policy, *, label=""):
        self.candidates = list(candidates)
        return TuneResult(candidates[0], 1.0, (), 0.0, "fwd")


def _setup(impl_cls=Tiles):
    reg = KernelRegistry(None)
    reg.register("flash_attention", "triton", name="tiles")(impl_cls)
    q = jnp.asarray(np.random.default_rng(0).standard_normal((1, 16, 2, 16)), jnp.float32)
    return get_op("flash_attention"), reg.get("flash_attention", platform="tiles"), bind("flash_attention", q, q, q)


def test_explicit_config_that_does_not_fit_is_a_value_error():
    op, impl, args = _setup()
    chain = ConfigSelectorChain(cache=ConfigCache(), persistent=None)
    with pytest.raises(ValueError, match=r"'forward' needs 131072 B .* sm_86 \(NVIDIA A10\) allows at most 101376 B"):
        chain.select(op, impl, args, A10, explicit=_cfg(128))
    assert chain.select(op, impl, args, H100, explicit=_cfg(128)).tier is Tier.EXPLICIT
    # Off NVIDIA GPUs there is nothing to check.
    check_fits(impl, _cfg(1024), args, CPU)


def test_autotune_prunes_candidates_that_do_not_fit_before_timing():
    op, impl, args = _setup()
    tuner = Recorder()
    chain = ConfigSelectorChain(cache=ConfigCache(), persistent=None, tuner=tuner)
    with policy(autotune=True, persistent_cache=False):
        res = chain.select(op, impl, args, A10)
    assert res.tier is Tier.AUTOTUNE
    assert [c.fwd_params.q_blocksize for c in tuner.candidates] == [32, 64]
    chain = ConfigSelectorChain(cache=ConfigCache(), persistent=None, tuner=tuner)
    with policy(autotune=True, persistent_cache=False):
        chain.select(op, impl, args, H100)
    assert [c.fwd_params.q_blocksize for c in tuner.candidates] == [32, 128, 64]


def test_a_heuristic_that_does_not_fit_is_an_error_not_a_launch():
    class TooBig(Tiles):
        heuristic_q = 128

    op, impl, args = _setup(TooBig)
    chain = ConfigSelectorChain(cache=ConfigCache(), persistent=None)
    with pytest.raises(ConfigResolutionError, match=r"heuristic: ValueError: .*101376 B"):
        chain.select(op, impl, args, A10)
    assert chain.select(op, impl, args, H100).tier is Tier.HEURISTIC


def test_a_cached_config_that_does_not_fit_is_skipped(tmp_path):
    from ejkernel.ops import PersistentCache

    op, impl, args = _setup()
    persistent = PersistentCache(tmp_path / "configs.json")
    chain = ConfigSelectorChain(cache=ConfigCache(), persistent=persistent)
    key = chain.key(op, impl, args, A10)
    persistent.put(key, {"config": dataclasses.replace(_cfg(128), platform="tiles").to_dict()})
    res = chain.select(op, impl, args, A10)
    assert res.tier is Tier.HEURISTIC and res.config.fwd_params.q_blocksize == 64
