"""The ``gla_attention`` op: gated linear attention with per-key-channel log gates."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..families.linear_attention import LinearAttentionConfig, LinearAttentionOp

__all__ = ["GLAttention", "GLAttentionConfig"]


@dataclasses.dataclass(frozen=True)
class GLAttentionConfig(LinearAttentionConfig):
    __doc__ = "Config of ``gla_attention``. " + (LinearAttentionConfig.__doc__ or "")


class GLAttention(LinearAttentionOp):
    """The ``gla_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "gla_attention"
    version = "1"
    config_cls = GLAttentionConfig
    # The spec's module example calls ``gla_attention(query, key, value, gate=...)``.
    param_aliases: ClassVar[dict[str, str]] = {"gate": "g"}

    def gates(self, params):
        return {"g": params.get("g"), "g_gamma": params.get("g_gamma")}
