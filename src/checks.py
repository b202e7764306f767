"""The one home of value checks: every config value and public argument is checked here.

Each check takes the name to report and the value, returns the value normalised to a plain
Python type (NumPy scalars become `int`/`float`/`bool`, sequences become tuples) and raises
`ConfigError` (a `ValueError`) whose message is one line naming the key and the value:
``max_risk=1.5: must be a float in (0.0, 1.0)``.

>>> check_int("num_envs", 8, low=1)
8
>>> check_float("max_risk", 0.1, low=0.0, high=1.0, open_high=True)
0.1
"""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "ConfigError",
    "check_bool",
    "check_choice",
    "check_float",
    "check_int",
    "check_int_tuple",
    "check_mapping",
    "check_nested",
    "check_probability",
    "check_str",
    "fail",
    "is_int",
    "lookup",
    "nested_excess",
    "shown",
]


T = TypeVar("T")


class ConfigError(ValueError):
    """A config value or argument is missing, of the wrong type or out of range.

    The message is one line naming the key and the bad value.
    """


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 60, 60
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 4


def shown(value: Any) -> str:
    """`repr(value)` for a small value; for a large or deeply nested one a shortened repr
    (`reprlib`), which never walks the whole value: an error message names a value without
    spelling out megabytes of it."""
    if nested_excess(value, max_depth=4, max_items=64, max_text=120) is None:
        return repr(value)
    return _SHORT.repr(value)


def nested_excess(value: Any, *, max_depth: int, max_items: int, max_text: int) -> str | None:
    """Why the nested value (dicts, lists, tuples and sets of plain values) exceeds the bounds,
    in words without the value itself; None when it does not.

    Counts every value it holds, keys included, as often as it appears: a sub-list held in
    ten places counts ten times, so a few kilobytes of shared references (a pickle's memo)
    cannot stand for billions of values. Stops at the first excess, so the walk costs at most
    `max_items` steps. `max_depth`: the most levels of containers below `value`; `max_text`:
    the longest string or bytes.
    """
    pending: list[tuple[Any, int]] = [(value, 0)]
    count = 0
    while pending:
        item, depth = pending.pop()
        count += 1
        if count > max_items:
            return f"holds more than {max_items} values (shared ones counted each time)"
        if isinstance(item, str | bytes):
            if len(item) > max_text:
                return f"holds a text of {len(item)} characters, more than {max_text}"
        elif isinstance(item, Mapping | list | tuple | set | frozenset):
            if depth >= max_depth:
                return f"is nested deeper than {max_depth} levels"
            if len(item) > max_items:
                return f"holds a container of {len(item)} values, more than {max_items}"
            children = (
                [entry for pair in item.items() for entry in pair]
                if isinstance(item, Mapping)
                else list(item)
            )
            pending.extend((child, depth + 1) for child in children)
    return None


def check_nested(
    name: str,
    value: Any,
    *,
    max_depth: int = 32,
    max_items: int = 100_000,
    max_text: int = 65_536,
) -> Any:
    """`value`, after checking that it is no deeper, larger or longer than the bounds
    (`nested_excess`); `ConfigError` naming `name` and the bound otherwise, without the value.

    >>> check_nested("config", {"a": [1, 2]})
    {'a': [1, 2]}
    >>> shared = [0] * 10
    >>> for _ in range(7):
    ...     shared = [shared] * 10
    >>> check_nested("config", {"a": shared})
    Traceback (most recent call last):
    ...
    src.checks.ConfigError: config holds more than 100000 values (shared ones counted each time)
    """
    excess = nested_excess(value, max_depth=max_depth, max_items=max_items, max_text=max_text)
    if excess is not None:
        raise ConfigError(f"{name} {excess}")
    return value


def fail(name: str, value: Any, requirement: str) -> ConfigError:
    """The error for `name` = `value` not meeting `requirement` (``must be ...``); a large
    value is shown shortened (`shown`)."""
    hint = ""
    if isinstance(value, str) and requirement.startswith(("an int", "a float")):
        # PyYAML reads `3e-4` (no dot) as a string, a common way to end up here.
        hint = " (got a string; write numbers without quotes, e.g. 3.0e-4 in YAML)"
    return ConfigError(f"{name}={shown(value)}: must be {requirement}{hint}")


