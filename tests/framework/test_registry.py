"""The kernel registry: registration, priorities, declines with reasons, explicit platforms."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import ejkernel
from ejkernel.errors import NoImplementationError, UnsupportedError
from ejkernel.modules import FlashAttention, FlashAttentionConfig
from ejkernel.ops import (
    Backend,
    ConfigSelectorChain,
    DeviceInfo,
    Executor,
    KernelImpl,
    KernelRegistry,
    Platform,
    policy,
    record_dispatches,
)

CPU = DeviceInfo(platform="cpu", kind="cpu")
GPU = DeviceInfo(platform="gpu", kind="NVIDIA H200", compute_capability=(9, 0))


class Fake(KernelImpl):
    def __init__(self, reason=None, tag="fake"):
        self.reason = reason
        self.tag = tag
        self.calls = 0

    def decline(self, args, device):
        return self.reason

    def heuristic_cfg(self, args, device):
        return FlashAttentionConfig()

    def run(self, args, cfg):
        self.calls += 1
        return jnp.full(args.query.shape[:3] + args.value.shape[3:], float(len(self.tag)), args.query.dtype)


def small_qkv():
    q = jnp.asarray([[[[0.5, -1.0]]]] * 1, jnp.float32)
    return q, q + 1, q - 1


def test_register_and_get_by_priority():
    reg = KernelRegistry(None)
    low, high = Fake(tag="low"), Fake(tag="high")
    reg.register("op", Platform.XLA, Backend.ANY, priority=0)(low)
    reg.register("op", Platform.TRITON, Backend.GPU, priority=10)(high)
    assert reg.get("op") is high
    assert reg.get("op", platform="xla") is low
    assert reg.get("op", backend="cpu") is low  # triton targets GPUs only
    assert [i.name for i in reg.implementations("op")] == ["triton", "xla"]
    assert reg.ops() == ["op"]


def test_register_rejects_duplicates_and_bad_values():
    reg = KernelRegistry(None)
    reg.register("op", "xla")(Fake())
    with pytest.raises(ValueError, match="already registered"):
        reg.register("op", "xla")(Fake())
    reg.register("op", "xla", name="xla_v2")(Fake())  # another name is fine
    with pytest.raises(ValueError, match="platform must be one of"):
        reg.register("op", "fortran")
    with pytest.raises(ValueError, match="backend must be one of"):
        reg.register("op", "xla", "quantum")
    with pytest.raises(TypeError, match="priority"):
        reg.register("op", "xla", priority="high")


def test_select_skips_declining_and_wrong_device():
    reg = KernelRegistry(None)
    gpu = Fake(tag="gpu")
    picky = Fake(reason="head_dim 80 is not supported", tag="picky")
    fallback = Fake(tag="xla")
    reg.register("op", "triton", "gpu", priority=20)(gpu)
    reg.register("op", "pallas", "any", priority=10)(picky)
    reg.register("op", "xla", "any", priority=0)(fallback)
    assert reg.select("op", None, CPU) is fallback
    assert reg.select("op", None, GPU) is gpu


def test_all_declining_lists_every_reason():
    reg = KernelRegistry(None)
    reg.register("op", "triton", "gpu")(Fake())
    reg.register("op", "xla", "any")(Fake(reason="no bias support"))
    with pytest.raises(NoImplementationError) as info:
        reg.select("op", None, CPU)
    assert "needs a GPU device; this call runs on cpu" in str(info.value)
    assert "no bias support" in str(info.value)
    assert set(info.value.reasons) == {"triton", "xla"}


def test_explicit_platform_that_declines_is_an_error_with_its_reason():
    reg = KernelRegistry(None)
    reg.register("op", "triton", "gpu")(Fake())
    reg.register("op", "xla", "any")(Fake())
    with pytest.raises(UnsupportedError, match="needs a GPU device") as info:
        reg.select("op", None, CPU, platform="triton")
    assert info.value.implementation == "triton"
    # A first-party backend that is not here is named with its install command.
    with pytest.raises(NoImplementationError, match=r"'cuda' is not installed(.|\n)*ejkernel-core\[cuda\]"):
        reg.select("op", None, CPU, platform="cuda")
    # A platform no backend is known by lists what is registered.
    reg = KernelRegistry(None, known_backends={})
    reg.register("op", "xla", "any")(Fake())
    with pytest.raises(NoImplementationError, match="asked for platform='cuda'; registered: xla"):
        reg.select("op", None, CPU, platform="cuda")


def test_no_implementation_hints_at_the_extra():
    reg = KernelRegistry(None)
    with pytest.raises(NoImplementationError, match=r"ejkernel-core\[xla\]"):
        reg.get("flash_attention")


def test_policy_denies_a_backend_plugin():
    reg = KernelRegistry(None)
    impl = Fake()
    reg.register("op", "xla")(impl)
    impl.plugin = "xla"  # as if registered by the 'xla' plugin
    with policy(backends_deny=frozenset({"xla"})):
        assert "disabled by the policy" in reg.check(impl, None, CPU)
    with policy(backends_allow=frozenset({"triton"})):
        assert "disabled by the policy" in reg.check(impl, None, CPU)
    assert reg.check(impl, None, CPU) is None


def test_a_raising_decline_is_reported_not_fatal():
    class Buggy(Fake):
        def decline(self, args, device):
            raise RuntimeError("boom")

    reg = KernelRegistry(None)
    reg.register("op", "triton", priority=5)(Buggy())
    good = Fake()
    reg.register("op", "xla")(good)
    assert reg.select("op", None, CPU) is good
    assert "decline() raised RuntimeError: boom" in reg.check(reg.get("op", "triton"), None, CPU)


def test_chosen_implementation_is_observable_and_plain_functions_register():
    reg = KernelRegistry(None)
    seen = []

    @reg.register("flash_attention", "xla", priority=1, name="plain")
    def plain(args, cfg):
        seen.append(cfg)
        return jnp.zeros(args.query.shape, args.query.dtype)

    ex = Executor(ConfigSelectorChain(persistent=None), registry=reg)
    q, k, v = small_qkv()
    with record_dispatches() as log:
        out = ex(FlashAttention(), q, k, v)
    assert out.shape == q.shape and seen
    assert [(d.op, d.impl, d.tier.value) for d in log] == [("flash_attention", "plain", "heuristic")]


def test_impl_objects_are_callable_like_the_op():
    impl = ejkernel.kernel_registry.get("flash_attention", platform="xla")
    q = jnp.asarray(jnp.linspace(-1, 1, 2 * 5 * 2 * 8).reshape(2, 5, 2, 8), jnp.float32)
    out = impl(q, q, q, causal=True)
    ref = ejkernel.flash_attention(q, q, q, causal=True, platform="xla")
    assert jnp.allclose(out, ref)


def test_platform_and_cfg_must_agree():
    q, k, v = small_qkv()
    with pytest.raises(ValueError, match="contradicts"):
        ejkernel.flash_attention(q, k, v, platform="xla", cfg=FlashAttentionConfig(platform="triton"))
    with pytest.raises(TypeError, match="cfg must be a FlashAttentionConfig"):
        ejkernel.flash_attention(q, k, v, cfg=ejkernel.PageAttentionConfig())


def test_allowing_only_uninstalled_backends_warns(caplog):
    """EJKERNEL_BACKENDS=bogus must not silently disable every backend."""
    reg = KernelRegistry()  # the real entry-point group: the installed plugins
    with caplog.at_level("WARNING", logger="ejkernel"), policy(backends_allow=frozenset({"bogus"})):
        reg.load_plugins()
        reg.load_plugins()  # said once
    warnings = [r.getMessage() for r in caplog.records if "not installed" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "bogus" in warnings[0] and "installed: " in warnings[0] and "xla" in warnings[0]
