"""Implementations of ops, and what each one declares it supports.

A backend subclasses :class:`KernelImpl` (or its op family's base, e.g.
:class:`~ejkernel.ops.families.attention.AttentionImpl`) and registers it. What it cannot run is
*declared*, not decided call by call:

- ``backend`` (set at registration) and :meth:`KernelImpl.available`: the device and environment
  (a GPU of compute capability 8.0+, ``triton`` installed, ...);
- ``dtypes``: the input dtypes it runs (``None``: all);
- ``max_sizes``: axis name → largest size (e.g. ``{"head_dim": 256}``);
- ``allowed_sizes``: axis name → the sizes it runs: a list (``{"head_dim": (64, 128, 256)}``) or a
  :class:`SizeRule` (``SizeRule("at most 128 or a multiple of 128", lambda n: ...)``);
- ``unsupported``: feature name → reason, for the features of its op
  (:attr:`~ejkernel.ops.op.Op.features`) it does not implement.

A GPU kernel also declares what a config needs of the device (:meth:`KernelImpl.resources`:
shared memory, threads, registers per block): :func:`check_config` checks it against the
device's limits (:mod:`ejkernel.ops.resources`) for every config before it runs.

:func:`declared_decline` turns the declaration into a decline reason; the registry uses it for
every call, and the conformance suite uses it to decide, independently of the implementation's
code, which cases must raise :class:`~ejkernel.errors.UnsupportedError` and which must match the
reference. :meth:`KernelImpl.decline` remains for reasons no declaration can state; a decline
there of a case the declaration covers fails the conformance suite.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import jax.numpy as jnp

from .args import Args
from .config import OpConfig
from .device import DeviceInfo
from .op import get_op, op_class
from .resources import Need, check_fits

__all__ = ["Backend", "KernelImpl", "Platform", "SizeRule", "check_config", "declared_decline"]

_DIRECT = "<direct>"


class Platform(enum.StrEnum):
    """The technology an implementation is written in."""

    TRITON = "triton"
    PALLAS = "pallas"
    CUDA = "cuda"
    XLA = "xla"
    CUDNN = "cudnn"  # NVIDIA's fused attention library, through jax.nn.dot_product_attention


class Backend(enum.StrEnum):
    """The device kind an implementation targets; ``ANY`` runs on every device."""

    GPU = "gpu"
    TPU = "tpu"
    CPU = "cpu"
    ANY = "any"


@dataclasses.dataclass(frozen=True)
class SizeRule:
    """A declared rule on an axis's size that no finite list states: ``allows(n)``, described in
    words for the decline reason (``"supports head_dim <description>, got n"``)."""

    description: str
    allows: Callable[[int], bool]


class KernelImpl:
    """One implementation of one op. Backends subclass it and register it.

    The registry sets ``op_name``, ``platform``, ``backend``, ``priority``, ``name`` and
    ``plugin`` at registration. Subclasses declare ``dtypes``, ``max_sizes`` and
    ``unsupported`` (see the module docstring) and override:

    - :meth:`available`, when the device or the environment can rule it out;
    - :meth:`heuristic_cfg`, a config for any call it accepts (pure function of shapes, dtype and
      device), and :meth:`candidate_cfgs`, the autotuning search space;
    - :meth:`validate_cfg`, to reject configs it cannot run;
    - :meth:`resources`, what each kernel it launches needs of the GPU with a config (checked
      against the device before anything is compiled: :func:`check_config`);
    - :meth:`run`, which computes the op from the op's bound arguments and a complete config.

    ``version`` enters cache keys: bump it when a change makes tuned configs stale.
    ``device_requirement`` words the device a non-``ANY`` implementation needs, for the decline
    reason on other devices (default: "a GPU device", "a TPU device", ...).
    """

    op_name: str = ""
    platform: Platform = Platform.XLA
    backend: Backend = Backend.ANY
    priority: int = 0
    name: str = ""
    plugin: str = _DIRECT
    version: str = "1"
    device_requirement: str | None = None
    dtypes: ClassVar[Sequence[str] | None] = None
    max_sizes: ClassVar[Mapping[str, int]] = {}
    allowed_sizes: ClassVar[Mapping[str, Sequence[int] | SizeRule]] = {}
    unsupported: ClassVar[Mapping[str, str]] = {}
    test_configs: ClassVar[Mapping[str, OpConfig]] = {}

    @property
    def algorithm(self) -> str:
        """Earlier name of :attr:`op_name`."""
        return self.op_name

    def available(self, device: DeviceInfo) -> str | None:
        """Why this implementation cannot run on ``device`` at all (``None``: it can). The
        registry has already checked the device kind against ``backend``."""
        return None

    def decline(self, args: Any, device: DeviceInfo) -> str | None:
        """A reason beyond the declaration to refuse ``args`` (``None``: accept). Prefer declaring
        ``unsupported`` / ``dtypes`` / ``max_sizes``: the conformance suite treats a decline here
        of a case the declaration supports as a failure."""
        return None

    def heuristic_cfg(self, args: Any, device: DeviceInfo) -> OpConfig:
        raise NotImplementedError(f"{type(self).__name__} defines no heuristic config")

    def candidate_cfgs(self, args: Any, device: DeviceInfo) -> Sequence[OpConfig]:
        """Configs that autotuning times; by default only the heuristic one."""
        return [self.heuristic_cfg(args, device)]

    def validate_cfg(self, cfg: OpConfig, args: Any, device: DeviceInfo) -> None:
        """Raise ``ValueError`` if ``cfg`` (complete) cannot run ``args``; default: accept."""

    def resources(self, cfg: OpConfig, args: Any, device: DeviceInfo) -> Sequence[Need]:
        """What one block of each kernel that ``run(args, cfg)`` launches (forward and backward)
        needs on ``device`` (an NVIDIA GPU; its architecture may change the need): shared memory
        from tiles, pipeline stages and dtypes, threads, registers where bounded. An upper bound of
        what the compiler allocates. Default: nothing declared (nothing to check)."""
        return ()

    def run(self, args: Any, cfg: OpConfig) -> Any:
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the op through this implementation only: ``impl(q, k, v, causal=True)``."""
        kwargs["platform"] = self.name
        return get_op(self.op_name).function(*args, **kwargs)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.op_name}/{self.name} platform={self.platform.value} "
            f"backend={self.backend.value} priority={self.priority} plugin={self.plugin}>"
        )


