"""Adam as one fused kernel over one flat tensor, without torch.optim.

The update is torch's own fused Adam kernel (`torch._fused_adam_`, what
`torch.optim.Adam(fused=True)` runs), applied to the flat parameter and gradient buffers of
`FlatParameters`: one kernel launch per step whatever the number of parameter tensors.
Why not torch.optim: constructing any torch.optim optimizer imports torch._dynamo, which
costs about 1.2 s of a trainer's start-up on an idle 2-core machine and 4 s on a busy one:
on CartPole that is a large part of the time to solve.
tests/unit/test_adam.py checks the updates against torch.optim.Adam.
"""

from __future__ import annotations

from typing import Any

import torch

from surge.algos.flat_params import FlatParameters


class FusedAdam:
    def __init__(
        self,
        flat: FlatParameters,
        lr: float,
        eps: float = 1e-8,
        betas: tuple[float, float] = (0.9, 0.999),
    ) -> None:
        self.flat = flat
        # On a GPU the rate lives on the device, so that a step captured in a CUDA graph
        # (algos/cuda_graph.py) reads the current rate rather than the one at its capture.
        self._lr_on_device = (
            None if flat.data.device.type == "cpu" else torch.tensor(lr, device=flat.data.device)
        )
        self.lr = lr
        self.eps = eps
        self.betas = betas
        self.exp_avg = torch.zeros_like(flat.data)
        self.exp_avg_sq = torch.zeros_like(flat.data)
        self.step_count = torch.zeros((), dtype=torch.float32, device=flat.data.device)

    @property
    def lr(self) -> float:
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        self._lr = float(value)
        if self._lr_on_device is not None:
            self._lr_on_device.fill_(self._lr)

    def zero_grad(self) -> None:
        self.flat.zero_grad()

    @torch.no_grad()
    def step(self) -> None:
        self.step_count += 1.0
        torch._fused_adam_(
            [self.flat.data],
            [self.flat.grad],
            [self.exp_avg],
            [self.exp_avg_sq],
            [],
            [self.step_count],
            lr=self.lr if self._lr_on_device is None else self._lr_on_device,
            beta1=self.betas[0],
            beta2=self.betas[1],
            weight_decay=0.0,
            eps=self.eps,
            amsgrad=False,
            maximize=False,
        )

    def state_dict(self) -> dict[str, Any]:
        """Per-parameter tensors and plain numbers (loads with `torch.load(weights_only=True)`),
        in the layout torch.optim.Adam keeps: one step count and two moments per parameter."""
        n = len(self.flat.params)
        return {
            "lr": self.lr,
            "steps": [self.step_count.clone() for _ in range(n)],
            "exp_avg": [m.clone() for m in self.flat.split(self.exp_avg)],
            "exp_avg_sq": [v.clone() for v in self.flat.split(self.exp_avg_sq)],
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["exp_avg"]) != len(self.flat.params):
            raise ValueError("optimizer state does not match the model's parameters")
        steps = {float(s) for s in state["steps"]}
        if len(steps) != 1:
            raise ValueError(f"optimizer state has different step counts per parameter: {steps}")
        self.lr = float(state["lr"])
        self.step_count.fill_(steps.pop())
        for mine, saved in zip(
            self.flat.split(self.exp_avg) + self.flat.split(self.exp_avg_sq),
            state["exp_avg"] + state["exp_avg_sq"],
            strict=True,
        ):
            mine.copy_(saved)
