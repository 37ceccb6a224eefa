"""Held-out evaluation of a language model on a task: greedy accuracy, and pass@k.

Used by the evaluation worker during training (surge/workers/llm_evaluator.py) and by
`surge eval RUN` on an LLM run's newest checkpoint (`evaluate_run`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from surge.config.llm_schema import RolloutConfig
from surge.config.schema import ExperimentConfig
from surge.llm.engine_protocol import Decoding
from surge.llm.engines import make_engine
from surge.llm.episodes import EpisodeRunner, episode_of
from surge.llm.model import decode_completion, encode_prompt, stop_sequences
from surge.llm.tasks import Problem, Task
from surge.llm.textenv import TextEnvTask


@dataclass
class Scores:
    rewards: np.ndarray
    """[problems, samples]"""
    lengths: np.ndarray
    """[problems, samples] the policy's tokens in each episode"""

    @property
    def accuracy(self) -> float:
        """Share of completions with reward 1 (greedy: one per problem)."""
        return float((self.rewards >= 1.0).mean())

    @property
    def pass_at_k(self) -> float:
        """Share of problems solved by at least one of their samples."""
        return float((self.rewards >= 1.0).any(axis=1).mean())


def score(
    model: Any,
    tokenizer: Any,
    task: Task,
    problems: list[Problem],
    rollout: RolloutConfig,
    temperature: float,
    samples: int = 1,
    seed: int = 0,
    on_step: Callable[[], None] = lambda: None,
    slots: int = 512,
) -> Scores:
    """Run `samples` episodes of each problem (the task's episode, as training runs it:
    surge/llm/episodes.py), at most `slots` at once, drawing at `temperature` (0: greedy)
    with `rollout`'s other generation settings (a run's `cfg.rollout`), and score each: its
    own reward, or the task's verifier on the policy's text. An episode that ends without a
    trajectory scores 0."""
    prompts = [tuple(encode_prompt(tokenizer, p.prompt)) for p in problems]
    n = len(prompts)
    max_prompt, max_length = max(len(p) for p in prompts), None
    max_new_tokens, stop = rollout.max_new_tokens, rollout.stop
    if isinstance(task, TextEnvTask):  # a context grows to the window, a turn at a time
        max_prompt = max_length = task.limits.rule.window
        max_new_tokens, stop = task.limits.longest_turn, list(task.limits.stop)
    decoding = Decoding(
        max_prompt=max_prompt, max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_token_id,
        temperature=temperature, top_p=rollout.top_p, stop=stop_sequences(tokenizer, stop),
        seed=seed, max_length=max_length,
    )  # fmt: skip
    # The built-in engine whatever `rollout.engine` says: a second vLLM instance beside the
    # generation worker's would claim the GPU memory that one holds.
    engine = make_engine(None, model, decoding, slots=min(n * samples, slots))
    runner = EpisodeRunner(engine, tokenizer, episode_of(task))
    for i in range(n * samples):
        runner.start(i, problems[i // samples], np.random.default_rng([seed, i]))
    rewards, lengths = np.zeros(n * samples), np.zeros(n * samples)
    while not runner.idle():
        on_step()
        for key, trajectory in runner.step():
            if trajectory is None:
                continue
            policy = trajectory.policy_tokens()
            reward = trajectory.reward
            if reward is None:
                reward = task.reward(problems[key // samples], decode_completion(tokenizer, policy))
            rewards[key], lengths[key] = reward, len(policy)
    return Scores(rewards.reshape(n, samples), lengths.reshape(n, samples))


def greedy_accuracy(model: Any, tokenizer: Any, task: Task, problems: list[Problem]) -> float:
    """Greedy exact-match accuracy, with room for the longest answer and the end token (and
    no stop string, no nucleus)."""
    longest = max(len(tokenizer.encode(p.answer, add_special_tokens=False)) for p in problems)
    # (a text env's turns are its own limit's: score)
    settings = RolloutConfig(max_new_tokens=longest + 1)
    return score(model, tokenizer, task, problems, settings, 0.0).accuracy


def evaluate_run(
    run_dir: Path, cfg: ExperimentConfig, checkpoint: Path, model_dir: Path, k: int = 0
) -> dict:
    """Held-out greedy accuracy (and pass@k) of an LLM run's checkpoint; writes eval.json.
    `model_dir`: the directory the run resumes from (run_dir/model, or a LoRA run's base,
    which gets the run's adapters)."""
    from surge.llm.lora import load_trained_state
    from surge.llm.model import load_model
    from surge.llm.tasks import heldout_set, more_summaries, task_of
    from surge.tracking.checkpoint import load_checkpoint

    state = load_checkpoint(checkpoint)
    model, tokenizer = load_model(model_dir, cfg.model.lora, cfg.seed)
    load_trained_state(model, state["model"])
    model.eval()
    task = task_of(cfg)
    problems = heldout_set(task, cfg.task.heldout)
    greedy = score(model, tokenizer, task, problems, cfg.rollout, temperature=0.0)
    result: dict[str, Any] = {
        "checkpoint": str(checkpoint),
        "policy_version": int(state["version"]),
        "env_steps": int(state["env_steps"]),
        "problems": len(problems),
        "accuracy": greedy.accuracy,
        "length_mean": float(greedy.lengths.mean()),
    }
    if more_summaries(cfg):
        more = task_of(cfg, evaluation=True)
        n = cfg.context.eval_max_summaries
        accuracy = score(model, tokenizer, more, problems, cfg.rollout, 0.0).accuracy
        result[f"accuracy@{n}_summaries"] = accuracy
    if k:
        r = cfg.rollout
        sampled = score(model, tokenizer, task, problems, r, r.temperature, k, cfg.seed)
        result[f"pass@{k}"] = sampled.pass_at_k
    (run_dir / "eval.json").write_text(json.dumps(result, indent=2))
    return result
