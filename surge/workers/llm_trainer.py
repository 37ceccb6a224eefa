"""The trainer of LLM RL: consumes scored groups in batch order, updates, publishes versions.

Batch v (groups v*B .. v*B+B-1, streams/rollouts.py) is trained by version v. One update per
batch: the proximal policy of AReaL's decoupled loss is then the current weights, so its
log-probs come from the same forward pass (detached) and cost nothing extra; the behaviour
weight pi_prox / mu corrects for the versions (and the sampling engine) that drew the tokens.
AIPO instead weights log pi by min(pi / mu, rho). Both are surge/algos/llm_losses.py; the
update (which skips the forward and backward of groups without a gradient) is
surge/algos/grpo_update.py.

Everything a run reports about LLM training is logged here: reward, accuracy, response
length, entropy, KL, clip fraction, the staleness of every trained token (histogram over
0..max_policy_lag), generated and trained tokens/s, and the evaluation workers' held-out
accuracy.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

from surge.algos.grpo_update import grpo_update
from surge.errors import UserError
from surge.llm.lean import LeanLlama
from surge.models.weights import model_to_flat
from surge.streams.params import ParameterService
from surge.streams.results import ResultReader
from surge.streams.rollouts import REFERENCED, SCORED, RolloutRows
from surge.threads import limit_torch_threads
from surge.tracking import timing
from surge.tracking.checkpoint import rng_state
from surge.tracking.checkpoint_writer import CheckpointWriter, snapshot
from surge.tracking.metrics import MetricsWriter, wandb_options
from surge.tracking.timing import COPY, LEARN
from surge.workers.base import Binding, RunContext
from surge.workers.trainer_loop import TrainerLoop

CHECKPOINT_FORMAT = 1
HF_DIR = "model"
"""run_dir/model: the newest checkpoint's weights as a Hugging Face directory."""


def build(ctx: RunContext, b: Binding) -> LLMTrainer:
    return LLMTrainer(ctx, b)


