"""Heuristics of the XLA ``attention``: nothing to tune."""

from __future__ import annotations

from ejkernel.ops.attention import AttentionConfig


def heuristic() -> AttentionConfig:
    return AttentionConfig()
