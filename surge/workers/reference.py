"""The reference worker of LLM RL: log-probs of every completion under the frozen starting
model, for the loss's KL term (verl's reference stage; `grpo.kl_coef > 0` adds it to the graph).

It takes each group the reward worker scored (state SCORED, streams/rollouts.py), runs the
group's prompt and completions through the reference model once (the prompt shared by its G
completions, surge/llm/lean.py), writes `ref_logprobs`, marks the row REFERENCED and wakes
the trainer. So the trainer never runs a second model, and this stage overlaps training
like the others. Stateless: a new life finds the SCORED rows and carries on.

The reference is the run's starting model: the warm start or `model.path`, also on a
resumed run (whose workers otherwise start from the checkpoint's weights).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from surge.devices import choose_device, require, visible_gpus
from surge.llm.lean import LeanLlama
from surge.llm.model import load_model
from surge.streams.rollouts import REFERENCED, SCORED, RolloutRows, trained_width
from surge.threads import limit_torch_threads
from surge.tracking.timing import INFERENCE
from surge.workers.base import Binding, RunContext
from surge.workers.stage import HandOver, StageWorker, every_row


def build(ctx: RunContext, b: Binding) -> ReferenceWorker:
    return ReferenceWorker(ctx, b)


class ReferenceWorker(StageWorker):
    """Adds reference log-probs to SCORED rows and gives them REFERENCED (workers/stage.py)."""

    activity = INFERENCE

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        from surge.llm.setup import model_directory

        start = model_directory(ctx.cfg, Path(ctx.run_dir), resuming=False)
        model, _ = load_model(start)
        model.to(reference_device(ctx.cfg.workers.trainer_device))
        self.lean = LeanLlama(model.eval().requires_grad_(False))
        limit_torch_threads(ctx.cfg.grpo.threads)
        port = b.port("scored")
        rows = RolloutRows(b.transport, port.block, ctx.cfg.rollout.prompts_per_batch)
        (trainer,) = b.port("referenced").sends_to
        work = every_row(self._reference)
        super().__init__(
            b, rows, [HandOver(SCORED, REFERENCED, work, b.transport.channel(trainer))]
        )
        self.a = rows.a

    def _reference(self, rows: list[int]) -> None:
        a = self.a
        groups = {k: a[k][rows] for k in ("prompt", "prompt_len", "tokens", "mask")}
        a["ref_logprobs"][rows] = reference_logprobs(self.lean, *groups.values())


def reference_device(trainer_setting: str) -> str:
    """The reference model's device: the trainer's setting where this process sees a GPU
    (beside the trainer on one machine, a GPU's memory holds both models), else the CPU
    (on Ray the reference worker declares no GPU)."""
    visible = visible_gpus()
    if visible == 0:
        return "cpu"
    device = choose_device(trainer_setting, True, visible)
    require(device, "workers.trainer_device", visible)
    return device


def reference_logprobs(
    lean: LeanLlama,
    prompts: np.ndarray,
    prompt_lens: np.ndarray,
    tokens: np.ndarray,
    mask: np.ndarray,
) -> np.ndarray:
    """Log-probs `[rows, G, width]` of groups' episode tokens (`tokens [rows, G, width]`)
    after their prompts (`prompts [rows, P]`, real lengths `prompt_lens`), at the policy's
    tokens (`mask [rows, G, width]`), zero elsewhere."""
    rows, g, width = tokens.shape
    P, N = int(prompt_lens.max()), trained_width(mask)
    device = lean.device
    tokens_in = tokens[:, :, :N].reshape(rows * g, N).astype(np.int64)
    completions = torch.from_numpy(tokens_in).to(device)
    with torch.inference_mode():
        logits = lean.forward_groups(
            torch.from_numpy(prompts[:, :P].astype(np.int64)).to(device),
            torch.from_numpy(prompt_lens.astype(np.int64)).to(device),
            completions,
        )
        logp = torch.log_softmax(logits.float(), -1).gather(2, completions[..., None])[..., 0]
    out = np.zeros(tokens.shape, np.float32)
    out[:, :, :N] = logp.cpu().numpy().reshape(rows, g, N) * mask[:, :, :N]
    return out
