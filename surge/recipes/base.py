"""An algorithm as one plug-in: everything the controller, the runtimes and the generic
workers need from it, in one object.

Acme's lesson: the algorithm owns its sample schema, its acting policy and its learner. In
surge an algorithm object (one per `algo` name, surge/config/algorithms.py) says

- which settings it checks (`validate`: what the config's types cannot express),
- what it prepares before a run (`prepare`: probe the env or task, count the parameters,
  check a checkpoint and find the version to start from) into the `RunContext` every worker
  is built from, which also names its acting policy (`RunContext.acting_policy`);
- its graph of workers and streams (`graph`), whose trainer runs its learner inside the
  trainer chassis (surge/workers/trainer.py);
- the lines that describe a run of it (`subject`, `describe`) and how `surge eval` scores a
  run of it (`evaluate`).

The controller (surge/runtime/controller.py) calls these and names no algorithm; nor do the
runtimes, nor the generic workers (actors, policy workers, evaluators), which find the
algorithm's pieces in their `RunContext` and ports.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from surge.config.schema import ExperimentConfig
from surge.devices import ROLES, Roles
from surge.workers.base import RunContext
from surge.workers.graph import Graph


class Algorithm:
    """The plug-in contract; an algorithm subclasses it (surge/recipes/ppo.py, grpo.py)."""

    name = ""

    reward_stage = False
    """Its graph puts a reward-model worker between the actors and the learner when
    `reward_model.mode` is not `env` (the replay graph: surge/recipes/replay_graph.py)."""
    warm_module: str | None = None
    """A module the trainer's process may import while the controller prepares the run
    (surge/runtime/warm.py): its learner's. None: no warm process."""
    device_roles: Roles = ROLES
    """(role, device setting) of its workers that run torch models: what is checked against
    the GPUs and shown in the run's header (surge/devices.py)."""
    mutable_settings: tuple[str, ...] = ()
    """Settings (config keys, `ppo.lr`) its learner reads afresh before each update, so
    they may change while it trains: by the trainer's settings channel
    (surge/tracking/hyperparams.py) or a population's explore step (docs/population.md)."""
    config_sections: ClassVar[dict[str, type]] = {}
    """Config sections it brings beyond ExperimentConfig's own, by name: dataclasses with
    their defaults and range rules (surge/config/rules.py), written at the top level of a
    config and read with `cfg.section(name)` (examples/my_algorithm.py)."""

    def validate(self, cfg: ExperimentConfig) -> None:
        """Raise a ConfigError naming the field for settings the types cannot rule out."""

    def prepare(
        self, cfg: ExperimentConfig, run_dir: Path | None, checkpoint: Path | None
    ) -> RunContext:
        """Everything the workers are built from. `checkpoint`: resume from it (check that
        it fits and start at its version). `run_dir` None: only to draw the graph (`surge
        graph`): nothing is written and no model is trained."""
        raise NotImplementedError

    def graph(self, ctx: RunContext) -> Graph:
        """The workers and streams of a run."""
        raise NotImplementedError

    def subject(self, cfg: ExperimentConfig) -> str:
        """What it trains on, for the run's first line (an env id, a task)."""
        return cfg.env.id

    def describe(self, ctx: RunContext, graph: Graph) -> list[str]:
        """Lines under the run's first line: its workers and the settings that shape them."""
        return [f"workers: {', '.join(spec.name for spec in graph.workers)}"]

    def evaluate(self, run_dir: Path, options: list[str], video: bool) -> str:
        """`surge eval RUN [key=value ...]`: score the run's newest checkpoint, and say how
        it did in one line."""
        raise NotImplementedError
