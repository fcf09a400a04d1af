"""Value checks of index arrays (``cum_seqlens_*``, ``block_tables``, ``context_lens``, segment ids).

Shapes and dtypes are always checked before a kernel is traced. *Values* can be checked only
when they are known: outside ``jit`` an out-of-range value is a ``ValueError`` at once. Under
``jit`` the values are traced; there they are checked only when value checks are on:

- ``with ejkernel.checks(): ...`` (or ``ejkernel.ops.policy(value_checks=True)``), or
- the environment variable ``EJKERNEL_CHECKS=1`` (read once, at import).

Checks are emitted when an op is *traced*, so the switch must be on when the jitted function is
first traced. Two modes:

- ``checks()`` / ``EJKERNEL_CHECKS=1``: a bad value raises from inside the jitted function when it
  runs (a ``JaxRuntimeError`` whose last line is the ``ValueError`` naming the op, the array and
  the rule); works in any ``jit``, ``shard_map``, ``grad``.
- ``checks("checkify")`` / ``EJKERNEL_CHECKS=checkify``: each rule is a
  :func:`jax.experimental.checkify.check`, to be functionalized by the caller the JAX way:
  ``err, out = checkify.checkify(jax.jit(f))(...); err.throw()``. (Unwrapped, JAX refuses to
  stage such a check.)

Each check costs a reduction over the index array and a host round trip when it runs outside
``checkify``: leave it off in production, turn it on to debug wrong numbers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from .policy import Policy, current_policy, policy

__all__ = ["Mode", "ValueRule", "checks", "checks_enabled", "enforce"]


Mode = Literal[False, True, "checkify"]


@contextlib.contextmanager
def checks(mode: bool | str = True) -> Iterator[Policy]:
    """Turn value checks of traced index arrays on (``True``, ``"checkify"``) or off (``False``)
    for the length of a ``with`` block.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> q = k = v = jnp.ones((1, 8, 2, 16))
        >>> f = jax.jit(lambda q, k, v, cu: ejkernel.flash_attention(q, k, v, cum_seqlens_q=cu))
        >>> with ejkernel.checks():
        ...     f(q, k, v, jnp.array([0, 6, 3], jnp.int32))  # doctest: +SKIP
        Traceback (most recent call last):
        JaxRuntimeError: ... ValueError: flash_attention: cum_seqlens_q must start at 0, never decrease ...
    """
    with policy(value_checks=mode) as p:
        yield p


def checks_enabled() -> bool:
    """Whether value checks of traced index arrays are on here (in either mode)."""
    return current_policy().value_checks is not False


@dataclasses.dataclass(frozen=True)
class ValueRule:
    """A rule on the values of index arrays.

    Attributes:
        arrays: names of the arrays the rule reads (the first one is the array blamed).
        requirement: what must hold, as the error says it (``"must be in [0, 64]"``).
        bad: ``bad(xp, *arrays)`` → a boolean array, ``True`` where the first array breaks the
            rule; ``xp`` is ``numpy`` for concrete values and ``jax.numpy`` for traced ones.
        whole: for a rule on the whole array rather than on each element (a bound on its sum):
            ``(label, value)`` with ``value(xp, *arrays)`` the scalar the rule bounds, which the
            error reports as ``label = value`` instead of blaming one element; ``bad`` then
            returns a scalar.
    """

    arrays: tuple[str, ...]
    requirement: str
    bad: Callable[..., Any]
    whole: tuple[str, Callable[..., Any]] | None = None


def _show(c: np.ndarray) -> str:
    return str(c.tolist()) if c.size <= 32 else f"an array of shape {tuple(c.shape)}"


def _index(flat: int, shape: tuple[int, ...]) -> str:
    return ", ".join(str(int(i)) for i in np.unravel_index(flat, shape)) if shape else ""


def enforce(op: str, rules: list[ValueRule], values: Mapping[str, Any]) -> None:
    """Check ``rules`` on ``values``: concrete values always, traced ones when checks are on.

    A concrete violation raises ``ValueError`` naming the op, the array, the rule, the first
    offending index and value (and the whole array when it is small).
    """
    from .args import concrete

    on = None
    for rule in rules:
        arrays = [values.get(n) for n in rule.arrays]
        if any(a is None for a in arrays):
            continue
        name = rule.arrays[0]
        cs = [concrete(a) for a in arrays]
        if all(c is not None for c in cs):
            mask = np.asarray(rule.bad(np, *cs))
            if mask.any():
                if rule.whole is not None:
                    label, of = rule.whole
                    got = f"{label} = {np.asarray(of(np, *cs)).item()} ({name} = {_show(cs[0])})"
                elif mask.ndim == 0:
                    got = f"{name} = {np.asarray(cs[0]).item()}"
                else:
                    first = int(np.flatnonzero(mask)[0])
                    c0 = np.broadcast_to(cs[0], mask.shape)
                    got = f"{name}[{_index(first, mask.shape)}] = {c0.reshape(-1)[first]} in {_show(cs[0])}"
                raise ValueError(f"{op}: {name} {rule.requirement}; got {got}")
            continue
        if on is None:
            on = current_policy().value_checks
        if on is False:
            continue
        xs = [jnp.asarray(a) for a in arrays]
        mask = rule.bad(jnp, *xs)
        if rule.whole is not None:
            label, of = rule.whole
            message, fmt = f"{op}: {name} {rule.requirement}; got {label} = {{}}", (of(jnp, *xs),)
        elif mask.ndim == 0:
            message, fmt = f"{op}: {name} {rule.requirement}; got {name} = {{}}", (jnp.broadcast_to(xs[0], ()),)
        else:
            first = jnp.argmax(mask.reshape(-1))
            value = jnp.broadcast_to(xs[0], mask.shape).reshape(-1)[first] if mask.size else 0
            message, fmt = f"{op}: {name} {rule.requirement}; got {name}[flat index {{}}] = {{}}", (first, value)
        if on == "checkify":
            from jax.experimental import checkify

            checkify.check(~jnp.any(mask), message, *fmt)
        else:
            _raise_at_run_time(~jnp.any(mask), message, *fmt)


# Marks the ValueError of a failed value check raised inside ``jax.debug.callback`` (a plain
# ValueError, so the JaxRuntimeError's last line still reads "ValueError: ...").
_CHECK_FAILED = "_ejkernel_value_check"


class _QuietFailedChecks(logging.Filter):
    """Drops JAX's "jax.debug.callback failed" traceback when the callback is a failed value check:
    the same ``ValueError`` reaches the caller as the ``JaxRuntimeError``, so stderr need not show
    it a second time. Other callbacks' failures are still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and getattr(record.exc_info[1], _CHECK_FAILED, False))


_QUIET = _QuietFailedChecks()


def _raise_at_run_time(ok: Any, message: str, *fmt: Any) -> None:
    def raise_if_bad(ok_value: Any, *fmt_values: Any) -> None:
        if not bool(ok_value):
            error = ValueError(message.format(*(np.asarray(v).item() for v in fmt_values)))
            setattr(error, _CHECK_FAILED, True)
            raise error

    # The logger of jax's debug-callback runtime (jax/_src/debugging.py).
    logger = logging.getLogger("jax._src.debugging")
    if _QUIET not in logger.filters:
        logger.addFilter(_QUIET)
    jax.debug.callback(raise_if_bad, ok, *fmt)