def is_int(value: Any) -> bool:
    """Whether `value` is an integer (Python or NumPy) and not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def _range_requirement(
    kind: str,
    low: float | None,
    high: float | None,
    *,
    open_low: bool,
    open_high: bool,
    unbounded: str,
) -> str:
    """The requirement of a number of `kind` (``"an int"``) between `low` and `high`, as
    `fail` words it: ``an int in [1, 8]``, ``a float > 0.0``; `unbounded` without either end.

    >>> _range_requirement("a float", 0.0, 1.0, open_low=True, open_high=False, unbounded="")
    'a float in (0.0, 1.0]'
    """
    if low is not None and high is not None:
        left = "(" if open_low else "["
        right = ")" if open_high else "]"
        return f"{kind} in {left}{low}, {high}{right}"
    if low is not None:
        return f"{kind} {'>' if open_low else '>='} {low}"
    if high is not None:
        return f"{kind} {'<' if open_high else '<='} {high}"
    return unbounded


def check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """An int in [low, high] (either end may be open-ended with None)."""
    requirement = _range_requirement(
        "an int", low, high, open_low=False, open_high=False, unbounded="an int"
    )
    if not is_int(value):
        raise fail(name, value, requirement)
    if (low is not None and value < low) or (high is not None and value > high):
        raise fail(name, value, requirement)
    return int(value)


def check_float(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = True,
    open_high: bool = False,
) -> float:
    """A finite real in the interval from `low` to `high`; the ends are open unless told.

    `low` is excluded by default (``> low``) and `high` included (``<= high``); None leaves
    that side unbounded.
    """
    requirement = _range_requirement(
        "a float", low, high, open_low=open_low, open_high=open_high, unbounded="a finite float"
    )
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise fail(name, value, requirement)
    number = float(value)
    if not math.isfinite(number):
        raise fail(name, value, requirement)
    if low is not None and (number < low or (open_low and number == low)):
        raise fail(name, value, requirement)
    if high is not None and (number > high or (open_high and number == high)):
        raise fail(name, value, requirement)
    return number


def check_probability(name: str, value: Any, *, open_interval: bool = True) -> float:
    """A probability: in (0, 1) by default, in [0, 1] with `open_interval=False`."""
    return check_float(
        name, value, low=0.0, high=1.0, open_low=open_interval, open_high=open_interval
    )


def check_bool(name: str, value: Any) -> bool:
    """A bool (NumPy bools included)."""
    if not isinstance(value, bool | np.bool_):
        raise fail(name, value, "a bool (true or false)")
    return bool(value)


def check_str(name: str, value: Any) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise fail(name, value, "a non-empty string")
    return value


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """One of `choices`."""
    options = tuple(choices)
    if not isinstance(value, str) or value not in options:
        raise fail(name, value, f"one of {', '.join(options)}")
    return value


def check_int_tuple(
    name: str, value: Any, *, low: int = 1, high: int = 4096, max_len: int = 16
) -> tuple[int, ...]:
    """A non-empty sequence of at most `max_len` ints in [low, high] (e.g. layer widths)."""
    requirement = f"a non-empty list of at most {max_len} ints in [{low}, {high}]"
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray):
        raise fail(name, value, requirement)
    items = list(value)
    if not 0 < len(items) <= max_len or not all(
        is_int(item) and low <= item <= high for item in items
    ):
        raise fail(name, value, requirement)
    return tuple(int(item) for item in items)


def check_mapping(name: str, value: Any) -> dict[str, Any]:
    """A mapping with string keys, as a plain dict."""
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise fail(name, value, "a mapping with string keys")
    return dict(value)


def lookup(registry: Mapping[str, T], name: Any, kind: str) -> T:
    """`registry[name]`, or a `ValueError` naming `kind`, the bad name and the known ones.

    >>> lookup({"v0": 1}, "v0", "lag_version")
    1
    """
    if not isinstance(name, str) or name not in registry:
        raise ValueError(f"unknown {kind} {name!r}; known: {sorted(registry)}")
    return registry[name]
