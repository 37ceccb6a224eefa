"""Range checks declared beside the config field they check, and the one function that runs
them over any section.

A field says what values it takes where it is defined: `lr: float = ruled(2.5e-4, POSITIVE)`.
So an algorithm plug-in's own section carries its checks with it (examples/my_algorithm.py),
`surge/config/load.py` validates every section, built-in or a plug-in's, by walking its
fields, and docs/configuration.md prints each rule beside its field. What a rule cannot say
(one field against another) stays in a plug-in's `validate` or in load.py's cross-field
checks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from surge import devices
from surge.errors import ConfigError

T = TypeVar("T")
METADATA_KEY = "surge.rules"


@dataclass(frozen=True)
class Rule:
    """A check on one value, and the rule in words (`> 0`, `in [0, 1)`)."""

    check: Callable[[Any], bool]
    words: str


def at_least(low: float) -> Rule:
    return Rule(lambda v: v >= low, f">= {low:g}")


def between(low: float, high: float, ends: str = "[]") -> Rule:
    """Within `low` and `high`; `ends` says which are included: `[]`, `[)`, `(]` or `()`."""
    opened, closed = ends[0], ends[1]

    def check(v: Any) -> bool:
        above = v >= low if opened == "[" else v > low
        below = v <= high if closed == "]" else v < high
        return bool(above and below)

    return Rule(check, f"in {opened}{low:g}, {high:g}{closed}")


def or_null(rule: Rule) -> Rule:
    return Rule(lambda v: v is None or rule.check(v), f"{rule.words} (or null)")


POSITIVE = Rule(lambda v: v > 0, "> 0")
NON_NEGATIVE = at_least(0)
AT_LEAST_ONE = at_least(1)
UNIT = between(0, 1)
DEVICE = Rule(devices.valid, "auto, cpu, cuda or cuda:N")
FINITE_OR_NULL = Rule(lambda v: v is None or math.isfinite(v), "a finite number (or null)")


def ruled(default: T, *rules: Rule) -> T:
    """A dataclass field with `default` and the rules its value must keep."""
    return cast(T, dataclasses.field(default=default, metadata={METADATA_KEY: rules}))


def ruled_factory(factory: Callable[[], T], *rules: Rule) -> T:
    """`ruled` for a mutable default (a list), made by `factory`."""
    return cast(T, dataclasses.field(default_factory=factory, metadata={METADATA_KEY: rules}))


def rules_of(field: dataclasses.Field[Any]) -> tuple[Rule, ...]:
    return tuple(field.metadata.get(METADATA_KEY, ()))


def check_section(section: Any, path: str = "") -> None:
    """Every rule of `section`'s fields, and of the sections nested in it (a ConfigError that
    names the first field breaking one, its value and the rule)."""
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        name = f"{path}.{field.name}" if path else field.name
        for rule in rules_of(field):
            if not rule.check(value):
                raise ConfigError(
                    f"{name}: must be {rule.words}, got {value!r}",
                    f"change {name} so it is {rule.words}",
                )
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_section(value, name)
