"""Settings that may change while a run trains: read, convert, check and set one by its
dotted key (`ppo.lr`).

An algorithm plug-in declares which of its settings its learner reads afresh between
updates (`Algorithm.mutable_settings`, surge/recipes/base.py); only those may be changed
during a run, by the trainer's settings channel (surge/tracking/hyperparams.py) or by a
population's explore step (surge/population/). A new value keeps the field's type and range
rules (surge/config/rules.py), so a run never trains with a value its config would refuse.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

from surge.config.rules import rules_of
from surge.errors import ConfigError


def _field(cfg: Any, key: str) -> tuple[Any, dataclasses.Field[Any], Any]:
    """(the section object holding `key`'s last part, its field, the field's type)."""
    parts = key.split(".")
    node = cfg
    for i, part in enumerate(parts[:-1]):
        try:
            node = cfg.section(part) if i == 0 else getattr(node, part)
        except AttributeError:
            node = None
        if node is None or not dataclasses.is_dataclass(node):
            raise ConfigError(f"{key}: no such setting", "name a setting as section.key")
    fields = {f.name: f for f in dataclasses.fields(node)}
    if parts[-1] not in fields or not dataclasses.is_dataclass(node):
        raise ConfigError(f"{key}: no such setting", "name a setting as section.key")
    hints = typing.get_type_hints(type(node))
    return node, fields[parts[-1]], hints[parts[-1]]


def get_setting(cfg: Any, key: str) -> Any:
    """The value of the setting `key` (`ppo.lr`) in `cfg`."""
    node, field, _ = _field(cfg, key)
    return getattr(node, field.name)


def checked_value(cfg: Any, key: str, value: Any) -> float:
    """`value` as the setting `key` takes it (a float, or an int for an integer field),
    after the field's range rules: a ConfigError naming `key` if it breaks one."""
    _, field, tp = _field(cfg, key)
    if tp not in (float, int) or isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"{key}: only numeric settings can change during a run, got {value!r}",
            "mutate a float or integer setting",
        )
    number: float = int(round(value)) if tp is int else float(value)
    if not math.isfinite(number):
        raise ConfigError(f"{key}: must be a finite number, got {value!r}")
    for rule in rules_of(field):
        if not rule.check(number):
            raise ConfigError(
                f"{key}: must be {rule.words}, got {number!r}",
                f"keep {key} {rule.words}",
            )
    return number


def set_setting(cfg: Any, key: str, value: Any) -> float:
    """Set the setting `key` in `cfg` in place (learners keep a reference to their section,
    so they read the new value at their next update); the value set."""
    number = checked_value(cfg, key, value)
    node, field, _ = _field(cfg, key)
    setattr(node, field.name, number)
    return number
