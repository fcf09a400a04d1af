"""The ``recurrent_attention`` op: linear attention gated per key channel, per value channel and
per head."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ..families.linear_attention import LinearAttentionArgs, LinearAttentionConfig, LinearAttentionOp

__all__ = ["RecurrentAttention", "RecurrentAttentionConfig"]


@dataclasses.dataclass(frozen=True)
class RecurrentAttentionConfig(LinearAttentionConfig):
    __doc__ = "Config of ``recurrent_attention``. " + (LinearAttentionConfig.__doc__ or "")


class RecurrentAttention(LinearAttentionOp):
    """The ``recurrent_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "recurrent_attention"
    version = "1"
    config_cls = RecurrentAttentionConfig
    # The spec's module example: ``out, new_state = recurrent_attention(q, k, v, state=previous)``.
    param_aliases: ClassVar[dict[str, str]] = {"state": "initial_state"}

    def bind(self, params: dict[str, Any]) -> LinearAttentionArgs:
        if params.get("state") is not None:  # the streaming form returns the new state too
            params = {**params, "return_state": True}
        return super().bind(params)  # type: ignore[return-value]
