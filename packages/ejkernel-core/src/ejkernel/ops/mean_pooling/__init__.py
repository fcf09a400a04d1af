"""``mean_pooling``: the mean of each sequence's valid tokens (dense, masked or packed)."""

from .api import mean_pooling
from .op import MeanPooling, MeanPoolingArgs, MeanPoolingConfig

__all__ = ["MeanPooling", "MeanPoolingArgs", "MeanPoolingConfig", "mean_pooling"]
