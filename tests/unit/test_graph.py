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
