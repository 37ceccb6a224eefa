"""Placement of a `runtime=ray` run: pods stay whole and spread, the trainer goes to its GPU."""

from __future__ import annotations

import pytest

from surge.config.load import load_config
from surge.errors import ConfigError, UserError
from surge.runtime.placement import NodeInfo, place
from surge.runtime.placement import pods as pods_of
from surge.workers.graph import WorkerSpec
from tests.conftest import sketch_graph


def _cfg(*overrides: str):  # type: ignore[no-untyped-def]
    cfg, _ = load_config("cartpole-ppo", ["runtime=ray", *overrides])
    return cfg


def _workers(cfg) -> list[WorkerSpec]:  # type: ignore[no-untyped-def]
    """The recipe's workers: placement sees only what the graph says."""
    return sketch_graph(cfg).workers


def pods(cfg) -> list[list[str]]:  # type: ignore[no-untyped-def]
    """The pods after the leader's (the trainer's own)."""
    return pods_of(_workers(cfg))[1:]


def _nodes(*cpus: float, gpus: tuple[float, ...] = (), controller: int = 0) -> list[NodeInfo]:
    return [
        NodeInfo(f"n{i}", "127.0.0.1", c, gpus[i] if i < len(gpus) else 0.0, i == controller)
        for i, c in enumerate(cpus)
    ]


def test_pods_are_whole_and_spread_over_nodes() -> None:
    cfg = _cfg("workers.actors=6", "workers.policy_workers=3")
    assert pods(cfg) == [
        ["policy-0", "actor-0", "actor-3"],
        ["policy-1", "actor-1", "actor-4"],
        ["policy-2", "actor-2", "actor-5"],
    ]
    placement = place(cfg, _workers(cfg), _nodes(2, 2, 2, 2))
    node = placement.node_of
    assert node["trainer-0"] == "n0"  # the controller's node
    for pod in pods(cfg):
        assert len({node[name] for name in pod}) == 1, pod
    # Three pods of 1.5 CPUs: one on each of the three nodes with 2 free CPUs.
    assert sorted(node[pod[0]] for pod in pods(cfg)) == ["n1", "n2", "n3"]
    assert len(placement.describe()) == 4


def test_pods_spread_even_when_one_node_is_much_bigger() -> None:
    cfg = _cfg("workers.actors=8", "workers.policy_workers=4")  # pods of 1.5 CPUs
    placement = place(cfg, _workers(cfg), _nodes(8, 16))
    policies = [placement.node_of[f"policy-{p}"] for p in range(4)]
    assert sorted(policies) == ["n0", "n0", "n1", "n1"]


def test_inline_inference_makes_every_actor_a_pod() -> None:
    cfg = _cfg("workers.inference=inline", "workers.actors=3")
    assert pods(cfg) == [["actor-0"], ["actor-1"], ["actor-2"]]
    placement = place(cfg, _workers(cfg), _nodes(1, 1, 1, controller=0))
    assert [placement.node_of[f"actor-{a}"] for a in range(3)] == ["n1", "n2", "n1"]


def test_one_node_holds_everything_when_it_fits() -> None:
    cfg = _cfg()
    placement = place(cfg, _workers(cfg), _nodes(2))
    assert set(placement.node_of.values()) == {"n0"}
    assert placement.describe() == [
        "node n0 127.0.0.1 (this machine's node): trainer-0, policy-0, actor-0 [2/2 CPUs]"
    ]


def test_trainer_goes_where_the_gpu_is_and_policy_workers_share_it() -> None:
    cfg = _cfg("ray.trainer_gpus=1")
    placement = place(cfg, _workers(cfg), _nodes(4, 4, gpus=(0, 1)))
    assert placement.node_of["trainer-0"] == "n1"  # not the controller's node: no GPU there
    # Fractional GPUs: the trainer and two policy workers on the one device.
    cfg = _cfg("ray.trainer_gpus=0.5", "workers.policy_workers=2", "workers.actors=2",
               "ray.policy_gpus=0.25")  # fmt: skip
    placement = place(cfg, _workers(cfg), _nodes(4, 4, gpus=(0, 1)))
    assert {placement.node_of[n] for n in ("trainer-0", "policy-0", "policy-1")} == {"n1"}
    # A third policy worker would need more GPU than is left.
    cfg = _cfg("ray.trainer_gpus=0.5", "workers.policy_workers=3", "workers.actors=3",
               "ray.policy_gpus=0.25")  # fmt: skip
    with pytest.raises(UserError, match="policy-2, actor-2"):
        place(cfg, _workers(cfg), _nodes(4, 4, gpus=(0, 1)))


def test_no_room_is_a_user_error_that_names_the_settings() -> None:
    cfg = _cfg("workers.actors=4")  # a pod of 0.5 + 4 x 0.5 CPUs
    with pytest.raises(UserError) as info:
        place(cfg, _workers(cfg), _nodes(1, 2))
    assert "policy-0, actor-0" in info.value.problem
    assert "ray.actor_cpus=0.5" in info.value.fix
    with pytest.raises(UserError):
        place(cfg, _workers(cfg), [])


def test_evaluators_share_the_trainers_node() -> None:
    cfg = _cfg("eval.workers=2", "workers.actors=2", "workers.policy_workers=2")
    assert pods_of(_workers(cfg))[0] == ["trainer-0", "evaluator-0", "evaluator-1"]
    placement = place(cfg, _workers(cfg), _nodes(2, 2, 2))
    node = placement.node_of
    assert node["evaluator-0"] == node["evaluator-1"] == node["trainer-0"] == "n0"


def test_trainer_goes_to_the_named_node_and_a_wrong_name_is_refused() -> None:
    cfg = _cfg("ray.trainer_node=n1")
    placement = place(cfg, _workers(cfg), _nodes(2, 2))
    assert placement.node_of["trainer-0"] == "n1"  # not the controller's node
    assert placement.node_of["policy-0"] == "n0"  # the other pods still spread
    with pytest.raises(ConfigError, match=r"ray.trainer_node='n9' names 0 of"):
        place(_cfg("ray.trainer_node=n9"), _workers(cfg), _nodes(2, 2))
    with pytest.raises(ConfigError, match=r"ray.trainer_node='n' names 2 of"):
        place(_cfg("ray.trainer_node=n"), _workers(cfg), _nodes(2, 2))
    with pytest.raises(UserError, match=r"on ray.trainer_node=n1"):
        place(cfg, _workers(cfg), _nodes(2, 0.5))  # no room there