class FunctionImpl(KernelImpl):
    """Adapter for registering a plain function ``fn(args, cfg) -> out``."""

    def __init__(self, fn: Any):
        self.fn = fn

    def heuristic_cfg(self, args: Any, device: DeviceInfo) -> OpConfig:
        return op_class(self.op_name).config_cls()

    def run(self, args: Any, cfg: OpConfig) -> Any:
        return self.fn(args, cfg)


def check_config(impl: KernelImpl, cfg: OpConfig, args: Any, device: DeviceInfo) -> None:
    """What every complete config goes through before ``impl`` runs it: the implementation's own
    :meth:`~KernelImpl.validate_cfg`, then its declared :meth:`~KernelImpl.resources` against the
    device's limits. Raises ``ValueError`` (naming the kernel, its need and the limit)."""
    impl.validate_cfg(cfg, args, device)
    check_fits(impl, cfg, args, device)


def declared_decline(impl: KernelImpl, args: Args) -> str | None:
    """Why ``impl``'s declaration (``dtypes``, ``max_sizes``, ``allowed_sizes``, ``unsupported``)
    rules out ``args``.

    Computed from the declaration and the op's features only, never
    by running the implementation's own code: the registry and the conformance suite share it.
    """
    dtype = getattr(args, "dtype", None)
    if impl.dtypes is not None and dtype is not None:
        name = jnp.dtype(dtype).name
        if name not in impl.dtypes:
            return f"supports {', '.join(impl.dtypes)} inputs, got {name}"
    for axis, limit in impl.max_sizes.items():
        try:
            n = args.size(axis)
        except ValueError:
            continue
        if n > limit:
            return f"supports {axis} up to {limit}, got {n}"
    for axis, sizes in impl.allowed_sizes.items():
        try:
            n = args.size(axis)
        except ValueError:
            continue
        if isinstance(sizes, SizeRule):
            if not sizes.allows(n):
                return f"supports {axis} {sizes.description}, got {n}"
        elif n not in sizes:
            return f"supports {axis} in {tuple(sizes)}, got {n}"
    if impl.unsupported:
        used = get_op(impl.op_name).features_of(args)
        for feature in sorted(used):
            if feature in impl.unsupported:
                return impl.unsupported[feature]
    return None
