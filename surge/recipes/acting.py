"""The acting half every env graph shares: actors, the policy workers that answer them, and
the streams between them and the trainer's parameters.

    actor-a   --(inference: obs -> actions)-->  policy-(a % P)   (or inline in actor-a)
    trainer   --(params: versions)----------->  policy-* (or the actors, inline)

PPO's graph (surge/recipes/ppo.py) adds the sample stream to its trainer, once per policy;
the replay graph (surge/recipes/replay_graph.py) adds replay shards between the actors and its
trainer. Both lay the acting half out here, so placement (a policy worker and the actors it
serves form a pod: the inference stream, which crosses processes on every env step, stays
inside one node), routing and the streams' notes are written once.
"""

from __future__ import annotations

from dataclasses import dataclass

from surge.config.schema import ExperimentConfig
from surge.streams.flow import FlowPolicy
from surge.workers.graph import Edge, StreamSpec, WorkerSpec, worker


@dataclass(frozen=True)
class ActingHalf:
    """The actors and policy workers of a graph, and who serves whom."""

    actors: list[WorkerSpec]
    servers: list[WorkerSpec]
    """Policy workers, `policy_workers` per policy (none with inline inference)."""
    groups: dict[str, tuple[int, ...]]
    """Actor -> the env groups it steps (its rows of the inference and sample streams)."""
    per_policy: int
    """Policy workers per policy: 0 with inline inference."""

    def server(self, actor: WorkerSpec, k: int = 0) -> str:
        """Who answers `actor`'s inference for the k-th policy (the actor itself, inline)."""
        if not self.per_policy:
            return actor.name
        return f"policy-{k * self.per_policy + actor.index % self.per_policy}"

    def subscribers(self, tag: str = "") -> list[str]:
        """The workers that load a policy's parameters: its policy workers, or the actors."""
        if self.per_policy:
            return [s.name for s in self.servers if s.policy == tag]
        return [a.name for a in self.actors]

    def edges(self, target: dict[str, str], source: str = "") -> tuple[Edge, ...]:
        """One edge per actor to `target[actor]` carrying the actor's env groups, written by
        the actor (or by `source`, a stage between the actors and `target`)."""
        return tuple(
            Edge(source or a.name, target[a.name], self.groups[a.name]) for a in self.actors
        )


def acting_half(cfg: ExperimentConfig, policy_tags: list[str]) -> ActingHalf:
    """The actors and, with remote inference, `workers.policy_workers` policy workers per
    policy (`policy_tags`: "" for a run's one policy), placed and sized by `workers.*` and
    `ray.*`."""
    w, r = cfg.workers, cfg.ray
    per_policy = w.policy_workers if w.inference == "remote" else 0
    servers = [
        worker(
            "policy",
            k * per_policy + p,
            threads=w.policy_threads,
            cpus=r.policy_cpus,
            gpus=r.policy_gpus,
            pod=f"policy-{p}",
            policy=tag,
        )
        for k, tag in enumerate(policy_tags)
        for p in range(per_policy)
    ]
    actors = [
        worker(
            "actor",
            a,
            threads=w.actor_threads,
            cpus=r.actor_cpus,
            pod=f"policy-{a % per_policy}" if per_policy else "",
        )
        for a in range(w.actors)
    ]
    groups = {
        a.name: tuple(range(a.index * w.ring_size, (a.index + 1) * w.ring_size)) for a in actors
    }
    return ActingHalf(actors, servers, groups, per_policy)


def inference_stream(
    half: ActingHalf, name: str, flow: FlowPolicy, note: str, k: int = 0, tag: str = ""
) -> StreamSpec:
    """The k-th policy's inference stream: each actor's env groups to the worker serving it."""
    target = {a.name: half.server(a, k) for a in half.actors}
    return StreamSpec(name, "request/response", name, half.edges(target), flow, note, policy=tag)


def params_stream(
    half: ActingHalf, block: str, trainer: str, n_params: int, tag: str = ""
) -> StreamSpec:
    """A policy's versions, from its trainer to every worker that acts with it."""
    return StreamSpec(
        block,
        "versions",
        block,
        tuple(Edge(trainer, s) for s in half.subscribers(tag)),
        note=f"the latest version, {n_params:,} float32 values, announced on each publish",
        policy=tag,
    )
