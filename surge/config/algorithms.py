"""The algorithms a config can name (`algo`), each an import path to its plug-in.

An algorithm is one object (surge/recipes/base.py `Algorithm`): its settings' checks, what
it prepares before a run, its acting policy, its graph of workers, its learner. Its name
maps to the import path of that object here; `algo: my_pkg.algos:MyAlgo` names a plug-in of
your own directly, without registering it. The object is imported when it is first asked
for, so nothing below the recipes imports an algorithm (plug-ins are found by import path,
as worker kinds are: surge/workers/graph.py).
"""

from __future__ import annotations

import importlib
from typing import Any

from surge.errors import ConfigError

ALGORITHMS: dict[str, str] = {
    "ppo": "surge.recipes.ppo:PPO",
    "appo": "surge.recipes.ppo:APPO",
    "grpo": "surge.recipes.grpo:GRPO",
    "dqn": "surge.recipes.dqn:DQN",
    "sac": "surge.recipes.sac:SAC",
    "qmix": "surge.recipes.qmix:QMIX",
}
"""`algo` -> `module:object` of its plug-in."""


def register_algorithm(name: str, plugin: str) -> None:
    """Make `algo: name` mean the plug-in at `plugin` (`module:object`)."""
    _split(plugin, f"algorithm {name!r}")
    ALGORITHMS[name] = plugin


def algorithm_path(name: str) -> str:
    """The import path `algo: name` stands for (a ConfigError naming `algo` if none)."""
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if ":" in name:
        return name
    raise ConfigError(
        f"algo: unknown algorithm {name!r}",
        f"use one of {', '.join(sorted(ALGORITHMS))}, or `module:Object` for a plug-in of "
        "your own (docs/architecture.md, adding an algorithm)",
    )


def load_algorithm(name: str) -> Any:
    """The plug-in object of `algo: name` (typed by surge/recipes/base.py `Algorithm`)."""
    module, attribute = _split(algorithm_path(name), "algo")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as e:
        raise ConfigError(
            f"algo: cannot import the plug-in {module}:{attribute} ({e})",
            "check the import path, and that its module is importable here",
        ) from None


def device_roles(cfg: Any) -> Any:
    """The (role, device setting) pairs of `cfg.algo`'s workers (its plug-in's
    `device_roles`): what surge/devices.py checks and describes."""
    from surge.devices import ROLES

    return getattr(load_algorithm(cfg.algo), "device_roles", ROLES)


def _split(path: str, what: str) -> tuple[str, str]:
    module, sep, attribute = path.partition(":")
    if not sep or not module or not attribute:
        raise ConfigError(f"{what}: {path!r} is not 'module:object'", "write module:Object")
    return module, attribute
