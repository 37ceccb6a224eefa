"""The multi-agent benchmark's env arguments and matched training settings (standard library
only: benchmarks/marl.py reads them in surge's venv, the peer scripts in theirs)."""

from __future__ import annotations

from typing import Any

N_AGENTS = 3
MAX_CYCLES = 25
SPREAD_KWARGS: dict[str, Any] = {
    "N": N_AGENTS,
    "local_ratio": 0.5,
    "max_cycles": MAX_CYCLES,
    "continuous_actions": False,
}

MATCHED: dict[str, Any] = {
    "n_envs": 32,  # simple_spread copies stepped per batch (surge's spread-* presets: 2 x 2 x 8)
    "rollout_len": 25,  # steps per env per batch: one whole episode each
    "epochs": 10,  # passes over each batch (the MAPPO paper's MPE setting)
    "minibatches": 1,  # minibatches per epoch: the whole batch (the MAPPO paper's MPE setting)
    "lr": 7e-4,  # Adam, constant (the MAPPO paper's MPE setting)
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip": 0.2,
    "ent_coef": 0.01,
    "vf_coef": 1.0,
    "max_grad_norm": 10.0,  # global norm (the MAPPO paper's MPE setting)
    "hidden": [64, 64],  # actor and critic, separate
    "activation": "relu",  # the MAPPO paper's (and surge's spread-* presets')
}
"""Per batch: 32 x 25 = 800 env steps = 2,400 agent steps, as surge's spread-mappo and
spread-ippo presets (benchmarks/marl.py passes the same to surge as overrides)."""
