"""The policy engine answers inference slots in place, for any set of groups."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from surge.config.load import load_config
from surge.runtime.launch import start_worker
from tests.conftest import in_process_streams


def test_groups_apart_are_answered_as_each_alone(tmp_path: Path) -> None:
    """Groups 1 and 3 of 4 (not one slice of the slots: index arrays, copies) get the values
    and actions the policy gives each group's rows alone, written to their own slots only."""
    cfg, _ = load_config(
        "cartpole-ppo", ["workers.ring_size=4", "log.progress=false", "log.tensorboard=false"]
    )
    graph, ctx, transport = in_process_streams(cfg, tmp_path)
    workers = {
        spec.name: start_worker(ctx, graph, slot, transport)[2]
        for slot, spec in enumerate(graph.workers)
        if spec.kind != "actor"  # the test writes the requests itself
    }
    policy = workers["policy-0"]
    engine = policy.engine  # type: ignore[attr-defined]
    assert engine.refresh(), "the trainer publishes version 0 at start"
    slots = policy.server.arrays  # type: ignore[attr-defined]
    obs = slots["obs/obs"]
    assert obs.shape[:2] == (4, cfg.workers.envs_per_group)
    obs[:] = np.random.default_rng(0).uniform(-1, 1, obs.shape).astype(obs.dtype)
    slots["request_id"][:] = 1
    untouched = {k: slots[k][[0, 2]].copy() for k in ("action", "value", "logp", "response_id")}

    engine.infer([1, 3])

    for key, before in untouched.items():  # groups 0 and 2 were not asked
        np.testing.assert_array_equal(slots[key][[0, 2]], before, err_msg=key)
    np.testing.assert_array_equal(slots["response_id"][[1, 3]], [1, 1])
    np.testing.assert_array_equal(slots["version"][[1, 3]], [0, 0])
    for g in (1, 3):
        action, logp, value = engine.policy.act({"obs": obs[g]}, deterministic=True)
        np.testing.assert_allclose(slots["value"][g], value, rtol=1e-5, atol=1e-6)
        assert set(slots["action"][g].tolist()) <= {0, 1}
    apart = {k: slots[k][[1, 3]].copy() for k in ("value", "logp", "action")}
    engine.infer([1, 2, 3])  # consecutive: one slice, views
    np.testing.assert_allclose(slots["value"][[1, 3]], apart["value"], rtol=1e-5, atol=1e-6)
