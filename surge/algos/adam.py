"""Adam as one fused kernel per step, without torch.optim.

The update is torch's own fused Adam kernel (`torch._fused_adam_`, what
`torch.optim.Adam(fused=True)` runs). Why not torch.optim: constructing any torch.optim
optimizer imports torch._dynamo, which costs about 1.2 s of a trainer's start-up on an idle
2-core machine and 4 s on a busy one: on CartPole that is a large part of the time to solve.
tests/unit/test_adam.py checks the updates against torch.optim.Adam.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor


class FusedAdam:
    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float,
        eps: float = 1e-8,
        betas: tuple[float, float] = (0.9, 0.999),
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.lr = lr
        self.eps = eps
        self.betas = betas
        with torch.no_grad():
            self.exp_avg = [
                torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params
            ]
            self.exp_avg_sq = [
                torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params
            ]
        self.steps = [torch.zeros((), dtype=torch.float32, device=p.device) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        steps = [self.steps[i] for i in live]
        torch._foreach_add_(steps, 1.0)
        torch._fused_adam_(
            [self.params[i] for i in live],
            [self.params[i].grad for i in live],  # type: ignore[misc]
            [self.exp_avg[i] for i in live],
            [self.exp_avg_sq[i] for i in live],
            [],
            steps,
            lr=self.lr,
            beta1=self.betas[0],
            beta2=self.betas[1],
            weight_decay=0.0,
            eps=self.eps,
            amsgrad=False,
            maximize=False,
        )

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain numbers only (loads with `torch.load(weights_only=True)`)."""
        return {
            "lr": self.lr,
            "steps": [s.clone() for s in self.steps],
            "exp_avg": [m.clone() for m in self.exp_avg],
            "exp_avg_sq": [v.clone() for v in self.exp_avg_sq],
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["exp_avg"]) != len(self.params):
            raise ValueError("optimizer state does not match the model's parameters")
        self.lr = float(state["lr"])
        for mine, saved in zip(
            self.steps + self.exp_avg + self.exp_avg_sq,
            state["steps"] + state["exp_avg"] + state["exp_avg_sq"],
            strict=True,
        ):
            mine.copy_(saved)
