"""Evaluation workers, added to any recipe's graph: they subscribe to a policy's parameter
stream and write their results to the trainer, which logs them. They write no samples, so
training never waits for them (surge/workers/evaluation.py)."""

from __future__ import annotations

from surge.config.schema import ExperimentConfig
from surge.evaluation.suite import match_fields
from surge.streams.results import results_layout
from surge.workers.graph import Edge, Graph, StreamSpec, WorkerSpec, worker

EVAL_FIELDS = ("version", "episodes", "return_mean", "return_std", "length_mean", "video")
"""What an evaluation reports (`video`: 1 if it recorded one)."""

EVALUATIONS = "evaluations"


def add_evaluators(
    graph: Graph,
    cfg: ExperimentConfig,
    trainer: WorkerSpec,
    params: str,
    more_params: list[str] | None = None,
) -> Graph:
    """`graph` plus `eval.workers` evaluators of the policy published on stream `params`
    (and, in a multi-agent run with several policies, of those on `more_params`: the
    evaluators play every policy's agents), reporting to `trainer` (and running on its node:
    its pod)."""
    e = cfg.eval
    if e.workers == 0:
        return graph
    evaluators = [
        worker("evaluator", i, cpus=cfg.ray.eval_cpus, pod=trainer.pod, nice=e.nice)
        for i in range(e.workers)
    ]
    every = f"{e.every_versions} versions" if e.every_versions else f"{e.every_s:g} s"
    mode = "deterministic" if e.deterministic else "sampled"
    stream = StreamSpec(
        EVALUATIONS,
        "results",
        EVALUATIONS,
        tuple(Edge(ev.name, trainer.name, (ev.index,)) for ev in evaluators),
        note=f"{e.episodes} {mode} episode(s) every {every}, logged as eval/* by the trainer",
    )
    publishers = {s.name: s.edges[0].source for s in graph.streams if s.kind == "versions"}
    for ev in evaluators:
        # Not woken by each publish: an evaluator looks for new versions on its own clock.
        edges = {
            p: [Edge(publishers[p], ev.name, wake=False)] for p in [params, *(more_params or [])]
        }
        graph = graph.with_worker(ev, edges)
    fields = EVAL_FIELDS + match_fields(cfg)  # self-play: win / draw / loss rates per player
    return graph.with_stream(stream, results_layout(e.workers, fields))
