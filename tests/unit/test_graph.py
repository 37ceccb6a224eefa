"""The worker graph as data: streams and edges, and the generated docs/graphs.md."""

from __future__ import annotations

from pathlib import Path

from surge.runtime import graph_docs

REPO = Path(__file__).resolve().parents[2]


def test_streams_name_their_edges_and_flow() -> None:
    lines = graph_docs.graph_text("cartpole-ppo", ["workers.actors=2", "max_policy_lag=2"])
    text = "\n".join(lines)
    assert "samples (segments, block 'samples')" in text
    assert "actor-0, actor-1 --> trainer-0" in text
    assert "3 slot(s) per group (max_policy_lag 2)" in text
    assert "actor-0, actor-1 <-> policy-0" in text


def test_graph_docs_up_to_date() -> None:
    committed = (REPO / "docs" / "graphs.md").read_text()
    assert committed == graph_docs.render(), "regenerate with: python -m surge.runtime.graph_docs"


def _graph(*overrides: str):  # type: ignore[no-untyped-def]
    from surge.config.load import load_config
    from tests.conftest import sketch_graph

    cfg, _ = load_config("cartpole-ppo", list(overrides))
    return sketch_graph(cfg)


def test_ports_carry_the_routing_the_workers_used_to_derive() -> None:
    g = _graph("workers.actors=3", "workers.policy_workers=2", "workers.ring_size=2")
    actor = g.ports("actor-2")
    assert actor["inference"].sends_to == ("policy-0",)  # actor a -> policy a % 2
    assert actor["inference"].slots == (4, 5)  # its ring of env groups
    assert actor["samples"].sends_to == ("trainer-0",) and actor["samples"].slots == (4, 5)
    policy = g.ports("policy-0")
    assert policy["inference"].hears_from == ("actor-0", "actor-2")
    assert policy["inference"].slots_of("actor-2") == (4, 5)
    assert policy["params.default"].hears_from == ("trainer-0",)
    trainer = g.ports("trainer-0")
    assert trainer["params.default"].sends_to == ("policy-0", "policy-1")
    assert trainer["samples"].slots == tuple(range(6))
    assert g.channels == [s.name for s in g.workers]  # one inbox per worker


def test_inline_inference_subscribes_actors_to_parameters() -> None:
    g = _graph("workers.inference=inline", "workers.actors=2")
    assert [s.kind for s in g.workers] == ["trainer", "actor", "actor"]
    assert g.ports("trainer-0")["params.default"].sends_to == ("actor-0", "actor-1")
    assert g.ports("actor-1")["inference"].sends_to == ("actor-1",)  # answers itself


def test_evaluators_subscribe_and_report_to_the_trainer() -> None:
    g = _graph("eval.workers=2")
    ev = g.ports("evaluator-1")
    assert ev["params.default"].hears_from == ("trainer-0",)
    assert ev["evaluations"].sends_to == ("trainer-0",) and ev["evaluations"].slots == (1,)
    assert g.ports("trainer-0")["evaluations"].hears_from == ("evaluator-0", "evaluator-1")
    published = g.ports("trainer-0")["params.default"]
    assert published.sends_to == ("policy-0", "evaluator-0", "evaluator-1")
    assert published.wakes == ("policy-0",)  # evaluators look on their own clock
    spec = g.workers[-1]
    assert spec.nice == 19 and spec.pod == g.leader.pod and spec.restartable


def test_unknown_kinds_and_streams_are_refused() -> None:
    import pytest

    from surge.workers.graph import Edge, register_worker_kind, worker

    with pytest.raises(ValueError, match="unknown worker kind 'nope'"):
        worker("nope", 0)
    with pytest.raises(ValueError, match="not 'module:function'"):
        register_worker_kind("bad", "surge.workers.actor")
    with pytest.raises(ValueError, match="no stream named"):
        _graph().with_worker(worker("actor", 9), {"nowhere": [Edge("actor-9", "trainer-0")]})


def test_version_bound_backpressure_and_admission() -> None:
    import numpy as np

    from surge.streams.flow import VersionBound

    bound = VersionBound(max_lag=2)
    assert bound.depth == 3
    assert [bound.min_version(n) for n in range(5)] == [0, 0, 0, 1, 2]
    admitted = bound.admits(5, np.array([2, 3, 4, 5]))
    assert admitted.tolist() == [False, True, True, True]


def test_llm_workers_fork_from_shared_imports_and_others_spawn() -> None:
    """A failed fork-server preload is ignored silently by multiprocessing (each worker
    would then load torch itself): every shared import must resolve."""
    import importlib.util

    from surge.config.load import load_config
    from surge.runtime.local import start_context
    from tests.conftest import sketch_graph

    cfg, _ = load_config("arith-grpo", [])
    llm = sketch_graph(cfg)
    for module in llm.shared_imports:
        assert importlib.util.find_spec(module) is not None, module
    worker_modules = {spec.factory.partition(":")[0] for spec in llm.workers}
    assert worker_modules <= set(llm.shared_imports)
    assert start_context(llm).get_start_method() == "forkserver"
    assert start_context(_graph()).get_start_method() == "spawn"
