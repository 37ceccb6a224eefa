"""Where a population's members run: the CPUs they share, and on Ray one cluster for all.

Every member is a whole run with its own workers, so a population of N members starts N
times a run's processes. `check_cpu_budget` refuses a population that would put more than
`MAX_PROCESSES_PER_CPU` processes on each CPU: members would then time out each other's
heartbeats and learn at a crawl (the error names what to lower).

On `runtime=ray` the controller connects once for the whole population (to `ray.address`, or
to a Ray instance it starts on this machine for every member) and hands each member the
cluster's address and a node for its trainer (`ray.trainer_node`), round-robin over the
nodes that have room for a trainer's pod, so members spread over the nodes; each member's
other pods then go where its placement puts them (surge/runtime/placement.py).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager

from surge.config.schema import ExperimentConfig
from surge.errors import ConfigError
from surge.workers.graph import WorkerSpec

MAX_PROCESSES_PER_CPU = 4
"""The most worker processes of all members together per CPU."""


def member_workers(cfg: ExperimentConfig) -> list[WorkerSpec]:
    """The workers of one member's run (the population's config without its section)."""
    from surge.recipes import algorithm_of

    sections = {k: v for k, v in cfg.sections.items() if k != "population"}
    member = dataclasses.replace(cfg, sections=sections)
    algorithm = algorithm_of(member)
    ctx = algorithm.prepare(member, run_dir=None, checkpoint=None)
    return list(algorithm.graph(ctx).workers)


def check_cpu_budget(size: int, workers: list[WorkerSpec], cpus: float, where: str) -> None:
    """ConfigError (exit 2) when `size` members of `workers` each are more processes than
    `MAX_PROCESSES_PER_CPU` per CPU of `cpus` (`where`: whose CPUs, for the message)."""
    processes = size * len(workers)
    if processes <= MAX_PROCESSES_PER_CPU * cpus:
        return
    names = ", ".join(w.name for w in workers)
    raise ConfigError(
        f"population.size={size}: {size} members of {len(workers)} workers each ({names}) "
        f"are {processes} processes for the {cpus:g} CPUs of {where}; at most "
        f"{MAX_PROCESSES_PER_CPU} per CPU let members keep their heartbeats and pace",
        "lower population.size, or give each member fewer workers (workers.actors, "
        "workers.policy_workers, workers.inference=inline, eval.workers=0), or run on a Ray "
        "cluster with more CPUs (runtime=ray ray.address=...)",
    )


def local_cpus() -> int:
    return os.cpu_count() or 1


@contextmanager
def ray_population(
    cfg: ExperimentConfig, size: int, workers: list[WorkerSpec]
) -> Iterator[list[list[str]]]:
    """Connected to the population's Ray cluster (started here when `ray.address` is unset,
    stopped at the end): yields each member's overrides, its `ray.address` and
    `ray.trainer_node`."""
    from surge.runtime.placement import demands, pods
    from surge.runtime.ray import LOCAL_RAY_ENV

    address = cfg.ray.address
    if address is None:
        for key, value in LOCAL_RAY_ENV.items():
            os.environ.setdefault(key, value)  # before `import ray`, which reads them
    import ray

    from surge.runtime.ray import cluster_nodes

    need = demands(workers)
    declared = sum(d.cpus for d in need.values())
    quiet = {"logging_level": logging.WARNING, "include_dashboard": False}
    if address is None:
        cpus = max(local_cpus(), math.ceil(size * declared))  # a scheduling budget, as `local`
        ray.init(address="local", num_cpus=cpus, **quiet)  # type: ignore[arg-type]
        address = ray.get_runtime_context().gcs_address
    else:
        ray.init(address=address, **quiet)  # type: ignore[arg-type]
    try:
        nodes = cluster_nodes()
        check_cpu_budget(size, workers, sum(n.cpus for n in nodes), "the Ray cluster")
        trainer_cpus = sum(need[name].cpus for name in pods(workers)[0])
        hosts = [n for n in nodes if n.cpus >= trainer_cpus] or nodes
        hosts.sort(key=lambda n: (not n.is_controller_node, n.node_id))
        yield [
            [f"ray.address={address}", f"ray.trainer_node={hosts[k % len(hosts)].node_id}"]
            for k in range(size)
        ]
    finally:
        ray.shutdown()
