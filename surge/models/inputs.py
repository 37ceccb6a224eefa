"""Which observation fields the policy and the value function read (`model.actor_inputs`,
`model.critic_inputs`), and the action mask.

A centralised critic (MAPPO) reads the env's global state while the policy reads only its
agent's observation: two sub-spaces of one observation. A field named `action_mask` is
never encoded: it masks the logits of a Discrete action (PettingZoo's convention for
illegal moves). Both the torch model and the numpy path build their encoders from the
sub-spaces given here, so they agree on the layout.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from surge.config.schema import ModelConfig
from surge.envs.spaces import flatten_obs_space
from surge.errors import ConfigError, EnvSpecError

ACTION_MASK = "action_mask"
GLOBAL_STATE = "global_state"
"""The multi-agent env's global state field (surge/envs/multiagent.py): the policy does not
read it unless `model.actor_inputs` names it."""
MASKED_LOGIT = -1e9
"""The logit of an illegal action: its probability is exactly 0 in float32 (exp underflows),
and, unlike -inf, it keeps the entropy's p * log p finite (0, not nan)."""


def input_fields(obs_space: gym.Space[Any], cfg: ModelConfig) -> tuple[list[str], list[str]]:
    """(the policy's fields, the value function's fields), sorted; ConfigError for a name the
    observation lacks, or for separate inputs with a shared torso."""
    fields = sorted(flatten_obs_space(obs_space))
    default = [f for f in fields if f not in (ACTION_MASK, GLOBAL_STATE)]
    actor = _chosen(fields, cfg.actor_inputs, "actor_inputs") or default
    critic = _chosen(fields, cfg.critic_inputs, "critic_inputs") or actor
    if not actor:
        raise ConfigError(
            f"model.actor_inputs: the observation has no field to encode ({fields})",
            "name the fields the policy reads in model.actor_inputs",
        )
    if cfg.shared and critic != actor:
        raise ConfigError(
            f"model.shared=true, but the policy reads {actor} and the value function "
            f"{critic}: one torso cannot take both",
            "set model.shared=false (separate torsos), or give both the same inputs",
        )
    return actor, critic


def _chosen(fields: list[str], names: list[str], key: str) -> list[str]:
    unknown = [n for n in names if n not in fields]
    if unknown:
        raise ConfigError(
            f"model.{key}: no observation field {unknown}; this env's fields are {fields}",
            f"choose model.{key} from {fields}",
        )
    if ACTION_MASK in names:
        raise ConfigError(
            f"model.{key}: `{ACTION_MASK}` masks the logits and is never encoded",
            f"remove it from model.{key}",
        )
    return sorted(set(names))


def subspace(obs_space: gym.Space[Any], fields: list[str]) -> gym.Space[Any]:
    """The observation space restricted to `fields` (the space itself when that is all of
    it, so a single image or vector keeps its own space)."""
    leaves = flatten_obs_space(obs_space)
    if sorted(fields) == sorted(leaves):
        return obs_space
    return gym.spaces.Dict({name: leaves[name] for name in fields})


def check_action_mask(obs_space: gym.Space[Any], action_space: gym.Space[Any]) -> bool:
    """Whether the observation carries an `action_mask`; EnvSpecError if it cannot mask this
    action space (a 1-D Box of one 0/1 entry per action of a Discrete space)."""
    space = flatten_obs_space(obs_space).get(ACTION_MASK)
    if space is None:
        return False
    n = int(action_space.n) if isinstance(action_space, gym.spaces.Discrete) else None
    if not isinstance(space, gym.spaces.Box) or space.shape != (n,):
        raise EnvSpecError(
            f"observation field {ACTION_MASK!r} is {space} and the action space "
            f"{action_space}; a mask is a 1-D Box with one 0/1 entry per action of a "
            "Discrete action space",
            "fix the env's mask, or rename the field if it is not an action mask",
        )
    return True
