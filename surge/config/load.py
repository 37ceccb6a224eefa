"""Load an `ExperimentConfig` from a preset or YAML file plus `key=value` overrides.

The conversion from nested dicts to the dataclasses is strict and driven by the type hints
in `schema.py`, so a new field needs no change here. Every error names the dotted field,
what was given and what is accepted.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.resources
import importlib.util
import math
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from surge import devices
from surge.config.algorithms import load_algorithm
from surge.config.reward_model_schema import STATE_KEYS
from surge.config.schema import ExperimentConfig
from surge.errors import ConfigError, UserError

DEFAULT_PRESET = "cartpole-appo"
_DESCRIPTION_PREFIX = "# description:"


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `3e-4` and `5e5` as floats.

    PyYAML follows YAML 1.1, where a float needs a dot and a signed exponent, so `3e-4`
    would otherwise arrive as the string '3e-4'.
    """


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str) -> Any:
    """Parse one YAML document (or one override value) with surge's loader."""
    return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader: no arbitrary objects


def read_yaml(path: Path, what: str = "config file") -> dict[str, Any]:
    """Read a YAML mapping from `path`; parse errors name the file and line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"{what} not found: {path}", "check the path") from None
    except OSError as e:
        raise UserError(f"cannot read {what} {path}: {e}") from None
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(
            f"{where}: invalid YAML: {problem}",
            "fix the YAML syntax at that line (indentation, a missing ':' or an unclosed "
            "bracket or quote)",
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping of keys to values at the top level, "
            f"got {type(data).__name__}",
            "write the config as `key: value` lines, e.g. `seed: 1`",
        )
    return data


# ---------------------------------------------------------------- presets


def _presets_dir() -> Any:
    return importlib.resources.files("surge.config").joinpath("presets")


def list_presets() -> list[tuple[str, str]]:
    """(name, description) of every shipped preset, sorted by name."""
    out = []
    for entry in _presets_dir().iterdir():
        if not entry.name.endswith(".yaml"):
            continue
        first = entry.read_text().splitlines()[:1]
        desc = ""
        if first and first[0].startswith(_DESCRIPTION_PREFIX):
            desc = first[0][len(_DESCRIPTION_PREFIX) :].strip()
        out.append((entry.name[: -len(".yaml")], desc))
    return sorted(out)


def _preset_text(name: str) -> str:
    entry = _presets_dir().joinpath(f"{name}.yaml")
    if not entry.is_file():
        known = "\n".join(f"    {n:<14} {d}" for n, d in list_presets())
        raise ConfigError(
            f"unknown preset '{name}'",
            f"use one of the presets below, or the path to a YAML file:\n{known}",
        )
    return str(entry.read_text())


def _looks_like_path(source: str) -> bool:
    return source.endswith((".yaml", ".yml")) or "/" in source or Path(source).is_file()


# ---------------------------------------------------------------- overrides

_OVERRIDE_FIX = (
    "write each override as key=value with a dotted key, e.g. ppo.lr=3e-4, "
    "env.id=Acrobot-v1, model.hidden_sizes=[128,128] or stop_return=null"
)


def _apply_override(raw: dict[str, Any], text: str, origins: dict[str, str]) -> None:
    key, sep, value_text = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override '{text}' is not of the form key=value", _OVERRIDE_FIX)
    origin = f"from the command line: {text}"
    try:
        value = parse_yaml(value_text) if value_text.strip() else ""
    except yaml.YAMLError as e:
        detail = getattr(e, "problem", None) or str(e)
        raise ConfigError(
            f"{key}: cannot parse the value {value_text!r} ({origin}): {detail}",
            "quote the value or fix its YAML syntax, e.g. model.hidden_sizes=[64,64]",
        ) from None
    parts = key.split(".")
    _check_key_path(parts, origin)
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    last = parts[-1]
    old = node.get(last)
    # `ppo={lr: 1e-3}` updates the ppo section rather than dropping its other keys.
    if isinstance(old, dict) and isinstance(value, dict) and _is_section(parts):
        old.update(value)
    else:
        node[last] = value
    origins[key] = origin


def _is_section(parts: list[str]) -> bool:
    tp: Any = ExperimentConfig
    for part in parts:
        if not dataclasses.is_dataclass(tp):
            return False
        tp = typing.get_type_hints(tp)[part]
    return dataclasses.is_dataclass(tp)


def _check_key_path(parts: list[str], origin: str) -> None:
    """Reject an override key that does not name a field, before any value is converted."""
    tp: Any = ExperimentConfig
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(tp):
            if typing.get_origin(tp) is dict:
                return  # free-form mapping such as env.kwargs: any sub-key is fine
            parent = ".".join(parts[:i])
            raise ConfigError(
                f"'{parent}' is a single value, not a section, so '{'.'.join(parts)}' "
                f"does not exist ({origin})",
                f"set it directly: {parent}=<value>",
            )
        hints = typing.get_type_hints(tp)
        if part not in hints:
            _unknown_key(".".join(parts[:i]), part, list(hints), origin)
        tp = hints[part]


def _unknown_key(parent: str, key: str, valid: list[str], origin: str) -> typing.NoReturn:
    dotted = f"{parent}.{key}" if parent else key
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f"did you mean '{parent + '.' if parent else ''}{close[0]}'? " if close else ""
    level = f"under '{parent}'" if parent else "at the top level"
    suffix = f" ({origin})" if origin else ""
    raise ConfigError(
        f"unknown key '{dotted}'{suffix}",
        f"{hint}valid keys {level}: {', '.join(valid)}",
    )


# ---------------------------------------------------------------- conversion


def _describe(tp: Any) -> str:
    """How a type reads in an error message: 'a float', 'one of 'serial', 'local''."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        arms = [_describe(a) for a in typing.get_args(tp) if a is not type(None)]
        none = " or null" if type(None) in typing.get_args(tp) else ""
        return " or ".join(arms) + none
    if origin is list:
        return f"a list of {_describe(typing.get_args(tp)[0]).split(' ', 1)[1]}s"
    if origin is dict:
        return "a mapping"
    names = {int: "an integer", float: "a float", str: "a string", bool: "a boolean"}
    if tp in names:
        return names[tp]
    if dataclasses.is_dataclass(tp):
        return "a mapping of keys"
    return str(tp)


