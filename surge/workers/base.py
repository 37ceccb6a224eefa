"""What every worker shares: the run context it is built from and the poll contract.

A worker is a loop with one job. Runtimes drive it through `poll(timeout)`: do one unit of
work if there is some (waiting at most `timeout` seconds for it) and say whether work was
done. The serial runtime polls every worker in turn with timeout 0; the local runtime polls
one worker per process with a blocking timeout. Workers never know which runtime runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from surge.config.schema import ExperimentConfig
from surge.envs.spaces import EnvInfo
from surge.tracking.run_dir import policy_home

if TYPE_CHECKING:
    from surge.streams.control import Control
    from surge.streams.ports import Port
    from surge.streams.transport import Transport


@dataclass(frozen=True)
class PolicyContext:
    """What differs between the policies of a multi-agent run (`policies`)."""

    env: EnvInfo
    """The policy's rows: its agents' spaces (surge/envs/multiagent.py)."""
    n_params: int
    start_version: int = 0
    checkpoint: str | None = None


@dataclass(frozen=True)
class RunContext:
    """Everything a worker is built from (picklable, sent to worker processes).

    `env`, `n_params`, `start_version` and `checkpoint` describe the run's first policy (its
    only one, but in multi-agent runs with several `policies`); a worker of another policy
    builds from `for_policy(name)`."""

    cfg: ExperimentConfig
    env: EnvInfo
    run_dir: Path
    n_params: int
    start_version: int = 0
    """Policy version (= trainer updates done) the run starts from: 0, or a checkpoint's."""
    checkpoint: str | None = None
    """Checkpoint the trainer restores, when resuming."""
    resumes: int = 0
    """How many times this run was resumed; mixed into seeds so resumed envs differ."""
    policies: dict[str, PolicyContext] = field(default_factory=dict)
    """Every policy's context, by name, when the run has several; empty otherwise."""
    acting_policy: str = ""
    """The algorithm's acting policy: `module:function` building it (models/acting.py), for
    every worker that acts (policy workers, inline inference, evaluators, opponents)."""
    explore: str = ""
    """The algorithm's exploration in the actors: `module:function` building it from this
    context (algos/exploration.py: DQN's epsilon-greedy); "" for none."""
    start_env_steps: int = 0
    """Env steps the run had done at its start (0, or its checkpoint's)."""
    family: Any = None
    """What only the algorithm family's own workers read, typed by the family: the replay's
    setup (`algos/transition_store.py` `ReplaySetup`, read with `replay_of`), the LLM run's
    model directory (`llm/model.py` `LLMRun`, read with `model_dir_of`). Shared code never
    looks inside it."""

    def for_policy(self, name: str) -> RunContext:
        """The context of policy `name`'s workers: its env view, parameter count, resume
        point, and, for all but the first policy, its own home for the trainer's metrics and
        checkpoints (`policy_home`). The first policy's (or "") is this context."""
        if not self.policies or name in ("", self.cfg.policy_names[0]):
            return self
        p = self.policies[name]
        home = policy_home(self.run_dir, name)
        return replace(
            self, env=p.env, n_params=p.n_params, start_version=p.start_version,
            checkpoint=p.checkpoint, run_dir=home,
        )  # fmt: skip

    @property
    def group_rows(self) -> int:
        """Rows of an env group in the streams: its envs, times their agents (a multi-agent
        env's agents are rows, surge/envs/multiagent.py)."""
        return self.cfg.workers.envs_per_group * self.env.rows_per_env

    @property
    def total_rows(self) -> int:
        """Columns of a sample-stream batch: every row of every env group."""
        return self.cfg.total_groups * self.group_rows


@dataclass(frozen=True)
class Binding:
    """What the runtime hands a worker it starts: its place in the graph and the transport."""

    name: str
    index: int
    ports: dict[str, Port]
    """By stream name (workers/graph.py `Graph.ports`)."""
    transport: Transport
    control: Control
    life: int = 0
    """0, then 1, 2, ... when the runtime restarts this worker in place."""
    policy: str = ""
    """The policy a trainer or policy worker serves (`RunContext.for_policy`); "" for
    workers of every policy (actors) or the only one."""

    @property
    def inbox(self) -> str:
        """The channel this worker waits on (named after it)."""
        return self.name

    def port(self, stream: str) -> Port:
        """This worker's port on stream `stream` (a RuntimeError if the graph gives it none)."""
        port = self.ports.get(stream)
        if port is None:
            raise RuntimeError(f"{self.name} has no port on stream {stream!r} in this graph")
        return port

    def port_of_kind(self, kind: str) -> Port:
        """Its one port on a stream of this kind (e.g. the `versions` stream it subscribes to)."""
        ports = [p for p in self.ports.values() if p.kind == kind]
        if len(ports) != 1:
            found = sorted(p.stream for p in ports)
            raise RuntimeError(f"{self.name} needs one port of kind {kind!r}, has {found}")
        return ports[0]


class Worker(Protocol):
    """What a runtime drives: a worker is built from its `Binding`, polled until `finished`, then
    closed."""

    name: str
    finished: bool

    def poll(self, timeout: float) -> bool:
        """Do one round of work, waiting up to `timeout` seconds for input; True if it did any."""

    def close(self) -> None:
        """Release what the worker holds (envs, files, models)."""
