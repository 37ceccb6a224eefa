"""The reward-model stage's pieces (surge/rewards/models.py, env info recording): the
scorers, the step rewards of each mode, and the env's recorded info entries."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from surge.config.reward_model_schema import RewardModelConfig
from surge.config.schema import EnvConfig
from surge.envs.make import probe_env
from surge.errors import ConfigError, EnvSpecError
from surge.rewards.clg import clg_reward, synthesize
from surge.rewards.clip import ClipScorer, check_clip_dir
from surge.rewards.models import make_scorer, step_rewards
from surge.rewards.open_clip_scorer import check_open_clip, parse_open_clip

CAMERA = "surge.envs.testing:surge/CameraPendulum-v0"


def test_probe_records_the_info_entries_it_is_asked_for() -> None:
    env = probe_env(EnvConfig(id=CAMERA, info_keys=["frame", "speed_kmh"]), seed=0)
    assert env.info["frame"].shape == (8, 8, 3) and env.info["frame"].dtype == np.uint8
    assert env.info["speed_kmh"].shape == () and env.info["speed_kmh"].dtype == np.float32
    assert probe_env(EnvConfig(id=CAMERA), seed=0).info == {}
    with pytest.raises(EnvSpecError, match="env.info_keys names 'camera'.*'frame'"):
        probe_env(EnvConfig(id=CAMERA, info_keys=["camera"]), seed=0)
    with pytest.raises(ConfigError, match="env.info_keys apply to gymnasium envs"):
        probe_env(EnvConfig(id="ALE/Pong-v5", backend="ale", info_keys=["lives"]), seed=0)


def test_step_rewards_of_each_mode() -> None:
    n = 5
    rng = np.random.default_rng(0)
    scores = rng.random(n).astype(np.float32)
    info = {
        "speed_kmh": rng.uniform(0, 40, n),
        "lane_offset": rng.uniform(-2, 2, n),
        "heading_error": rng.uniform(-1, 1, n),
        "lane_offset_std": rng.uniform(0, 0.5, n),
    }
    terminated = np.array([False, False, True, False, False])
    terms = [info[k] for k in ("speed_kmh", "lane_offset", "heading_error", "lane_offset_std")]
    clg = step_rewards(RewardModelConfig(mode="clg"), scores, info, terminated)
    np.testing.assert_array_equal(clg, scores)  # the env's terminal steps are not overridden
    both = step_rewards(RewardModelConfig(mode="clg+state"), scores, info, terminated)
    np.testing.assert_allclose(both, synthesize(scores, *terms, terminated), rtol=1e-6)
    assert both[2] == -10.0
    state = step_rewards(RewardModelConfig(mode="state", v_target=30.0), None, info, terminated)
    want = synthesize(np.ones(n), *terms, terminated, make_settings(30.0))
    np.testing.assert_allclose(state, want, rtol=1e-6)


def make_settings(v_target: float):  # type: ignore[no-untyped-def]
    from surge.rewards.models import synthesis_settings

    return synthesis_settings(RewardModelConfig(v_target=v_target))


def test_a_function_scorer_is_checked_per_call() -> None:
    assert make_scorer(RewardModelConfig(mode="state")) is None
    score = make_scorer(RewardModelConfig(mode="clg", fn="surge.envs.testing:brightness"))
    assert score is not None
    frames = np.full((3, 8, 8, 3), 255, np.uint8)
    np.testing.assert_allclose(score(frames), 1.0)
    bad = make_scorer(RewardModelConfig(mode="clg", fn="numpy:ones_like"))
    assert bad is not None
    with pytest.raises(ValueError, match="returned shape"):
        bad(frames)
    with pytest.raises(ConfigError, match="reward_model.fn='nowhere:f'"):
        make_scorer(RewardModelConfig(mode="clg", fn="nowhere:f"))


def tiny_clip(path: Path) -> None:
    """A CLIP model from a config (random weights) with a word-level tokenizer, saved."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import CLIPConfig, CLIPModel, PreTrainedTokenizerFast

    words = "the road is clear with no car accidents two cars have collided each other on"
    vocab = {w: i for i, w in enumerate(["<pad>", "<unk>", *sorted(set(words.split()))])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>")
    config = CLIPConfig(
        text_config={
            "vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 16,
            "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0,
        },
        vision_config={
            "image_size": 32, "patch_size": 8, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 2,
        },
        projection_dim=16,
    )  # fmt: skip
    CLIPModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


def test_a_clip_directory_scores_frames_by_their_contrast(tmp_path: Path) -> None:
    tiny_clip(tmp_path)
    cfg = RewardModelConfig(mode="clg", path=str(tmp_path), threshold=0.03)
    scorer = make_scorer(cfg)
    assert isinstance(scorer, ClipScorer)
    frames = np.random.default_rng(0).integers(0, 256, (6, 40, 40, 3), dtype=np.uint8)
    scores = scorer(frames)
    want = clg_reward(scorer.embed(frames), scorer.positive, scorer.negative, 0.03)
    np.testing.assert_allclose(scores, want, rtol=1e-5)
    assert scores.shape == (6,) and ((scores >= 0) & (scores <= 1)).all()


def test_a_directory_that_is_not_clip_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no readable config.json"):
        check_clip_dir(str(tmp_path))
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ConfigError, match="a 'llama' model, not a CLIP model"):
        check_clip_dir(str(tmp_path))


