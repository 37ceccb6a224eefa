"""Self-play's addition to a PPO / APPO graph (`env.id=selfplay:<game>`): the league.

    trainer-0 --(params.default)--> league-0 --(league: snapshots)--> actor-*

The league worker keeps snapshots of the learner (surge/workers/league.py); each actor's
self-play envs draw the opponent of every episode from them (surge/streams/league.py). The
league runs in the trainer's pod, beside the parameters it copies.
"""

from __future__ import annotations

from surge.config.schema import ExperimentConfig
from surge.streams.league import league_layout
from surge.workers.graph import Edge, Graph, StreamSpec, WorkerSpec, worker

LEAGUE = "league"


def add_league(
    graph: Graph, cfg: ExperimentConfig, trainer: WorkerSpec, params: str, n_params: int
) -> Graph:
    s = cfg.selfplay
    league = worker("league", 0, cpus=cfg.ray.eval_cpus, pod=trainer.pod)
    # Neither edge wakes its reader: the league looks for versions on its clock, and actors
    # read the pool when an episode starts.
    graph = graph.with_worker(league, {params: [Edge(trainer.name, league.name, wake=False)]})
    actors = [w.name for w in graph.workers if w.kind == "actor"]
    stream = StreamSpec(
        LEAGUE,
        "snapshots",
        LEAGUE,
        tuple(Edge(league.name, a, wake=False) for a in actors),
        note=f"a snapshot every {s.snapshot_every} versions, the newest {s.pool_size} kept; "
        f"an episode's opponent is the newest ({s.latest_share:.0%}) or a "
        + (f"PFSP draw (power {s.pfsp_power:g})" if s.pfsp_power else "uniform draw"),
    )
    return graph.with_stream(stream, league_layout(s.pool_size, n_params))
