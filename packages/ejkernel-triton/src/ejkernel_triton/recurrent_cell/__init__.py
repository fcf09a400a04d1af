from .impl import TritonRecurrentCell

__all__ = ["TritonRecurrentCell"]
