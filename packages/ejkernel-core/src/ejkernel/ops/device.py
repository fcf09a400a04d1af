"""The device a call runs on, and its fingerprint for config caches."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import Any

import jax

__all__ = ["DeviceInfo", "device_fingerprint", "device_for_arrays"]


def _jaxlib_version() -> str:
    try:
        import jaxlib

        return str(jaxlib.__version__)
    except Exception:  # pragma: no cover - jaxlib always ships with jax
        return "unknown"


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """What an implementation needs to know about the device it would run on.

    Attributes:
        platform: ``"cpu"``, ``"gpu"`` or ``"tpu"`` (ROCm and CUDA GPUs both say ``"gpu"``).
        kind: the JAX device kind, e.g. ``"cpu"``, ``"NVIDIA H200"``, ``"TPU v5 lite"``.
        compute_capability: ``(major, minor)`` on NVIDIA GPUs, else ``None``.
        runtime: jaxlib version and, on accelerators, the platform runtime version.
        sm_count: streaming multiprocessors on NVIDIA GPUs (the device's ``core_count``), else
            ``None``; not part of the fingerprint (the kind names the part).
    """

    platform: str
    kind: str
    compute_capability: tuple[int, int] | None = None
    runtime: str = ""
    sm_count: int | None = None

    @property
    def fingerprint(self) -> str:
        """A readable string that keys config caches: tuned configs do not travel across it."""
        parts = [self.platform, self.kind]
        if self.compute_capability is not None:
            parts.append(f"sm{self.compute_capability[0]}{self.compute_capability[1]}")
        parts.append(self.runtime)
        return "|".join(parts)

    @classmethod
    def from_device(cls, device: Any) -> DeviceInfo:
        return _device_info(device)


@functools.cache
def _device_info(device: Any) -> DeviceInfo:
    platform = str(device.platform).lower()
    if platform in ("cuda", "rocm"):
        platform = "gpu"
    cc = None
    raw_cc = getattr(device, "compute_capability", None)
    if raw_cc:
        try:
            major, minor = str(raw_cc).split(".")[:2]
            cc = (int(major), int(minor))
        except ValueError:
            cc = None
    runtime = f"jaxlib-{_jaxlib_version()}"
    if platform != "cpu":
        try:
            pv = str(device.client.platform_version).strip()
        except Exception:
            pv = ""
        if pv and pv != "<unknown>":
            runtime += f"/{pv.replace(' ', '-')}"
    sm_count = None
    if cc is not None:
        try:
            sm_count = int(getattr(device, "core_count", 0)) or None
        except (TypeError, ValueError):
            sm_count = None
    return DeviceInfo(
        platform=platform, kind=str(device.device_kind), compute_capability=cc, runtime=runtime, sm_count=sm_count
    )


def _default_device() -> Any:
    default = jax.config.jax_default_device
    if default is not None:
        if isinstance(default, str):
            return jax.devices(default)[0]
        return default
    return jax.devices()[0]


def device_for_arrays(arrays: Iterable[Any] = ()) -> DeviceInfo:
    """The device a call on ``arrays`` runs on.

    A concrete ``jax.Array`` tells its own device. Under ``jit`` (tracers) the call runs on the
    default device, which is what this returns then.
    """
    for x in arrays:
        if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
            try:
                devices = x.devices()
            except Exception:
                continue
            if devices:
                return _device_info(next(iter(devices)))
    return _device_info(_default_device())


def device_fingerprint(device: Any | None = None) -> str:
    """Fingerprint of ``device`` (a ``jax.Device``; default: the default device)."""
    return _device_info(device if device is not None else _default_device()).fingerprint
