"""LLM RL across Ray nodes: generation workers on other nodes than the trainer, their finished
groups carried to it by the group bridge (surge/streams/ray_bridge.py).

In process, two transports stand for two nodes' shared memory and the forwarders are stepped
by hand: a generation worker killed mid-group on its node leaves nothing partial on the
trainer's, and its new life starts after the trained batches. Then `surge train arith-grpo`
on a real three-node `ray.cluster_utils.Cluster` on 127.0.0.1, with the generators on the two
worker nodes and one of them SIGKILLed mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# First: it sets the variables that keep Ray on 127.0.0.1, which `import ray` reads.
from tests.integration.test_ray import RAY_ENV, ConnectionSampler, loopback_cluster

pytest.importorskip("transformers")
pytest.importorskip("ray")

from surge.config.load import load_config  # noqa: E402
from surge.llm.run import LLMRun
from surge.runtime.launch import start_worker
from surge.runtime.placement import NodeInfo, place  # noqa: E402
from surge.streams.control import Control  # noqa: E402
from surge.streams.params import ParameterService  # noqa: E402
from surge.streams.ray_bridge import (  # noqa: E402
    HANDED_OVER,
    GroupForwarder,
    GroupStream,
    ParamsForwarder,
    publish_params,
    write_groups,
)
from surge.streams.rollouts import GENERATED, GENERATING, SCORED  # noqa: E402
from surge.streams.transport import InlineTransport  # noqa: E402
from surge.workers.base import RunContext  # noqa: E402
from surge.workers.graph import Graph
from tests.conftest import SURGE, metrics_so_far, wait_for, workers_by_name  # noqa: E402

pytestmark = pytest.mark.integration

SMALL = [
    "sft.steps=0", "rollout.prompts_per_batch=4", "rollout.group_size=4",
    "log.interval_s=0", "log.progress=false", "task.heldout=50",
]  # fmt: skip


def _graph(run_dir: Path, *extra: str) -> tuple[RunContext, Graph]:
    from surge.llm import setup
    from surge.recipes.grpo import grpo_graph

    cfg, _ = load_config("arith-grpo", [*SMALL, "eval.workers=0", *extra])
    model_dir = setup.model_directory(cfg, run_dir, resuming=False)
    env, n_params = setup.shapes_and_size(cfg, model_dir)
    ctx = RunContext(cfg, env, run_dir, n_params, family=LLMRun(str(model_dir)))
    return ctx, grpo_graph(ctx)


def _groups(rows: dict[str, np.ndarray], state: int) -> set[int]:
    """The groups whose rows are in `state`."""
    return {int(g) for g, s in zip(rows["group"], rows["state"], strict=True) if s == state}


def _node(graph: Graph) -> InlineTransport:
    """One node's shared memory: every block and channel of the graph, as the agent makes it."""
    transport = InlineTransport(graph.all_layouts(), graph.channels)
    Control(transport).reset()
    for s in graph.streams:
        if s.kind == "versions":
            ParameterService(transport, s.block).reset()
    return transport


def test_placement_spreads_generators_and_keeps_the_reward_stage_with_the_trainer(
    tmp_path: Path,
) -> None:
    _, graph = _graph(tmp_path, "rollout.workers=2", "eval.workers=1", "grpo.kl_coef=0.1")
    cfg = load_config("arith-grpo", [])[0]
    nodes = [NodeInfo(f"n{i}", "127.0.0.1", c, 0.0, i == 0) for i, c in enumerate((3, 1, 1))]
    node = place(cfg, graph.workers, nodes).node_of
    assert {node[n] for n in ("rewarder-0", "reference-0", "llm-evaluator-0")} == {"n0"}
    assert node["trainer-0"] == "n0"
    assert sorted([node["generator-0"], node["generator-1"]]) == ["n1", "n2"]
    # On one node (a Ray instance surge starts itself) everything stays together.
    one = place(cfg, graph.workers, [NodeInfo("n0", "127.0.0.1", 4, 0.0, True)]).node_of
    assert set(one.values()) == {"n0"}


