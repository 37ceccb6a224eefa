"""GRPO's learner inside the trainer chassis (surge/workers/trainer.py): LLM RL.

Batch v (groups v*B .. v*B+B-1, streams/rollouts.py) is trained by version v, once every
group of it has been through the last stage (scored; referenced when the loss has a KL
term). One update per batch: the proximal policy of AReaL's decoupled loss is then the
current weights, so its log-probs come from the same forward pass (detached) and cost
nothing extra; the behaviour weight pi_prox / mu corrects for the versions (and the
sampling engine) that drew the tokens. AIPO instead weights log pi by min(pi / mu, rho).
Both are surge/algos/llm_losses.py; the update (which skips the forward and backward of
groups without a gradient) is surge/algos/grpo_update.py.

An episode is one completion: the chassis counts completions as env steps and their
rewards as returns. What else a run reports about LLM training is logged here: accuracy,
response length, entropy, KL, clip fraction, the staleness of every trained token
(histogram over 0..max_policy_lag), generated and trained tokens/s, and the evaluation
workers' held-out accuracy.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from surge.algos.grpo_update import grpo_update
from surge.devices import trainer_device
from surge.errors import UserError
from surge.learners.state import load_optimizer_state, optimizer_state
from surge.llm.lean import LeanLlama
from surge.llm.lora import add_adapters, load_trained_state, trained_parameters, trained_state
from surge.llm.model import load_model, save_adapter, save_model_dir
from surge.llm.run import model_dir_of
from surge.streams.rollouts import (
    EPISODE_STATS,
    REFERENCED,
    SCORED,
    RolloutRows,
    trained_width,
)
from surge.threads import limit_torch_threads
from surge.workers.base import Binding, RunContext
from surge.workers.trainer import Evaluation, TrainerWorker, Update, eval_fields

CHECKPOINT_FORMAT = 1
HF_DIR = "model"
"""run_dir/model: the newest checkpoint's weights as a Hugging Face directory (a LoRA run's:
its adapters, as PEFT saves them)."""


def build(ctx: RunContext, b: Binding) -> TrainerWorker:
    return TrainerWorker(ctx, b, GRPOLearner(ctx, b))


def grouped_batch(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """A batch's rows as tensors for `LeanLlama.forward_groups`: `prompts` [groups, P] and
    `prompt_lens`; per episode (group-major, S = groups x G), over its N token positions
    after the prompt: `completions` [S, N] (the policy's tokens and any env tokens between
    them), `mask` (1 on the policy's tokens), `behav` (behaviour log-probs), `versions`;
    and per episode `reward` and `overlong` (a multi-turn episode is several sequences, its
    segments: surge/streams/rollouts.py). P and N are trimmed to this batch's longest."""
    plen = batch["prompt_len"].astype(np.int64)
    P, N = int(plen.max()), trained_width(batch["mask"])
    groups, q, _ = batch["tokens"].shape  # q: episodes x segments per group
    S = groups * q
    return {
        "prompts": torch.from_numpy(batch["prompt"][:, :P].astype(np.int64)),
        "prompt_lens": torch.from_numpy(plen),
        "completions": torch.from_numpy(batch["tokens"].reshape(S, -1)[:, :N].astype(np.int64)),
        "mask": torch.from_numpy(batch["mask"].reshape(S, -1)[:, :N].astype(np.float32)),
        "behav": torch.from_numpy(batch["logprobs"].reshape(S, -1)[:, :N].copy()),
        "versions": torch.from_numpy(batch["versions"].reshape(S, -1)[:, :N].astype(np.int64)),
        "reward": torch.from_numpy(batch["reward"].reshape(-1).astype(np.float32)),
        "overlong": torch.from_numpy(batch["overlong"].reshape(-1).astype(np.float32)),
        "ref": torch.from_numpy(batch["ref_logprobs"].reshape(S, -1)[:, :N].copy()),
    }


def episode_metrics(stats: np.ndarray) -> dict[str, float]:
    """Means of multi-turn episodes' numbers (`EPISODE_STATS`, then overlong) over the
    episodes since the last log, and the longest context any of them showed the policy."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a column with no value: NaN
        means = np.nanmean(stats, axis=0)
    names = (*EPISODE_STATS, "overlong")
    record = {
        f"episode/{k}": float(v) for k, v in zip(names, means, strict=True) if not np.isnan(v)
    }
    record["episode/context_max_max"] = float(
        np.nanmax(stats[:, EPISODE_STATS.index("context_max")])
    )
    return record


class GRPOLearner:
    """The chassis' `Learner` for the GRPO family."""

    name = "torch"

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = self.cfg = ctx.cfg
        self.ctx = ctx
        self.model, self.tokenizer = load_model(model_dir_of(ctx))
        lora = cfg.model.lora
        # With LoRA: the PEFT model around self.model (whose layers it adapted in place)
        self.adapted = add_adapters(self.model, lora, cfg.seed) if lora.r else None
        self.device = trainer_device(cfg)
        self.model.to(self.device).train()  # before the optimizer takes its parameters
        self.trained = trained_parameters(self.model)  # what is published: adapters alone
        g = cfg.grpo
        limit_torch_threads(g.threads)
        self.optimizer = torch.optim.AdamW(
            self.trained, lr=g.lr, weight_decay=g.weight_decay, foreach=True
        )
        # The forward shares each prompt's computation among its G completions (llm/lean.py).
        self.lean = LeanLlama(self.model)
        self.group_size = cfg.rollout.group_size
        # Its input: the last stage's rows (the reference worker's when the loss has a KL).
        port = b.port("referenced" if g.kl_coef > 0 else "scored")
        assert port.flow is not None
        self.flow = port.flow
        complete = REFERENCED if g.kl_coef > 0 else SCORED
        self.rows = RolloutRows(b.transport, port.block, cfg.rollout.prompts_per_batch, complete)
        self.wait = b.transport.channel(b.inbox).recv
        self.tokens = 0  # completion tokens generated and delivered to the trainer
        self._tokens_at_log = 0
        self._learned_tokens = 0.0  # since the last log: tokens with a loss weight
        self._window: list[dict[str, float]] = []  # per-update stats since the last log
        self._dropped = 0  # episodes the generation workers dropped and ran again, ditto
        self._staleness = np.zeros(cfg.max_policy_lag + 1, np.int64)
        self._evaluation: tuple[Any, Any] | None = None  # (task, held-out problems), made once
        self.multi_turn = self.rows.segments > 1 or cfg.context != type(cfg.context)()
        self._episodes: list[np.ndarray] = []  # multi-turn: per-episode stats since the log

    def ready(self, version: int) -> bool:
        return self.rows.batch_ready(version)

    def update(self, version: int) -> Update:
        batch = self.rows.batch(version)
        data = grouped_batch(batch)
        self._dropped += int(batch["dropped"].sum())
        if self.multi_turn:
            self._episodes.append(
                np.concatenate(
                    [
                        batch["stats"].reshape(-1, len(EPISODE_STATS)),
                        batch["overlong"].reshape(-1, 1),
                    ],
                    axis=1,
                )
            )
        self._check_staleness(data, version)
        on_device = {k: v.to(self.device, non_blocking=True) for k, v in data.items()}
        stats = grpo_update(self.lean, self.optimizer, on_device, self.cfg.grpo, self.group_size)
        rewards = data["reward"]
        self.tokens += int(data["mask"].sum())
        self._learned_tokens += stats.pop("learned_tokens")
        self._window.append(stats)
        return Update(int(rewards.numel()), rewards.tolist())

    def _check_staleness(self, data: dict[str, torch.Tensor], version: int) -> None:
        """Count each trained token's staleness; the stream's bound makes anything older
        than max_policy_lag impossible, so finding some is a bug."""
        mask = data["mask"].bool()
        versions = data["versions"][mask].numpy()
        rejected = int((~self.flow.admits(version, versions)).sum())
        if rejected:
            raise RuntimeError(
                f"batch {version} holds {rejected} token(s) older than the rollout "
                f"stream's bound ({self.flow.describe()})"
            )
        lag = version - versions
        self._staleness += np.bincount(lag, minlength=len(self._staleness))[: len(self._staleness)]

    def parameters(self) -> np.ndarray:
        from surge.models.weights import tensors_to_flat

        return tensors_to_flat(self.trained)

    def metrics(self, seconds: float) -> dict[str, Any]:
        window = self._window or [{}]
        means = {k: float(np.mean([w[k] for w in window if k in w])) for k in window[-1]}
        seen = max(int(self._staleness.sum()), 1)
        record: dict[str, Any] = {
            "tokens_per_s": round((self.tokens - self._tokens_at_log) / seconds, 1),
            # fewer than generated when dynamic sampling drops groups or behav_cap masks tokens
            "trained_tokens_per_s": round(self._learned_tokens / seconds, 1),
            "policy_lag_mean": float((np.arange(len(self._staleness)) * self._staleness).sum())
            / seen,
            "episodes_dropped": self._dropped,
            **means,
        }
        for lag, count in enumerate(self._staleness):
            record[f"staleness/{lag}"] = float(count) / seen  # share of tokens `lag` behind
        if self._episodes:
            record.update(episode_metrics(np.concatenate(self._episodes)))
            self._episodes = []
        self._tokens_at_log = self.tokens
        self._learned_tokens = 0.0
        self._dropped = 0
        self._window = []
        self._staleness[:] = 0
        return record

    def eval_record(self, result: dict[str, float]) -> tuple[dict[str, Any], float]:
        fields = eval_fields({k: v for k, v in result.items() if k != "pass_at_k"})
        k = self.cfg.task.pass_k
        if k and not math.isnan(result["pass_at_k"]):
            fields[f"eval/pass@{k}"] = result["pass_at_k"]
        if self.multi_turn:  # an agent's episode succeeds (reward 1) rather than answers
            fields["eval/success"] = fields["eval/accuracy"]
            if "eval/accuracy_eval_summaries" in fields:
                fields["eval/success_eval_summaries"] = fields["eval/accuracy_eval_summaries"]
        return fields, result["accuracy"]

    def evaluate(self, episodes: int, seed: int) -> Evaluation:
        """Greedy accuracy on the task's held-out problems (`task.heldout`; `episodes` is
        the env runs' count and does not apply)."""
        from surge.llm.evaluate import score
        from surge.llm.tasks import heldout_set, task_of

        if self._evaluation is None:
            task = task_of(self.cfg)
            self._evaluation = (task, heldout_set(task, self.cfg.task.heldout))
        task, problems = self._evaluation
        self.model.eval()
        try:
            scores = score(self.model, self.tokenizer, task, problems, self.cfg.rollout, 0.0)
        finally:
            self.model.train()
        solved = scores.rewards[:, 0]
        return Evaluation(scores.accuracy, float(solved.std()), len(problems))

    def state(self) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT,
            "kind": "llm",
            "tokens": self.tokens,
            "model": trained_state(self.model),  # a LoRA run's adapters alone
            "optimizer": optimizer_state(self.optimizer),
        }

    def load(self, state: dict[str, Any]) -> None:
        if state.get("format") != CHECKPOINT_FORMAT or state.get("kind") != "llm":
            raise UserError(
                "this checkpoint was not written by the LLM trainer of this surge version",
                "resume it with the surge version that wrote it, or start a new run",
            )
        try:
            load_trained_state(self.model, state["model"])
        except (ValueError, RuntimeError) as e:
            raise UserError(
                f"this checkpoint's weights do not fit the run's model: {e}",
                "resume with the model.path and model.lora settings it was written with",
            ) from None
        load_optimizer_state(self.optimizer, state["optimizer"])
        self.tokens = self._tokens_at_log = int(state["tokens"])

    def export(self, run_dir: Path, version: int, wait: bool) -> bool:
        """run_dir/model: the weights as a Hugging Face directory, loadable by plain
        transformers (`generate` with the run's completion length and stops); with LoRA the
        adapters, which PEFT loads onto the base (the run's starting directory)."""
        directory, rollout = run_dir / HF_DIR, self.cfg.rollout
        if self.adapted is None:
            save_model_dir(self.model, self.tokenizer, directory, rollout)
        else:
            save_adapter(self.adapted, self.tokenizer, directory, model_dir_of(self.ctx), rollout)
        return True

    def close(self) -> None:
        pass
