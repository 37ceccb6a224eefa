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

from surge.config.schema import ExperimentConfig
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
    cfg: ExperimentConfig,
    temperature: float,
    samples: int = 1,
    seed: int = 0,
    on_step: Callable[[], None] = lambda: None,
    slots: int = 512,
) -> Scores:
    """Decode `samples` completions per problem (temperature 0: greedy) with the run's
    generation settings, at most `slots` at once, and score them."""
    r = cfg.rollout
    stop = stop_sequences(tokenizer, r.stop)
    return decode_and_score(
        model, tokenizer, task, problems, r.max_new_tokens, temperature, samples, r.top_p, stop,
        seed, on_step, slots,
    )  # fmt: skip


def greedy_accuracy(model: Any, tokenizer: Any, task: Task, problems: list[Problem]) -> float:
    """Greedy exact-match accuracy, with room for the longest answer and the end token."""
    longest = max(len(tokenizer.encode(p.answer, add_special_tokens=False)) for p in problems)
    # (a text env's turns are its own limit's: decode_and_score)
    return decode_and_score(model, tokenizer, task, problems, longest + 1, 0.0).accuracy


def decode_and_score(
    model: Any,
    tokenizer: Any,
    task: Task,
    problems: list[Problem],
    max_new_tokens: int,
    temperature: float,
    samples: int = 1,
    top_p: float = 1.0,
    stop: tuple[tuple[int, ...], ...] = (),
    seed: int = 0,
    on_step: Callable[[], None] = lambda: None,
    slots: int = 512,
) -> Scores:
    """Run `samples` episodes of each problem (the task's episode, as training runs it:
    surge/llm/episodes.py) and score each: its own reward, or the task's verifier on the
    policy's text. An episode that ends without a trajectory scores 0."""
    prompts = [tuple(encode_prompt(tokenizer, p.prompt)) for p in problems]
    n = len(prompts)
    max_prompt, max_length = max(len(p) for p in prompts), None
    if isinstance(task, TextEnvTask):  # a context grows to the window, a turn at a time
        max_prompt = max_length = task.limits.rule.window
        max_new_tokens = task.limits.longest_turn
        stop = stop_sequences(tokenizer, list(task.limits.stop))
    # The built-in engine whatever `rollout.engine` says: a second vLLM instance beside the
    # generation worker's would claim the GPU memory that one holds.
    engine = make_engine(
        None,
        model,
        tokenizer,
        slots=min(n * samples, slots),
        max_prompt=max_prompt,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        stop=stop,
        seed=seed,
        max_length=max_length,
    )
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


def evaluate_run(run_dir: Path, cfg: ExperimentConfig, checkpoint: Path, k: int = 0) -> dict:
    """Held-out greedy accuracy (and pass@k) of an LLM run's checkpoint; writes eval.json."""
    import torch

    from surge.llm.model import load_model
    from surge.llm.tasks import heldout_set, more_summaries, task_of
    from surge.tracking.checkpoint import load_checkpoint

    state = load_checkpoint(checkpoint)
    model, tokenizer = load_model(run_dir / "model")
    model.load_state_dict({name: torch.as_tensor(v) for name, v in state["model"].items()})
    model.eval()
    task = task_of(cfg)
    problems = heldout_set(task, cfg.task.heldout)
    greedy = score(model, tokenizer, task, problems, cfg, temperature=0.0)
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
        accuracy = score(model, tokenizer, more, problems, cfg, 0.0).accuracy
        result[f"accuracy@{n}_summaries"] = accuracy
    if k:
        sampled = score(model, tokenizer, task, problems, cfg, cfg.rollout.temperature, k, cfg.seed)
        result[f"pass@{k}"] = sampled.pass_at_k
    (run_dir / "eval.json").write_text(json.dumps(result, indent=2))
    return result
