"""Config dataclasses: validation at construction, normalization, JSON round trip, filling, hashing.

Covers ``FwdParams``/``BwdParams``, the ``OpConfig`` base through ``FlashAttentionConfig`` and
``PageAttentionConfig``: bad values fail where they are written, platform/backend are normalized
to lower-case strings, configs survive ``to_dict``/``from_dict`` (also through JSON), and
``filled_from`` fills only what is ``None``.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

import ejkernel
from ejkernel.modules import FlashAttentionConfig, PageAttentionConfig
from ejkernel.ops import Backend, BwdParams, FwdParams, OpConfig, Platform
from ejkernel.ops.config import check_positive_int

PARAMS = pytest.mark.parametrize("cls", [FwdParams, BwdParams])
FIELDS = ("q_blocksize", "kv_blocksize", "num_warps", "num_stages")


# -- FwdParams / BwdParams ------------------------------------------------------------------------


@PARAMS
def test_params_default_to_none(cls):
    p = cls()
    assert all(getattr(p, f) is None for f in FIELDS)
    assert [f.name for f in dataclasses.fields(cls)] == list(FIELDS)


@PARAMS
def test_params_accept_positive_ints(cls):
    p = cls(q_blocksize=128, kv_blocksize=1, num_warps=8, num_stages=3)
    assert (p.q_blocksize, p.kv_blocksize, p.num_warps, p.num_stages) == (128, 1, 8, 3)
    cls(q_blocksize=3, kv_blocksize=1000)  # block sizes need not be powers of two


@PARAMS
@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", [0, -1, -64])
def test_params_reject_non_positive(cls, field, value):
    with pytest.raises(ValueError, match=field):
        cls(**{field: value})


@PARAMS
@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", [True, False, 64.0, 1.5, "64", [64]])
def test_params_reject_non_ints(cls, field, value):
    with pytest.raises(TypeError, match=field):
        cls(**{field: value})


@PARAMS
@pytest.mark.parametrize("warps", [1, 2, 4, 8, 16, 32])
def test_num_warps_powers_of_two(cls, warps):
    assert cls(num_warps=warps).num_warps == warps


@PARAMS
@pytest.mark.parametrize("warps", [3, 6, 12, 24, 33, 48, 64, 128])
def test_num_warps_rejected(cls, warps):
    with pytest.raises(ValueError, match="num_warps"):
        cls(num_warps=warps)


@PARAMS
def test_num_stages(cls):
    assert cls(num_stages=1).num_stages == 1
    assert cls(num_stages=7).num_stages == 7  # any positive int
    with pytest.raises(ValueError, match="num_stages"):
        cls(num_stages=0)


def test_error_messages_name_the_class():
    with pytest.raises(ValueError, match=r"FwdParams\.q_blocksize"):
        FwdParams(q_blocksize=0)
    with pytest.raises(TypeError, match=r"BwdParams\.kv_blocksize"):
        BwdParams(kv_blocksize=2.0)


@PARAMS
def test_params_frozen_and_hashable(cls):
    p = cls(q_blocksize=64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.q_blocksize = 32  # type: ignore[misc]
    assert hash(p) == hash(cls(q_blocksize=64))
    assert p == cls(q_blocksize=64)
    assert p != cls(q_blocksize=32)
    assert {p, cls(q_blocksize=64), cls()} == {p, cls()}


def test_fwd_and_bwd_params_differ():
    assert FwdParams(q_blocksize=64) != BwdParams(q_blocksize=64)
    assert len({FwdParams(q_blocksize=64), BwdParams(q_blocksize=64)}) == 2


@PARAMS
def test_params_round_trip(cls):
    p = cls(q_blocksize=64, num_warps=4)
    d = p.to_dict()
    assert d == {"q_blocksize": 64, "kv_blocksize": None, "num_warps": 4, "num_stages": None}
    assert cls.from_dict(d) == p
    assert cls.from_dict(json.loads(json.dumps(d))) == p
    assert cls.from_dict({}) == cls()
    assert cls.from_dict({"kv_blocksize": 16}) == cls(kv_blocksize=16)


@PARAMS
def test_params_from_dict_validates(cls):
    with pytest.raises(ValueError, match="unknown fields"):
        cls.from_dict({"block_m": 64})
    with pytest.raises(ValueError, match="num_warps"):
        cls.from_dict({"num_warps": 3})
    with pytest.raises(TypeError):
        cls.from_dict([("q_blocksize", 64)])


def test_check_positive_int():
    check_positive_int("X", "y", None)
    check_positive_int("X", "y", 5)
    check_positive_int("X", "y", 8, power_of_two=True)
    with pytest.raises(ValueError, match=r"X\.y must be a power of two"):
        check_positive_int("X", "y", 6, power_of_two=True)
    with pytest.raises(ValueError, match=r"X\.y must be positive"):
        check_positive_int("X", "y", 0)
    with pytest.raises(TypeError, match=r"X\.y must be an int or None"):
        check_positive_int("X", "y", True)


# -- FlashAttentionConfig -------------------------------------------------------------------------


def test_flash_config_defaults():
    cfg = FlashAttentionConfig()
    assert cfg.platform == "auto"
    assert cfg.backend == "any"
    assert cfg.fwd_params is None
    assert cfg.bwd_params is None
    assert FlashAttentionConfig.op_name == "flash_attention"
    assert isinstance(cfg, OpConfig)
    assert ejkernel.FlashAttentionConfig is FlashAttentionConfig


@pytest.mark.parametrize(
    "platform, expected",
    [
        (Platform.XLA, "xla"),
        (Platform.TRITON, "triton"),
        (Platform.PALLAS, "pallas"),
        (Platform.CUDA, "cuda"),
        ("XLA", "xla"),
        ("Triton", "triton"),
        ("AUTO", "auto"),
        ("auto", "auto"),
        ("My_Impl", "my_impl"),  # a registered implementation's name
    ],
)
def test_platform_normalization(platform, expected):
    cfg = FlashAttentionConfig(platform=platform)
    assert cfg.platform == expected
    assert type(cfg.platform) is str  # not the enum


@pytest.mark.parametrize(
    "backend, expected",
    [
        (Backend.GPU, "gpu"),
        (Backend.TPU, "tpu"),
        (Backend.CPU, "cpu"),
        (Backend.ANY, "any"),
        ("GPU", "gpu"),
        ("Cpu", "cpu"),
        ("ANY", "any"),
    ],
)
def test_backend_normalization(backend, expected):
    cfg = FlashAttentionConfig(backend=backend)
    assert cfg.backend == expected
    assert type(cfg.backend) is str


def test_normalized_configs_are_equal():
    a = FlashAttentionConfig(platform=Platform.XLA, backend=Backend.CPU)
    b = FlashAttentionConfig(platform="XLA", backend="CPU")
    c = FlashAttentionConfig(platform="xla", backend="cpu")
    assert a == b == c
    assert hash(a) == hash(b) == hash(c)
    assert json.dumps(a.to_dict()) == json.dumps(c.to_dict())


@pytest.mark.parametrize("backend", ["cuda", "xla", "", "gpus", "auto", "rocm"])
def test_bad_backend(backend):
    with pytest.raises(ValueError, match="backend"):
        FlashAttentionConfig(backend=backend)


@pytest.mark.parametrize("field", ["platform", "backend"])
@pytest.mark.parametrize("value", [None, 1, 1.0, b"xla", ["xla"]])
def test_non_str_platform_or_backend(field, value):
    with pytest.raises(TypeError, match=field):
        FlashAttentionConfig(**{field: value})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"fwd_params": BwdParams(q_blocksize=64)},
        {"bwd_params": FwdParams(q_blocksize=64)},
        {"bwd_params": 64},
    ],
)
def test_params_of_the_wrong_type(kwargs):
    with pytest.raises(TypeError, match=next(iter(kwargs))):
        FlashAttentionConfig(**kwargs)


def test_params_given_as_dicts_are_converted():
    """A nested config given as a dict (as JSON gives it back) becomes its class, validated."""
    assert FlashAttentionConfig(fwd_params={"q_blocksize": 64}).fwd_params == FwdParams(q_blocksize=64)
    with pytest.raises(ValueError, match="num_warps"):
        FlashAttentionConfig(bwd_params={"num_warps": 3})


def test_flash_config_frozen():
    cfg = FlashAttentionConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.platform = "xla"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.fwd_params = FwdParams()  # type: ignore[misc]


FULL = FlashAttentionConfig(
    platform="xla",
    backend="cpu",
    fwd_params=FwdParams(q_blocksize=128, kv_blocksize=64, num_warps=4, num_stages=2),
    bwd_params=BwdParams(q_blocksize=64, kv_blocksize=32, num_warps=8, num_stages=1),
)


@pytest.mark.parametrize(
    "cfg",
    [
        FlashAttentionConfig(),
        FlashAttentionConfig(platform=Platform.TRITON, backend=Backend.GPU),
        FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=64)),
        FlashAttentionConfig(bwd_params=BwdParams(num_stages=3)),
        FULL,
    ],
    ids=["default", "enums", "fwd-only", "bwd-only", "full"],
)
def test_flash_config_round_trip(cfg):
    d = cfg.to_dict()
    assert set(d) == {"platform", "backend", "fwd_params", "bwd_params"}
    assert FlashAttentionConfig.from_dict(d) == cfg
    through_json = json.loads(json.dumps(d))
    back = FlashAttentionConfig.from_dict(through_json)
    assert back == cfg
    assert hash(back) == hash(cfg)
    assert back.to_dict() == d
    assert type(back.fwd_params) is type(cfg.fwd_params)
    assert type(back.bwd_params) is type(cfg.bwd_params)


def test_flash_config_to_dict_is_plain_json():
    d = FULL.to_dict()
    assert d == {
        "platform": "xla",
        "backend": "cpu",
        "fwd_params": {"q_blocksize": 128, "kv_blocksize": 64, "num_warps": 4, "num_stages": 2},
        "bwd_params": {"q_blocksize": 64, "kv_blocksize": 32, "num_warps": 8, "num_stages": 1},
    }
    assert json.loads(json.dumps(d)) == d
    enum_cfg = FlashAttentionConfig(platform=Platform.XLA, backend=Backend.ANY).to_dict()
    assert type(enum_cfg["platform"]) is str
    assert type(enum_cfg["backend"]) is str


def test_flash_config_from_partial_dict():
    assert FlashAttentionConfig.from_dict({}) == FlashAttentionConfig()
    cfg = FlashAttentionConfig.from_dict({"fwd_params": {"q_blocksize": 32}})
    assert cfg == FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=32))
    assert isinstance(cfg.fwd_params, FwdParams)
    cfg = FlashAttentionConfig.from_dict({"bwd_params": {"kv_blocksize": 16}, "platform": "XLA"})
    assert cfg == FlashAttentionConfig(platform="xla", bwd_params=BwdParams(kv_blocksize=16))
    assert isinstance(cfg.bwd_params, BwdParams)


@pytest.mark.parametrize(
    "data, error, match",
    [
        ({"block_q": 64}, ValueError, "unknown fields"),
        ({"fwd_params": {"q_blocksize": 64}, "extra": 1}, ValueError, "extra"),
        ({"fwd_params": {"block_m": 64}}, ValueError, "unknown fields"),
        ({"fwd_params": {"num_warps": 5}}, ValueError, "num_warps"),
        ({"fwd_params": {"q_blocksize": 64.0}}, TypeError, "q_blocksize"),
        ({"backend": "npu"}, ValueError, "backend"),
        ({"platform": 3}, TypeError, "platform"),
        ({"fwd_params": 64}, TypeError, "fwd_params"),
    ],
)
def test_flash_config_from_bad_dict(data, error, match):
    with pytest.raises(error, match=match):
        FlashAttentionConfig.from_dict(data)


def test_from_dict_names_the_unknown_fields():
    with pytest.raises(ValueError, match=re.escape("FlashAttentionConfig.from_dict: unknown fields ['alpha', 'zeta']")):
        FlashAttentionConfig.from_dict({"alpha": 1, "zeta": 2})


def test_from_dict_needs_a_dict():
    with pytest.raises(TypeError, match="expects a dict"):
        FlashAttentionConfig.from_dict([("platform", "xla")])  # type: ignore[arg-type]


def test_filled_from_fills_none_fields():
    default = FULL
    partial = FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=32, num_warps=2))
    filled = partial.filled_from(default)
    assert filled.fwd_params == FwdParams(q_blocksize=32, kv_blocksize=64, num_warps=2, num_stages=2)
    assert filled.bwd_params == default.bwd_params  # a None nested field is taken whole
    assert isinstance(filled.fwd_params, FwdParams)
    assert isinstance(filled.bwd_params, BwdParams)
    # platform/backend are not taken from the default
    assert (filled.platform, filled.backend) == ("auto", "any")
    # the originals are untouched
    assert partial == FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=32, num_warps=2))
    assert default == FULL


def test_filled_from_keeps_set_fields():
    assert FULL.filled_from(FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=8))) == FULL
    assert FULL.filled_from(FlashAttentionConfig()) == FULL
    cfg = FlashAttentionConfig(platform="xla", bwd_params=BwdParams(num_stages=4))
    filled = cfg.filled_from(FlashAttentionConfig(backend="gpu", bwd_params=BwdParams(num_stages=1, num_warps=4)))
    assert filled == FlashAttentionConfig(platform="xla", bwd_params=BwdParams(num_stages=4, num_warps=4))


def test_filled_from_an_empty_default_changes_nothing():
    partial = FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=32))
    assert partial.filled_from(FlashAttentionConfig()) == partial
    assert FlashAttentionConfig().filled_from(FlashAttentionConfig()) == FlashAttentionConfig()


def test_filled_from_another_config_class():
    with pytest.raises(TypeError, match="cannot fill FlashAttentionConfig from PageAttentionConfig"):
        FlashAttentionConfig().filled_from(PageAttentionConfig())
    with pytest.raises(TypeError, match="cannot fill PageAttentionConfig from FlashAttentionConfig"):
        PageAttentionConfig().filled_from(FlashAttentionConfig())
    with pytest.raises(TypeError):
        FlashAttentionConfig().filled_from(None)  # type: ignore[arg-type]


def test_tuning_fields():
    tf = FULL.tuning_fields()
    assert tf == {
        "fwd_params": {"q_blocksize": 128, "kv_blocksize": 64, "num_warps": 4, "num_stages": 2},
        "bwd_params": {"q_blocksize": 64, "kv_blocksize": 32, "num_warps": 8, "num_stages": 1},
    }
    assert "platform" not in tf and "backend" not in tf
    assert FlashAttentionConfig(platform="triton", backend="gpu").tuning_fields() == {
        "fwd_params": None,
        "bwd_params": None,
    }
    assert PageAttentionConfig(platform="xla", num_splits=2).tuning_fields() == {
        "tokens_per_block": None,
        "num_splits": 2,
        "num_warps": None,
        "num_stages": None,
        "pages_per_compute_block": None,
    }
    # the same tuning on two platforms
    a = dataclasses.replace(FULL, platform="triton", backend="gpu")
    assert a.tuning_fields() == FULL.tuning_fields()


# -- PageAttentionConfig --------------------------------------------------------------------------


def test_page_config_defaults():
    cfg = PageAttentionConfig()
    assert (cfg.platform, cfg.backend, cfg.tokens_per_block, cfg.num_splits) == ("auto", "any", None, None)
    assert PageAttentionConfig.op_name == "page_attention"
    assert ejkernel.PageAttentionConfig is PageAttentionConfig


@pytest.mark.parametrize("n", [1, 2, 7, 16])
def test_page_config_num_splits_valid(n):
    assert PageAttentionConfig(num_splits=n).num_splits == n


@pytest.mark.parametrize("n, error", [(-1, ValueError), (-2, ValueError), (2.0, TypeError), (True, TypeError)])
def test_page_config_num_splits_invalid(n, error):  # 0 is valid: "the implementation decides"
    with pytest.raises(error, match="num_splits"):
        PageAttentionConfig(num_splits=n)


def test_page_config_declares_its_own_tile_fields():
    assert PageAttentionConfig(tokens_per_block=16).tokens_per_block == 16
    with pytest.raises(TypeError, match="tokens_per_block"):
        PageAttentionConfig(tokens_per_block=16.0)
    with pytest.raises(ValueError, match="num_warps"):
        PageAttentionConfig(num_warps=3)  # a power of two
    with pytest.raises(TypeError, match="fwd_params"):
        PageAttentionConfig(fwd_params=FwdParams(kv_blocksize=16))  # attention tiling is not its config


@pytest.mark.parametrize(
    "cfg",
    [
        PageAttentionConfig(),
        PageAttentionConfig(num_splits=4),
        PageAttentionConfig(platform=Platform.XLA, backend="CPU", tokens_per_block=32, num_splits=1, num_warps=4),
    ],
    ids=["default", "splits", "full"],
)
def test_page_config_round_trip(cfg):
    d = cfg.to_dict()
    assert set(d) == {
        "platform",
        "backend",
        "tokens_per_block",
        "num_splits",
        "num_warps",
        "num_stages",
        "pages_per_compute_block",
    }
    back = PageAttentionConfig.from_dict(json.loads(json.dumps(d)))
    assert back == cfg
    assert hash(back) == hash(cfg)


def test_page_config_from_bad_dict():
    with pytest.raises(ValueError, match="num_splits"):
        PageAttentionConfig.from_dict({"num_splits": -1})
    with pytest.raises(ValueError, match="unknown fields"):
        PageAttentionConfig.from_dict({"bwd_params": {}})


def test_page_config_filled_from():
    cfg = PageAttentionConfig(tokens_per_block=16)
    default = PageAttentionConfig(tokens_per_block=64, num_warps=4, num_splits=8)
    assert cfg.filled_from(default) == PageAttentionConfig(tokens_per_block=16, num_warps=4, num_splits=8)
    assert PageAttentionConfig(num_splits=1).filled_from(default).num_splits == 1


# -- hashing --------------------------------------------------------------------------------------


def test_configs_as_dict_keys_and_in_sets():
    a1 = FlashAttentionConfig(platform="XLA", fwd_params=FwdParams(q_blocksize=64))
    a2 = FlashAttentionConfig(platform=Platform.XLA, fwd_params=FwdParams(q_blocksize=64))
    a3 = FlashAttentionConfig.from_dict(json.loads(json.dumps(a1.to_dict())))
    b = FlashAttentionConfig(platform="xla", fwd_params=FwdParams(q_blocksize=32))
    p = PageAttentionConfig(platform="xla")
    assert a1 == a2 == a3
    assert hash(a1) == hash(a2) == hash(a3)
    assert a1 != b
    assert FlashAttentionConfig() != PageAttentionConfig()  # same fields set, different classes
    table = {a1: "a", b: "b", p: "p"}
    assert table[a2] == "a"
    assert table[a3] == "a"
    assert table[PageAttentionConfig(platform="XLA")] == "p"
    assert len({a1, a2, a3, b, p, PageAttentionConfig(platform=Platform.XLA)}) == 3
    assert len({FlashAttentionConfig(), PageAttentionConfig()}) == 2


def test_filled_configs_dedupe_in_sets():
    default = FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=64, kv_blocksize=64))
    candidates = [
        FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=64)).filled_from(default),
        FlashAttentionConfig(fwd_params=FwdParams(kv_blocksize=64)).filled_from(default),
        FlashAttentionConfig().filled_from(default),
        default,
    ]
    assert len(set(candidates)) == 1
