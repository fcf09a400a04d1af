"""Chunked gated linear attention in Triton, shared by ``gla_attention``, ``lightning_attention``,
``recurrent_attention`` and ``state_space_v2``: ``_kernel.py`` (the four kernels), ``_call.py``
(chunk tables, launches, custom VJP), ``impl.py`` (the implementations' shared declaration)."""
