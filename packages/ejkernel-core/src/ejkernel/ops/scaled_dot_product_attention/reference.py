"""The reference of ``scaled_dot_product_attention``: the dense attention reference."""

from ..flash_attention.reference import attention_reference as reference

__all__ = ["reference"]