class _Converter:
    def __init__(self, origins: dict[str, str], default_origin: str) -> None:
        self.origins = origins
        self.default_origin = default_origin

    def origin(self, path: str) -> str:
        best = ""
        for key in self.origins:
            if (path == key or path.startswith((key + ".", key + "["))) and len(key) > len(best):
                best = key
        return self.origins[best] if best else self.default_origin

    def fail(self, path: str, tp: Any, value: Any, fix: str = "") -> typing.NoReturn:
        where = self.origin(path)
        suffix = f" ({where})" if where else ""
        problem = f"{path}: expected {_describe(tp)}, got {value!r}{suffix}"
        raise ConfigError(problem, fix)

    def convert(self, value: Any, tp: Any, path: str) -> Any:
        origin = typing.get_origin(tp)
        if dataclasses.is_dataclass(tp):
            return self.dataclass(value, tp, path)
        if origin in (Union, types.UnionType):
            args = typing.get_args(tp)
            if value is None and type(None) in args:
                return None
            arms = [a for a in args if a is not type(None)]
            fix = ""
            for arm in arms:
                try:
                    return self.convert(value, arm, path)
                except ConfigError as e:
                    if arm not in (int, float, str, bool):
                        raise  # keep the inner path, e.g. model.hidden_sizes[1]
                    fix = e.fix
            self.fail(path, tp, value, fix)
        if origin is Literal:
            allowed = typing.get_args(tp)
            # `type(a) is type(value)` keeps True from matching a literal 1
            if any(value == a and type(a) is type(value) for a in allowed):
                return value
            self.fail(path, tp, value)
        if origin is list:
            if not isinstance(value, list | tuple):
                self.fail(path, tp, value, "write a list such as [64, 64]")
            (item,) = typing.get_args(tp)
            return [self.convert(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
        if origin is dict:
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                self.fail(path, tp, value, "write a mapping such as {render_mode: null}")
            return dict(value)
        if tp is Any:
            return value
        if tp is bool:
            if not isinstance(value, bool):
                self.fail(path, tp, value, "write true or false")
            return value
        if tp is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                return int(value)  # 5e5 -> 500000
            self.fail(path, tp, value, "write a whole number such as 500000 or 5e5")
        if tp is float:
            if isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
            self.fail(path, tp, value, "write a number such as 3e-4 or 0.99")
        if tp is str:
            if not isinstance(value, str):
                self.fail(path, tp, value, f"quote the value: {path}='{value}'")
            return value
        raise TypeError(f"surge.config.load cannot convert type {tp!r} (field {path})")

    def dataclass(self, value: Any, cls: Any, path: str) -> Any:
        if not isinstance(value, dict):
            self.fail(path or "config", cls, value, "write `key: value` pairs under it")
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        kwargs = {}
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            if key not in names:
                _unknown_key(path, str(key), names, self.origin(sub))
            kwargs[key] = self.convert(item, hints[key], sub)
        return cls(**kwargs)


# ---------------------------------------------------------------- validation


def _at_least(low: float) -> Callable[[Any], bool]:
    return lambda v: v >= low


def _positive(v: Any) -> bool:
    return bool(v > 0)


_WORKER_COUNTS = ("actors", "ring_size", "envs_per_group", "policy_workers")
_THREADS = ("actor_threads", "policy_threads", "trainer_threads")
_RAY_RESOURCES = (
    "trainer_cpus",
    "trainer_gpus",
    "policy_cpus",
    "policy_gpus",
    "actor_cpus",
    "eval_cpus",
)

RULES: list[tuple[str, Callable[[Any], bool], str]] = [
    ("env.id", lambda v: bool(v.strip()), "a non-empty Gymnasium id"),
    ("env.max_episode_steps", lambda v: v is None or v >= 1, ">= 1 (or null)"),
    *[
        (f"env.atari.{n}", _at_least(1), ">= 1")
        for n in ("frame_skip", "screen_size", "frame_stack")
    ],
    ("env.atari.noop_max", _at_least(0), ">= 0"),
    ("env.atari.repeat_action_probability", lambda v: 0 <= v < 1, "in [0, 1)"),
    *[(f"workers.{n}", _at_least(1), ">= 1") for n in (*_WORKER_COUNTS, *_THREADS)],
    ("workers.trainer_threads_alone", _at_least(0), ">= 0"),
    ("workers.inference_spin_us", _at_least(0), ">= 0 (0: never poll)"),
    ("workers.max_restarts", _at_least(0), ">= 0"),
    ("workers.heartbeat_timeout_s", _positive, "> 0"),
    *[(f"ray.{n}", _at_least(0), ">= 0") for n in _RAY_RESOURCES],
    ("model.hidden_sizes", lambda v: len(v) > 0, "a non-empty list such as [64, 64]"),
    ("model.hidden_sizes", lambda v: all(s >= 1 for s in v), "a list of positive widths"),
    *[(f"ppo.{n}", _at_least(1), ">= 1") for n in ("rollout_len", "epochs", "minibatches")],
    *[(f"ppo.{n}", _positive, "> 0") for n in ("lr", "adam_eps", "clip_coef", "max_grad_norm")],
    ("ppo.gamma", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("ppo.gae_lambda", lambda v: 0 <= v <= 1, "in [0, 1]"),
    *[(f"ppo.{n}", _at_least(0), ">= 0") for n in ("ent_coef", "vf_coef")],
    ("ppo.target_kl", lambda v: v is None or v > 0, "> 0 (or null)"),
    ("ppo.clip_reward", _positive, "> 0"),
    ("model.clip_obs", _positive, "> 0"),
    ("model.core_size", _at_least(1), ">= 1"),
    ("ppo.burn_in", _at_least(0), ">= 0"),
    *[(f"appo.{n}", _positive, "> 0") for n in ("rho_bar", "c_bar")],
    *[(n, _at_least(1), ">= 1") for n in ("total_env_steps", "return_window")],
    ("max_policy_lag", _at_least(0), ">= 0"),
    ("max_train_time_s", lambda v: v is None or v > 0, "> 0 (or null)"),
    *[(f"log.{n}", _at_least(0), ">= 0") for n in ("interval_s", "checkpoint_interval_s")],
    ("log.first_checkpoint_s", _at_least(0), ">= 0"),
    ("log.keep_checkpoints", _at_least(1), ">= 1"),
    *[(f"eval.{n}", _at_least(0), ">= 0") for n in ("workers", "every_versions", "video_every")],
    *[(f"eval.{n}", _positive, "> 0") for n in ("every_s", "final_timeout_s")],
    ("eval.episodes", _at_least(1), ">= 1"),
    ("eval.nice", lambda v: 0 <= v <= 19, "in [0, 19]"),
    *[(f"selfplay.{n}", _at_least(1), ">= 1") for n in ("snapshot_every", "pool_size")],
    ("selfplay.latest_share", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("selfplay.pfsp_power", _at_least(0), ">= 0"),
    (
        "selfplay.eval_opponents",
        lambda v: set(v) <= {"random", "heuristic"} and len(set(v)) == len(v),
        "a list of distinct players from [random, heuristic]",
    ),
    # LLM RL (algo: grpo)
    *[
        (f"rollout.{n}", _at_least(1), ">= 1")
        for n in ("group_size", "prompts_per_batch", "max_new_tokens", "workers", "threads")
    ],
    ("rollout.slots", _at_least(0), ">= 0"),
    ("rollout.temperature", _at_least(0), ">= 0"),
    ("rollout.top_p", lambda v: 0 < v <= 1, "in (0, 1]"),
    *[
        (f"grpo.{n}", _positive, "> 0")
        for n in ("lr", "clip_high", "behav_cap", "aipo_rho", "max_grad_norm")
    ],
    ("grpo.clip_low", lambda v: 0 < v < 1, "in (0, 1)"),
    *[(f"grpo.{n}", _at_least(0), ">= 0") for n in ("weight_decay", "kl_coef")],
    ("grpo.threads", _at_least(1), ">= 1"),
    ("sft.steps", _at_least(0), ">= 0"),
    ("sft.batch_size", _at_least(1), ">= 1"),
    ("sft.lr", _positive, "> 0"),
    ("sft.target_accuracy", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("sft.threads", _at_least(1), ">= 1"),
    ("task.heldout", _at_least(1), ">= 1"),
    ("task.pass_k", _at_least(0), ">= 0"),
    *[(f"tiny_model.{n}", _at_least(1), ">= 1") for n in ("hidden", "layers", "heads")],
    # replay-based RL (algo: dqn | sac)
    *[
        (f"replay.{n}", _at_least(1), ">= 1")
        for n in ("capacity", "shards", "batch_size", "prefetch", "segment_len")
    ],
    ("replay.ratio", _positive, "> 0"),
    *[(f"replay.{n}", _at_least(0), ">= 0") for n in ("min_size", "error_buffer", "alpha")],
    ("replay.beta0", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("replay.priority_eps", _positive, "> 0"),
    *[(f"{n}.threads", _at_least(1), ">= 1") for n in ("dqn", "sac")],
    # a model as the reward (reward_model.mode != env)
    *[(f"reward_model.{n}", _at_least(1), ">= 1") for n in ("batch_size", "max_pending")],
    *[
        (f"reward_model.{n}", _positive, "> 0")
        for n in ("v_target", "d_max", "theta_max_deg", "sigma_max")
    ],
    ("reward_model.threshold", lambda v: v is None or _positive(v), "> 0 (or null)"),
    (
        "reward_model.threshold_min",
        lambda v: v is None or math.isfinite(v),
        "a finite number (or null)",
    ),
    *[
        (name, devices.valid, "auto, cpu, cuda or cuda:N")
        for name in (
            "workers.trainer_device",
            "workers.policy_device",
            "eval.device",
            "rollout.device",
        )
    ],
]
"""(field, check, the rule in words): the value checks the types cannot express."""


def validate(cfg: ExperimentConfig) -> None:
    """Check values the types cannot express; raise ConfigError naming the field."""
    algorithm = load_algorithm(cfg.algo)  # first: an unknown algorithm is the mistake to name
    for field, ok, rule in RULES:
        value = functools.reduce(getattr, field.split("."), cfg)
        if not ok(value):
            raise ConfigError(
                f"{field}: must be {rule}, got {value!r}", f"change {field} so it is {rule}"
            )
    _check_inference_splits(cfg)
    _check_policies(cfg)
    _check_extras(cfg)
    _check_reward_model(cfg, algorithm.reward_stage)
    _check_devices(cfg)
    # the algorithm's own checks, by its plug-in (found by import path: config/algorithms.py)
    algorithm.validate(cfg)


def _check_devices(cfg: ExperimentConfig) -> None:
    """The numpy learners run on the CPU only; on Ray a worker sees only the GPUs it
    declares, so a CUDA device asked of a role that declares none could never be found.
    (Whether this machine has the GPU a serial or local run asks for is checked before it
    starts: surge/devices.py `check_devices`.)"""
    trainer = cfg.workers.trainer_device
    if trainer.startswith("cuda") and cfg.model.backend == "numpy":
        raise ConfigError(
            f"workers.trainer_device={trainer} with model.backend=numpy: the numpy learner "
            "runs on the CPU only",
            "set model.backend=auto or torch to train on the GPU, or workers.trainer_device=cpu",
        )
    if cfg.runtime != "ray":
        return
    declared = {
        "workers.trainer_device": ("ray.trainer_gpus", cfg.ray.trainer_gpus),
        "workers.policy_device": ("ray.policy_gpus", cfg.ray.policy_gpus),
        "rollout.device": ("ray.policy_gpus", cfg.ray.policy_gpus),
        "eval.device": ("the evaluation workers' GPUs (none on Ray)", 0.0),
    }
    for _, name, value in devices.settings_of(cfg):
        if value.startswith("cuda") and name in declared and declared[name][1] <= 0:
            gpus, amount = declared[name]
            raise ConfigError(
                f"{name}={value} on Ray, but {gpus}={amount:g}: Ray gives the worker no GPU",
                f"set {gpus} to the GPUs it needs (a fraction shares one), or {name}=auto",
            )


def _check_reward_model(cfg: ExperimentConfig, supported: bool) -> None:
    """A reward-model stage: an algorithm whose graph has one, the model named once, and the
    info entries it reads recorded (`env.info_keys`)."""
    r = cfg.reward_model
    if r.mode == "env":
        return
    if not supported:
        raise ConfigError(
            f"reward_model.mode={r.mode}: algo {cfg.algo} has no reward-model stage (the "
            "replay-based algorithms have: dqn, sac)",
            "set reward_model.mode=env, or train with algo=sac or algo=dqn",
        )
    needs = list(STATE_KEYS) if r.mode != "clg" else []
    if r.mode != "state":
        models = (("fn", r.fn), ("path", r.path), ("open_clip", r.open_clip))
        named = {k: v for k, v in models if v is not None}
        if len(named) > 1:
            raise ConfigError(
                f"reward_model.mode={r.mode} scores frames with one model: got "
                + " and ".join(f"reward_model.{k}={v!r}" for k, v in named.items()),
                "keep one of them (none: the built-in tiny CLIP)",
            )
        needs.insert(0, r.frame_key)
    missing = [k for k in needs if k not in cfg.env.info_keys]
    if missing:
        raise ConfigError(
            f"env.info_keys={cfg.env.info_keys}: reward_model.mode={r.mode} reads "
            f"{', '.join(missing)} from each step's info",
            f"add {missing} to env.info_keys (surge/envs/driving.py records them)",
        )


def _check_inference_splits(cfg: ExperimentConfig) -> None:
    splits, ring = cfg.workers.inference_splits, cfg.workers.ring_size
    if not (splits == 0 or (splits >= 1 and ring % splits == 0)):
        rule = f"0 or a divisor of workers.ring_size ({ring})"
        raise ConfigError(
            f"workers.inference_splits: must be {rule}, got {splits!r}",
            f"change workers.inference_splits so it is {rule}",
        )


def _check_policies(cfg: ExperimentConfig) -> None:
    """`policies` and `policy_mapping`, as far as the config alone tells (that every agent
    finds a policy is checked against the env: surge/envs/multiagent.py `route_agents`)."""
    names, mapping = cfg.policies, cfg.policy_mapping
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9_-]+", n)]
    if bad or len(set(names)) != len(names):
        raise ConfigError(
            f"policies: {names!r} must be distinct names of letters, digits, _ and -",
            "rename the policies",
        )
    if not names and not mapping:
        return
    if not cfg.env.id.startswith("pettingzoo:"):
        raise ConfigError(
            f"policies / policy_mapping route the agents of a multi-agent env; env.id="
            f"{cfg.env.id!r} is not one (pettingzoo:<module>)",
            "remove policies and policy_mapping, or train a PettingZoo env",
        )
    unknown = sorted(set(mapping.values()) - set(cfg.policy_names))
    if unknown:
        raise ConfigError(
            f"policy_mapping routes agents to {unknown}, which policies does not declare "
            f"({cfg.policy_names})",
            "add them to policies, or fix policy_mapping",
        )
    if len(names) > 1 and not mapping:
        raise ConfigError(
            f"policies declares {len(names)} policies but policy_mapping is empty",
            "map agent-name patterns to policies, e.g. policy_mapping={'adversary_*': "
            f"{names[0]}, '*': {names[1]}}}",
        )


def _check_extras(cfg: ExperimentConfig) -> None:
    """Settings that need an optional package."""
    if cfg.eval.workers and cfg.eval.video_every and importlib.util.find_spec("av") is None:
        raise ConfigError(
            "eval.video_every needs the av package (PyAV) to write MP4s, which is not installed",
            "install the extra (pip install 'surge-rl[video]', or .venv/bin/pip install av in "
            "a clone), or set eval.video_every=0",
        )
    if cfg.log.wandb and importlib.util.find_spec("wandb") is None:
        raise ConfigError(
            "log.wandb=true needs the wandb package, which is not installed",
            "install the extra (pip install 'surge-rl[wandb]', or .venv/bin/pip install wandb "
            "in a clone), or set log.wandb=false",
        )


# ---------------------------------------------------------------- public API


def config_from_dict(
    data: dict[str, Any], *, origins: dict[str, str] | None = None, source: str = ""
) -> ExperimentConfig:
    """Convert a nested dict (e.g. a run's saved config.yaml) and validate it."""
    cfg = _Converter(origins or {}, source).convert(data, ExperimentConfig, "")
    validate(cfg)
    return typing.cast(ExperimentConfig, cfg)


def load_config(source: str | None, overrides: list[str]) -> tuple[ExperimentConfig, str]:
    """Load a preset name or YAML path (None: the default preset), apply overrides, validate.

    Returns the config and a short name for the run directory.
    """
    if source is None:
        source = DEFAULT_PRESET
    if _looks_like_path(source):
        path = Path(source)
        raw = read_yaml(path)
        name, where = path.stem, f"in {path}"
    else:
        text = _preset_text(source)
        try:
            raw = parse_yaml(text) or {}
        except yaml.YAMLError as e:  # a broken shipped preset is our bug, but say where
            raise ConfigError(f"preset '{source}' is not valid YAML: {e}") from None
        name, where = source, f"in preset {source}"
    origins: dict[str, str] = {}
    for text in overrides:
        _apply_override(raw, text, origins)
    return config_from_dict(raw, origins=origins, source=where), name


def config_to_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """A plain nested dict (YAML- and JSON-able) holding every field."""
    return dataclasses.asdict(cfg)


def dump_yaml(cfg: ExperimentConfig, path: Path) -> None:
    """Write the full resolved config, every key explicit, loadable by `config_from_dict`."""
    text = yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=None)
    Path(path).write_text(text)
