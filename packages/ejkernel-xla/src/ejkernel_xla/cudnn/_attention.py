"""What the cuDNN dense attention implementations share: the declaration of what cuDNN computes
as the op defines it, and the call of ``jax.nn.dot_product_attention(implementation="cudnn")``.

The declaration mirrors the checks of ``jax._src.cudnn.fused_attention_stablehlo`` (``check_layout``,
``check_is_flash_attention``) and of ``jax.nn.dot_product_attention``, so that a call cuDNN would
reject at trace time is declined before anything is traced, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax

from ejkernel.ops import DeviceInfo, SizeRule
from ejkernel.ops.families.attention import AttentionArgs, AttentionImpl

__all__ = ["CudnnAttention", "cudnn_version", "dot_product_attention", "jax_nn_arguments"]

# cuDNN's flash attention on Ampere and Ada: head dims up to 128; from Hopper on, up to 256.
_HOPPER = (9, 0)
_HEAD_DIM_BEFORE_HOPPER = 128
_SEQ_RULE = "a multiple of 8 (other lengths failed against the reference on an H200)"


def cudnn_version() -> int | None:
    """The cuDNN version this jaxlib loads (e.g. ``91000`` for 9.10), or ``None`` without one."""
    try:
        from jax._src.lib import cuda_versions
    except ImportError:  # a jaxlib without its CUDA plugin
        return None
    if cuda_versions is None:
        return None
    try:
        return int(cuda_versions.cudnn_get_version())
    except Exception:  # the plugin is there but cannot load libcudnn
        return None


def jax_nn_arguments(args: AttentionArgs) -> dict[str, Any]:
    """The keyword arguments of ``jax.nn.dot_product_attention`` that compute ``args`` (accepted
    by :class:`CudnnAttention`), besides query, key and value.

    A window whose right side is 0 is causal, so it runs as cuDNN's causal mask with its left
    window (``local_window_size=(left, 0)``: query ``i`` sees keys ``i - left .. i``); with
    ``causal`` the right side of any window is cut at the diagonal anyway.
    """
    causal, window = args.causal, None
    if args.sliding_window is not None:
        causal, window = True, (int(args.sliding_window[0]), 0)
    return {
        "scale": float(args.softmax_scale),
        "is_causal": bool(causal),
        "local_window_size": window,
        "implementation": "cudnn",
    }


def dot_product_attention(args: AttentionArgs) -> jax.Array:
    """``args`` through cuDNN. The gradient is cuDNN's own backward (``jax.nn``'s custom VJP)."""
    return jax.nn.dot_product_attention(args.query, args.key, args.value, **jax_nn_arguments(args))


class CudnnAttention(AttentionImpl):
    """Dense attention on cuDNN's fused flash attention (forward and backward), for NVIDIA GPUs of
    compute capability 8.0 and later, float16 and bfloat16.

    It has nothing to tune: cuDNN picks its kernels. The config's tiling fields (``fwd_params``,
    ``bwd_params``) do not apply to it.
    """

    version = "1"
    device_requirement = "an NVIDIA GPU"
    dtypes = ("float16", "bfloat16")
    allowed_sizes: ClassVar[Mapping[str, Any]] = {
        "head_dim": SizeRule("a multiple of 8 up to 256", lambda n: n % 8 == 0 and 0 < n <= 256),
        # On an H200 (jax 0.11.2) every case with a length off a multiple of 8 (17; 77 by 130)
        # failed test_cudnn_gpu.py and the call-modes test, every other length passed; cuDNN's
        # frontend answers such reports with "not a desirable multiple" (cudnn-frontend issue 160).
        "seq_q": SizeRule(_SEQ_RULE, lambda n: n % 8 == 0),
        "seq_k": SizeRule(_SEQ_RULE, lambda n: n % 8 == 0),
    }
    unsupported: ClassVar[Mapping[str, str]] = {
        "value_head_dim": "cuDNN through jax.nn.dot_product_attention needs the value head dim equal to the query's",
        "logits_soft_cap": "cuDNN's fused attention has no logits soft cap",
        "softmax_aux": "cuDNN's fused attention has no attention sinks (softmax_aux)",
        "dropout": (
            "dropout is not supported: cuDNN draws its own mask from its own generator, not the op's "
            "keep mask, so its results would differ from every other implementation's"
        ),
        "bias": (
            "an additive bias is not supported: cuDNN computes the bias gradient only for some bias "
            "shapes and even sequence lengths, and whether a call will be differentiated is unknown"
        ),
        "segment_ids": (
            "segment ids (MaskInfo segments, padding, per-example lengths) are not supported: cuDNN takes "
            "per-example lengths of trailing padding only, and traced segment ids cannot be checked to be of "
            "that form before tracing"
        ),
        "attention_mask": (
            "pairwise masks are not supported: cuDNN adds them as a large negative bias, so a fully "
            "masked row would average the values instead of returning zeros"
        ),
        "varlen": "packed sequences (cum_seqlens_q/k) are not supported: jax.nn.dot_product_attention has no packed layout",
        "position_offset": "position_offset (ring attention's window blocks) is not supported",
        "aligned_cross": (
            "causal masks and windows with seq_q != seq_k are not supported: cuDNN aligns them top-left "
            "(query i at key i), the op bottom-right"
        ),
        "window_right": (
            "a window reaching right of the diagonal without causal is not supported: cuDNN's window "
            "is causal (it reaches left only)"
        ),
    }

    def available(self, device: DeviceInfo) -> str | None:
        cc = device.compute_capability
        if cc is None:  # a GPU without CUDA compute capability (ROCm)
            return f"needs an NVIDIA GPU; this call runs on {device.kind}"
        if cc < (8, 0):
            return f"cuDNN's flash attention needs compute capability >= 8.0, this GPU has {cc}"
        version = cudnn_version()
        if version is None:
            return "this jaxlib loads no cuDNN (install a CUDA jax: pip install 'jax[cuda13]')"
        if cc == (10, 3) and version < 91100:
            return f"compute capability 10.3 needs cuDNN >= 9.11, this jaxlib loads {version}"
        return None

    def decline(self, args: AttentionArgs, device: DeviceInfo) -> str | None:
        cc = device.compute_capability
        if cc is not None and cc < _HOPPER and args.head_dim > _HEAD_DIM_BEFORE_HOPPER:
            return (
                f"cuDNN supports head_dim up to {_HEAD_DIM_BEFORE_HOPPER} before Hopper (compute capability "
                f"{_HOPPER}), got {args.head_dim} on a GPU of compute capability {cc}"
            )
        return None

    def run(self, args: AttentionArgs, cfg: Any) -> jax.Array:
        return dot_product_attention(args)
