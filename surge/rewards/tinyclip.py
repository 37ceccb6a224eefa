"""The built-in tiny CLIP: a small `CLIPModel` trained here on highway-env frames, for
machines with no CLIP weights (nothing may be downloaded).

VLM-RL scores frames with OpenCLIP ViT-bigG-14 against two language goals. Here a CLIP of
about a million parameters learns the same kind of image-text match from frames of
surge/envs/driving.py, driven by a random and a scripted driver, each captioned from the
simulator's state (a crash, the distance to the car ahead, the lane, the speed) by one of
many templates. The goal sentences are never captions (`check_captions`): scored zero-shot,
they are new combinations of words it was trained on. This exercises the mechanism and the
reward maths, not a web-scale model's knowledge.

`build(...)` collects the frames, trains, measures the held-out contrast z = cos(e, negative)
- cos(e, positive) of crashed against other frames (AUROC), and saves a directory that
`reward_model.path` loads like any CLIP checkpoint, with the ramp of r_CLG its held-out z
suggests (`tiny_clip.json`; surge/rewards/clip.py `suggested_thresholds`): VLM-RL's 0 to
0.03 fits ViT-bigG's cosines, not a tiny model's, whose ordinary frames sit near z = -0.5.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from surge.cache import cache_root, publish_dir, staging_dir
from surge.config.reward_model_schema import RewardModelConfig

FORMAT = 1
"""Bumped when what `build` makes changes, so cached models of an older kind are not reused."""

SITUATIONS: dict[str, tuple[str, ...]] = {
    "crash": (
        "two cars have crashed on the road",
        "a car has collided with another car",
        "there is a car accident on the road",
        "cars collided on the road",
        "an accident with two cars on the road",
        "a car crashed into another car",
        "the cars have had an accident",
        "two cars collided with each other",
    ),
    "close": (
        "a car is very close to the car ahead",
        "two cars are close to each other on the road",
        "the car ahead is too close",
        "a car drives close behind another car",
        "the road ahead has a car very close",
    ),
    "follow": (
        "a car follows another car on the road",
        "there is a car ahead on the road",
        "a car drives behind another car",
        "the car keeps its distance to the car ahead",
    ),
    "clear": (
        "the road ahead is clear",
        "the road is clear with no cars ahead",
        "no cars on the road ahead",
        "a car drives on a clear road",
        "the lane ahead is clear",
        "the road is empty ahead",
        "no accidents on the clear road",
    ),
}
"""Caption templates by situation (31): `caption` adds the lane and the speed."""

LANES = ("on the left lane", "on the middle lane", "on the right lane")
SPEEDS = ("slowly", "fast")


@dataclass(frozen=True)
class TinyClipSettings:
    frames: int = 20_000
    """Frames collected (half the episodes random driving, half scripted)."""
    frame_size: int = 64
    steps: int = 1_500
    batch_size: int = 64
    lr: float = 1e-3
    hidden: int = 64
    layers: int = 2
    seed: int = 0


def check_captions(goals: tuple[str, ...]) -> None:
    """No caption template is a goal sentence (they must be new sentences to the model)."""
    captions = {c.lower() for templates in SITUATIONS.values() for c in templates}
    same = [g for g in goals if g.lower().rstrip(".") in captions]
    if same:
        raise ValueError(f"goal sentences among the captions: {same}")


def situation(vehicle: Any) -> str:
    """The situation of a highway-env vehicle: crash, close (< 15 m to the car ahead in its
    lane), follow (< 40 m) or clear."""
    if vehicle.crashed:
        return "crash"
    front, _ = vehicle.road.neighbour_vehicles(vehicle, vehicle.lane_index)
    if front is None:
        return "clear"
    gap = float(vehicle.lane_distance_to(front))
    return "close" if gap < 15.0 else "follow" if gap < 40.0 else "clear"


def caption(kind: str, lane: int, lanes: int, speed_kmh: float, rng: np.random.Generator) -> str:
    """One of the situation's templates, sometimes with the lane and the speed."""
    text = str(rng.choice(SITUATIONS[kind]))
    if rng.random() < 0.5:
        text += " " + LANES[0 if lane == 0 else 2 if lane == lanes - 1 else 1]
    if rng.random() < 0.3:
        text += " " + SPEEDS[int(speed_kmh > 90.0)]
    return text


