from .impl import TritonMeanPooling

__all__ = ["TritonMeanPooling"]
