"""Load an `ExperimentConfig` from a preset or YAML file plus `key=value` overrides.

The conversion from nested dicts to the dataclasses is strict and driven by the type hints
in `schema.py`, so a new field needs no change here. Every error names the dotted field,
what was given and what is accepted.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources
import importlib.util
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from surge import devices
from surge.config.algorithms import device_roles, load_algorithm
from surge.config.population_schema import POPULATION, PopulationConfig, check_population
from surge.config.psro_schema import PSRO, PSROConfig, check_psro
from surge.config.reward_model_schema import STATE_KEYS
from surge.config.rules import check_section
from surge.config.schema import MULTI_AGENT_PREFIXES, NOT_A_KEY, ExperimentConfig
from surge.errors import ConfigError, UserError

OPTIONAL_SECTIONS: dict[str, type] = {POPULATION: PopulationConfig, PSRO: PSROConfig}
"""Sections a config may hold or not: their presence makes the run a population of runs
(docs/population.md)."""

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


def _apply_override(
    raw: dict[str, Any], text: str, origins: dict[str, str], extra: dict[str, type]
) -> None:
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
    _check_key_path(parts, origin, extra)
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
    if isinstance(old, dict) and isinstance(value, dict) and _is_section(parts, extra):
        old.update(value)
    else:
        node[last] = value
    origins[key] = origin


def _hints(tp: Any, extra: dict[str, type]) -> dict[str, Any]:
    """A section's fields and their types; at the top level, with the plug-in's sections."""
    if tp is ExperimentConfig:
        fields = {f.name for f in dataclasses.fields(tp) if not f.metadata.get(NOT_A_KEY)}
        hints = {k: v for k, v in typing.get_type_hints(tp).items() if k in fields}
        return {**hints, **extra}
    return typing.get_type_hints(tp)


def _is_section(parts: list[str], extra: dict[str, type]) -> bool:
    tp: Any = ExperimentConfig
    for part in parts:
        if not dataclasses.is_dataclass(tp):
            return False
        tp = _hints(tp, extra)[part]
    return dataclasses.is_dataclass(tp)


def _check_key_path(parts: list[str], origin: str, extra: dict[str, type]) -> None:
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
        hints = _hints(tp, extra)
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
        names = [f.name for f in dataclasses.fields(cls) if not f.metadata.get(NOT_A_KEY)]
        kwargs = {}
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            if key not in names:
                _unknown_key(path, str(key), names, self.origin(sub))
            kwargs[key] = self.convert(item, hints[key], sub)
        return cls(**kwargs)


# ---------------------------------------------------------------- validation


def validate(cfg: ExperimentConfig) -> None:
    """Check values the types cannot express; raise ConfigError naming the field."""
    algorithm = load_algorithm(cfg.algo)  # first: an unknown algorithm is the mistake to name
    check_section(cfg)  # every field's own rules (config/rules.py)
    for name, section in cfg.sections.items():
        check_section(section, name)
    _check_inference_splits(cfg)
    _check_policies(cfg)
    _check_extras(cfg)
    _check_reward_model(cfg, algorithm.reward_stage)
    _check_devices(cfg)
    # the algorithm's own checks, by its plug-in (found by import path: config/algorithms.py)
    algorithm.validate(cfg)
    check_population(cfg, tuple(getattr(algorithm, "mutable_settings", ())))
    check_psro(cfg)


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
    for _, name, value in devices.settings_of(cfg, device_roles(cfg)):
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
    if not cfg.env.id.startswith(MULTI_AGENT_PREFIXES):
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


def plugin_sections(algo: Any) -> dict[str, type]:
    """The sections the plug-in of `algo` brings beyond ExperimentConfig's own (its
    `config_sections`: name -> dataclass); a ConfigError for an unknown algorithm, or for a
    plug-in whose sections are not dataclasses or take a built-in section's name."""
    if not isinstance(algo, str):
        return {}  # the conversion names the wrong type
    sections = dict(getattr(load_algorithm(algo), "config_sections", None) or {})
    builtin = {f.name for f in dataclasses.fields(ExperimentConfig)}
    for name, cls in sections.items():
        if name in builtin or not name.isidentifier() or not dataclasses.is_dataclass(cls):
            raise ConfigError(
                f"algo: {algo}'s config_sections has {name!r}: {cls!r}",
                "give each section of a plug-in an unused identifier and a dataclass "
                "(docs/architecture.md, adding an algorithm)",
            )
    return sections


def config_from_dict(
    data: dict[str, Any], *, origins: dict[str, str] | None = None, source: str = ""
) -> ExperimentConfig:
    """Convert a nested dict (e.g. a run's saved config.yaml) and validate it."""
    extra = plugin_sections(data.get("algo", ExperimentConfig.algo))
    for name, section in OPTIONAL_SECTIONS.items():  # present: the run is a population
        if data.get(name) is not None:
            extra[name] = section
    rest = {k: v for k, v in data.items() if k not in extra and k not in OPTIONAL_SECTIONS}
    converter = _Converter(origins or {}, source)
    cfg = converter.convert(rest, ExperimentConfig, "")
    cfg.sections = {
        name: converter.convert(data.get(name, {}), cls, name) for name, cls in extra.items()
    }
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
    return config_with_overrides(raw, overrides, where), name


def config_with_overrides(
    raw: dict[str, Any], overrides: list[str], source: str
) -> ExperimentConfig:
    """The config of the nested dict `raw` (from `source`, for messages) with `key=value`
    overrides applied, converted and validated."""
    origins: dict[str, str] = {}
    extra = {**plugin_sections(_final_algo(raw, overrides)), **OPTIONAL_SECTIONS}
    for text in overrides:
        _apply_override(raw, text, origins, extra)
    return config_from_dict(raw, origins=origins, source=source)


def _final_algo(raw: dict[str, Any], overrides: list[str]) -> Any:
    """The `algo` the config will have: the last `algo=` override's, else the source's."""
    algo = raw.get("algo", ExperimentConfig.algo)
    for text in overrides:
        key, sep, value = text.partition("=")
        if sep and key.strip() == "algo":
            algo = parse_yaml(value) if value.strip() else ""
    return algo


def config_to_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """A plain nested dict (YAML- and JSON-able) holding every field, a plug-in's sections at
    the top level as they are written."""
    data = dataclasses.asdict(cfg)
    sections = data.pop("sections")
    return {**data, **sections}


def dump_yaml(cfg: ExperimentConfig, path: Path) -> None:
    """Write the full resolved config, every key explicit, loadable by `config_from_dict`."""
    text = yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=None)
    Path(path).write_text(text)
