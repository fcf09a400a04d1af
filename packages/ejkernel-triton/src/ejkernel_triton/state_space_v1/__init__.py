from .impl import TritonStateSpaceV1

__all__ = ["TritonStateSpaceV1"]
