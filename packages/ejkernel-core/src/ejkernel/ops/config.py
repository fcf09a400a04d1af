"""Config dataclasses: kernel tuning parameters and the base of every op's config.

Configs are small, frozen, hashable and validated at construction, so a bad value fails where it
is written, not deep inside a kernel. ``None`` in a field means "let the implementation choose":
resolution fills it from the heuristic (see :meth:`OpConfig.filled_from`). Configs round-trip
through JSON (:meth:`OpConfig.to_dict` / :meth:`OpConfig.from_dict`) for the persistent cache.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any, ClassVar, TypeVar

import numpy as np

from .. import _compat_loader

__all__ = ["BwdParams", "FwdParams", "OpConfig", "check_positive_int", "tile"]

C = TypeVar("C", bound="_Serializable")


def check_positive_int(
    owner: str, name: str, value: Any, *, power_of_two: bool = False, minimum: int = 1, maximum: int | None = None
) -> None:
    """Raise ``ValueError``/``TypeError`` unless ``value`` is None or an int in ``[minimum, maximum]``."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{owner}.{name} must be an int or None, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{owner}.{name} must be {'positive' if minimum == 1 else f'>= {minimum}'}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{owner}.{name} must be at most {maximum}, got {value}")
    if power_of_two and value & (value - 1):
        raise ValueError(f"{owner}.{name} must be a power of two, got {value}")


def tile(default: Any = None, *, power_of_two: bool = False, maximum: int | None = None, minimum: int = 1) -> Any:
    """A config field holding a positive int (or ``None``: chosen by the implementation).

    The constraints are checked when the config is built (``ValueError``/``TypeError`` naming
    the class and the field)."""
    return dataclasses.field(
        default=default, metadata={"power_of_two": power_of_two, "maximum": maximum, "minimum": minimum}
    )


class _Serializable:
    """Frozen dataclasses whose fields are scalars or nested dataclasses: validated from their
    type hints at construction, and round-tripped through JSON.

    Every field is checked against its annotation (``int | None``, ``FwdParams | None``,
    ``bool``, ``str``, ...); int fields are positive unless their :func:`tile` metadata says
    otherwise. A nested config given as a dict (e.g. read back from JSON) is converted.
    """

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        owner = type(self).__name__
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = _check_field(owner, f, getattr(self, f.name), hints.get(f.name))
            object.__setattr__(self, f.name, value)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if isinstance(v, _Serializable):
                v = v.to_dict()
            elif isinstance(v, enum.Enum):
                v = v.value
            elif isinstance(v, tuple):
                v = list(v)
            out[f.name] = v
        return out

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}.from_dict expects a dict, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"{cls.__name__}.from_dict: unknown fields {sorted(unknown)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _types(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _check_field(owner: str, f: dataclasses.Field, value: Any, hint: Any) -> Any:
    if hint is None or hint is Any:
        return value
    allowed = _types(hint)
    if value is None:
        if type(None) in allowed:
            return None
        raise TypeError(f"{owner}.{f.name} is required (got None)")
    nested = _nested_type(hint)
    if nested is not None:
        if isinstance(value, dict):
            return nested.from_dict(value)
        if not isinstance(value, nested):
            raise TypeError(f"{owner}.{f.name} must be a {nested.__name__}, got {type(value).__name__}")
        return value
    plain = tuple(t for t in allowed if isinstance(t, type) and t is not type(None))
    if int in plain and bool not in plain:
        meta = f.metadata
        check_positive_int(
            owner,
            f.name,
            value,
            power_of_two=meta.get("power_of_two", False),
            minimum=meta.get("minimum", 1),
            maximum=meta.get("maximum"),
        )
        return int(value)
    if plain == (bool,) and not isinstance(value, bool):
        raise TypeError(f"{owner}.{f.name} must be a bool, got {type(value).__name__} {value!r}")
    if float in plain and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if plain and not isinstance(value, plain):
        names = " or ".join(t.__name__ for t in plain)
        raise TypeError(f"{owner}.{f.name} must be {names}, got {type(value).__name__} {value!r}")
    return value