def test_open_clip_settings_name_what_is_missing(tmp_path: Path) -> None:
    for value, says in [
        ("ViT-B-32", "expected NAME:WEIGHTS"),
        (f"ViT-B-32:{tmp_path / 'none.bin'}", "no weights file at"),
        (f"local-dir:{tmp_path}", "holds no open_clip_config.json"),
    ]:
        with pytest.raises(ConfigError, match=says):
            parse_open_clip(value)
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"")
    assert parse_open_clip(f"ViT-B-32:{weights}") == ("ViT-B-32", str(weights))


def test_open_clip_that_does_not_import_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As open-clip-torch does beside a CPU torch with pip's CUDA torchvision: its import
    raises from torchvision's missing compiled operators. (A package of that name that fails
    the same way stands in for it; with none installed, the error says so.)"""
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"")
    value = f"ViT-B-32:{weights}"
    monkeypatch.delitem(sys.modules, "open_clip", raising=False)
    if importlib.util.find_spec("open_clip") is None:
        with pytest.raises(ConfigError, match="open_clip is not installed"):
            check_open_clip(value)
    package = tmp_path / "site" / "open_clip"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        'raise RuntimeError("operator torchvision::nms does not exist")\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(ConfigError, match=r"does not import here: RuntimeError: operator torch"):
        check_open_clip(value)
    with pytest.raises(ConfigError, match="scores frames with one model"):
        from surge.config.load import load_config

        load_config(
            "pendulum-sac",
            ["reward_model.mode=clg", "env.info_keys=[frame]", f"reward_model.open_clip={value}",
             "reward_model.fn=a:b", "env.id=surge.envs.testing:surge/CameraPendulum-v0"],
        )  # fmt: skip


def test_an_env_group_records_each_steps_own_info_the_last_one_before_its_reset() -> None:
    from surge.envs.group import EnvGroup

    cfg = EnvConfig(id=CAMERA, info_keys=["frame", "speed_kmh"], max_episode_steps=3)
    obs = {"obs": np.zeros((2, 3), np.float32)}
    group = EnvGroup(cfg, [1, 2], obs)
    group.reset()
    for t in range(3):
        group.step(np.zeros((2, 1), np.float32))
        # the frame shows the state the step led to: at the cut, the final observation
        seen = group.final_obs["obs"] if t == 2 else obs["obs"]
        level = np.round((seen[:, 0] + 1) / 2 * 255)
        np.testing.assert_array_equal(group.info["frame"][:, 0, 0, 0], level)
        np.testing.assert_allclose(group.info["speed_kmh"], 10 * np.abs(seen[:, 2]), rtol=1e-6)
    assert group.truncated.all() and group.info["frame"].shape == (2, 8, 8, 3)


def test_drawing_the_graph_trains_no_reward_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`surge graph highway-vlmrl` where the built-in tiny CLIP is not cached draws the graph
    at once: training the model (minutes) is left to the run that scores with it."""
    from surge.runtime.graph_docs import graph_text

    monkeypatch.setenv("SURGE_CACHE", str(tmp_path))
    lines = graph_text("highway-vlmrl", [])
    assert any(line.split()[:2] == ["reward-model-0", "reward-model"] for line in lines)
    assert not any(tmp_path.iterdir())  # nothing built, nothing cached
