"""Mosaic GPU kernels (``jax.experimental.pallas.mosaic_gpu``): none yet.

Kernels for NVIDIA GPUs written with Pallas' Mosaic GPU backend belong here, one folder per op as
in ``ejkernel_pallas.tpu`` (``gpu/flash_attention/``, ...), registered from
:func:`ejkernel_pallas.register` with ``Backend.GPU`` under their own names (e.g.
``name="pallas_mosaic_gpu"``) so they can sit next to the TPU implementations.
"""
