"""The PPO / APPO graph (SRL's actor-policy-trainer dataflow):

    actor-i  --(inference: obs -> actions)-->  policy-(i % P)   (or inline in actor-i)
    actor-i  --(samples: segments)---------->  trainer-0
    trainer-0 --(params.default: versions)--->  policy-* (or the actors, inline)

A multi-agent run with several `policies` has these three streams once per policy (named
`inference.<policy>`, `samples.<policy>`, `params.<policy>`), a trainer per policy
(`trainer-<k>` for the k-th) and P policy workers per policy; every actor steps its envs once
for all policies and writes each policy's agents into that policy's streams.

Plus evaluation workers when `eval.workers` > 0 (surge/recipes/evaluation.py), and a league
worker for self-play games (surge/recipes/selfplay.py).
"""

from __future__ import annotations

from surge.algos.ppo_common import POLICY_OUTPUTS
from surge.config.schema import ExperimentConfig
from surge.envs.selfplay import is_selfplay_id
from surge.envs.spaces import EnvInfo
from surge.models.recurrent_state import inference_state_fields, segment_state_fields
from surge.recipes.evaluation import add_evaluators
from surge.recipes.selfplay import add_league
from surge.streams.flow import VersionBound
from surge.streams.inference import inference_layout
from surge.streams.params import params_block, params_layout
from surge.streams.sample import sample_layout
from surge.workers.base import PolicyContext
from surge.workers.graph import Edge, Graph, StreamSpec, WorkerSpec, worker

POLICY = "default"
"""The one policy of a PPO graph without `policies`."""


def ppo_graph(
    cfg: ExperimentConfig,
    env: EnvInfo,
    n_params: int,
    policies: dict[str, PolicyContext] | None = None,
) -> Graph:
    """`policies`: every policy's env view and size (several policies); None: one policy,
    `env` and `n_params`."""
    policies = policies or {cfg.policy_names[0]: PolicyContext(env, n_params)}
    single = len(policies) == 1
    w, r = cfg.workers, cfg.ray
    remote = w.inference == "remote"
    n_policy = w.policy_workers if remote else 0
    trainers: list[WorkerSpec] = []
    servers: list[WorkerSpec] = []
    for k, name in enumerate(policies):
        tag = "" if single else name
        trainers.append(
            worker(
                "trainer",
                k,
                threads=w.trainer_threads,
                restartable=False,
                ends_run=True,
                cpus=r.trainer_cpus,
                gpus=r.trainer_gpus,
                pod="trainer" if k == 0 else f"trainer-{k}",
                policy=tag,
            )  # fmt: skip
        )
        # A policy worker and the actors it serves form a pod: the inference stream, which
        # crosses processes on every env step, stays inside one node.
        servers += [
            worker(
                "policy",
                k * n_policy + p,
                threads=w.policy_threads,
                cpus=r.policy_cpus,
                gpus=r.policy_gpus,
                pod=f"policy-{p}",
                policy=tag,
            )  # fmt: skip
            for p in range(n_policy)
        ]
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
    flow = VersionBound(cfg.max_policy_lag)
    streams: list[StreamSpec] = []
    layouts = {}
    for k, (name, policy) in enumerate(policies.items()):
        tag, suffix = ("", "") if single else (name, f".{name}")
        server = {
            a.name: f"policy-{k * n_policy + a.index % n_policy}" if remote else a.name
            for a in actors
        }
        subscribers = [p.name for p in servers if p.policy == tag] if remote else list(server)
        params = params_block(name)
        trainer = trainers[k]
        penv = policy.env
        rows = w.envs_per_group * penv.rows_per_env  # per env group: an env's agents are rows
        group = f"{w.envs_per_group} envs"
        if penv.agents:
            n = len(penv.agents)
            group += f" x {n} agent{'s' if n > 1 else ''}" + (f" ({name})" if tag else "")
        streams += [
            StreamSpec(
                f"inference{suffix}",
                "request/response",
                f"inference{suffix}",
                tuple(Edge(a.name, server[a.name], groups[a.name]) for a in actors),
                flow,
                f"a slot per env group ({cfg.total_groups} of {group}); the acting policy is "
                f"{flow.describe()}",
                policy=tag,
            ),
            StreamSpec(
                f"samples{suffix}",
                "segments",
                f"samples{suffix}",
                tuple(Edge(a.name, trainer.name, groups[a.name]) for a in actors),
                flow,
                f"segments of {cfg.ppo.rollout_len} steps x {group}, each step stamped with its "
                f"policy version; {flow.depth} slot(s) per group (max_policy_lag {flow.max_lag})",
                policy=tag,
            ),
            StreamSpec(
                params,
                "versions",
                params,
                tuple(Edge(trainer.name, s) for s in subscribers),
                note=f"the latest version, {policy.n_params:,} float32 values, announced on "
                "each publish",
                policy=tag,
            ),
        ]
        layouts[f"inference{suffix}"] = inference_layout(
            penv.obs,
            penv.action,
            POLICY_OUTPUTS,
            groups=cfg.total_groups,
            group_size=rows,
            state=inference_state_fields(cfg.model),
        )
        layouts[f"samples{suffix}"] = sample_layout(
            penv.obs,
            penv.action,
            POLICY_OUTPUTS,
            depth=flow.depth,
            steps=cfg.ppo.rollout_len,
            envs=cfg.total_groups * rows,
            groups=cfg.total_groups,
            active=bool(penv.agents),
            state=segment_state_fields(cfg.model),
        )
        layouts[params] = params_layout(policy.n_params)
    graph = Graph([*trainers, *servers, *actors], layouts, streams)
    lead, lead_params = trainers[0], params_block(next(iter(policies)))
    if is_selfplay_id(cfg.env.id):
        graph = add_league(graph, cfg, lead, lead_params, n_params)
    if single:
        return add_evaluators(graph, cfg, trainer=lead, params=lead_params)
    return add_evaluators(
        graph, cfg, trainer=lead, params=lead_params,
        more_params=[params_block(name) for name in list(policies)[1:]],
    )  # fmt: skip
