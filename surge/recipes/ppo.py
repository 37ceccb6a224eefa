"""The PPO / APPO graph (SRL's actor-policy-trainer dataflow):

    actor-i  --(inference: obs -> actions)-->  policy-(i % P)   (or inline in actor-i)
    actor-i  --(samples: segments)---------->  trainer-0
    trainer-0 --(params.default: versions)--->  policy-* (or the actors, inline)

plus evaluation workers when `eval.workers` > 0 (surge/recipes/evaluation.py), and a league
worker for self-play games (surge/recipes/selfplay.py).
"""

from __future__ import annotations

from surge.algos.ppo_common import POLICY_OUTPUTS
from surge.config.schema import ExperimentConfig
from surge.envs.make import EnvInfo
from surge.envs.selfplay import is_selfplay_id
from surge.recipes.evaluation import add_evaluators
from surge.recipes.selfplay import add_league
from surge.runtime.graph import Edge, Graph, StreamSpec, worker
from surge.streams.flow import VersionBound
from surge.streams.inference import inference_layout
from surge.streams.params import params_block, params_layout
from surge.streams.sample import sample_layout

POLICY = "default"
"""The one policy of a PPO graph (a multi-agent recipe has several)."""


def ppo_graph(cfg: ExperimentConfig, env: EnvInfo, n_params: int) -> Graph:
    w, r = cfg.workers, cfg.ray
    remote = w.inference == "remote"
    n_policy = w.policy_workers if remote else 0
    trainer = worker(
        "trainer",
        0,
        threads=w.trainer_threads,
        restartable=False,
        ends_run=True,
        cpus=r.trainer_cpus,
        gpus=r.trainer_gpus,
        pod="trainer",
    )
    policies = [
        worker(
            "policy",
            p,
            threads=w.policy_threads,
            cpus=r.policy_cpus,
            gpus=r.policy_gpus,
            pod=f"policy-{p}",
        )
        for p in range(n_policy)
    ]
    # A policy worker and the actors it serves form a pod: the inference stream, which
    # crosses processes on every env step, stays inside one node.
    actors = [
        worker(
            "actor",
            a,
            threads=w.actor_threads,
            cpus=r.actor_cpus,
            pod=f"policy-{a % n_policy}" if remote else "",
        )
        for a in range(w.actors)
    ]
    groups = {
        a.name: tuple(range(a.index * w.ring_size, (a.index + 1) * w.ring_size)) for a in actors
    }
    server = {a.name: f"policy-{a.index % n_policy}" if remote else a.name for a in actors}
    subscribers = [p.name for p in policies] if remote else [a.name for a in actors]
    flow = VersionBound(cfg.max_policy_lag)
    params = params_block(POLICY)
    rows = w.envs_per_group * env.rows_per_env  # per env group: an env's agents are rows
    group = f"{w.envs_per_group} envs"
    if env.agents:
        group += f" x {len(env.agents)} agents"
    streams = [
        StreamSpec(
            "inference",
            "request/response",
            "inference",
            tuple(Edge(a.name, server[a.name], groups[a.name]) for a in actors),
            flow,
            f"a slot per env group ({cfg.total_groups} of {group}); the acting policy is "
            f"{flow.describe()}",
        ),
        StreamSpec(
            "samples",
            "segments",
            "samples",
            tuple(Edge(a.name, trainer.name, groups[a.name]) for a in actors),
            flow,
            f"segments of {cfg.ppo.rollout_len} steps x {group}, each step stamped with its "
            f"policy version; {flow.depth} slot(s) per group (max_policy_lag {flow.max_lag})",
        ),
        StreamSpec(
            params,
            "versions",
            params,
            tuple(Edge(trainer.name, s) for s in subscribers),
            note=f"the latest version, {n_params:,} float32 values, announced on each publish",
        ),
    ]
    layouts = {
        "inference": inference_layout(
            env.obs,
            env.action,
            POLICY_OUTPUTS,
            groups=cfg.total_groups,
            group_size=rows,
        ),
        "samples": sample_layout(
            env.obs,
            env.action,
            POLICY_OUTPUTS,
            depth=flow.depth,
            steps=cfg.ppo.rollout_len,
            envs=cfg.total_groups * rows,
            groups=cfg.total_groups,
            active=bool(env.agents),
        ),
        params: params_layout(n_params),
    }
    graph = Graph([trainer, *policies, *actors], layouts, streams)
    if is_selfplay_id(cfg.env.id):
        graph = add_league(graph, cfg, trainer, params, n_params)
    return add_evaluators(graph, cfg, trainer=trainer, params=params)