def test_groups_cross_nodes_whole_and_a_generator_killed_mid_group_is_not_shipped(
    tmp_path: Path,
) -> None:
    # 6 slots for groups of 4: a group's members run at different times, so a group can be
    # half written when the worker dies.
    ctx, graph = _graph(tmp_path, "max_policy_lag=1", "rollout.slots=6")
    slot = {w.name: i for i, w in enumerate(graph.workers)}
    home, away = _node(graph), _node(graph)  # the trainer's node, the generator's node
    trainer = start_worker(ctx, graph, slot["trainer-0"], home)[2]
    rewarder = start_worker(ctx, graph, slot["rewarder-0"], home)[2]
    generator = start_worker(ctx, graph, slot["generator-0"], away)[2]
    # The two bridges the Ray runtime wires for this placement (runtime/ray.py).
    groups = GroupStream("rollouts", "rollouts", "rewarder-0", HANDED_OVER["rollouts"])
    group_forwarder = GroupForwarder(away, groups, lambda rows: write_groups(home, groups, rows))
    block = next(s.block for s in graph.streams if s.kind == "versions")
    sub = "generator-0"
    params_forwarder = ParamsForwarder(
        home, block, ctx.n_params, [home.channel(sub)],
        lambda version, flat: publish_params(away, block, [away.channel(sub)], version, flat),
    )  # fmt: skip
    there, here = away.block("rollouts"), home.block("rollouts")

    def step(generator: Any) -> None:
        params_forwarder.step()
        generator.poll(0)
        group_forwarder.step()
        rewarder.poll(0)
        trainer.poll(0)

    # Life 0 runs until the trainer has moved on and a group is half done, then "dies".
    for _ in range(2000):
        step(generator)
        half = [k for k, (_, n, _) in generator.open.items() if n > 0]  # type: ignore[attr-defined]
        if half and trainer.version >= 3:  # type: ignore[attr-defined]
            break
    else:
        pytest.fail("no half-written group to kill the worker on")
    victim, at_kill = half[0], int(trainer.version)  # type: ignore[attr-defined]
    finished = _groups(there, GENERATED)
    group_forwarder.step()
    on_trainer_node = _groups(here, GENERATED) | _groups(here, SCORED)
    assert finished <= on_trainer_node and victim not in on_trainer_node  # whole groups only
    assert (there["state"] == GENERATING).any()  # the half group stays on its node

    # Life 1 on the same node: it starts after the trained batches, regenerates the
    # half-written group and skips those already shipped.
    generator = start_worker(ctx, graph, slot["generator-0"], away, life=1)[2]
    begun: list[int] = []
    begin = generator.rows.begin  # type: ignore[attr-defined]
    generator.rows.begin = lambda k, *a: begun.append(k) or begin(k, *a)  # type: ignore[attr-defined]
    while trainer.version < at_kill + 3:  # type: ignore[attr-defined]
        step(generator)
    B = ctx.cfg.rollout.prompts_per_batch
    assert victim in begun and not finished & set(begun)
    assert min(begun) >= at_kill * B, "a new life generated a group already trained"
    # Every row the trainer may read holds a whole group, stamped by whoever wrote it.
    for r in range(len(here["state"])):
        if here["state"][r] < SCORED:
            continue
        group = int(here["group"][r])
        mask = here["mask"][r]
        assert mask.any(axis=1).all(), f"group {group} has an empty episode"
        assert (here["versions"][r][mask] >= 0).all()
        if group in finished:
            assert here["life"][r] == 0, "a finished group was generated again"
        if group == victim:
            assert here["life"][r] == 1, "the half-written group was not regenerated"
    rows = [r for r in metrics_so_far(tmp_path) if "steps_per_s" in r]
    assert [r["policy_version"] for r in rows] == list(range(1, at_kill + 4))


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A head with room for the trainer's pod (trainer and reward worker: 1.5 CPUs) and two
    1-CPU worker nodes, each its own raylet, all on 127.0.0.1 (RAY_ENV, as test_ray.py)."""
    yield from loopback_cluster(head_cpus=2)


def test_generators_on_other_nodes_train_and_a_killed_one_is_restarted_there(
    cluster: str, run_dir: Path
) -> None:
    steps, lag = 1600, 1  # 100 versions of 4 prompts x 4 completions
    env = {**os.environ, **RAY_ENV, "OMP_NUM_THREADS": "1"}
    sampler = ConnectionSampler()
    sampler.start()
    started = time.monotonic()
    proc = subprocess.Popen(
        [*SURGE, "train", "arith-grpo", f"run_dir={run_dir}", "runtime=ray",
         f"ray.address={cluster}", *SMALL, "eval.workers=0", "rollout.workers=2",
         f"max_policy_lag={lag}", f"total_env_steps={steps}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert wait_for(lambda: len(metrics_so_far(run_dir)) >= 10, 150), "training never started"
        at_kill = len(metrics_so_far(run_dir))
        victim = workers_by_name(run_dir)["generator-1"]
        os.kill(int(victim["pid"]), signal.SIGKILL)
        _, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sampler.done.set()
        sampler.join()
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, err[-3000:]

    # Placement: the trainer and its reward worker on one node, a generator on each other.
    workers = workers_by_name(run_dir)
    node = {name: w["node_id"] for name, w in workers.items()}
    assert node["rewarder-0"] == node["trainer-0"]
    assert len({node["trainer-0"], node["generator-0"], node["generator-1"]}) == 3, node
    assert "placement:" in err and str(node["generator-1"])[:8] in err

    # The killed generator was restarted in place, on its node, and the run went on.
    assert "surge: generator-1 failed (" in err, err[-3000:]
    assert f"restarting it on node {str(victim['node_id'])[:8]} (1/3)" in err
    again = workers["generator-1"]
    assert again["restarts"] == 1 and again["pid"] != victim["pid"]
    assert again["node_id"] == victim["node_id"]
    assert workers["trainer-0"]["state"] == "finished"

    # Versions advanced one per batch, every batch whole, staleness within the bound.
    rows = [r for r in metrics_so_far(run_dir) if "steps_per_s" in r]
    versions = [r["policy_version"] for r in rows]
    assert versions == sorted(versions) and versions[-1] == steps // 16
    assert rows[-1]["env_steps"] == steps and rows[-1]["restarts"] == 1
    assert len(rows) > at_kill  # trained after the kill, on both generators' groups
    for r in rows:
        staleness = {k: v for k, v in r.items() if k.startswith("staleness/")}
        assert set(staleness) == {f"staleness/{i}" for i in range(lag + 1)}
        assert abs(sum(staleness.values()) - 1.0) < 1e-6
        assert r["tokens_per_s"] > 0 and 0.0 <= r["accuracy"] <= 1.0
        assert 1 <= r["response_length_mean"] <= 4  # rollout.max_new_tokens

    # Every socket of the run and the cluster stayed on 127.0.0.0/8.
    assert sampler.samples >= 3 and sampler.outside_loopback() == []
    print(f"three-node arith-grpo: {versions[-1]} versions, {elapsed:.0f} s")