def _nested_type(hint: Any) -> type[_Serializable] | None:
    """The _Serializable class inside ``hint`` (``X``, ``X | None``, ``Optional[X]``)."""
    if isinstance(hint, type) and issubclass(hint, _Serializable):
        return hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            if isinstance(arg, type) and issubclass(arg, _Serializable):
                return arg
    return None


def _fill(value: Any, default: Any) -> Any:
    if value is None:
        return default
    if isinstance(value, _Params) and isinstance(default, type(value)):
        return dataclasses.replace(
            value,
            **{f.name: _fill(getattr(value, f.name), getattr(default, f.name)) for f in dataclasses.fields(value)},
        )
    return value


@dataclasses.dataclass(frozen=True)
class _Params(_Serializable):
    """Block sizes and launch parameters of one pass of an attention kernel.

    Attributes:
        q_blocksize: rows of the query tile (``BLOCK_M``); ``None``: chosen by the implementation.
        kv_blocksize: rows of the key/value tile (``BLOCK_N``); ``None``: chosen.
        num_warps: warps per program (GPU kernels; a power of two up to 32).
        num_stages: software-pipelining depth (GPU kernels).

    Which fields matter depends on the implementation (XLA uses the block sizes as chunk sizes
    and ignores warps and stages); each implementation validates the values it uses.
    """

    q_blocksize: int | None = tile()
    kv_blocksize: int | None = tile()
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()


@dataclasses.dataclass(frozen=True)
class FwdParams(_Params):
    __doc__ = "Forward-pass parameters. " + (_Params.__doc__ or "")


@dataclasses.dataclass(frozen=True)
class BwdParams(_Params):
    __doc__ = "Backward-pass parameters. " + (_Params.__doc__ or "")


@functools.cache
def _init_fields(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls) if f.init)


class _OpConfigType(type):
    """Builds an op config from earlier releases' field names too (``GLAttentionConfig(block_q=64)``):
    keywords that are not fields of the class go through the translation that
    :mod:`ejkernel.compat` installs (loaded then), which maps them onto fields, drops those that
    only tuned earlier kernels, or raises."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.keys() <= _init_fields(cls):
            kwargs = _compat_loader.config_fields(cls, kwargs)
        return super().__call__(*args, **kwargs)


@dataclasses.dataclass(frozen=True)
class OpConfig(_Serializable, metaclass=_OpConfigType):
    """Base of every op's config class (``FlashAttentionConfig``, ``PageAttentionConfig``, ...).

    Attributes:
        platform: ``"auto"`` or the implementation to use: a platform (``"triton"``,
            ``"pallas"``, ``"cuda"``, ``"xla"``) or a registered implementation's name.
        backend: ``"any"`` or the device kind the implementation must target
            (``"gpu"``, ``"tpu"``, ``"cpu"``).
    """

    op_name: ClassVar[str] = ""

    platform: str = "auto"
    backend: str = "any"

    def __post_init__(self):
        for name in ("platform", "backend"):
            v = getattr(self, name)
            if isinstance(v, enum.Enum):
                object.__setattr__(self, name, str(v.value))
            elif not isinstance(v, str):
                raise TypeError(f"{type(self).__name__}.{name} must be a str, got {type(v).__name__}")
            else:
                object.__setattr__(self, name, v.lower())
        if self.backend not in ("any", "gpu", "tpu", "cpu"):
            raise ValueError(
                f"{type(self).__name__}.backend must be 'any', 'gpu', 'tpu' or 'cpu', got {self.backend!r}"
            )
        super().__post_init__()

    def filled_from(self, default: OpConfig) -> OpConfig:
        """This config with every ``None`` (also inside nested params) taken from ``default``."""
        if type(default) is not type(self):
            raise TypeError(f"cannot fill {type(self).__name__} from {type(default).__name__}")
        changes = {}
        for f in dataclasses.fields(self):
            if f.name in ("platform", "backend"):
                continue
            changes[f.name] = _fill(getattr(self, f.name), getattr(default, f.name))
        return dataclasses.replace(self, **changes)

    def tuning_fields(self) -> dict[str, Any]:
        """The config without ``platform``/``backend``: what tuning chose."""
        d = self.to_dict()
        d.pop("platform", None)
        d.pop("backend", None)
        return d
