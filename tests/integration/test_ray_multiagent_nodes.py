"""Multi-agent and self-play runs across Ray nodes.

In process, two transports stand for two nodes' shared memory: the league's snapshots reach
an actor's node whole, in their slots. Then the spread and connect-four presets on a real
three-node `ray.cluster_utils.Cluster` on 127.0.0.1, with actors on the worker nodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

# First: it sets the variables that keep Ray on 127.0.0.1, which `import ray` reads.
from tests.integration.test_ray import RAY_ENV, ConnectionSampler, loopback_cluster

pytest.importorskip("ray")
pytest.importorskip("mpe2")

from surge.streams.league import LeaguePool, LeagueWriter, league_layout  # noqa: E402
from surge.streams.ray_bridge import SnapshotForwarder, write_snapshot  # noqa: E402
from surge.streams.transport import InlineTransport  # noqa: E402
from tests.conftest import metrics_so_far, run_surge, workers_by_name  # noqa: E402

pytestmark = pytest.mark.integration


def test_league_snapshots_reach_another_node_whole() -> None:
    layout = {"league": league_layout(3, 5)}
    home, away = InlineTransport(layout, []), InlineTransport(layout, [])
    writer = LeagueWriter(home, "league")
    shipped: list[int] = []

    def ship(number: int, version: int, flat: np.ndarray) -> None:
        shipped.append(number)
        write_snapshot(away, "league", number, version, flat)

    forwarder = SnapshotForwarder(home, "league", ship)
    forwarder.stopping.set()  # step() then returns at once instead of waiting
    for k in range(5):  # the pool keeps 3: snapshots 0 and 1 are overwritten by 3 and 4
        writer.add(10 * k, np.full(5, float(k), np.float32))
    forwarder.step()
    assert shipped == [2, 3, 4]  # only what still exists
    there = LeagueWriter(away, "league")
    assert there.count == 5 and there.newest_version() == 40
    pool = LeaguePool(away, "league", lambda: _Flat(5), latest_share=1.0)
    player = pool.sample(np.random.default_rng(0))
    assert player.name == "v40" and (player.policy.flat == 4.0).all()  # type: ignore[attr-defined]
    writer.add(50, np.full(5, 5.0, np.float32))
    forwarder.step()
    assert shipped == [2, 3, 4, 5] and there.newest_version() == 50


class _Flat:
    """The part of FlatPolicy the pool uses."""

    def __init__(self, n: int) -> None:
        self.flat = np.zeros(n, np.float32)

    def reload(self) -> None:
        pass


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A head with room for the trainer's pod and two 1-CPU worker nodes for the actors,
    each its own raylet, all on 127.0.0.1."""
    yield from loopback_cluster(head_cpus=2)


@pytest.mark.parametrize(
    ("preset", "extra"),
    [
        ("spread-mappo", ["total_env_steps=4000", "workers.envs_per_group=2"]),
        (
            "connect4-selfplay",
            [
                "total_env_steps=16384",
                "workers.envs_per_group=4",
                "selfplay.snapshot_every=2",
                "eval.workers=0",
            ],
        ),  # fmt: skip
    ],
)
def test_multiagent_presets_on_three_nodes(
    cluster: str, run_dir: Path, preset: str, extra: list[str]
) -> None:
    import os

    os.environ.update(RAY_ENV)
    sampler = ConnectionSampler()
    sampler.start()
    try:
        result = run_surge(
            "train", preset, f"run_dir={run_dir}", "runtime=ray", f"ray.address={cluster}",
            "ray.actor_cpus=1", "log.interval_s=0", "log.progress=false", *extra, timeout=300,
        )  # fmt: skip
    finally:
        sampler.done.set()
        sampler.join()
    assert result.returncode == 0, result.stderr[-3000:]
    node = {name: w["node_id"] for name, w in workers_by_name(run_dir).items()}
    assert node["actor-0"] != node["trainer-0"] and node["actor-1"] != node["trainer-0"]
    assert node["actor-0"] != node["actor-1"]
    last = [r for r in metrics_so_far(run_dir) if "steps_per_s" in r][-1]
    steps = int(extra[0].split("=")[1])
    assert last["env_steps"] == steps
    if preset == "connect4-selfplay":
        assert node["league-0"] == node["trainer-0"]
    assert sampler.samples >= 1 and sampler.outside_loopback() == []
