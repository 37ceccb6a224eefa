"""Action distributions: pure functions over tensors, and the heads that own their parameters.

Why not `torch.distributions`: building a Distribution object (argument validation, shape
broadcasting) on every call costs about as much as the whole MLP for the 2-8 row batches on
the actor hot path, and its `sample()` takes no `torch.Generator`, which we need so that a
fixed seed reproduces the actions exactly. The formulas here are checked against
`torch.distributions` in tests/unit/test_models.py.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from torch import Tensor, nn

from surge.envs.spaces import action_spec
from surge.models.layers import orthogonal_linear
from surge.models.numpy_net import POLICY_GAIN
from surge.models.numpy_policy import LOG_SQRT_2PI

# --- pure functions -------------------------------------------------------------------------


def categorical_log_prob(logits: Tensor, action: Tensor) -> Tensor:
    """log p(action) for logits [..., n] and integer actions [...] in [0, n)."""
    logp_all = torch.log_softmax(logits, dim=-1)
    return logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)


def categorical_entropy(logits: Tensor) -> Tensor:
    """Entropy [...] of categoricals with logits [..., n] (finite logits)."""
    logp_all = torch.log_softmax(logits, dim=-1)
    return -(logp_all.exp() * logp_all).sum(-1)


def categorical_sample(logits: Tensor, generator: torch.Generator | None) -> Tensor:
    """Sample int64 actions [...] from logits [..., n] by inverting the CDF.

    One uniform draw per row from `generator`, so the draw is reproducible and works for any
    leading shape (torch.multinomial only takes 2-D input). The clamp guards the rare case
    where rounding leaves the last CDF entry just below u.
    """
    probs = torch.softmax(logits, dim=-1)
    u = torch.rand(
        (*probs.shape[:-1], 1), generator=generator, dtype=probs.dtype, device=probs.device
    )
    idx = (probs.cumsum(-1) < u).sum(-1)
    return idx.clamp_(max=logits.shape[-1] - 1)


def gaussian_log_prob(mean: Tensor, log_std: Tensor, action: Tensor) -> Tensor:
    """log density [...] of a diagonal Gaussian, summed over the last (action) dim."""
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z * z - log_std - LOG_SQRT_2PI).sum(-1)


def gaussian_entropy(log_std: Tensor) -> Tensor:
    """Entropy of a diagonal Gaussian, summed over the last dim (independent of the mean)."""
    return (0.5 + LOG_SQRT_2PI + log_std).sum(-1)


def gaussian_sample(mean: Tensor, log_std: Tensor, generator: torch.Generator | None) -> Tensor:
    noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
    return mean + torch.exp(log_std) * noise


# --- heads ----------------------------------------------------------------------------------


class ActionHead(nn.Module):
    """Maps policy features to distribution parameters (`forward`: the `linear` layer) and
    scores actions.

    `sample`, `log_prob` and `entropy` take those parameters, so one forward pass serves all
    three. Actions are in the action space's own coordinates (a nonzero `start` is applied).
    """

    linear: nn.Linear

    def forward(self, features: Tensor) -> Tensor:
        out: Tensor = self.linear(features)
        return out

    def sample(
        self, params: Tensor, deterministic: bool, generator: torch.Generator | None
    ) -> Tensor:
        raise NotImplementedError

    def log_prob(self, params: Tensor, action: Tensor) -> Tensor:
        raise NotImplementedError

    def entropy(self, params: Tensor) -> Tensor:
        raise NotImplementedError


class CategoricalHead(ActionHead):
    """Discrete(n): logits [B, n]; actions int64 [B]."""

    def __init__(self, in_dim: int | None, n: int, start: int = 0) -> None:
        """`in_dim` None: the logits come from elsewhere (models/grid_actions.py) and the
        head only samples and scores them (no `linear`)."""
        super().__init__()
        if in_dim is not None:
            self.linear = orthogonal_linear(in_dim, n, POLICY_GAIN)
        self.start = start

    def sample(
        self, params: Tensor, deterministic: bool, generator: torch.Generator | None
    ) -> Tensor:
        idx = params.argmax(-1) if deterministic else categorical_sample(params, generator)
        return idx + self.start if self.start else idx

    def log_prob(self, params: Tensor, action: Tensor) -> Tensor:
        idx = action.long() - self.start if self.start else action.long()
        return categorical_log_prob(params, idx)

    def entropy(self, params: Tensor) -> Tensor:
        return categorical_entropy(params)


class MultiCategoricalHead(ActionHead):
    """MultiDiscrete(nvec) with 1-D nvec: independent categoricals, logits concatenated
    [B, sum(nvec)]; actions int64 [B, k]; log-prob and entropy summed over components."""

    start: Tensor

    def __init__(self, in_dim: int, nvec: list[int], start: list[int]) -> None:
        super().__init__()
        self.linear = orthogonal_linear(in_dim, sum(nvec), POLICY_GAIN)
        self.nvec = nvec
        self.register_buffer("start", torch.tensor(start, dtype=torch.int64), persistent=False)
        self.has_start = any(start)

    def sample(
        self, params: Tensor, deterministic: bool, generator: torch.Generator | None
    ) -> Tensor:
        chunks = params.split_with_sizes(self.nvec, dim=-1)
        if deterministic:
            idx = torch.stack([c.argmax(-1) for c in chunks], dim=-1)
        else:
            idx = torch.stack([categorical_sample(c, generator) for c in chunks], dim=-1)
        return idx + self.start if self.has_start else idx

    def log_prob(self, params: Tensor, action: Tensor) -> Tensor:
        idx = action.long() - self.start if self.has_start else action.long()
        chunks = params.split_with_sizes(self.nvec, dim=-1)
        return torch.stack(
            [categorical_log_prob(c, idx[..., i]) for i, c in enumerate(chunks)], dim=-1
        ).sum(-1)

    def entropy(self, params: Tensor) -> Tensor:
        chunks = params.split_with_sizes(self.nvec, dim=-1)
        return torch.stack([categorical_entropy(c) for c in chunks], dim=-1).sum(-1)


class GaussianHead(ActionHead):
    """Box(d,): mean [B, d] from the features, a state-independent learned log-std [d].

    Samples are not clipped or squashed (the env side clips), so log-probs are exact for the
    action actually sampled. Actions are float32 [B, d].
    """

    def __init__(self, in_dim: int, dim: int, log_std_init: float) -> None:
        super().__init__()
        self.linear = orthogonal_linear(in_dim, dim, POLICY_GAIN)
        self.log_std = nn.Parameter(torch.full((dim,), float(log_std_init)))

    def sample(
        self, params: Tensor, deterministic: bool, generator: torch.Generator | None
    ) -> Tensor:
        if deterministic:
            return params
        return gaussian_sample(params, self.log_std, generator)

    def log_prob(self, params: Tensor, action: Tensor) -> Tensor:
        return gaussian_log_prob(params, self.log_std, action)

    def entropy(self, params: Tensor) -> Tensor:
        return gaussian_entropy(self.log_std).expand(params.shape[:-1])


def make_action_head(action_space: gym.Space[Any], in_dim: int, log_std_init: float) -> ActionHead:
    """The head for an action space; unsupported spaces raise EnvSpecError (via action_spec)."""
    spec = action_spec(action_space)
    if isinstance(action_space, gym.spaces.Discrete):
        return CategoricalHead(in_dim, int(action_space.n), int(action_space.start))
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        nvec = [int(n) for n in action_space.nvec]
        return MultiCategoricalHead(in_dim, nvec, [int(s) for s in action_space.start])
    return GaussianHead(in_dim, spec.shape[0], log_std_init)
