"""What every section of the run config shares: fields from the base config, tunable fields.

A section is a frozen `@dataclass(kw_only=True)`, the only place its hyperparameters are
declared (one docstring under each field). Its `BASE_KEYS` fields come from the output of
`create_base_config`, which has already checked them; the other fields are *tunable*: they
have defaults, may be set through the run config's `algo_params`, and are checked by the
section itself (`RULES`, applied in `__post_init__`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

__all__ = ["Section"]


class Section:
    """Mixin of the run-config sections (see the module docstring)."""

    BASE_KEYS: ClassVar[tuple[str, ...]] = ()
    """Fields taken from the base config (checked by create_base_config, not here)."""
    RULES: ClassVar[Mapping[str, Callable[[str, Any], Any]]] = {}
    """The rule of each tunable field: `rule(name, value) -> normalised value`."""
    RECORDED_IF_SET: ClassVar[tuple[str, ...]] = ()
    """Tunable fields recorded (`tunables`) only off their defaults: options added after runs
    were recorded, whose records (and the runs' numbers) stay what they were while the option
    is off; a record without one reads it at its default."""

    def __post_init__(self) -> None:
        """Check every tunable field by its rule and store the normalised value."""
        for name, rule in self.RULES.items():
            object.__setattr__(self, name, rule(name, getattr(self, name)))

    @classmethod
    def tunable_names(cls) -> tuple[str, ...]:
        """Fields that `algo_params` may set, in declaration order."""
        return tuple(
            f.name
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.name not in cls.BASE_KEYS
        )

    @classmethod
    def from_parts(cls, base: Mapping[str, Any], algo_params: Mapping[str, Any]) -> Self:
        """Build from a checked base config and the algo_params entries of this section.

        A base key the base config lacks (an optional override) keeps the field's default.
        """
        tunable = set(cls.tunable_names())
        values = {key: base[key] for key in cls.BASE_KEYS if key in base}
        values.update({k: v for k, v in algo_params.items() if k in tunable})
        return cls(**values)

    def tunables(self) -> dict[str, Any]:
        """The tunable fields as plain values (tuples as lists), in declaration order, those of
        `RECORDED_IF_SET` only off their defaults."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        out = {}
        for name in self.tunable_names():
            value = getattr(self, name)
            if name in self.RECORDED_IF_SET and value == defaults[name]:
                continue
            out[name] = list(value) if isinstance(value, tuple) else value
        return out

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain values (tuples as lists), in declaration order."""
        out = {}
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            out[field.name] = list(value) if isinstance(value, tuple) else value
        return out
