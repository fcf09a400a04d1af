"""Where the core hands the names of earlier ejkernel releases to :mod:`ejkernel.compat`.

``import ejkernel`` does not import the compat package. The core knows only the names below,
and loads the package the first time code uses one of them; the package then installs what the
name needs (the earlier ``MaskInfo`` members, the translation of earlier op config fields).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = [
    "MASK_INFO_NAMES",
    "OPS_MAPPED_NAMES",
    "OPS_NAMES",
    "Deferred",
    "config_fields",
    "install_config_fields",
    "load",
]

#: Names of the earlier ``ejkernel.ops`` API that map onto this one (``ejkernel.ops`` lists them in
#: its ``__all__``; ``ejkernel.compat.ops`` serves them).
OPS_MAPPED_NAMES = frozenset(
    {
        "AutotunePolicy",
        "Cfg",
        "ConfigChooser",
        "Invocation",
        "Kernel",
        "Out",
        "Tuner",
        "abstractify",
        "autotune",
        "default_key_builder_with_sharding",
        "device_kind",
        "forward_autotune_only",
        "from_json",
        "get_device_platform",
        "overlay_cache",
        "pmap_with_config",
        "policy_override",
        "sharding_fingerprint",
        "short_hash",
        "stable_json",
        "to_json",
        "vmap_with_config",
    }
)
#: ... and those refused with what to use instead; ``ejkernel.compat.ops`` serves both kinds.
OPS_NAMES = OPS_MAPPED_NAMES | frozenset(
    {
        "AutotuneData",
        "AutotuningResult",
        "Entry",
        "FNAutotuner",
        "Measurement",
        "autotune_recorded",
        "extract_labels_from_hlo_text",
        "find_labels_in_lowered",
        "get_invocations",
        "label",
        "labels_to_configs",
        "log_autotune_progress",
        "record_invocation",
        "set_autotune_progress",
    }
)

#: ``MaskInfo`` members of earlier releases (``ejkernel.compat.mask_info`` defines them).
MASK_INFO_NAMES = frozenset(
    {
        "apply_causal",
        "apply_chunked",
        "apply_sliding_window",
        "bias",
        "create_bias",
        "create_chunked_attention_mask",
        "dynamic_init",
        "from_random",
        "get_or_compute_attention_mask",
        "get_or_compute_positions",
        "get_or_compute_segment_ids",
        "get_qkv_masks",
        "is_multi_sequence",
        "is_self_attention",
        "kv_len",
        "materialize_attention_mask",
        "materialize_segment_ids",
        "q_attention_mask",
        "q_len",
        "q_position_ids",
        "replace",
        "shape",
        "to_dtype",
    }
)


def load() -> ModuleType:
    """Import :mod:`ejkernel.compat` (it installs itself on its first import)."""
    return importlib.import_module("ejkernel.compat")


class Deferred:
    """A class attribute of earlier releases that stands in until :mod:`ejkernel.compat` replaces
    it: the first read (on the class or an instance) loads the package, then reads the attribute
    it installed."""

    def __init__(self, owner: type, name: str):
        self.owner, self.name = owner, name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        load()
        if vars(self.owner).get(self.name) is self:
            raise AttributeError(f"{self.owner.__name__}.{self.name}: ejkernel.compat did not install it")
        return getattr(objtype if obj is None else obj, self.name)


_config_fields: Callable[[type, dict[str, Any]], dict[str, Any]] | None = None


def install_config_fields(translate: Callable[[type, dict[str, Any]], dict[str, Any]]) -> None:
    """Set what maps an op config's keywords of earlier releases onto its fields."""
    global _config_fields
    _config_fields = translate


def config_fields(cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` of ``cls(...)``, some of them not fields of ``cls``, with earlier releases'
    field names mapped onto its fields (``TypeError`` for a name that is neither)."""
    if _config_fields is None:
        load()
    assert _config_fields is not None, "ejkernel.compat did not install the config field translation"
    return _config_fields(cls, kwargs)