def collect(settings: TinyClipSettings) -> dict[str, Any]:
    """Frames, captions and crash flags from highway-env episodes: odd episodes random
    actions, even ones a scripted driver (hold the lane, steer back to its centre, now and
    then a sudden lane change into traffic)."""
    from surge.envs.driving import make_driving_env

    rng = np.random.default_rng(settings.seed)
    env = make_driving_env(frames=True, frame_size=settings.frame_size, vehicles_density=1.5)
    frames: list[np.ndarray] = []
    captions: list[str] = []
    crashed: list[bool] = []
    episode = 0
    while len(frames) < settings.frames:
        _, info = env.reset(seed=int(rng.integers(2**31)))
        scripted = episode % 2 == 0
        episode += 1
        done = False
        while not done and len(frames) < settings.frames:
            if scripted:
                steer = -0.3 * info["lane_offset"] - 0.5 * info["heading_error"]
                if rng.random() < 0.05:
                    steer += float(rng.choice([-0.1, 0.1]))
                action = np.array([0.3, np.clip(steer, -1, 1)], np.float32)
            else:
                action = rng.uniform(-1, 1, 2).astype(np.float32)
            _, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            vehicle = env.unwrapped.vehicle  # type: ignore[attr-defined]
            lanes = len(vehicle.road.network.all_side_lanes(vehicle.lane_index))
            kind = situation(vehicle)
            frames.append(info["frame"])
            captions.append(caption(kind, vehicle.lane_index[2], lanes, info["speed_kmh"], rng))
            crashed.append(kind == "crash")
    env.close()
    return {"frames": np.stack(frames), "captions": captions, "crashed": np.array(crashed)}


def word_tokenizer(texts: list[str]) -> Any:
    """A word-level tokenizer over the words of `texts` (lower case), saved with the model."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for t in texts for w in t.lower().replace(".", " ").split()})
    vocab = {w: i for i, w in enumerate(["<pad>", "<unk>", "<eos>", *words])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace(".", "")])
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>"
    )


def tiny_config(vocab_size: int, settings: TinyClipSettings) -> Any:
    from transformers import CLIPConfig

    h, n = settings.hidden, settings.layers
    return CLIPConfig(
        text_config={
            "vocab_size": vocab_size, "hidden_size": h, "intermediate_size": 2 * h,
            "num_hidden_layers": n, "num_attention_heads": 2, "max_position_embeddings": 24,
            "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 2,
        },
        vision_config={
            "image_size": settings.frame_size, "patch_size": 8, "hidden_size": h,
            "intermediate_size": 2 * h, "num_hidden_layers": n, "num_attention_heads": 2,
        },
        projection_dim=h,
    )  # fmt: skip


def pixel_values(frames: np.ndarray) -> Any:
    """uint8 [N, H, W, 3] -> CLIP's normalised [N, 3, H, W] (surge/rewards/clip.py)."""
    import torch

    from surge.rewards.clip import CLIP_MEAN, CLIP_STD

    x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float() / 255.0
    return (x - torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)) / torch.tensor(CLIP_STD).view(1, 3, 1, 1)


def train(data: dict[str, Any], tokenizer: Any, settings: TinyClipSettings) -> Any:
    """CLIP's contrastive loss over batches of (frame, caption) pairs."""
    import torch
    from transformers import CLIPModel

    torch.manual_seed(settings.seed)
    model = CLIPModel(tiny_config(len(tokenizer), settings))
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.1)
    rng = np.random.default_rng(settings.seed + 1)
    n = len(data["captions"])
    model.train()
    for step in range(settings.steps):
        rows = rng.choice(n, settings.batch_size, replace=False)
        tokens = tokenizer([data["captions"][i] for i in rows], padding=True, return_tensors="pt")
        out = model(
            input_ids=tokens.input_ids,
            attention_mask=tokens.attention_mask,
            pixel_values=pixel_values(data["frames"][rows]),
            return_loss=True,
        )
        optimizer.zero_grad()
        out.loss.backward()
        for group in optimizer.param_groups:  # cosine decay
            group["lr"] = settings.lr * 0.5 * (1 + np.cos(np.pi * step / settings.steps))
        optimizer.step()
    return model.eval()


def auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """The probability that a positive scores above a negative (ties count half)."""
    pos, neg = scores[positive], scores[~positive]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * ties)


def build(directory: Path, settings: TinyClipSettings | None = None) -> dict[str, Any]:
    """Collect, train on 90% of the frames, measure on the rest, and save to `directory`
    (a CLIP directory plus tiny_clip.json: settings, held-out AUROC, the z
    medians that set r_CLG's ramp, seconds). Returns what tiny_clip.json holds."""
    import torch

    from surge.rewards.clg import CLG_THRESHOLD, clg_contrast
    from surge.rewards.clip import ClipScorer

    settings = settings or TinyClipSettings()
    goals = RewardModelConfig()
    check_captions((goals.positive, goals.negative))
    clock = time.perf_counter()
    data = collect(settings)
    collected = time.perf_counter() - clock
    n = len(data["captions"])
    held = np.random.default_rng(settings.seed + 2).random(n) < 0.1
    captions = [c for c, h in zip(data["captions"], held, strict=True) if not h]
    train_part = {"frames": data["frames"][~held], "captions": captions}
    tokenizer = word_tokenizer([*data["captions"], goals.positive, goals.negative])
    clock = time.perf_counter()
    with torch.set_grad_enabled(True):
        model = train(train_part, tokenizer, settings)
    trained = time.perf_counter() - clock
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    scorer = ClipScorer(str(directory), goals.positive, goals.negative, CLG_THRESHOLD)
    z = clg_contrast(scorer.embed(data["frames"][held]), scorer.positive, scorer.negative)
    crashed = data["crashed"][held]
    # r_CLG is 0 from the threshold on: put it at the crashed frames' median z, so a crash
    # scores near 0. The ramp's floor (clip.suggested_thresholds) is the median z of the
    # other frames, so ordinary frames score 1 and those nearer the negative goal less.
    threshold = float(max(np.median(z[crashed]), 1e-3)) if crashed.any() else CLG_THRESHOLD
    record = {
        "settings": asdict(settings),
        "frames": n,
        "crashed_frames": int(data["crashed"].sum()),
        "heldout_auroc": auroc(z, crashed),
        "heldout_z_crashed_median": float(np.median(z[crashed])) if crashed.any() else None,
        "heldout_z_other_median": float(np.median(z[~crashed])),
        "threshold": threshold,
        "collect_s": round(collected, 1),
        "train_s": round(trained, 1),
    }
    (directory / "tiny_clip.json").write_text(json.dumps(record, indent=1))
    return record


def cache_path(settings: TinyClipSettings | None = None, root: Path | None = None) -> Path:
    """Where the tiny CLIP of `settings` is cached: `$SURGE_CACHE/tiny-clip/<key>`, the key a
    hash of the settings and of `FORMAT`."""
    fields = json.dumps(
        {**asdict(settings or TinyClipSettings()), "format": FORMAT}, sort_keys=True
    )
    key = hashlib.blake2b(fields.encode(), digest_size=10).hexdigest()
    return (root or cache_root()) / "tiny-clip" / key


def cached_model(
    settings: TinyClipSettings | None = None,
    root: Path | None = None,
    log: Callable[[str], None] = lambda text: None,
) -> Path:
    """The cached directory of the tiny CLIP `settings` make (`$SURGE_CACHE/tiny-clip/<key>`),
    built first if it is not there: written beside it and renamed into place, so a run never
    sees half of one."""
    settings = settings or TinyClipSettings()
    target = cache_path(settings, root)
    if (target / "tiny_clip.json").is_file():
        return target
    log(
        f"the built-in tiny CLIP: collecting {settings.frames:,} highway-env frames and "
        "training (about ten minutes on two cores; cached for later runs)"
    )
    staging = staging_dir(target)
    record = build(staging, settings)
    log(
        f"the built-in tiny CLIP: held-out AUROC {record['heldout_auroc']:.3f} (crashed "
        f"against other frames), threshold {record['threshold']:.3g}; cached at {target}"
    )
    publish_dir(staging, target)
    return target
