"""The Python API: train, evaluate and load agents from Python, as the `surge` command does.

    import surge

    run = surge.train("cartpole-appo", total_env_steps=50_000)
    print(run.evaluate(episodes=10)["return_mean"])
    policy = surge.load(run.dir)

`surge.train` runs what `surge train` runs (the same config loading, warm trainer process and
controller), and raises the same errors: a `ConfigError` naming the field for a bad setting,
a `WorkerFailure` when a worker fails. Settings are `key=value` strings as on the command line
(`overrides=["ppo.lr=1e-3"]`) or keyword arguments whose double underscores stand for the dots
(`ppo__lr=1e-3`).

Everything heavy (numpy, gymnasium, torch, the runtimes) is imported inside the functions:
`import surge` stays cheap, and every worker process imports the package too.
"""

from __future__ import annotations

import json
import math
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The `surge.config` subpackage doubles as the `config()` function below (see `_ConfigPackage`).
from surge import config as config_package
from surge.errors import ConfigError, UserError

if TYPE_CHECKING:
    import ast

    import gymnasium as gym
    import numpy as np

    from surge.config.schema import ExperimentConfig
    from surge.models.acting import ActingPolicy
    from surge.population.controller import PopulationResult
    from surge.population.psro import PSROResult
    from surge.runtime.controller import TrainResult
    from surge.runtime.warm import WarmProcess

__all__ = ["Policy", "Run", "config", "keyword_overrides", "load", "train"]


# ---------------------------------------------------------------------- configs


def config(
    preset_or_file: str | Path | ExperimentConfig | None = None,
    /,
    *,
    overrides: Sequence[str] = (),
    **settings: Any,
) -> ExperimentConfig:
    """The validated config of a preset, a YAML file or a config object, with settings changed.

    What `surge train PRESET key=value ...` would train, as an `ExperimentConfig` (a
    dataclass: change it with `dataclasses.replace` and pass it to `train`).

    Args:
        preset_or_file: a preset name (`surge presets` lists them), a YAML path, an
            `ExperimentConfig`, or None for the default preset (`cartpole-appo`).
        overrides: `key=value` strings, as on the command line (`"ppo.lr=3e-4"`).
        **settings: more settings as keyword arguments, a double underscore for each dot
            (`ppo__lr=3e-4`, `total_env_steps=20_000`); applied after `overrides`.

    Raises:
        ConfigError: a setting is unknown or out of range; the message names the field.
        UserError: the preset or file does not exist.
    """
    return _resolve(preset_or_file, [*overrides, *keyword_overrides(settings)])[0]


def keyword_overrides(settings: Mapping[str, Any]) -> list[str]:
    """Keyword settings as the command line's `key=value` strings: `algo__lr=1e-3` becomes
    `"algo.lr=0.001"`. Values are written as YAML literals, so a Python string stays a string
    (`env__id="CartPole-v1"`), None becomes `null` and lists and dicts keep their structure.

    Raises:
        ConfigError: a value that has no YAML form (e.g. an arbitrary object).
    """
    return [
        f"{key.replace('__', '.')}={_yaml_value(key, value)}" for key, value in settings.items()
    ]


