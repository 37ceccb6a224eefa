"""Every shipped preset, as shipped, trains on every runtime: two updates of each on serial,
local and Ray (a Ray instance started for the run), through the real `surge train`.

Benchmark tier (marker `slow`: about 10 minutes on 2 cores); CI runs the short checks of each
runtime instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from surge.config.load import list_presets, load_config
from surge.recipes.ppo import batch_steps
from tests.conftest import run_surge

RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}
PRESETS = [name for name, _ in list_presets()]
NEEDS = {
    "halfcheetah-ppo": "mujoco",
    "hopper-ppo": "mujoco",
    "minigrid-empty-ppo": "minigrid",
    **{f"highway-{r}": "highway_env" for r in ("sac", "vlmrl", "clg", "state")},
    **{f"lbf-{a}": "lbforaging" for a in ("qmix", "vdn", "iql")},
}
"""Presets that need an extra (by the module it installs). The highway CLG presets train the
built-in tiny CLIP first where $SURGE_CACHE lacks it (about ten minutes, once)."""


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["serial", "local", "ray"])
@pytest.mark.parametrize("preset", PRESETS)
def test_preset_trains_on_runtime(preset: str, runtime: str, run_dir: Path) -> None:
    if preset in NEEDS and importlib.util.find_spec(NEEDS[preset]) is None:
        pytest.skip(f"needs the {NEEDS[preset]} extra")
    cfg, _ = load_config(preset, [])
    if "population" in cfg.sections:
        pytest.skip("a population trains its members (tests/integration/test_population.py)")
    # the replay algorithms update once replay.min_size steps are stored, at replay.ratio
    replay = cfg.algo in ("dqn", "sac", "qmix")
    budget = 2 * batch_steps(cfg) + (cfg.replay.min_size if replay else 0)  # two updates
    if runtime == "ray":
        os.environ.update(RAY_ENV)
    result = run_surge(
        "train", preset, f"runtime={runtime}", f"run_dir={run_dir}", "log.progress=false",
        f"total_env_steps={budget}", "stop_return=null", timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "reached total_env_steps" in result.stderr
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    if replay:  # the budget is checked after each update, and updates follow the inserts
        assert rows[-1]["env_steps"] >= budget and rows[-1]["policy_version"] >= 1
    else:
        assert rows[-1]["env_steps"] == budget and rows[-1]["policy_version"] == 2
