"""The XLA ``gated_delta_rule`` implementation: the shared delta rule (``ejkernel_xla._delta``)."""

from __future__ import annotations

from typing import ClassVar

from ejkernel.ops.gated_delta_rule import GatedDeltaRuleConfig

from .._delta import XlaDeltaRule


class XlaGatedDeltaRule(XlaDeltaRule):
    """``gated_delta_rule`` in plain JAX (chunked WY algorithm; the step path for decode), any device."""

    config_cls = GatedDeltaRuleConfig
    # 16-token chunks: many chunks (and several per sequence) on the small conformance inputs. The
    # token-by-token path (chunked=False) is the same function for both delta-rule ops: it runs
    # through kernel_delta_attention's cases (scalar decay and GVA among them).
    test_configs: ClassVar[dict[str, GatedDeltaRuleConfig]] = {
        "chunk16": GatedDeltaRuleConfig(chunk_size=16, chunked=True),
    }