def _yaml_value(key: str, value: Any) -> str:
    """`value` as a YAML flow literal that the config loader parses back to it."""
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_value(key, v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = (f"{json.dumps(str(k))}: {_yaml_value(key, v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if value is None or isinstance(value, (str, bool, int, float)):
        return json.dumps(value)  # JSON scalars are YAML flow scalars
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return _yaml_value(key, value.item())  # numpy scalars, e.g. from a sweep's grid
    raise ConfigError(
        f"{key.replace('__', '.')}={value!r}: a {type(value).__name__} is not a config value",
        "pass a number, string, bool, None, or a list or dict of them",
    )


def _slug(env_id: str) -> str:
    """`my_pkg.envs:ALE/Pong-v5` -> `pong-v5`: short and safe for a directory name."""
    tail = env_id.split(":")[-1].split("/")[-1]
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in tail).lower()


def _resolve(
    source: str | Path | ExperimentConfig | None, items: list[str]
) -> tuple[ExperimentConfig, str]:
    """(config, run directory name), as `surge train SOURCE ITEMS...` makes them."""
    from surge.config.load import load_config
    from surge.config.schema import ExperimentConfig

    if isinstance(source, ExperimentConfig):
        cfg = _with_overrides(source, items)
        return cfg, f"{_slug(cfg.env.id)}-{cfg.algo}"
    cfg, name = load_config(None if source is None else str(source), items)
    if any(item.split("=", 1)[0].strip() in ("env", "env.id") for item in items):
        name = f"{_slug(cfg.env.id)}-{cfg.algo}"  # the preset's name would mislead
    return cfg, name


def _with_overrides(cfg: ExperimentConfig, items: list[str]) -> ExperimentConfig:
    """`cfg` with `key=value` overrides, converted and validated again as a loaded config is
    (a config changed in code with `dataclasses.replace` is checked here too)."""
    from surge.config.load import config_to_dict, config_with_overrides

    return config_with_overrides(config_to_dict(cfg), items, "in the ExperimentConfig given")


class _ConfigPackage(types.ModuleType):
    """`surge.config` is the config subpackage (`surge.config.load`, `surge.config.schema`)
    and, called, `config()` above. A function of that name in `surge` would not last: the
    first import of a submodule sets the package attribute to the subpackage."""

    def __call__(
        self,
        preset_or_file: str | Path | ExperimentConfig | None = None,
        /,
        *,
        overrides: Sequence[str] = (),
        **settings: Any,
    ) -> ExperimentConfig:
        return config(preset_or_file, overrides=overrides, **settings)


config_package.__class__ = _ConfigPackage


# ---------------------------------------------------------------------- training


def train(
    preset_or_config: str | Path | ExperimentConfig | None = None,
    /,
    *,
    overrides: Sequence[str] = (),
    **settings: Any,
) -> Run:
    """Train as `surge train` does, and return the run.

    Example:
        `surge.train("cartpole-ppo", total_env_steps=20_000, ppo__lr=1e-3)` is
        `surge train cartpole-ppo total_env_steps=20000 ppo.lr=1e-3`.

    The local runtime starts its workers with `spawn`, which imports the main module of a
    script in every worker: a script calls `train` under `if __name__ == "__main__":`
    (`python -c`, a notebook or the REPL need no guard; nor does `runtime=serial`, which
    starts no process). A script that does not is told so before anything starts.

    Args:
        preset_or_config: a preset name, a YAML path, an `ExperimentConfig` (e.g. from
            `surge.config`), or None for the default preset (`cartpole-appo`).
        overrides: `key=value` strings, as on the command line.
        **settings: more settings as keyword arguments, a double underscore for each dot
            (`ppo__lr=1e-3`); applied after `overrides`.

    Returns:
        The run: its directory, the `TrainResult` (why it stopped, steps, returns), its
        metrics, evaluation and newest checkpoint. A run stopped by Ctrl+C saves a checkpoint
        and returns with `result.reason == "interrupted"`.

    Raises:
        ConfigError: a setting is unknown or out of range; the message names the field.
        UserError: another mistake of the input (a missing preset, an env that cannot work).
        WorkerFailure: a worker failed; it carries the worker's name and traceback.
    """
    import multiprocessing

    from surge.runtime.warm import warm_trainer

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # A worker importing the main script, which calls train at its top level.
        raise UserError("surge.train was called while a worker process imported the script", _GUARD)
    items = [*overrides, *keyword_overrides(settings)]
    unguarded = _unguarded_call()
    if unguarded is not None:  # only a run that starts no process can work
        return train_source(preset_or_config, items, None, unguarded)
    # First, as `surge train` does: the trainer's process imports its modules while this
    # one loads the config and probes the env; a run that does not use it closes it.
    warm = warm_trainer()
    try:
        return train_source(preset_or_config, items, warm)
    finally:
        warm.close()


_GUARD = 'call it under `if __name__ == "__main__":` (docs/python-api.md)'


def train_source(
    source: str | Path | ExperimentConfig | None,
    items: list[str],
    warm: WarmProcess | None,
    unguarded: str | None = None,
) -> Run:
    """surge/cli.py `_train_with`, returning the run rather than an exit status.
    `unguarded`: where a script calls `train` outside its `__main__` guard (no warm process)."""
    from surge.recipes import algorithm_of
    from surge.runtime.controller import train as train_config

    cfg, name = _resolve(source, items)
    if "psro" in cfg.sections:  # best responses are runs of their own (docs/population.md)
        from surge.population.psro import train_psro

        if warm is not None:
            warm.close()
        psro = train_psro(cfg, name)
        return Run(psro.run_dir, population=psro)
    if "population" in cfg.sections:  # members are runs of their own (docs/population.md)
        from surge.population.controller import train_population

        if warm is not None:
            warm.close()  # each member's own `surge train` starts its trainer ahead
        population = train_population(cfg, name)
        return Run(population.run_dir, population=population)
    if unguarded is not None and cfg.runtime == "local":
        # spawn imports the main script in every worker, which would train again there
        raise UserError(
            f"surge.train is called at the top level of {unguarded}, outside an "
            '`if __name__ == "__main__":` block, and the local runtime\'s worker processes '
            "import the script",
            _GUARD,
        )
    module = algorithm_of(cfg).warm_module
    if warm is not None and module is not None:
        warm.preload(module)  # its learner's imports, while this process prepares the run
    result = train_config(cfg, name, warm)
    return Run(result.run_dir, result)


def _unguarded_call() -> str | None:
    """`file:line` of the top-level statement of the main script that led to this call, when
    it is not inside `if __name__ == "__main__":`; None when it is, or when the main module is
    no script file (`python -c`, the REPL, a notebook: workers import nothing of it)."""
    import ast
    import sys

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    frame: types.FrameType | None = sys._getframe()
    while frame is not None:  # the main module's own frame, at its top level
        if (
            main is not None
            and frame.f_globals is vars(main)
            and frame.f_code.co_name == "<module>"
        ):
            break
        frame = frame.f_back
    if frame is None or path is None:
        return None
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return None  # not a readable source file: let the run say what goes wrong
    line = frame.f_lineno
    for node in tree.body:
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            guarded = isinstance(node, ast.If) and _is_main_test(node.test)
            return None if guarded else f"{path}:{line}"
    return None


def _is_main_test(test: ast.expr) -> bool:
    """`__name__ == "__main__"` (either way round)."""
    import ast

    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    if not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    mains = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(mains) == 1


class Run:
    """A run directory and what it holds: metrics, checkpoints, evaluation.

    `surge.train` returns one; `Run(path)` opens a run trained earlier (its `result` is None).
    """

    def __init__(
        self,
        run_dir: str | Path,
        result: TrainResult | None = None,
        population: PopulationResult | PSROResult | None = None,
    ) -> None:
        self.dir = Path(run_dir)
        """The run directory (docs/runs.md)."""
        self.result = result
        """How training ended (`surge.runtime.controller.TrainResult`: `reason`,
        `env_steps`, `episode_return_mean`, `eval_return_mean`, ...); None for a run opened
        by its path, or a population."""
        self.population = population
        """A population's outcome (a config with a `population` section: its members are
        runs in `dir/member-<k>/`, docs/population.md); None otherwise."""

    def __repr__(self) -> str:
        ended = self.result or self.population
        reason = f", reason={ended.reason!r}" if ended is not None else ""
        return f"Run({str(self.dir)!r}{reason})"

    def metrics(self, rows: str = "all") -> list[dict[str, Any]]:
        """The run's logged metrics (its `metrics.jsonl`), one dict per record, oldest first:
        `pandas.DataFrame(run.metrics())` makes a table of them.

        Args:
            rows: `all`, `training` (the trainer's records: steps/s, losses, episode
                returns) or `eval` (evaluations: the `eval/*` fields).
        """
        from surge.tracking.metrics import read_metrics

        if rows not in ("all", "training", "eval"):
            raise UserError(f"rows={rows!r}: expected all, training or eval")
        return read_metrics(self.dir, rows)

    @property
    def checkpoint(self) -> Path | None:
        """The newest checkpoint's path (None before the first one is written)."""
        from surge.tracking.checkpoint import latest_checkpoint

        return latest_checkpoint(self.dir)

    def evaluate(
        self,
        episodes: int | None = None,
        *,
        deterministic: bool | None = None,
        seed: int | None = None,
        video: bool = False,
        **options: Any,
    ) -> dict[str, Any]:
        """Score the newest checkpoint, as `surge eval RUN` does; writes `eval.json` too.

        Args:
            episodes: episodes to play (None: 10, `surge eval`'s default).
            deterministic: act greedily (None: `surge eval`'s default, true).
            seed: the seed of the episodes (None: the run's).
            video: also record the first episode to `RUN/videos/*.mp4`.
            **options: the algorithm's other `surge eval` options (LLM runs: `pass_k`,
                `problems`).

        Returns:
            What `eval.json` holds: `return_mean`, `return_std`, `length_mean`, `returns`,
            `policy_version`, `env_steps`, ... (LLM runs: accuracy).
        """
        from surge.recipes import algorithm_of
        from surge.tracking.run_dir import load_run_config

        given = {"episodes": episodes, "deterministic": deterministic, "seed": seed, **options}
        items = [f"{k}={_yaml_value(k, v)}" for k, v in given.items() if v is not None]
        algorithm_of(load_run_config(self.dir)).evaluate(self.dir, items, video)
        result: dict[str, Any] = json.loads((self.dir / "eval.json").read_text())
        return result

    def load(self, deterministic: bool = True) -> Policy:
        """The newest checkpoint's policy: `surge.load(run.dir)`."""
        return load(self.dir, deterministic=deterministic)


# ---------------------------------------------------------------------- trained policies


def load(run_dir: str | Path, *, deterministic: bool = True, device: str = "cpu") -> Policy:
    """The policy of a run's newest checkpoint, to act with in your own loop.

    Supports single-policy runs of PPO and APPO (MLP, CNN and recurrent models), DQN (and
    R2D2) and SAC. The policy acts as `surge eval` plays: with the run's observation
    statistics, greedily unless told otherwise.

    Args:
        run_dir: a run directory (`run.dir`), or a `Run`'s directory as a string.
        deterministic: act greedily by default (the mode of the action distribution);
            `act(obs, deterministic=False)` samples instead.
        device: where a torch model (a CNN) acts; MLPs act in numpy on the CPU.

    Raises:
        UserError: not a run directory, no checkpoint yet, or a kind of run this does not
            load (multi-agent, LLM, QMIX): `surge eval` / `Run.evaluate` score those.
    """
    from surge.envs.spaces import EnvInfo
    from surge.models.acting import acting_policy
    from surge.seeds import derive_seed
    from surge.tracking.checkpoint import load_checkpoint, require_checkpoint
    from surge.tracking.run_dir import load_run_config

    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    acting, published = _acting_of(cfg, run_dir)
    checkpoint = require_checkpoint(run_dir, "load")
    state = load_checkpoint(checkpoint)
    env = _make_env(cfg)  # its spaces are the policy's, wrappers and preprocessing included
    spaces = EnvInfo(env.observation_space, env.action_space)
    env.close()
    policy = acting_policy(acting, spaces, cfg, derive_seed(cfg.seed, "eval"), device)
    policy.load(published(cfg, spaces, state))
    return Policy(policy, cfg, spaces, checkpoint, state, deterministic)


def _acting_of(cfg: ExperimentConfig, run_dir: Path) -> tuple[str, Any]:
    """(the acting policy's import path, the checkpoint -> published vector function) of the
    run's algorithm: what `surge eval` plays it with (surge/evaluation/checkpoint.py)."""
    from surge.envs.pettingzoo import is_pettingzoo_id

    if len(cfg.policy_names) > 1 or is_pettingzoo_id(cfg.env.id):
        raise UserError(
            f"surge.load: {run_dir} is a multi-agent run ({cfg.env.id}); it loads "
            "single-agent policies only",
            "score it with `surge eval RUN` or surge.Run(RUN).evaluate()",
        )
    if cfg.algo in ("ppo", "appo"):
        from surge.recipes.ppo import ACTING, checkpoint_flat

        return ACTING, checkpoint_flat
    if cfg.algo == "dqn":
        from surge.recipes.dqn import ACTING as DQN_ACTING
        from surge.recipes.dqn import _published as dqn_published

        return DQN_ACTING, dqn_published
    if cfg.algo == "sac":
        from surge.recipes.sac import ACTING as SAC_ACTING
        from surge.recipes.sac import _published as sac_published

        return SAC_ACTING, sac_published
    raise UserError(
        f"surge.load: runs of algo {cfg.algo} are not supported (it loads ppo, appo, dqn and "
        "sac policies)",
        "score it with `surge eval RUN` or surge.Run(RUN).evaluate()",
    )


def _make_env(cfg: ExperimentConfig) -> gym.Env[Any, Any]:
    from surge.envs.make import make_env

    return make_env(cfg.env)


class Policy:
    """A trained policy (from `surge.load`): `act` on one observation or on a batch.

    Observations are the run's env's (`make_env()` makes one, preprocessing and
    `env.wrappers` included: for `CartPole-v1` that is `gymnasium.make("CartPole-v1")`). A
    recurrent policy carries its state from call to call; `reset()` starts a new episode.
    """

    def __init__(
        self,
        policy: ActingPolicy,
        cfg: ExperimentConfig,
        spaces: Any,
        checkpoint: Path,
        state: dict[str, Any],
        deterministic: bool,
    ) -> None:
        from surge.envs.spaces import action_converter, obs_specs

        self._policy = policy
        self._specs = obs_specs(spaces.observation_space)
        self._to_env = action_converter(spaces.action_space, cfg.env.clip_actions)
        self._core: np.ndarray | None = None
        self.cfg = cfg
        """The run's config."""
        self.observation_space: gym.Space[Any] = spaces.observation_space
        """What `act` takes (one observation; a batch has a leading axis)."""
        self.action_space: gym.Space[Any] = spaces.action_space
        """What `act` returns for one observation."""
        self.checkpoint = checkpoint
        """The checkpoint loaded."""
        self.version = int(state["version"])
        """Its policy version (trainer updates)."""
        self.env_steps = int(state["env_steps"])
        """The env steps it was trained on."""
        self.deterministic = deterministic
        """Whether `act` is greedy unless told otherwise."""

    def __repr__(self) -> str:
        return f"Policy({self.cfg.algo} on {self.cfg.env.id}, version {self.version})"

    def act(self, obs: Any, deterministic: bool | None = None) -> Any:
        """The action for one observation (as `env.step` takes it: an int for Discrete
        actions), or an array of actions for a batch (a leading axis on every array).

        Args:
            obs: one observation of `observation_space`, or a batch of them.
            deterministic: greedy (True) or sampled (False); None: as loaded.
        """
        import numpy as np

        fields, single = self._fields(obs)
        rows = len(next(iter(fields.values())))
        core = self._state(rows)
        greedy = self.deterministic if deterministic is None else deterministic
        out = self._policy.act(fields, greedy, core)
        if core is not None:  # the state after this step, for the next one
            self._core = np.array(out[-1], np.float32)
        action = out[0]
        return self._to_env(action[0]) if single else np.asarray(action)

    def reset(self) -> None:
        """Start new episodes: a recurrent policy's state goes back to zeros."""
        self._core = None

    def make_env(self, **kwargs: Any) -> gym.Env[Any, Any]:
        """A new env of the run (`env` section: id, kwargs, Atari preprocessing, wrappers),
        whose observations `act` takes. `kwargs` are added to `env.kwargs`, e.g.
        `render_mode="human"`."""
        import dataclasses

        env = dataclasses.replace(self.cfg.env, kwargs={**self.cfg.env.kwargs, **kwargs})
        return _make_env(dataclasses.replace(self.cfg, env=env))

    def _fields(self, obs: Any) -> tuple[dict[str, np.ndarray], bool]:
        """The policy's input arrays, each with a leading batch axis, and whether `obs` was
        one observation."""
        import numpy as np

        from surge.envs.spaces import split_obs

        leaves = split_obs(obs, self.observation_space)
        fields: dict[str, np.ndarray] = {}
        single: bool | None = None
        for key, spec in self._specs.items():
            value = np.asarray(leaves[key], spec.dtype)
            if value.shape == spec.shape:
                one = True
            elif value.shape[1:] == spec.shape and value.ndim == len(spec.shape) + 1:
                one = False
            else:
                raise UserError(
                    f"observation {key!r} of shape {value.shape}: this policy takes "
                    f"{spec.shape} (one observation) or (N, {', '.join(map(str, spec.shape))}) "
                    "(a batch)",
                    "pass observations of the run's env (Policy.make_env() makes one)",
                )
            if single is not None and one != single:
                raise UserError("an observation mixes single and batched fields")
            single = one
            fields[key] = value[None] if one else value
        return fields, bool(single)

    def _state(self, rows: int) -> np.ndarray | None:
        """The recurrent state before this step (None: feed-forward)."""
        if self._policy.state_size == 0:
            return None
        if self._core is None or len(self._core) != rows:
            self._core = self._policy.initial_state(rows)
        return self._core
