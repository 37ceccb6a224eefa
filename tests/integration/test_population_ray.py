"""A population on Ray: two CartPole members on a two-node `ray.cluster_utils.Cluster` on
127.0.0.1, their trainers on different nodes; SIGKILL of one member's trainer mid-run
resumes that member from its checkpoint while the other runs on, and both finish."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

# First: it sets the variables that keep Ray on 127.0.0.1, which `import ray` reads.
from tests.integration.test_ray import RAY_ENV

pytest.importorskip("ray")

from surge.tracking.checkpoint import latest_checkpoint  # noqa: E402
from tests.conftest import SURGE, wait_for, workers_by_name  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[str]:
    """A head and a worker node of 2 CPUs each: room for one member's trainer (1 CPU) and
    the other's actor (0.5) on each."""
    from ray.cluster_utils import Cluster

    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "include_dashboard": False},
        shutdown_at_exit=True,
    )
    try:
        c.add_node(num_cpus=2)
        c.wait_for_nodes()
        yield str(c.address)
    finally:
        c.shutdown()


def test_members_spread_over_nodes_and_a_killed_trainer_resumes(
    two_nodes: str, run_dir: Path
) -> None:
    argv = [
        "train", "cartpole-pbt", f"run_dir={run_dir}", "runtime=ray", f"ray.address={two_nodes}",
        "total_env_steps=40000", "stop_return=null", "ppo.rollout_len=32",
        "log.interval_s=0.5", "log.tensorboard=false", "log.first_checkpoint_s=0",
        "log.checkpoint_interval_s=0.5", "population.size=2",
        "population.perturbation_interval=100000", "population.initial={ppo.lr: [3e-3, 3e-3]}",
    ]  # fmt: skip
    env = {**os.environ, **RAY_ENV, "OMP_NUM_THREADS": "1"}
    population = subprocess.Popen(
        [*SURGE, *argv], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env
    )
    victim = run_dir / "member-1"
    try:
        started = wait_for(lambda: latest_checkpoint(victim) is not None, 150)
        assert started, population.communicate(timeout=10)[1][-3000:]
        trainers = [workers_by_name(run_dir / f"member-{k}")["trainer-0"] for k in range(2)]
        assert trainers[0]["node_id"] != trainers[1]["node_id"]  # one trainer per node
        os.kill(trainers[1]["pid"], signal.SIGKILL)
        _, err = population.communicate(timeout=300)
    finally:
        if population.poll() is None:
            population.kill()
    assert population.returncode == 0, err[-3000:]
    assert "member-1 exited with" in err and "resuming it" in err, err[-3000:]
    assert "member-0 exited" not in err  # the other member ran on, untouched
    for k in range(2):
        rows = [json.loads(x) for x in (run_dir / f"member-{k}" / "metrics.jsonl").open()]
        assert max(r["env_steps"] for r in rows if "steps_per_s" in r) >= 40000
    states = json.loads((run_dir / "members.json").read_text())
    assert [s["state"] for s in states] == ["finished", "finished"]
    assert states[1]["restarts"] == 1
