"""What a kernel config needs of an NVIDIA GPU, what the GPU has, and the check that one fits.

A GPU implementation declares, for a complete config and the call's bound arguments, what each
kernel it launches needs (:class:`Need`: shared memory and threads per block, registers per
thread where it bounds them) by overriding :meth:`~ejkernel.ops.KernelImpl.resources`. The
device's limits are a :class:`DeviceProfile`, taken from the device when there is one (its
compute capability and SM count) and otherwise from :data:`PROFILES`, keyed by compute
capability. Config resolution checks every config against the profile before anything is
compiled (:func:`check_fits`): an explicit ``cfg`` that does not fit is a ``ValueError`` naming the
kernel, its need and the limit; autotuning drops such candidates; a heuristic must never return
one (the suite walks every heuristic against every profile).

A declared need is an upper bound of what the compiler allocates, computed from tiles, pipeline
stages and dtypes; the suite compares it with Triton's compiled ``metadata.shared``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from .device import DeviceInfo

__all__ = ["PROFILES", "DeviceProfile", "Need", "check_fits", "profile_for", "unfit", "warpgroup_mma"]


@dataclasses.dataclass(frozen=True)
class DeviceProfile:
    """The per-block and per-SM limits of an NVIDIA GPU architecture (CUDA C++ Programming Guide,
    "Technical Specifications per Compute Capability").

    Attributes:
        name: ``"sm_90"``.
        compute_capability: ``(9, 0)``.
        shared_memory_per_block: the most dynamic shared memory one block may request (the opt-in
            maximum, ``cudaDevAttrMaxSharedMemoryPerBlockOptin``), bytes.
        shared_memory_per_sm: shared memory of one SM, bytes.
        reserved_shared_memory_per_block: what the system keeps of an SM's shared memory for each
            resident block (1 KiB from sm_80 on), bytes.
        registers_per_sm: 32-bit registers of one SM.
        registers_per_thread: the most registers one thread may use.
        threads_per_block: the most threads in one block.
        threads_per_sm: the most resident threads of one SM.
        sm_count: streaming multiprocessors: the device's own count when the profile comes from a
            device, else that of the architecture's reference part (``example``).
        example: a GPU of this architecture.
    """

    name: str
    compute_capability: tuple[int, int]
    shared_memory_per_block: int
    shared_memory_per_sm: int
    reserved_shared_memory_per_block: int
    threads_per_sm: int
    sm_count: int
    example: str
    registers_per_sm: int = 65536
    registers_per_thread: int = 255
    threads_per_block: int = 1024

    def blocks_per_sm(self, need: Need) -> int:
        """Blocks of a kernel with ``need`` that one SM holds at once (by shared memory, threads
        and, where declared, registers); 0 when one block does not fit."""
        if unfit_reason(need, self) is not None:
            return 0
        by_threads = self.threads_per_sm // max(need.threads, 1)
        by_smem = self.shared_memory_per_sm // (need.shared_memory + self.reserved_shared_memory_per_block)
        blocks = min(by_threads, by_smem)
        if need.registers is not None:
            blocks = min(blocks, self.registers_per_sm // (need.registers * need.threads))
        return blocks

    def describe(self) -> str:
        return f"{self.name} ({self.example})"


def _profile(cc: tuple[int, int], per_block_kib: int, per_sm_kib: int, threads_per_sm: int, sms: int, example: str):
    return DeviceProfile(
        name=f"sm_{cc[0]}{cc[1]}",
        compute_capability=cc,
        shared_memory_per_block=per_block_kib * 1024,
        shared_memory_per_sm=per_sm_kib * 1024,
        reserved_shared_memory_per_block=1024 if cc >= (8, 0) else 0,
        threads_per_sm=threads_per_sm,
        sm_count=sms,
        example=example,
    )


# Compute capability -> limits (CUDA C++ Programming Guide, table "Technical Specifications per
# Compute Capability"; the SM count is the named part's).
PROFILES: Mapping[tuple[int, int], DeviceProfile] = {
    p.compute_capability: p
    for p in (
        _profile((6, 0), 48, 64, 2048, 56, "Tesla P100"),
        _profile((7, 0), 96, 96, 2048, 80, "Tesla V100"),
        _profile((7, 5), 64, 64, 1024, 40, "Tesla T4"),
        _profile((8, 0), 163, 164, 2048, 108, "A100"),
        _profile((8, 6), 99, 100, 1536, 84, "A40"),
        _profile((8, 7), 163, 164, 2048, 16, "Jetson AGX Orin"),
        _profile((8, 9), 99, 100, 1536, 58, "L4"),
        _profile((9, 0), 227, 228, 2048, 132, "H100 SXM"),
        _profile((10, 0), 227, 228, 2048, 148, "B200"),
        _profile((12, 0), 99, 100, 1536, 170, "GeForce RTX 5090"),
    )
}
# An architecture not in the table: the smallest per-block shared memory of the sm_80+ parts.
_UNKNOWN = PROFILES[(8, 9)]


def profile_for(device: DeviceInfo) -> DeviceProfile | None:
    """The limits of ``device`` (``None`` when it is no NVIDIA GPU: nothing to check).

    The compute capability picks the architecture's limits; a minor revision not in the table
    takes its major's closest earlier entry, an unknown architecture the smallest per-block
    shared memory of the sm_80+ parts (99 KiB), one older than the table the oldest entry's. The
    device's own SM count, when it reports one, replaces the reference part's.
    """
    cc = device.compute_capability
    if cc is None:
        return None
    profile = PROFILES.get(cc)
    if profile is None:
        same_major = [k for k in PROFILES if k[0] == cc[0] and k <= cc]
        other = _UNKNOWN if cc > min(PROFILES) else PROFILES[min(PROFILES)]
        base = PROFILES[max(same_major)] if same_major else other
        profile = dataclasses.replace(
            base, name=f"sm_{cc[0]}{cc[1]}", compute_capability=cc, example=f"{device.kind}, limits of {base.name}"
        )
    elif device.kind:
        profile = dataclasses.replace(profile, example=device.kind)
    if device.sm_count:
        profile = dataclasses.replace(profile, sm_count=device.sm_count)
    return profile


def warpgroup_mma(cc: tuple[int, int] | None) -> bool:
    """Whether Triton's products on compute capability ``cc`` are warpgroup MMAs (sm_90's wgmma,
    sm_100's tcgen05), whose operand and accumulator layouts take more shared memory than the
    warp-level MMA of sm_80/86/89 and the consumer sm_120 parts."""
    return cc is not None and (9, 0) <= cc < (12, 0)


@dataclasses.dataclass(frozen=True)
class Need:
    """What one kernel launch needs of one block.

    Attributes:
        kernel: which kernel (``"gmm forward"``, ``"tgmm"``): named in the error when it does not fit.
        shared_memory: bytes of shared memory per block (an upper bound of what the compiler
            allocates for the config: pipeline buffers, layout-conversion scratch, ...).
        threads: threads per block (``num_warps * 32``).
        registers: registers per thread where the implementation bounds them (``None``: not declared).
    """

    kernel: str
    shared_memory: int
    threads: int
    registers: int | None = None


def unfit_reason(need: Need, profile: DeviceProfile) -> str | None:
    """Why one block of ``need`` cannot run on ``profile`` (``None``: it can)."""
    where = profile.describe()
    if need.shared_memory > profile.shared_memory_per_block:
        return (
            f"kernel {need.kernel!r} needs {need.shared_memory} B of shared memory per block; "
            f"{where} allows at most {profile.shared_memory_per_block} B"
        )
    if need.threads > profile.threads_per_block:
        return f"kernel {need.kernel!r} needs {need.threads} threads per block; {where} allows at most {profile.threads_per_block}"
    if need.registers is not None:
        if need.registers > profile.registers_per_thread:
            return (
                f"kernel {need.kernel!r} needs {need.registers} registers per thread; "
                f"{where} allows at most {profile.registers_per_thread}"
            )
        if need.registers * need.threads > profile.registers_per_sm:
            return (
                f"kernel {need.kernel!r} needs {need.registers * need.threads} registers per block "
                f"({need.registers} x {need.threads} threads); {where} has {profile.registers_per_sm} per SM"
            )
    return None


def unfit(needs: Iterable[Need], profile: DeviceProfile) -> str | None:
    """The first reason one of ``needs`` does not fit ``profile`` (``None``: all fit)."""
    for need in needs:
        reason = unfit_reason(need, profile)
        if reason is not None:
            return reason
    return None


def check_fits(impl: Any, cfg: Any, args: Any, device: DeviceInfo) -> None:
    """Raise ``ValueError`` when a kernel of ``impl`` with config ``cfg`` (complete) on ``args``
    needs more than ``device`` has (:meth:`~ejkernel.ops.KernelImpl.resources` against
    :func:`profile_for`). Nothing to check off NVIDIA GPUs."""
    profile = profile_for(device)
    if profile is None:
        return
    reason = unfit(impl.resources(cfg, args, device), profile)
    if reason is not None:
        name = f"{impl.name or impl.platform.value} {impl.op_name}".strip()
        raise ValueError(f"{name}: config {cfg.tuning_fields()} does not fit the device: {reason}")
