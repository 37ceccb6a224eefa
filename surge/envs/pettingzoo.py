"""PettingZoo environments by id: `env.id=pettingzoo:<module>` or `pettingzoo:<module>:<factory>`.

- `pettingzoo:mpe2.simple_spread_v3` imports the module and calls its `parallel_env(**kwargs)`
  (PettingZoo's convention for every parallel-capable env), else its `env(**kwargs)` (an AEC
  env), which is converted with PettingZoo's own `aec_to_parallel` when the env declares
  `is_parallelizable`.
- `pettingzoo:my_pkg.envs:make_arena` calls a user's factory, which may return a
  `ParallelEnv` or a parallelisable `AECEnv`.
- `lbforaging:Foraging-8x8-2p-2f-coop-v3` builds Level-Based Foraging's env of that id as a
  `ParallelEnv` (surge/envs/foraging.py).

Turn-based AEC games (chess, connect four: one agent acts per step) are not parallelisable;
they are played by the self-play env (surge/envs/selfplay.py), not here.
"""

from __future__ import annotations

import importlib
from typing import Any

from surge.config.schema import MULTI_AGENT_PREFIXES, EnvConfig
from surge.errors import ConfigError, EnvSpecError

PREFIX, LBF_PREFIX = MULTI_AGENT_PREFIXES
"""PettingZoo modules, and Level-Based Foraging's Gymnasium ids served as parallel envs
(surge/envs/foraging.py)."""


def is_pettingzoo_id(env_id: str) -> bool:
    """Whether `env_id` names a multi-agent env that trains as PettingZoo agent rows."""
    return env_id.startswith(MULTI_AGENT_PREFIXES)


def import_env_module(env_id: str) -> tuple[Any, str]:
    """(the module an id names, the factory attribute it names or "")."""
    spec = env_id.removeprefix(PREFIX)
    module_name, _, factory = spec.partition(":")
    if not module_name:
        raise ConfigError(
            f"env.id={env_id!r} names no module",
            "write pettingzoo:<module>, e.g. pettingzoo:mpe2.simple_spread_v3, or "
            "pettingzoo:<module>:<factory> for your own env",
        )
    try:
        return importlib.import_module(module_name), factory
    except ImportError as e:
        raise ConfigError(
            f"env.id={env_id!r}: cannot import {module_name!r} ({e})",
            "install the multi-agent extra (pip install -e '.[multiagent]': PettingZoo and "
            "mpe2), or put your module on PYTHONPATH",
        ) from None


def make_parallel_env(cfg: EnvConfig, render_mode: str | None = None) -> Any:
    """A PettingZoo `ParallelEnv` for `cfg.id` with `cfg.kwargs`."""
    from pettingzoo import AECEnv, ParallelEnv
    from pettingzoo.utils.conversions import aec_to_parallel

    if cfg.id.startswith(LBF_PREFIX):
        from surge.envs.foraging import foraging_env

        return foraging_env(cfg.id.removeprefix(LBF_PREFIX), render_mode, **cfg.kwargs)
    module, factory = import_env_module(cfg.id)
    if factory:
        make = getattr(module, factory, None)
        if not callable(make):
            raise ConfigError(
                f"env.id={cfg.id!r}: {module.__name__} has no callable {factory!r}",
                "name a function that returns a PettingZoo ParallelEnv",
            )
    else:
        make = getattr(module, "parallel_env", None) or getattr(module, "env", None)
        if make is None:
            raise ConfigError(
                f"env.id={cfg.id!r}: {module.__name__} has neither parallel_env() nor env()",
                "name the factory: pettingzoo:<module>:<function>",
            )
    kwargs = dict(cfg.kwargs)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    try:
        env = make(**kwargs)
    except TypeError as e:
        raise ConfigError(f"env.kwargs for {cfg.id!r}: {e}", "check env.kwargs") from None
    if isinstance(env, AECEnv):
        if not env.metadata.get("is_parallelizable", False):
            raise EnvSpecError(
                f"env {cfg.id!r} is a turn-based (AEC) game that PettingZoo cannot convert to "
                "the parallel API",
                "train it by self-play (selfplay.* settings, docs/multiagent.md), or give the "
                "env a parallel_env()",
            )
        env = aec_to_parallel(env)
    if not isinstance(env, ParallelEnv):
        raise EnvSpecError(
            f"env {cfg.id!r}: the factory returned {type(env).__name__}, not a PettingZoo "
            "ParallelEnv or AECEnv",
            "return pettingzoo.ParallelEnv (or a parallelisable AECEnv)",
        )
    return env
