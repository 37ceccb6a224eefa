"""The supervised warm start of the built-in model, cached and reused by later runs.

RL from random weights gets no reward, hence no GRPO gradient, so a built-in LLM preset first
trains its tiny model on the task's solutions for `sft.steps` steps: each example is
`<bos> prompt answer <eos>`, with the loss on the answer and the end token only. The result is
a Hugging Face directory under `$SURGE_CACHE/warm-start/<key>` (default `~/.cache/surge`), the
key a hash of every setting that changes it, so a second run with the same settings starts
from it at once. It is written to a temporary directory and renamed into place, so a run never
sees half of one, and two runs warming up at once both end with a complete directory. Its
progress is saved beside it every `CHECKPOINT_EVERY` steps, so a warm start stopped part-way
resumes there at the next run with the same settings (`train_sft`'s `checkpoint`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from surge.algos.llm_losses import Aggregation, aggregate
from surge.cache import cache_root, publish_dir, staging_dir
from surge.llm.model import encode_prompt, save_model_dir
from surge.llm.problems import Problem
from surge.llm.tasks import ALPHABETS, Task, heldout_set, make_task
from surge.llm.text_sample import alphabet_of, text_sample
from surge.llm.textenv import TextEnvTask
from surge.llm.turn_loop import limits_from
from surge.tracking.files import atomic_writer

FORMAT = 2  # 2: the tokenizer adds <bos> itself; a generation config
"""Bumped when the warm start's recipe changes, so old cache entries are not reused."""
HELDOUT = 500
KEY_DEFAULTS: dict[str, Any] = {"threads": 2, "aggregation": "token-mean"}
"""Settings added after cache entries existed: left out of the key at these values (the
defaults), so the earlier entries keep their keys."""


@dataclass(frozen=True)
class WarmStartSettings:
    task: str
    task_kwargs: dict[str, Any] = field(default_factory=dict)
    reward_fn: str | None = None
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    max_length: int = 64
    steps: int = 600
    batch_size: int = 128
    lr: float = 1e-3
    target_accuracy: float = 0.0
    aggregation: Aggregation = KEY_DEFAULTS["aggregation"]
    seed: int = 1
    threads: int = KEY_DEFAULTS["threads"]
    limits: dict[str, Any] = field(default_factory=dict)
    """A multi-turn task's episode limits (surge/llm/textenv.py `limits_record`): they shape
    the expert's transcripts."""

    def key(self) -> str:
        fields = dataclasses.asdict(self)
        for name, default in KEY_DEFAULTS.items():
            if fields[name] == default:
                fields.pop(name)
        fields["format"] = FORMAT
        fields["alphabet"] = self.alphabet()
        if self.task not in ALPHABETS:  # the data itself: a changed file trains anew
            fields["text"] = text_sample(self.task, self.task_kwargs, self.reward_fn).digest
        text = json.dumps(fields, sort_keys=True)
        return hashlib.blake2b(text.encode(), digest_size=10).hexdigest()

    def alphabet(self) -> str:
        """The built-in tokenizer's characters for the task."""
        return alphabet_of(self.task, self.task_kwargs, self.reward_fn)


