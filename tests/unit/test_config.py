"""Config loading, conversion, validation, presets and the generated reference docs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from surge.config import docs
from surge.config.load import (
    DEFAULT_PRESET,
    config_from_dict,
    config_to_dict,
    dump_yaml,
    list_presets,
    load_config,
    read_yaml,
)
from surge.config.schema import ExperimentConfig
from surge.errors import ConfigError, UserError
from surge.recipes.ppo import batch_steps

REPO = Path(__file__).resolve().parents[2]


def error_text(source: str | None, overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(source, overrides)
    return str(info.value)


def test_default_is_the_fast_cartpole_preset() -> None:
    cfg, name = load_config(None, [])
    assert name == DEFAULT_PRESET == "cartpole-appo"  # the fastest reliable CartPole solve
    assert cfg.env.id == "CartPole-v1" and cfg.stop_return == 475.0
    # cartpole-ppo (CleanRL's ppo.py, for comparable curves) spells out the schema defaults.
    ppo, _ = load_config("cartpole-ppo", [])
    assert ppo == ExperimentConfig(stop_return=475.0)
    assert ppo.total_envs == 4 and batch_steps(ppo) == 512


@pytest.mark.parametrize("name", ["cartpole-ppo", "acrobot-ppo", "pendulum-ppo"])
def test_presets_load(name: str) -> None:
    cfg, run_name = load_config(name, [])
    assert run_name == name
    assert batch_steps(cfg) % cfg.ppo.minibatches == 0


def test_preset_values() -> None:
    acro, _ = load_config("acrobot-ppo", [])
    assert acro.env.id == "Acrobot-v1" and acro.stop_return == -100.0
    pend, _ = load_config("pendulum-ppo", [])
    assert pend.env.id == "Pendulum-v1" and pend.stop_return is None
    assert pend.total_env_steps == 200_000 and pend.ppo.ent_coef == 0.0
    assert not pend.ppo.clip_vloss  # rewards are not normalised


def test_list_presets_has_descriptions() -> None:
    presets = dict(list_presets())
    assert {"cartpole-ppo", "acrobot-ppo", "pendulum-ppo"} <= set(presets)
    assert all(desc for desc in presets.values())


def test_overrides_of_every_kind() -> None:
    cfg, _ = load_config(
        "cartpole-ppo",
        [
            "ppo.lr=3e-4",  # float written the way PyYAML alone reads as a string
            "total_env_steps=5e5",  # integral float -> int
            "ppo.gamma=1",  # int accepted for float
            "env.id=Acrobot-v1",
            "model.hidden_sizes=[128,128]",
            "stop_return=null",
            "env.kwargs={render_mode: null}",
            "env.max_episode_steps=100",
            "ppo.anneal_lr=false",
            "runtime=serial",
            "ppo.target_kl=0.02",
        ],
    )
    assert cfg.ppo.lr == 3e-4 and isinstance(cfg.ppo.lr, float)
    assert cfg.total_env_steps == 500_000 and isinstance(cfg.total_env_steps, int)
    assert cfg.ppo.gamma == 1.0 and isinstance(cfg.ppo.gamma, float)
    assert cfg.env.id == "Acrobot-v1"
    assert cfg.model.hidden_sizes == [128, 128]
    assert cfg.stop_return is None
    assert cfg.env.kwargs == {"render_mode": None}
    assert cfg.env.max_episode_steps == 100
    assert cfg.ppo.anneal_lr is False
    assert cfg.runtime == "serial"
    assert cfg.ppo.target_kl == 0.02


def test_section_override_merges_and_dict_subkey() -> None:
    cfg, _ = load_config("cartpole-ppo", ["ppo={lr: 1e-3}", "env.kwargs.render_mode=rgb_array"])
    assert cfg.ppo.lr == 1e-3 and cfg.ppo.epochs == 4  # other ppo keys kept
    assert cfg.env.kwargs == {"render_mode": "rgb_array"}


def test_wrong_type_names_field_value_and_origin() -> None:
    text = error_text(None, ["ppo.lr=abc"])
    assert "ppo.lr: expected a float, got 'abc' (from the command line: ppo.lr=abc)" in text


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("seed=true", "seed: expected an integer, got True"),
        ("seed=1.5", "seed: expected an integer, got 1.5"),
        ("env.id=123", "env.id: expected a string, got 123"),
        ("ppo.norm_adv=1", "ppo.norm_adv: expected a boolean, got 1"),
        ("model.hidden_sizes=[64,x]", "model.hidden_sizes[1]: expected an integer, got 'x'"),
        ("model.hidden_sizes=64", "model.hidden_sizes: expected a list of integers, got 64"),
        ("stop_return=abc", "stop_return: expected a float or null, got 'abc'"),
        ("env.kwargs=5", "env.kwargs: expected a mapping, got 5"),
        ("ppo=3", "ppo: expected a mapping of keys, got 3"),
    ],
)
def test_type_errors(override: str, expected: str) -> None:
    assert expected in error_text(None, [override])


def test_literal_error_lists_choices() -> None:
    text = error_text(None, ["runtime=gpu"])
    assert "runtime: expected one of 'serial', 'local', 'ray', got 'gpu'" in text


def test_unknown_key_suggests_and_lists() -> None:
    text = error_text(None, ["ppo.lrr=1"])
    assert "unknown key 'ppo.lrr'" in text
    assert "did you mean 'ppo.lr'?" in text
    assert "valid keys under 'ppo': rollout_len, epochs" in text


def test_unknown_top_level_key() -> None:
    text = error_text(None, ["sed=3"])
    assert "unknown key 'sed'" in text and "did you mean 'seed'?" in text
    assert "valid keys at the top level" in text


def test_override_into_scalar() -> None:
    text = error_text(None, ["seed.x=1"])
    assert "'seed' is a single value, not a section" in text


def test_override_without_equals() -> None:
    text = error_text(None, ["ppo.lr"])
    assert "override 'ppo.lr' is not of the form key=value" in text
    assert "ppo.lr=3e-4" in text


def test_unknown_preset_lists_presets() -> None:
    text = error_text("cartpol", [])
    assert "unknown preset 'cartpol'" in text
    for name, desc in list_presets():
        assert name in text and desc in text


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("workers.actors=0", "workers.actors: must be >= 1, got 0"),
        ("workers.ring_size=0", "workers.ring_size: must be >= 1"),
        ("ppo.rollout_len=0", "ppo.rollout_len: must be >= 1"),
        ("ppo.epochs=0", "ppo.epochs: must be >= 1"),
        ("return_window=0", "return_window: must be >= 1"),
        ("total_env_steps=0", "total_env_steps: must be >= 1"),
        ("ppo.gamma=0", "ppo.gamma: must be in (0, 1]"),
        ("ppo.gamma=1.5", "ppo.gamma: must be in (0, 1]"),
        ("ppo.gae_lambda=-0.1", "ppo.gae_lambda: must be in [0, 1]"),
        ("ppo.lr=0", "ppo.lr: must be > 0"),
        ("ppo.clip_coef=-1", "ppo.clip_coef: must be > 0"),
        ("max_policy_lag=-1", "max_policy_lag: must be >= 0"),
        ("workers.trainer_threads_alone=-1", "workers.trainer_threads_alone: must be >= 0"),
        ("workers.inference_spin_us=-5", "workers.inference_spin_us: must be >= 0"),
        ("model.hidden_sizes=[]", "model.hidden_sizes: must be a non-empty list"),
        ("model.hidden_sizes=[64,0]", "model.hidden_sizes: must be a list of positive widths"),
        ("env.id=''", "env.id: must be a non-empty Gymnasium id"),
    ],
)
def test_value_errors(override: str, expected: str) -> None:
    assert expected in error_text(None, [override])


def test_minibatch_divisibility_names_fields() -> None:
    text = error_text("cartpole-ppo", ["ppo.minibatches=5"])
    assert "ppo.minibatches" in text and "batch of 512 steps" in text
    assert "ppo.rollout_len" in text and "workers.envs_per_group" in text


def test_yaml_file_source_subset(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("env:\n  id: Acrobot-v1\nppo:\n  lr: 1e-3\n")
    cfg, name = load_config(str(path), ["seed=7"])
    assert name == "mine"
    assert cfg.env.id == "Acrobot-v1" and cfg.ppo.lr == 1e-3 and cfg.seed == 7
    assert cfg.ppo.epochs == ExperimentConfig().ppo.epochs  # untouched keys keep defaults


def test_yaml_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("ppo:\n  lrr: 1\n")
    text = error_text(str(path), [])
    assert "unknown key 'ppo.lrr'" in text and str(path) in text


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(textwrap.dedent("seed: 1\nppo:\n  lr: [1, 2\n  epochs: 3\n"))
    text = error_text(str(path), [])
    assert f"{path}:" in text and "invalid YAML" in text
    line = int(text.split(f"{path}:")[1].split(":")[0])
    assert 3 <= line <= 4


def test_missing_yaml_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="config file not found"):
        load_config(str(tmp_path / "nope.yaml"), [])


def test_round_trip_dict_and_yaml(tmp_path: Path) -> None:
    cfg, _ = load_config("pendulum-ppo", ["env.kwargs={g: 9.81}", "run_dir=runs/x"])
    assert config_from_dict(config_to_dict(cfg)) == cfg
    dump_yaml(cfg, tmp_path / "config.yaml")
    assert config_from_dict(read_yaml(tmp_path / "config.yaml")) == cfg


def test_config_from_dict_validates() -> None:
    data = config_to_dict(ExperimentConfig())
    data["ppo"]["minibatches"] = 7
    with pytest.raises(ConfigError, match="ppo.minibatches"):
        config_from_dict(data)


def test_docs_cover_every_field() -> None:
    text = docs.render()
    for key in ("`seed`", "`ppo.lr`", "`env.kwargs`", "`workers.heartbeat_timeout_s`"):
        assert key in text
    assert "Adam learning rate." in text
    from surge.config.schema import PPOConfig, RewardModelConfig

    assert docs.field_docs(PPOConfig)["lr"] == "Adam learning rate."
    # every section's fields are documented, and each range rule is printed beside its field
    assert all(docs.field_docs(RewardModelConfig).values())
    assert "| `ppo.lr` | `float` | `0.00025` | Adam learning rate. Must be > 0. |" in text


def test_docs_file_up_to_date() -> None:
    committed = (REPO / "docs" / "configuration.md").read_text()
    assert committed == docs.render(), "regenerate with: python -m surge.config.docs"
