"""Where each worker of a `runtime=ray` run goes: decided by surge, from counts and resources.

The unit of placement is a *pod*: the workers whose specs name the same pod (workers/graph.py
`WorkerSpec.pod`; a worker with no pod is a pod of its own). The PPO recipe makes policy
worker p and every actor it serves a pod, so the inference stream, which crosses between
processes on every env step, stays in shared memory; the trainer's pod also holds the
evaluation workers. The LLM recipe makes each generation worker a pod and puts the reward and
reference workers in the trainer's. Only streams with a bridge (surge/streams/ray_bridge.py:
segments, parameter versions, finished groups) may cross nodes.

- The leader's pod (the trainer's) goes to `ray.trainer_node` when it is set (a population's
  members, spread over the nodes), else where its GPUs are, preferring the controller's node:
  the trainer writes the run directory (metrics, checkpoints) and the controller reads it.
- Pods spread: each goes to a node with the fewest pods so far (ties: the most CPUs still
  free, then a node without the trainer), so k pods use k nodes when k nodes have room, even
  when one node is much bigger than the others.

This module is plain Python (no Ray), so placement is testable on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from surge.config.schema import ExperimentConfig
from surge.errors import ConfigError, UserError
from surge.workers.graph import WorkerSpec

EPS = 1e-9


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    address: str
    cpus: float
    gpus: float
    is_controller_node: bool = False


@dataclass(frozen=True)
class Demand:
    cpus: float
    gpus: float


@dataclass
class Placement:
    node_of: dict[str, str]
    """Worker name -> node id."""
    nodes: list[NodeInfo]
    demands: dict[str, Demand] = field(default_factory=dict)

    def workers_on(self, node_id: str) -> list[str]:
        return [name for name, n in self.node_of.items() if n == node_id]

    @property
    def used_nodes(self) -> list[NodeInfo]:
        used = set(self.node_of.values())
        return [n for n in self.nodes if n.node_id in used]

    def describe(self) -> list[str]:
        """One line per node that hosts workers, for the start-up banner."""
        lines = []
        for node in self.used_nodes:
            names = self.workers_on(node.node_id)
            cpus = sum(self.demands[n].cpus for n in names) if self.demands else 0.0
            where = " (this machine's node)" if node.is_controller_node else ""
            lines.append(
                f"node {node.node_id[:8]} {node.address}{where}: {', '.join(names)} "
                f"[{cpus:g}/{node.cpus:g} CPUs]"
            )
        return lines


def demands(workers: list[WorkerSpec]) -> dict[str, Demand]:
    return {w.name: Demand(w.cpus, w.gpus) for w in workers}


def pods(workers: list[WorkerSpec]) -> list[list[str]]:
    """Workers grouped by pod, the leader's pod first, then in start order."""
    groups: dict[str, list[str]] = {}
    for w in sorted(workers, key=lambda w: not w.ends_run):
        groups.setdefault(w.pod or f"\0{w.name}", []).append(w.name)
    return list(groups.values())


def place(cfg: ExperimentConfig, workers: list[WorkerSpec], nodes: list[NodeInfo]) -> Placement:
    if not nodes:
        raise UserError("the Ray cluster has no alive nodes", "start the cluster (docs/scaling.md)")
    need = demands(workers)
    free_cpus = {n.node_id: n.cpus for n in nodes}
    free_gpus = {n.node_id: n.gpus for n in nodes}
    pods_on = {n.node_id: 0 for n in nodes}
    node_of: dict[str, str] = {}

    def fits(node: NodeInfo, d: Demand) -> bool:
        return free_cpus[node.node_id] + EPS >= d.cpus and free_gpus[node.node_id] + EPS >= d.gpus

    def take(node: NodeInfo, names: list[str]) -> None:
        for name in names:
            free_cpus[node.node_id] -= need[name].cpus
            free_gpus[node.node_id] -= need[name].gpus
            node_of[name] = node.node_id

    def total(pod: list[str]) -> Demand:
        return Demand(sum(need[n].cpus for n in pod), sum(need[n].gpus for n in pod))

    def place_pod(pod: list[str], preference: Callable[[NodeInfo], Any]) -> NodeInfo:
        """The pod onto the node it fits that `preference` ranks highest."""
        d = total(pod)
        candidates = [n for n in nodes if fits(n, d)]
        if not candidates:
            raise _no_room(cfg, _pod_name(pod), d, nodes)
        best = max(candidates, key=preference)
        take(best, pod)
        return best

    leader_pod, *others = pods(workers)
    lead = total(leader_pod)
    wanted = cfg.ray.trainer_node
    if wanted is not None:
        nodes_named = [n for n in nodes if n.node_id.startswith(wanted)]
        if len(nodes_named) != 1:
            ids = ", ".join(n.node_id for n in nodes)
            raise ConfigError(
                f"ray.trainer_node={wanted!r} names {len(nodes_named)} of the cluster's "
                f"alive nodes ({ids})",
                "give one node's id or a prefix only it has, or leave ray.trainer_node unset",
            )
    # The named node, else GPUs first (when asked for), then the controller's node, then
    # the most free CPUs.
    trainer_node = place_pod(
        leader_pod,
        lambda n: (
            wanted is None or n.node_id.startswith(wanted),
            lead.gpus > 0 and n.gpus,
            n.is_controller_node,
            free_cpus[n.node_id],
        ),
    ).node_id
    if wanted is not None and not trainer_node.startswith(wanted):
        raise _no_room(cfg, f"{_pod_name(leader_pod)} on ray.trainer_node={wanted}", lead, nodes)
    for pod in others:
        placed = place_pod(
            pod,
            lambda n: (
                -pods_on[n.node_id],
                round(free_cpus[n.node_id], 6),
                n.node_id != trainer_node,
            ),
        )
        pods_on[placed.node_id] += 1
    ordered = {w.name: node_of[w.name] for w in workers}
    return Placement(ordered, nodes, need)


def _pod_name(pod: list[str]) -> str:
    return pod[0] if len(pod) == 1 else f"the pod {', '.join(pod)}"


def _no_room(cfg: ExperimentConfig, what: str, d: Demand, nodes: list[NodeInfo]) -> UserError:
    sizes = ", ".join(f"{n.node_id[:8]}: {n.cpus:g} CPUs {n.gpus:g} GPUs" for n in nodes)
    r = cfg.ray
    return UserError(
        f"no Ray node has room for {what} ({d.cpus:g} CPUs, {d.gpus:g} GPUs) after the "
        f"workers placed before it; nodes: {sizes}",
        "lower the declared resources (ray.trainer_cpus="
        f"{r.trainer_cpus:g}, ray.policy_cpus={r.policy_cpus:g}, ray.actor_cpus="
        f"{r.actor_cpus:g}, ray.eval_cpus={r.eval_cpus:g}, ray.*_gpus), use more policy "
        "workers (smaller pods), or add nodes",
    )