def example_batch(
    tokenizer: Any, pairs: list[tuple[str, str]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """`<bos> prompt answer <eos>` rows, right-padded, and the mask [B, T-1] of the positions
    whose next token is trained (the answer's and the end token)."""
    rows, starts = [], []
    for prompt, answer in pairs:
        ids = encode_prompt(tokenizer, prompt)
        starts.append(len(ids))
        rows.append(
            ids + tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
        )
    width = max(map(len, rows))
    tokens = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width - 1)
    for i, (ids, start) in enumerate(zip(rows, starts, strict=True)):
        tokens[i, : len(ids)] = torch.tensor(ids)
        mask[i, start - 1 : len(ids) - 1] = 1.0  # position t predicts token t + 1
    return tokens, mask


def transcript_batch(
    tokenizer: Any, task: TextEnvTask, problems: list[Problem], seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The expert's episodes of `problems` as rows, one per segment (`<bos> prompt` and the
    segment's tokens) and one per turn a summary dropped (in its context), and the mask of
    the positions whose next token is the expert's (actions and summaries; the env's and
    carried tokens are context only)."""
    from surge.llm.episodes import EpisodeEngine

    engine = EpisodeEngine(tokenizer)
    rows: list[list[int]] = []
    masks: list[list[bool]] = []
    for n, problem in enumerate(problems):
        rng = np.random.default_rng([seed, n])
        trajectory = task.expert_episode(engine, int(problem.meta["seed"]), rng)
        for segment in [*trajectory.segments(), *trajectory.dropped]:
            rows.append(trajectory.prompt + segment.tokens)
            masks.append([False] * len(trajectory.prompt) + segment.mask)
    width = max(map(len, rows))
    tokens = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width - 1)
    for i, (ids, trained) in enumerate(zip(rows, masks, strict=True)):
        tokens[i, : len(ids)] = torch.tensor(ids)
        mask[i, : len(ids) - 1] = torch.tensor(trained[1:], dtype=torch.float32)
    return tokens, mask


CHECK_EVERY = 5
"""Steps between the target-accuracy checks."""
CHECK_EVERY_LED = 200
"""Steps between the expert-led checks of a text env (a whole episode per problem)."""
CHECK_PROBLEMS = 256


def expert_led_accuracy(
    model: Any, tokenizer: Any, task: TextEnvTask, problems: list[Problem], seed: int = 7
) -> float:
    """The share of `problems` won when the env's expert at its best leads each episode and
    the model writes the deciding action greedily (for recall: the answer, read out of the
    expert's full summaries). It measures the skill a warm start must bring where RL can
    only improve the rest (which summaries to write)."""
    from surge.llm.episodes import EpisodeEngine

    engine = EpisodeEngine(tokenizer)
    stops = tuple(task.limits.stop)

    def greedy(context: list[int], max_new: int, summarize: bool) -> Any:
        out: list[int] = []
        finish = "length"
        with torch.no_grad():
            while len(out) < max_new:
                token = int(model(torch.tensor([context + out])).logits[0, -1].argmax())
                if token == tokenizer.eos_token_id:
                    finish = "eos"
                    break
                out.append(token)
                if stops and engine.decode(out).endswith(stops):
                    finish = "stop"
                    break
        return out, [0.0] * len(out), [0] * len(out), finish

    won = 0
    for n, problem in enumerate(problems):
        rng = np.random.default_rng([seed, n])
        episode = task.expert_led_episode(engine, int(problem.meta["seed"]), rng, greedy)
        won += episode is not None and episode.reward > 0
    return won / max(len(problems), 1)


def check_every(task: Task) -> int:
    """Steps between the target checks of `task`'s warm start."""
    led = isinstance(task, TextEnvTask) and task.has_deciding
    return CHECK_EVERY_LED if led else CHECK_EVERY


CHECKPOINT_EVERY = 200
"""Steps between the saves of a warm start's progress (a stopped one resumes from the last)."""


@dataclass
class SFTProgress:
    """How far a warm start got: the steps taken, their losses and the target checks."""

    step: int = 0
    losses: list[float] = field(default_factory=list)
    checks: list[tuple[int, float]] = field(default_factory=list)
    seconds: float = 0.0
    """Training time over every stretch of the warm start (resumed ones added)."""


def train_sft(
    model: Any,
    tokenizer: Any,
    task: Task,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    target_accuracy: float = 0.0,
    aggregation: Aggregation = "token-mean",
    on_check: Callable[[int, float], None] = lambda step, accuracy: None,
    checkpoint: Path | None = None,
) -> SFTProgress:
    """Up to `steps` AdamW steps on fresh training problems, stopping once the accuracy on a
    fixed sample of training problems reaches `target_accuracy` (> 0). The check is greedy
    decoding, or, for a text env that marks its deciding action, the expert-led accuracy
    (`expert_led_accuracy`); it never looks at held-out problems.

    With `checkpoint`, the weights, optimizer and sampler state are saved there every
    `CHECKPOINT_EVERY` steps, and a run that finds the file resumes from it: the same steps
    follow as if it had never stopped (the same thread count gives the same weights)."""
    from surge.llm.evaluate import greedy_accuracy

    rng = random.Random(seed)
    check = task.sample("train", CHECK_PROBLEMS, random.Random(seed + 1))
    led = isinstance(task, TextEnvTask) and task.has_deciding
    every = check_every(task)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    progress = SFTProgress()
    if checkpoint is not None and checkpoint.is_file():
        progress = _resume(checkpoint, model, optimizer, rng)
    started = time.monotonic() - progress.seconds
    model.train()
    for step in range(progress.step, steps):
        if target_accuracy > 0 and step and step % every == 0:
            model.eval()
            if led:
                assert isinstance(task, TextEnvTask)
                accuracy = expert_led_accuracy(model, tokenizer, task, check)
            else:
                accuracy = greedy_accuracy(model, tokenizer, task, check)
            model.train()
            progress.checks.append((step, round(accuracy, 4)))
            on_check(step, accuracy)
            if accuracy >= target_accuracy:
                break
        problems = task.sample("train", batch_size, rng)
        if isinstance(task, TextEnvTask):
            tokens, mask = transcript_batch(tokenizer, task, problems, rng.getrandbits(63))
        else:
            tokens, mask = example_batch(tokenizer, [(p.prompt, p.answer) for p in problems])
        logp = torch.log_softmax(model(tokens).logits[:, :-1].float(), dim=-1)
        token_logp = logp.gather(2, tokens[:, 1:, None])[..., 0]
        loss = aggregate(-token_logp, mask, aggregation)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        progress.losses.append(float(loss.detach()))
        progress.step = step + 1
        if checkpoint is not None and progress.step % CHECKPOINT_EVERY == 0:
            progress.seconds = time.monotonic() - started
            _save(checkpoint, model, optimizer, rng, progress)
    progress.seconds = time.monotonic() - started
    model.eval()
    return progress


def _save(
    path: Path,
    model: Any,
    optimizer: torch.optim.Optimizer,
    rng: random.Random,
    progress: SFTProgress,
) -> None:
    """Written beside and renamed into place: a stop mid-save leaves the previous one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": rng.getstate(),
        "progress": dataclasses.asdict(progress),
    }
    with atomic_writer(path, "wb", durable=True) as f:
        torch.save(state, f)


def _resume(
    path: Path, model: Any, optimizer: torch.optim.Optimizer, rng: random.Random
) -> SFTProgress:
    state = torch.load(path, weights_only=False)  # the run's own file, in its own cache
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    rng.setstate(state["rng"])
    return SFTProgress(**state["progress"])


def warm_start(
    settings: WarmStartSettings,
    root: Path | None = None,
    log: Callable[[str], None] = lambda text: None,
) -> Path:
    """The cached warm-start directory of `settings`, trained first if it is not there."""
    target = (root or cache_root()) / "warm-start" / settings.key()
    if (target / "warm_start.json").is_file():
        log(f"warm start: cached at {target}")
        return target
    from transformers.utils import logging

    from surge.llm.evaluate import greedy_accuracy
    from surge.llm.tiny import char_tokenizer, tiny_llama

    logging.disable_progress_bar()
    threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        s = settings
        log(f"warm start: {s.steps} supervised steps on {s.task} (cached for later runs)")
        tokenizer = char_tokenizer(s.alphabet())
        model = tiny_llama(len(tokenizer), s.hidden, s.layers, s.heads, s.max_length, s.seed)
        task = make_task(s.task, s.task_kwargs, s.reward_fn)
        if isinstance(task, TextEnvTask):
            task.configure(limits_from(s.limits))
        every = check_every(task)

        def checked(step: int, accuracy: float) -> None:
            if (step // every) % 5 == 1 or accuracy >= s.target_accuracy:
                log(f"warm start: step {step}, check accuracy {accuracy:.1%}")

        checkpoint = target.with_name(f".{target.name}.progress.pt")
        if checkpoint.is_file():
            log(f"warm start: resuming from {checkpoint}")
        progress = train_sft(
            model, tokenizer, task, s.steps, s.batch_size, s.lr, s.seed, s.target_accuracy,
            s.aggregation, on_check=checked, checkpoint=checkpoint,
        )  # fmt: skip
        evaluated = time.monotonic()
        accuracy = greedy_accuracy(model, tokenizer, task, heldout_set(task, HELDOUT))
        seconds = progress.seconds + time.monotonic() - evaluated
    finally:
        torch.set_num_threads(threads)
    steps, losses = progress.step, progress.losses
    log(f"warm start: held-out accuracy {accuracy:.1%} after {steps} steps, {seconds:.0f} s")
    staging = staging_dir(target)
    save_model_dir(model, tokenizer, staging)  # the run's stops are the run's to add
    record = {
        "settings": dataclasses.asdict(settings),
        "format": FORMAT,
        "heldout_accuracy": accuracy,
        "heldout_problems": HELDOUT,
        "steps": steps,
        "checks": progress.checks,
        "final_loss": losses[-1] if losses else None,
        "seconds": round(seconds, 1),
    }
    (staging / "warm_start.json").write_text(json.dumps(record, indent=1))
    publish_dir(staging, target)  # another run's identical warm start may have come first
    checkpoint.unlink(missing_ok=True)
    return target
