"""The op definition: one class per op, holding its canonical signature, validation and config.

An op (``FlashAttention``, ``PageAttention``, ...) is a :class:`Kernel` subclass in the core. Its
public function (``ejkernel.flash_attention``) is the one place where the signature is written;
the function's body hands its parameters to the executor, and :meth:`Kernel.bind` turns them into
an immutable, validated *arguments record* (a pytree dataclass: arrays are leaves, options are
static). Backends receive that record; they never see raw user arguments.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import jax
import numpy as np

from .config import OpConfig

__all__ = [
    "CALL_OPTIONS",
    "Kernel",
    "args_record",
    "array_field",
    "array_fields",
    "describe_array",
    "get_op",
    "is_traced",
    "list_ops",
]

CALL_OPTIONS = ("platform", "cfg", "mesh", "in_specs", "out_specs")

_OPS: dict[str, type[Kernel]] = {}

R = TypeVar("R")


def args_record(cls: type[R]) -> type[R]:
    """Make a frozen dataclass whose fields marked ``array=True`` are pytree leaves.

    Declare array fields with ``dataclasses.field(metadata={"array": True})`` (or the helper
    ``array_field()``); every other field is static and must be hashable.
    """
    cls = dataclasses.dataclass(frozen=True)(cls)
    fields = dataclasses.fields(cls)
    data = [f.name for f in fields if f.metadata.get("array")]
    meta = [f.name for f in fields if not f.metadata.get("array")]
    jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)
    return cls


def array_field(default: Any = dataclasses.MISSING) -> Any:
    """A field of an arguments record that holds an array (or ``None``)."""
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata={"array": True})
    return dataclasses.field(default=default, metadata={"array": True})


def array_fields(record: Any) -> list[str]:
    """Names of the array fields of an arguments record, in pytree order."""
    return [f.name for f in dataclasses.fields(record) if f.metadata.get("array")]


def is_traced(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


_DTYPE_ABBREV = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "float64": "f64",
    "int32": "i32",
    "int64": "i64",
    "uint32": "u32",
    "bool": "bool",
    "int8": "i8",
    "uint8": "u8",
    "float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2",
}


def describe_array(x: Any) -> str:
    """``"bf16[8,2048,16,128]"`` for an array (or tracer); ``"-"`` for ``None``."""
    if x is None:
        return "-"
    dtype = np.dtype(x.dtype).name
    return f"{_DTYPE_ABBREV.get(dtype, dtype)}[{','.join(str(int(d)) for d in x.shape)}]"


class Kernel:
    """Base of op definitions (the "Module" form of an op, for use with an ``Executor``).

    Subclasses set ``op_name``, ``config_cls`` and ``version`` (bump it when the op's meaning
    changes so cached configs are not reused), and implement :meth:`bind`, :meth:`describe` and
    :meth:`autotune_inputs`. Ops that run under ``mesh=`` implement :meth:`partition_specs`.
    ``function`` is the op's public function, attached by :meth:`define`.
    """

    op_name: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    config_cls: ClassVar[type[OpConfig]] = OpConfig
    trainable: ClassVar[bool] = False
    function: ClassVar[Callable[..., Any]]

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if cls.op_name:
            _OPS[cls.op_name] = cls

    @classmethod
    def define(cls, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: ``fn`` is this op's public function and canonical signature.

        Its parameters must end with the call options ``platform, cfg, mesh, in_specs,
        out_specs``; its body is ``return Op.call(locals())``.
        """
        params = list(inspect.signature(fn).parameters)
        missing = [o for o in CALL_OPTIONS if o not in params]
        if missing:
            raise TypeError(f"{fn.__name__} lacks the call options {missing}")
        cls.function = staticmethod(fn)  # type: ignore[assignment]
        return fn

    @classmethod
    def signature(cls) -> inspect.Signature:
        return inspect.signature(cls.function)

    @classmethod
    def call(cls, params: Mapping[str, Any]) -> Any:
        """Run the op with its parameters (the public function's ``locals()``) on the default executor."""
        from .executor import default_executor

        return default_executor().run(cls(), dict(params))

    # -- the op's contract --------------------------------------------------------------------

    def bind(self, params: dict[str, Any]) -> Any:
        """Validate and canonicalize the op's parameters (call options removed) into a record.

        Raises ``TypeError``/``ValueError`` naming the argument and shapes. Runs once per call,
        before any implementation is chosen or traced.
        """
        raise NotImplementedError

    def describe(self, args: Any) -> str:
        """Readable abstract description of ``args`` for cache keys: shapes, dtypes, options."""
        raise NotImplementedError

    def arrays(self, args: Any) -> list[Any]:
        """The array leaves of ``args`` (used to find the device a call runs on)."""
        return [x for x in jax.tree.leaves(args) if x is not None]

    def autotune_inputs(self, args: Any, seed: int = 0) -> Any:
        """Concrete random arguments with the abstract shapes of ``args`` (which may be traced).

        Must produce *valid* values (segment ids, sequence lengths, page tables), not only the
        right shapes, so that timings reflect real work.
        """
        raise NotImplementedError

    def differentiable_fields(self, args: Any) -> tuple[str, ...]:
        """Array fields that forward+backward tuning differentiates (trainable ops)."""
        return ()

    def partition_specs(self, args: Any, in_specs: Any, mesh: Any) -> dict[str, Any]:
        """PartitionSpec of each present array field of ``args`` for ``shard_map``.

        ``in_specs`` are the user's specs of the positional array arguments. Raise
        ``ValueError`` for shardings the op cannot run under (e.g. a sharded sequence axis).
        """
        raise ValueError(f"{self.op_name} does not support mesh/in_specs/out_specs")

    def default_out_spec(self, args: Any, specs: dict[str, Any]) -> Any:
        raise ValueError(f"{self.op_name}: out_specs is required with mesh")

    def localize(self, args: Any, specs: dict[str, Any], mesh: Any) -> Any:
        """Adjust a shard's arguments inside ``shard_map`` (default: unchanged)."""
        return args

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def get_op(name: str) -> Kernel:
    """The op definition registered as ``name`` (e.g. ``"flash_attention"``)."""
    try:
        return _OPS[name]()
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known: {sorted(_OPS)}") from None


def list_ops() -> list[str]:
    return sorted(_OPS)