def grouped_batch(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """A batch's rows as tensors for `LeanLlama.forward_groups`: `prompts` [groups, P] and
    `prompt_lens`; per completion (group-major, S = groups x G), over its N token positions:
    `completions` [S, N], `mask` (1 on real tokens), `behav` (behaviour log-probs),
    `versions`; and `reward` [S]. P and N are trimmed to this batch's longest."""
    plen = batch["prompt_len"].astype(np.int64)
    length = batch["length"].reshape(-1)
    P, N = int(plen.max()), max(int(length.max()), 1)
    groups, g, _ = batch["tokens"].shape
    S = groups * g
    mask = np.arange(N)[None, :] < length[:, None]
    return {
        "prompts": torch.from_numpy(batch["prompt"][:, :P].astype(np.int64)),
        "prompt_lens": torch.from_numpy(plen),
        "completions": torch.from_numpy(batch["tokens"].reshape(S, -1)[:, :N].astype(np.int64)),
        "mask": torch.from_numpy(mask.astype(np.float32)),
        "behav": torch.from_numpy(batch["logprobs"].reshape(S, -1)[:, :N].copy()),
        "versions": torch.from_numpy(batch["versions"].reshape(S, -1)[:, :N].astype(np.int64)),
        "reward": torch.from_numpy(batch["reward"].reshape(-1).astype(np.float32)),
        "ref": torch.from_numpy(batch["ref_logprobs"].reshape(S, -1)[:, :N].copy()),
    }


class LLMTrainer(TrainerLoop):
    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = self.cfg = ctx.cfg
        self.name = b.name
        self.finished = False
        self.finish_reason = ""
        self.ctx = ctx
        self.control = b.control
        self.timers = b.control.timers
        from surge.llm.model import load_model

        assert ctx.model_dir is not None
        self.model, self.tokenizer = load_model(ctx.model_dir)
        self.model.train()
        limit_torch_threads(cfg.grpo.threads)
        g = cfg.grpo
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=g.lr, weight_decay=g.weight_decay, foreach=True
        )
        # The forward shares each prompt's computation among its G completions (llm/lean.py).
        self.lean = LeanLlama(self.model)
        self.group_size = cfg.rollout.group_size
        # Its input: the last stage's rows (the reference worker's when the loss has a KL).
        port = b.port("referenced" if g.kl_coef > 0 else "scored")
        self.flow = port.flow
        assert self.flow is not None
        complete = REFERENCED if g.kl_coef > 0 else SCORED
        self.rows = RolloutRows(b.transport, port.block, cfg.rollout.prompts_per_batch, complete)
        self.inbox = b.transport.channel(b.inbox)
        self._wait = self.inbox.recv
        published = b.port_of_kind("versions")
        subscribers = [b.transport.channel(name) for name in published.wakes]
        self.params = ParameterService(b.transport, published.block, subscribers)
        results = b.ports.get("evaluations")
        self.evaluations = ResultReader(b.transport, results) if results else None

        self.version = 0
        self.env_steps = 0  # completions trained (each prompt-completion is one episode)
        self.tokens = 0  # completion tokens generated and delivered to the trainer
        self._learned_tokens = 0.0  # since the last log: tokens with a loss weight
        self.wall_time_offset = 0.0
        self.recent_returns: deque[float] = deque(maxlen=max(cfg.return_window, 1))
        if ctx.checkpoint is not None:
            from surge.tracking.checkpoint import load_checkpoint

            self._restore(load_checkpoint(Path(ctx.checkpoint)))
        resumed_at = self.env_steps if ctx.checkpoint is not None else None
        self.checkpoints = CheckpointWriter(ctx.run_dir, cfg.log.keep_checkpoints)
        self.metrics = MetricsWriter(
            ctx.run_dir, cfg.log.tensorboard, resumed_at, wandb_options(cfg)
        )
        self._start_clock()
        self._last_log = (self._started, self.env_steps, self.tokens)
        self._window: list[dict[str, float]] = []  # per-update stats since the last log
        self._staleness = np.zeros(cfg.max_policy_lag + 1, np.int64)
        self._timing_at_last_log = self.control.timing.sum(axis=0)
        self.params.reset()
        self._publish()

    # ------------------------------------------------------------------ main loop

    def _ready(self) -> bool:
        return self.rows.batch_ready(self.version)

    def _train_next(self) -> None:
        self._train(self.rows.batch(self.version))

    def _train(self, batch: dict[str, np.ndarray]) -> None:
        clock = self.timers.now()
        data = grouped_batch(batch)
        self._check_staleness(data)
        stats = self._update(data)
        clock = self.timers.add(LEARN, clock)
        self.version += 1
        self._publish()
        stats["publish_s"] = self.timers.now() - clock
        self.timers.add(COPY, clock)
        rewards = data["reward"]
        self.env_steps += int(rewards.numel())
        self.tokens += int(data["mask"].sum())
        self._learned_tokens += stats.pop("learned_tokens")
        self.recent_returns.extend(rewards.tolist())
        self._window.append(stats)
        self.control.set_progress(
            env_steps=self.env_steps,
            episode_return_mean=self.return_mean,
            policy_version=self.version,
            episodes=self.env_steps,
        )
        self._log_evaluations()
        self._after_update(time.monotonic())

    def _check_staleness(self, data: dict[str, torch.Tensor]) -> None:
        """Count each trained token's staleness; the stream's bound makes anything older
        than max_policy_lag impossible, so finding some is a bug."""
        assert self.flow is not None
        mask = data["mask"].bool()
        versions = data["versions"][mask].numpy()
        rejected = int((~self.flow.admits(self.version, versions)).sum())
        if rejected:
            raise RuntimeError(
                f"batch {self.version} holds {rejected} token(s) older than the rollout "
                f"stream's bound ({self.flow.describe()})"
            )
        lag = self.version - versions
        self._staleness += np.bincount(lag, minlength=len(self._staleness))[: len(self._staleness)]

    def _update(self, data: dict[str, torch.Tensor]) -> dict[str, float]:
        return grpo_update(self.lean, self.optimizer, data, self.cfg.grpo, self.group_size)

    def _log_evaluations(self) -> None:
        if self.evaluations is None:
            return
        for result in self.evaluations.new():
            row = {
                "env_steps": self.env_steps,
                "wall_time_s": round(self.wall_time_s(), 3),
                "time": round(time.time(), 3),
                "eval/policy_version": int(result["version"]),
                "eval/problems": int(result["problems"]),
                "eval/accuracy": result["accuracy"],
                "eval/length_mean": result["length_mean"],
            }
            if self.cfg.task.pass_k:
                row[f"eval/pass@{self.cfg.task.pass_k}"] = result["pass_at_k"]
            self.metrics.write(row)
            self.control.set_progress(eval_return_mean=result["accuracy"])

    def _publish(self) -> None:
        self.params.publish(self.version, model_to_flat(self.model))

    def _log(self, now: float) -> None:
        then, steps_then, tokens_then = self._last_log
        dt = max(now - then, 1e-9)
        window = self._window or [{}]
        means = {k: float(np.mean([w[k] for w in window if k in w])) for k in window[-1]}
        seen = max(int(self._staleness.sum()), 1)
        lag_mean = float((np.arange(len(self._staleness)) * self._staleness).sum() / seen)
        record: dict[str, Any] = {
            "env_steps": self.env_steps,
            "wall_time_s": round(self.wall_time_s(), 3),
            "time": round(time.time(), 3),
            "episode_return_mean": self.return_mean,
            "episodes": self.env_steps,
            "steps_per_s": round((self.env_steps - steps_then) / dt, 1),
            "tokens_per_s": round((self.tokens - tokens_then) / dt, 1),
            # fewer than generated when dynamic sampling drops groups or behav_cap masks tokens
            "trained_tokens_per_s": round(self._learned_tokens / dt, 1),
            "policy_version": self.version,
            "policy_lag_mean": lag_mean,
            "restarts": int(self.control.progress()["restarts"]),
            **means,
        }
        for lag, count in enumerate(self._staleness):
            record[f"staleness/{lag}"] = float(count) / seen  # share of tokens `lag` behind
        record.update(timing.shares_since(self.control.timing, self._timing_at_last_log))
        self._timing_at_last_log = self.control.timing.sum(axis=0)
        self.metrics.write(record)
        self.control.set_progress(steps_per_s=record["steps_per_s"], policy_lag_mean=lag_mean)
        self._last_log = (now, self.env_steps, self.tokens)
        self._learned_tokens = 0.0
        self._window = []
        self._staleness[:] = 0

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self, wait: bool = False) -> None:
        """The trainer state (surge's checkpoint) and the weights as a Hugging Face directory
        (run_dir/model, loadable by plain transformers)."""
        state = {
            "format": CHECKPOINT_FORMAT,
            "kind": "llm",
            "version": self.version,
            "env_steps": self.env_steps,
            "tokens": self.tokens,
            "wall_time_s": self.wall_time_s(),
            "recent_rewards": list(self.recent_returns),
            "resumes": self.ctx.resumes,
            "model": snapshot(self.model.state_dict()),
            "optimizer": snapshot(_string_keys(self.optimizer.state_dict())),
            "rng": rng_state(),
        }
        self.checkpoints.submit(state, self.version)
        self.model.save_pretrained(self.ctx.run_dir / HF_DIR)
        self.tokenizer.save_pretrained(self.ctx.run_dir / HF_DIR)
        self._next_checkpoint = time.monotonic() + self.cfg.log.checkpoint_interval_s
        if wait:
            self.checkpoints.wait()

    def _restore(self, state: dict[str, Any]) -> None:
        from surge.tracking.checkpoint import restore_rng_state

        if state.get("format") != CHECKPOINT_FORMAT or state.get("kind") != "llm":
            raise UserError(
                "this checkpoint was not written by the LLM trainer of this surge version",
                "resume it with the surge version that wrote it, or start a new run",
            )
        self.model.load_state_dict({k: torch.as_tensor(v) for k, v in state["model"].items()})
        self.optimizer.load_state_dict(_tensors(state["optimizer"]))
        restore_rng_state(state["rng"])
        self.version = int(state["version"])
        self.env_steps = int(state["env_steps"])
        self.tokens = int(state["tokens"])
        self.wall_time_offset = float(state["wall_time_s"])
        self.recent_returns.extend(float(x) for x in state["recent_rewards"])

    def _finish(self, reason: str) -> bool:
        self._log_evaluations()  # results that arrived since the last update
        return super()._finish(reason)

    def close(self) -> None:
        self.checkpoints.close()
        self.metrics.close()


def _string_keys(obj: Any) -> Any:
    """torch's optimizer state keys parameters by number; a checkpoint's keys are strings."""
    if isinstance(obj, dict):
        return {str(k): _string_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_string_keys(v) for v in obj]
    return obj


def _tensors(obj: Any) -> Any:
    """An optimizer state read back from a checkpoint: arrays as tensors."""
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, dict):
        return {
            (int(k) if isinstance(k, str) and k.isdigit() else k): _tensors(v)
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_tensors(v) for v in obj]
    return obj
