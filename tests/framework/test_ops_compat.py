"""The earlier ``ejkernel.ops`` API (signatures.md §3, api-modules.md) runs on this framework.

Every documented export imports or says what to use instead; ``Kernel`` subclasses written for
the earlier API run through an ``Executor``; the earlier import paths and field names map.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import ejkernel.ops
from ejkernel.errors import ConfigResolutionError
from ejkernel.modules import FlashAttention, FlashAttentionConfig
from ejkernel.ops import (
    AutotunePolicy,
    Cfg,
    ConfigCache,
    ConfigSelectorChain,
    Executor,
    Invocation,
    Kernel,
    Out,
    Tier,
    Tuner,
    autotune,
    current_policy,
    device_fingerprint,
    get_device_platform,
    list_ops,
    op_class,
    overlay_cache,
    policy,
    policy_override,
    record_dispatches,
)
from ejkernel.ops import BwdParams as OurBwd
from ejkernel.ops import FwdParams as OurFwd
from ejkernel.ops.compat import PARAM_ALIASES, PARAM_IGNORED, PARAM_REFUSED, REFUSED, RemovedNameError

# signatures.md §3: the exports of ejkernel.ops [v0.0.16] and those [2026] added.
DOCUMENTED_EXPORTS = [
    "AutotuneData",
    "AutotunePolicy",
    "Autotuner",
    "AutotuningResult",
    "BwdParams",
    "Cfg",
    "ConfigCache",
    "ConfigChooser",
    "ConfigSelectorChain",
    "Entry",
    "Executor",
    "FNAutotuner",
    "FwdParams",
    "Invocation",
    "Kernel",
    "Measurement",
    "Out",
    "PersistentCache",
    "Tuner",
    "abstractify",
    "autotune",
    "autotune_recorded",
    "benchmark",
    "default_key_builder_with_sharding",
    "device_fingerprint",
    "device_kind",
    "extract_labels_from_hlo_text",
    "find_labels_in_lowered",
    "from_json",
    "get_device_platform",
    "get_invocations",
    "label",
    "labels_to_configs",
    "overlay_cache",
    "pmap_with_config",
    "policy_override",
    "record_invocation",
    "sharding_fingerprint",
    "short_hash",
    "stable_json",
    "to_json",
    "vmap_with_config",
    "forward_autotune_only",
    "log_autotune_progress",
    "set_autotune_progress",
]


@pytest.fixture
def executor():
    return Executor(ConfigSelectorChain(cache=ConfigCache(), persistent=None))


# -- the documented names ---------------------------------------------------------------------------


# ejkernel.ops.benchmark is the op benchmark suite (a module, `ejkernel bench`); the earlier
# function is ejkernel.ops.compat.benchmark.
COLLISIONS = {"benchmark"}


def test_every_documented_export_imports_or_says_what_to_use():
    import ejkernel.ops.benchmark

    provided = [n for n in DOCUMENTED_EXPORTS if n not in REFUSED and n not in COLLISIONS]
    assert ejkernel.ops.benchmark.OpBench and callable(ejkernel.ops.compat.benchmark)
    for name in provided:
        assert getattr(ejkernel.ops, name) is not None, name
    assert set(REFUSED) <= set(DOCUMENTED_EXPORTS)
    for name in REFUSED:
        with pytest.raises(ImportError, match=rf"ejkernel\.ops\.{name} is not provided: .*ejkernel\.ops\."):
            exec(f"from ejkernel.ops import {name}", {})
        assert not hasattr(ejkernel.ops, name)  # attribute access raises AttributeError, as hasattr needs
        with pytest.raises(AttributeError, match="is not provided"):
            getattr(ejkernel.ops, name)
    with pytest.raises(AttributeError, match="has no attribute 'not_a_name'"):
        ejkernel.ops.not_a_name  # noqa: B018


def test_refusals_point_at_what_exists():
    from ejkernel.ops import record_dispatches  # named by the recording and label refusals

    assert record_dispatches
    with pytest.raises(RemovedNameError, match=r"record_dispatches"):
        from ejkernel.ops import get_invocations  # noqa: F401
    with pytest.raises(ImportError, match=r"policy\(progress=True\)"):
        from ejkernel.ops import set_autotune_progress  # noqa: F401
    with pytest.raises(ImportError, match=r"ejkernel\.ops\.autotune\(fn, hyperparams"):
        from ejkernel.ops import FNAutotuner  # noqa: F401


def test_generic_subscripting():
    @dataclasses.dataclass(frozen=True)
    class C:
        block: int = 8

    assert Kernel[C, jax.Array] is not None and Kernel[Cfg, Out] is not None
    assert Invocation[C, jax.Array] is not None
    assert Executor[C, jax.Array] is not None
    assert Tuner[C] is not None

    class K(Kernel[C, jax.Array]):
        def run(self, x, *, cfg):
            return x

        def heuristic_cfg(self, inv):
            return C()

    assert issubclass(K, Kernel)


def test_get_device_platform_and_kind():
    assert get_device_platform() == "cpu"
    assert get_device_platform(jax.devices()[0]) == "cpu"
    assert ejkernel.ops.device_kind() == jax.devices()[0].device_kind


# -- a user-defined Kernel ------------------------------------------------------------------------------


@dataclasses.dataclass
class MyConfig:
    algorithm: str = "default"


class MyKernel(Kernel[MyConfig, jax.Array]):
    def run(self, a, b, *, cfg: MyConfig, **kwargs):
        return jax.numpy.dot(a, b)

    def heuristic_cfg(self, inv):
        return MyConfig()


def test_the_documented_user_kernel_example():
    # The example of the earlier ejkernel.ops docstring, verbatim but for the arrays.
    a, b = jnp.arange(12.0).reshape(4, 3), jnp.arange(6.0).reshape(3, 2)

    cache = ConfigCache()
    selector = ConfigSelectorChain(cache)
    executor = Executor(selector)

    kernel = MyKernel("my_op")
    with record_dispatches() as log:
        result = executor(kernel, a, b)
    np.testing.assert_allclose(result, a @ b)
    assert kernel.op_id == "my_op"
    assert [(d.op, d.tier, d.config) for d in log] == [("my_op", Tier.HEURISTIC, MyConfig())]
    np.testing.assert_allclose(jax.jit(lambda a, b: executor(kernel, a, b))(a, b), a @ b)


def test_op_id_from_init_class_or_default(executor):
    class Named(MyKernel):
        def __init__(self):
            super().__init__(op_id="named_op")

    class ClassLevel(MyKernel):
        op_id = "class_op"

    assert Named().op_id == "named_op"
    assert ClassLevel().op_id == "class_op"
    assert MyKernel().op_id == f"{__name__}.MyKernel"
    a = jnp.ones((2, 2))
    with record_dispatches() as log:
        executor(Named(), a, a)
    assert log[0].op == "named_op" and "named_op@0" in log[0].key


def test_explicit_cfg_and_underscore_cfg(executor):
    a = jnp.ones((2, 2))
    for kw in ({"cfg": MyConfig("x")}, {"_cfg": MyConfig("x")}):
        with record_dispatches() as log:
            executor(MyKernel(), a, a, **kw)
        assert (log[0].tier, log[0].config) == (Tier.EXPLICIT, MyConfig("x"))
    assert executor.choose_config(MyKernel(), a, a, cfg=MyConfig("y")) == MyConfig("y")


def test_kernel_keywords_named_like_the_executors_internals(executor):
    class Keywords(Kernel):
        def run(self, x, *, cfg, platform="auto", kernel=None, fn=None, inv=None):
            return x + (platform == "triton") + (kernel == "k") + (fn == "f") + (inv == "i")

        def heuristic_cfg(self, inv):
            return MyConfig()

        def candidate_cfgs(self, inv):
            return [MyConfig("a"), MyConfig("b")]

    with policy(autotune=True):
        out = executor(Keywords(), jnp.zeros(2), platform="triton", kernel="k", fn="f", inv="i")
    np.testing.assert_allclose(out, [4.0, 4.0])


def _sleep_then(y):
    time.sleep(SLOW_CALL_S)
    return y


SLOW_CALL_S = 0.005  # the slow candidate's host pause per call: ~50x a 128x128 matmul on a CPU


class SlowOrFast(Kernel[MyConfig, jax.Array]):
    """Candidate "slow" pauses ``SLOW_CALL_S`` on the host each call (a callback in the program,
    data-dependent so it runs every iteration of the timing loop), "fast" does one matmul: tuning
    must pick "fast". A pause, not more matmuls: 40 matmuls against one was flipped once by CPU
    load under ``pytest -n auto`` on 2 cores, while a sleep's time cannot be taken by another
    worker."""

    def run(self, x, *, cfg):
        y = jnp.tanh(x @ x)
        if cfg.algorithm == "slow":
            y = jax.pure_callback(_sleep_then, jax.ShapeDtypeStruct(y.shape, y.dtype), y)
        return y

    def heuristic_cfg(self, inv):
        return MyConfig("slow")

    def candidate_cfgs(self, inv):
        return [MyConfig("slow"), MyConfig("fast")]


def test_autotune_tier_then_memory(executor):
    x = jnp.ones((128, 128)) / 128
    kernel = SlowOrFast("slow_or_fast")
    with policy(autotune=True), record_dispatches() as log:
        executor(kernel, x)
        executor(kernel, x)
        jax.jit(lambda x: executor(kernel, x))(x + 1)  # traced: same shapes, from memory
    assert [(d.tier, d.config.algorithm) for d in log] == [
        (Tier.AUTOTUNE, "fast"),
        (Tier.MEMORY, "fast"),
        (Tier.MEMORY, "fast"),
    ]
    assert executor.choose_config(kernel, x) == MyConfig("fast")
    with record_dispatches() as log:  # the heuristic without the policy, for another shape
        executor(kernel, jnp.ones((8, 8)))
    assert (log[0].tier, log[0].config) == (Tier.HEURISTIC, MyConfig("slow"))


def test_autotune_under_jit_tunes_on_concrete_inputs(executor):
    kernel = SlowOrFast("slow_or_fast_jit")
    with policy(autotune=True), record_dispatches() as log:
        out = jax.jit(lambda x: executor(kernel, x))(jnp.ones((128, 128)) / 128)
    assert out.shape == (128, 128)
    assert (log[0].tier, log[0].config) == (Tier.AUTOTUNE, MyConfig("fast"))


def test_heuristics_only_error_policy(executor):
    with policy(on_cache_miss="error"), pytest.raises(ConfigResolutionError, match="on_cache_miss='error'"):
        executor(MyKernel(), jnp.ones((2, 2)), jnp.ones((2, 2)))


def test_kernel_without_heuristic_fails_naming_it(executor):
    class NoHeuristic(Kernel):
        def run(self, x, *, cfg):
            return x

    with pytest.raises(ConfigResolutionError, match="NoHeuristic has no heuristic_cfg"):
        executor(NoHeuristic(), jnp.ones(2))


def test_overlay_cache_for_kernels(executor):
    x = jnp.ones((3, 3))
    call_key = Invocation(op_id="ov", args=(x, x), kwargs={}).call_key
    with overlay_cache({(device_fingerprint(), "ov@v0", call_key): MyConfig("overlaid")}):
        with record_dispatches() as log:
            executor(MyKernel("ov"), x, x)
        executor(MyKernel("ov"), x, x, cfg=MyConfig("explicit"))  # explicit wins
    assert (log[0].tier, log[0].config) == (Tier.OVERLAY, MyConfig("overlaid"))
    with record_dispatches() as log:
        executor(MyKernel("ov"), x, x)
    assert log[0].tier is Tier.HEURISTIC
    builtin_key = (device_fingerprint(), "flash_attention@v1", "0" * 16)
    with pytest.raises(TypeError, match=r"ejkernel\.ops\.overlay\(flash_attention=FlashAttentionConfig"):
        overlay_cache({builtin_key: FlashAttentionConfig()}).__enter__()


def test_platform_variants_are_preferred():
    class PerPlatform(Kernel):
        def run(self, x, *, cfg):
            return x

        def run_cpu(self, x, *, cfg):
            return x + cfg

        def heuristic_cfg(self, inv):
            return 1.0

        def heuristic_cfg_cpu(self, inv):
            return 2.0

        def run_gpu(self, x, *, cfg):  # not this device
            raise AssertionError

    out = Executor(ConfigSelectorChain(persistent=None))(PerPlatform(), jnp.zeros(2))
    np.testing.assert_allclose(out, [2.0, 2.0])


def test_custom_vjp_kernel(executor):
    class Square(Kernel):
        def run(self, x, scale=1.0, *, cfg):
            return scale * x * x

        def heuristic_cfg(self, inv):
            return MyConfig()

        def fwd_with_residuals(self, x, scale=1.0, *, cfg):
            return scale * x * x, x

        def vjp(self, res, dy, *args, cfg, **kwargs):
            # One gradient per positional argument; deliberately not 2·x, to see it is used.
            return (10.0 * res * dy, *[None] * (len(args) - 1))

    x = jnp.arange(3.0)
    g = jax.grad(lambda x: executor(Square(), x, 2.0).sum())(x)
    np.testing.assert_allclose(g, 10.0 * x)
    g = jax.grad(lambda x: executor(Square(), x, scale=jnp.float32(2.0)).sum())(x)
    np.testing.assert_allclose(g, 10.0 * x)

    class DictGrads(Square):
        def vjp(self, res, dy, *args, cfg, **kwargs):
            return {"x": dy}

    with pytest.raises(TypeError, match="tuple of gradients"):
        jax.grad(lambda x: executor(DictGrads(), x).sum())(x)

    class WrongCount(Square):
        def vjp(self, res, dy, *args, cfg, **kwargs):
            return (dy, dy)

    with pytest.raises(TypeError, match="one gradient per positional arg; got 2 for 1"):
        jax.grad(lambda x: executor(WrongCount(), x).sum())(x)


def test_shard_map_method():
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))

    class Doubler(Kernel):
        def run(self, x, *, cfg):
            return x * cfg

        def heuristic_cfg(self, inv):
            assert inv.method == "shard_map" and inv.mesh is mesh
            return 2.0

        def create_shard_map_wrapper(self, x, *, mesh, in_specs, out_specs, check_vma=False, cfg):
            return super().create_shard_map_wrapper(
                functools.partial(self.run, cfg=cfg), x, mesh=mesh, in_specs=in_specs, out_specs=out_specs
            )

    ex = Executor(ConfigSelectorChain(persistent=None))
    x = jnp.arange(8.0)
    out = ex(Doubler(), x, method="shard_map", mesh=mesh, in_specs=(P("x"),), out_specs=P("x"))
    np.testing.assert_allclose(out, 2 * x)
    with pytest.raises(ValueError, match="needs mesh, in_specs and out_specs"):
        ex(Doubler(), x, method="shard_map", mesh=mesh)
    with pytest.raises(ValueError, match="take effect with method='shard_map'"):
        ex(Doubler(), x, mesh=mesh, in_specs=(P("x"),), out_specs=P("x"))
    with pytest.raises(TypeError, match=r"needs MyKernel\.create_shard_map_wrapper"):
        ex(MyKernel(), x, x, method="shard_map", mesh=mesh, in_specs=(P("x"), P()), out_specs=P())


def test_a_custom_chooser_chooses():
    seen = []

    class Chooser:
        def choose(self, inv, kernel):
            seen.append((inv.op_id, inv.override_cfg, len(inv.args)))
            return MyConfig("chosen")

    ex = Executor(Chooser())
    a = jnp.ones((2, 2))
    np.testing.assert_allclose(ex(MyKernel("c"), a, a), a @ a)
    assert ex.choose_config(MyKernel("c"), a, a) == MyConfig("chosen")
    assert seen == [("c", None, 2), ("c", None, 2)]


def test_executor_rejects_other_objects(executor):
    with pytest.raises(TypeError, match=r"Executor runs ops .* and ejkernel\.ops\.Kernel subclasses, got object"):
        executor(object(), 1)


def test_vmap_and_pmap_with_config(executor):
    xs = jnp.arange(12.0).reshape(4, 3)
    out = ejkernel.ops.vmap_with_config(executor, MyKernel(), in_axes=(0, 0))(xs, xs)
    np.testing.assert_allclose(out, jnp.sum(xs * xs, axis=1))
    out = ejkernel.ops.pmap_with_config(executor, MyKernel(), in_axes=(0, 0))(xs[:2], xs[:2])
    np.testing.assert_allclose(out, jnp.sum(xs[:2] * xs[:2], axis=1))


# -- Executor.choose_config on the built-in ops ---------------------------------------------------------


def qkv(seq=24, batch=2):
    rng = np.random.default_rng(0)
    return tuple(jnp.asarray(rng.standard_normal((batch, seq, 2, 16)), jnp.float32) for _ in range(3))


def test_choose_config_is_what_the_call_uses(executor):
    q, k, v = qkv()
    for kw in ({}, {"causal": True}, {"cfg": FlashAttentionConfig(fwd_params=OurFwd(q_blocksize=8))}):
        chosen = executor.choose_config(FlashAttention(), q, k, v, **kw)
        with record_dispatches() as log:
            executor(FlashAttention(), q, k, v, **kw)
        assert [d.config for d in log] == [chosen]
    assert chosen.fwd_params.q_blocksize == 8 and chosen.platform == "xla"  # completed and stamped
    with record_dispatches() as log:  # choosing records nothing
        executor.choose_config(FlashAttention(), q, k, v)
    assert log == []


def test_choose_config_under_mesh_is_the_shards_config(executor):
    q, k, v = qkv(batch=4)
    mesh = Mesh(np.array(jax.devices()[:2]), ("dp",))
    kw = {"mesh": mesh, "in_specs": (P("dp"),) * 3, "out_specs": P("dp")}
    chosen = executor.choose_config(FlashAttention(), q, k, v, **kw)
    with record_dispatches() as log:
        executor(FlashAttention(), q, k, v, **kw)
    assert [d.config for d in log] == [chosen]


def test_choose_config_autotunes_as_the_call_would(executor):
    q, k, v = qkv(seq=16)
    with policy(autotune=True, autotune_repeats=1, persistent_cache=False):
        chosen = executor.choose_config(FlashAttention(), q, k, v)
        with record_dispatches() as log:
            executor(FlashAttention(), q, k, v)
    assert (log[0].tier, log[0].config) == (Tier.MEMORY, chosen)


# -- Invocation keys, Tuner, autotune, policies -------------------------------------------------------


def test_invocation_call_key():
    x, y = jnp.ones((2, 3)), jnp.zeros((2, 3))
    key = Invocation(op_id="k", args=(x,), kwargs={"causal": True}).call_key
    assert re.fullmatch(r"[0-9a-f]{16}", key)
    assert Invocation(op_id="other", args=(y,), kwargs={"causal": True}).call_key == key  # shapes, not values
    assert Invocation(op_id="k", args=(x,), kwargs={"causal": False}).call_key != key
    assert Invocation(op_id="k", args=(x.astype(jnp.bfloat16),), kwargs={"causal": True}).call_key != key
    assert Invocation(op_id="k", args=(x,), kwargs={"causal": True}, method="shard_map").call_key != key
    inv = Invocation(op_id="k", args=(x,), kwargs={})
    assert inv.make_key(lambda i: "custom") == "custom"
    assert re.fullmatch(r"[0-9a-f]{16}", ejkernel.ops.default_key_builder_with_sharding(inv))
    with pytest.raises(dataclasses.FrozenInstanceError):
        inv.op_id = "x"


def test_key_builder_keys_the_memory_cache(executor):
    class Keyed(SlowOrFast):
        key_builder = staticmethod(lambda inv: "one-key-for-all-shapes")

    kernel = Keyed("keyed")
    with policy(autotune=True):
        executor(kernel, jnp.ones((32, 32)))
    with record_dispatches() as log:
        executor(kernel, jnp.ones((16, 16)))
    assert log[0].tier is Tier.MEMORY and log[0].key.endswith("one-key-for-all-shapes")


def test_tuner_measure_and_autotune():
    tuner = Tuner(warmup=1, iters=5)  # the median of 5: one slow repeat does not decide
    x = jnp.ones((128, 128))
    assert 0 < tuner.measure(lambda x, n=1: x @ x, x) < 10

    def make(reps):
        def fn(x):
            for _ in range(reps):
                x = jnp.tanh(x @ x)
            return x

        return fn

    assert tuner.autotune(make, (x,), {}, [40, 1]) == 1

    def broken(_):
        def fn(x):
            raise ValueError("no")

        return fn

    assert tuner.autotune(broken, (x,), {}, [1, 2]) is None
    assert 0 < ejkernel.ops.compat.benchmark(lambda x: x + 1, x, warmup=1, iters=2) < 10
    with pytest.raises(ValueError, match=r"Tuner\.iters"):
        Tuner(iters=0)
    assert isinstance(tuner, ejkernel.ops.Autotuner)  # also tunes the built-in ops


def test_tuner_validates_backward_when_tagged():
    tuner = Tuner(warmup=0, iters=1)

    def fn(x):
        return jnp.sin(x)

    fn._ejk_validate_backward = True
    assert tuner.measure(fn, jnp.ones(8)) > 0

    def not_differentiable(x):
        return jax.pure_callback(lambda v: np.asarray(v) * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    not_differentiable._ejk_validate_backward = True
    with pytest.raises(Exception, match=r"(?i)pure_callback|differentiat|jvp"):
        tuner.measure(not_differentiable, jnp.ones(8))


def test_autotune_decorator():
    @autotune(hyperparams={"reps": [40, 1]}, timing_rounds=5, timing_warmup_iterations=1)
    def f(x, reps=1):
        for _ in range(reps):
            x = jnp.tanh(x @ x)
        return x

    x = jnp.ones((128, 128)) / 128
    np.testing.assert_allclose(f(x), jnp.tanh(x @ x), rtol=1e-6)
    assert f.optimal_hyperparams == {"reps": 1}
    assert [hp for hp, _ in f.timing_results] == [{"reps": 1}, {"reps": 40}]
    assert f.timing_results[0][1] <= f.timing_results[1][1]
    first = f.timing_results
    f(x + 1)  # same signature: no tuning
    assert f.timing_results == first

    @autotune
    def plain(x):
        return x + 1

    np.testing.assert_allclose(plain(x), x + 1)
    g = autotune(lambda x, k=1: x * k, hyperparams={"k": [1, 2]})
    assert g(x).shape == x.shape and g.optimal_hyperparams["k"] in (1, 2)
    with pytest.raises(NotImplementedError, match=r"jax\.device_put"):
        autotune(hyperparams={"k": [1]}, in_shardings=P())

    @autotune(hyperparams={"k": [1, 2]})
    def always_fails(x, k=1):
        raise ValueError("no")

    with pytest.raises(RuntimeError, match="every setting failed"):
        always_fails(x)


def test_autotune_policy_maps_onto_policy():
    base = current_policy()
    p = AutotunePolicy().to_policy(base)
    assert (p.autotune, p.on_cache_miss, p.autotune_mode) == (True, base.on_cache_miss, "fwd")
    assert not AutotunePolicy(cache_miss_fallback="heuristics").to_policy(base).autotune
    assert not AutotunePolicy(allow_autotune=False).to_policy(base).autotune
    assert AutotunePolicy(allow_heuristics=False).to_policy(base).on_cache_miss == "error"
    assert AutotunePolicy(validate_backward=True).to_policy(base).autotune_mode == "fwdbwd"
    for ap in (AutotunePolicy(), AutotunePolicy(False, False, "heuristics", True)):
        assert AutotunePolicy.from_policy(ap.to_policy(base)).to_policy(base) == ap.to_policy(base)
    with pytest.raises(ValueError, match="cache_miss_fallback"):
        AutotunePolicy(cache_miss_fallback="never")


def test_policy_override_is_scoped(executor):
    before = current_policy()
    with policy_override(executor.chain, allow_autotune=True) as p:
        assert current_policy() is p and p.autotune
        with policy_override(executor.chain, allow_heuristics=False):
            assert current_policy().on_cache_miss == "error" and current_policy().autotune
        with policy_override(executor.chain, cache_miss_fallback="heuristics", validate_backward=True):
            assert not current_policy().autotune and current_policy().autotune_mode == "fwdbwd"
    assert current_policy() is before
    with policy_override(executor.chain, cache_miss_fallback="autotune"):
        assert current_policy().autotune
    with pytest.raises(ValueError, match="cache_miss_fallback"):
        policy_override(executor.chain, cache_miss_fallback="sometimes").__enter__()
    with pytest.raises(TypeError, match="unknown AutotunePolicy fields"):
        policy_override(executor.chain, autotune_repeats=3).__enter__()
    with policy(autotune_mode="fwdbwd"), ejkernel.ops.forward_autotune_only():
        assert current_policy().autotune_mode == "fwd"


# -- FwdParams/BwdParams under the earlier field names ---------------------------------------------


def test_datacarrier_aliases_map_to_our_fields():
    from ejkernel.ops.utils.datacarrier import BwdParams, FwdParams

    for old, ours in PARAM_ALIASES.items():
        assert FwdParams(**{old: 4}) == OurFwd(**{ours: 4}), old
        if old != "blocksize_keys":
            assert BwdParams(**{old: 2}) == OurBwd(**{ours: 2}), old
    p = FwdParams(blocksize_m=64, blocksize_n=128, blocksize_k=32, num_warps=4, num_stages=2)
    assert p == OurFwd(q_blocksize=64, kv_blocksize=128, num_warps=4, num_stages=2)
    assert type(p) is OurFwd and isinstance(p, FwdParams) and isinstance(OurFwd(), FwdParams)
    assert not isinstance(OurBwd(), FwdParams) and issubclass(OurFwd, FwdParams)
    assert FwdParams(64, None, 32) == OurFwd(q_blocksize=64, kv_blocksize=32)  # the earlier field order
    assert FwdParams(blocksize_m=64, q_blocksize=64) == OurFwd(q_blocksize=64)  # agreeing values


def test_datacarrier_ignored_refused_and_conflicting_fields():
    from ejkernel.ops.utils.datacarrier import BwdParams, FwdParams

    assert set(PARAM_IGNORED) == {"blocksize_k"} and FwdParams(blocksize_k=64) == OurFwd()
    for name in PARAM_REFUSED:
        assert FwdParams(**{name: None}) == OurFwd()
        with pytest.raises(ValueError, match=rf"FwdParams\.{name}=8 is not supported: .*ragged_decode_attention"):
            FwdParams(**{name: 8})
    with pytest.raises(ValueError, match=r"blocksize_m=64 and q_blocksize=32 set the same tile \(q_blocksize\)"):
        FwdParams(blocksize_m=64, q_blocksize=32)
    with pytest.raises(ValueError, match="set the same tile"):
        FwdParams(blocksize_n=64, blocksize_keys=32)
    with pytest.raises(TypeError, match="unexpected field 'blocksize_heads'"):
        BwdParams(blocksize_heads=4)
    with pytest.raises(ValueError, match="power of two"):  # our validation still applies
        FwdParams(num_warps=3)


def test_datacarrier_params_configure_an_op(executor):
    from ejkernel.modules.operations.configs import FlashAttentionConfig as EarlierPathConfig

    from ejkernel.ops.utils.datacarrier import BwdParams, FwdParams

    assert EarlierPathConfig is FlashAttentionConfig
    cfg = FlashAttentionConfig(fwd_params=FwdParams(blocksize_m=8, blocksize_n=8), bwd_params=BwdParams(blocksize_m=8))
    with record_dispatches() as log:
        executor(FlashAttention(), *qkv(), cfg=cfg)
    assert log[0].config.fwd_params.q_blocksize == 8 and log[0].config.fwd_params.kv_blocksize == 8
    assert log[0].config.bwd_params.q_blocksize == 8


# -- the earlier import paths ----------------------------------------------------------------------


def test_ops_utils_paths():
    from ejkernel.ops.utils import FwdParams, abstractify, get_device_platform, short_hash, stable_json
    from ejkernel.ops.utils.fingerprint import device_fingerprint as fp
    from ejkernel.ops.utils.serialize import from_json, to_json

    assert FwdParams(blocksize_m=16) == OurFwd(q_blocksize=16)
    assert get_device_platform() == "cpu" and fp() == device_fingerprint()
    spec = abstractify({"x": jnp.ones((2, 3), jnp.bfloat16), "n": 3})
    assert spec["x"] == jax.ShapeDtypeStruct((2, 3), jnp.bfloat16) and spec["n"] == 3
    assert stable_json(spec) == '{"n":3,"x":{"dtype":"bfloat16","shape":[2,3]}}'
    assert len(short_hash(spec)) == 16
    assert from_json(to_json(MyConfig("a"))) == {"algorithm": "a"}
    with pytest.raises(ImportError, match=r"ejkernel\.ops\.utils\.meta\.label is not provided: .*record_dispatches"):
        from ejkernel.ops.utils.meta import label  # noqa: F401
    with pytest.raises(ImportError, match=r"ejkernel\.ops\.utils\.labels_to_configs is not provided"):
        from ejkernel.ops.utils import labels_to_configs  # noqa: F401


def test_modules_operations_paths():
    from ejkernel.modules.operations.flash_attention import FlashAttention as F
    from ejkernel.modules.operations.flash_attention import flash_attention

    import ejkernel.modules
    import ejkernel.modules.operations as operations
    from ejkernel.modules.operations import configs

    assert F is FlashAttention and flash_attention is ejkernel.modules.flash_attention
    for name in list_ops():
        cls = op_class(name)
        assert getattr(operations, cls.__name__) is cls
        assert getattr(configs, cls.config_cls.__name__) is cls.config_cls  # from the op table
        assert sys.modules[f"ejkernel.modules.operations.{name}"].__name__ == f"ejkernel.ops.{name}"
        assert getattr(operations, name) is getattr(ejkernel.modules, name)  # the function, as before
    assert configs.BaseOperationConfig is ejkernel.ops.OpConfig
    assert configs.FwdParams(blocksize_m=16) == OurFwd(q_blocksize=16)
    implemented = ", ".join(list_ops())
    with pytest.raises(
        ImportError, match=rf"NoSuchAttention is not provided: ejkernel implements the ops {implemented}"
    ):
        from ejkernel.modules.operations import NoSuchAttention  # noqa: F401
    with pytest.raises(ImportError, match=r"configs\.NoSuchAttentionConfig is not provided: the op configs are"):
        from ejkernel.modules.operations.configs import NoSuchAttentionConfig  # noqa: F401
    assert not hasattr(operations, "NoSuchAttention")


def test_the_documented_module_executor_construction(tmp_path):
    """signatures.md 2.1: each module's Executor(ConfigSelectorChain(cache=..., policy=..., tuner=...,
    persistent=PersistentCache("<name>")))."""
    from ejkernel.ops import PersistentCache

    events = []
    policy = ejkernel.ops.Policy(cache_dir=tmp_path)
    with ejkernel.ops.policy(cache_dir=tmp_path):
        pc = PersistentCache("flash-attn")
        assert pc.path == tmp_path / "flash-attn.json"
    chain = ConfigSelectorChain(
        cache=ConfigCache(),
        policy=AutotunePolicy(allow_autotune=True, cache_miss_fallback="heuristics", validate_backward=True),
        tuner=Tuner(warmup=5, iters=100),
        persistent=pc,
        on_event=lambda event, **data: events.append((event, data["op"])),
    )
    assert isinstance(chain.tuner, Tuner)
    ex = Executor(chain)
    q = jax.random.normal(jax.random.key(0), (1, 16, 2, 32))
    with ejkernel.ops.policy(cache_dir=tmp_path):
        out = ex(FlashAttention(), q, q, q, causal=True)
        ex(FlashAttention(), q, q, q, causal=True)
    assert out.shape == q.shape
    # cache_miss_fallback="heuristics": no tuning; the heuristic (cheap: recomputed, not cached).
    assert events == [("heuristics", "flash_attention")] * 2
    assert policy.cache_dir == tmp_path
    with pytest.raises(TypeError, match="policy must be"):
        ConfigSelectorChain(policy="autotune")
    with pytest.raises(TypeError, match="tuner or autotuner"):
        ConfigSelectorChain(tuner=Tuner(), autotuner=Tuner())
    assert PersistentCache(tmp_path / "x.json").path == tmp_path / "x.json"
    assert PersistentCache("gla", path=tmp_path / "y.json").path == tmp_path / "y.json"


def test_persistent_cache_loader_dumper(tmp_path):
    from ejkernel.ops import PersistentCache

    dumped = []
    pc = PersistentCache(
        "mine",
        path=tmp_path / "c.json",
        dumper=lambda cfg: dumped.append(cfg) or cfg.to_dict(),
        loader=lambda d: FlashAttentionConfig.from_dict(d),
    )
    cfg = FlashAttentionConfig(fwd_params=OurFwd(q_blocksize=32, kv_blocksize=32))
    assert pc.decode(pc.encode(cfg), FlashAttentionConfig) == cfg and dumped == [cfg]
    with pytest.raises(TypeError, match="expected"):
        PersistentCache("x", loader=lambda d: d).decode({}, FlashAttentionConfig)


def test_executor_compile():
    ex = Executor(ConfigSelectorChain(persistent=None))
    q = jax.random.normal(jax.random.key(0), (1, 16, 2, 32))
    f = ex.compile(FlashAttention(), q, q, q, causal=True, platform="xla")
    np.testing.assert_allclose(f(q, q, q), ejkernel.flash_attention(q, q, q, causal=True, platform="xla"), atol=1e-6)
    k2 = q * 0.5
    np.testing.assert_allclose(f(q, k2, q), ejkernel.flash_attention(q, k2, q, causal=True, platform="xla"), atol=1e-6)


# -- earlier registry names and config fields --------------------------------------------------------


@pytest.mark.parametrize(
    ("earlier", "op"),
    [
        ("gla", "gla_attention"),
        ("lightning_attn", "lightning_attention"),
        ("recurrent", "recurrent_attention"),
        ("kda", "kernel_delta_attention"),
        ("kda_decay", "kernel_delta_attention"),
        ("ssm1", "state_space_v1"),
        ("mamba1", "state_space_v1"),
        ("ssm2", "state_space_v2"),
        ("mamba2", "state_space_v2"),
        ("grouped_matmulv2", "grouped_matmul"),
        ("grouped_matmulv3", "grouped_matmul"),
        ("mla_attention", "flash_mla"),
    ],
)
def test_earlier_registry_names_resolve(earlier, op):
    registry = ejkernel.ops.kernel_registry
    assert registry.get(earlier, platform="xla") is registry.get(op, platform="xla")
    assert registry.get(algorithm=earlier, platform="xla").op_name == op
    assert registry.implementations(earlier) == registry.implementations(op)


def test_an_implementation_registered_under_an_earlier_name_serves_the_op():
    from ejkernel.ops import KernelRegistry, Platform

    registry = KernelRegistry(entry_point_group=None)
    registry.register("ssm2", Platform.XLA, name="mine")(lambda args, cfg: None)
    assert [i.op_name for i in registry.implementations("state_space_v2")] == ["state_space_v2"]
    registry.unregister("mamba2", "mine")
    assert registry.implementations("state_space_v2") == []


def test_earlier_config_fields():
    from ejkernel.modules.operations import configs

    # Fields that tiled the earlier kernels only: accepted, dropped; same-named fields kept.
    gla = configs.GLAttentionConfig(block_q=64, block_k=64, block_d=64, num_warps=4, num_stages=1, platform="xla")
    assert gla == configs.GLAttentionConfig(num_warps=4, num_stages=1, platform="xla")
    for name in ("LightningAttentionConfig", "RecurrentAttentionConfig"):
        assert getattr(configs, name)(block_q=64, block_k=64, block_d=64) == getattr(configs, name)()
    assert configs.AttentionConfig(block_q=128, block_k=128, num_warps=4, num_stages=2) == configs.AttentionConfig()
    sdpa = configs.ScaledDotProductAttentionConfig
    assert sdpa(block_q=128, block_k=128, num_warps=4, num_stages=2) == sdpa()
    assert configs.StateSpaceV2Config(block_e=128, n_groups=1, use_gated_rmsnorm=False, rmsnorm_eps=1e-5) == (
        configs.StateSpaceV2Config()
    )
    # The v0.0.16 ring config: its chunk sizes are the inner kernel's forward tiles, as the call's are.
    ring = configs.RingAttentionConfig(block_q=128, block_k=128, query_chunk_size=64, key_chunk_size=32, num_warps=4)
    assert ring.fwd_params == OurFwd(q_blocksize=64, kv_blocksize=32, num_warps=4)
    assert configs.GatedDeltaRuleConfig(use_chunked=False, chunk_size=64).chunked is False
    assert configs.GatedDeltaRuleConfig(use_input_dtype_state=False) == configs.GatedDeltaRuleConfig()
    # Settings of a call's meaning are refused unless they change nothing, naming what to use.
    with pytest.raises(ValueError, match=r"StateSpaceV2Config.n_groups=2 .* pass n_groups= to state_space_v2"):
        configs.StateSpaceV2Config(n_groups=2)
    with pytest.raises(ValueError, match=r"use_input_dtype_state=True .* float32"):
        configs.GatedDeltaRuleConfig(use_input_dtype_state=True)
    with pytest.raises(ValueError, match="pass fwd_params or the earlier fields"):
        configs.RingAttentionConfig(fwd_params=OurFwd(q_blocksize=16), query_chunk_size=64)
    with pytest.raises(TypeError, match=r"GLAttentionConfig got an unexpected field 'blok_q'; fields: .*block_q"):
        configs.GLAttentionConfig(blok_q=64)
    with pytest.raises(ValueError, match=r"GLAttentionConfig.num_warps must be a power of two"):
        configs.GLAttentionConfig(block_q=64, num_warps=3)  # the kept fields are still validated


def test_an_earlier_config_configures_the_call():
    q = k = v = jax.random.normal(jax.random.key(0), (1, 32, 2, 16))
    cfg = ejkernel.modules.RingAttentionConfig(query_chunk_size=16, key_chunk_size=8, platform="xla")
    with ejkernel.ops.record_dispatches() as log:
        out = ejkernel.ring_attention(q, k, v, causal=True, cfg=cfg)
    fwd = log[0].config.fwd_params
    assert (fwd.q_blocksize, fwd.kv_blocksize) == (16, 8)
    np.testing.assert_allclose(
        np.asarray(out), np.asarray(ejkernel.flash_attention(q, k, v, causal=True)), atol=1e-5, rtol=1e-5
    )
