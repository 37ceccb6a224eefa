"""The maths of LLM RL: group advantages, token-level policy losses, their
aggregation, the off-policy corrections for asynchronous data, and the staleness rule.

Pure functions of token tensors, each pinned by hand-computed values in
tests/unit/test_llm_losses.py. Shapes: a batch of B sequences (G completions per prompt, the
groups contiguous), T token positions; `mask` [B, T] is 1.0 on completion tokens and 0.0 on
padding. Log-probs are of the sampled tokens. Every loss returns per-token terms (to be
reduced by `aggregate`) so that the aggregation is a setting, not a property of a loss.

Sources (facts in ../shared/reference/llmrl.md, section 3 and 8.1):
- GRPO (DeepSeekMath): A_i = (R_i - mean R) / std R over the group, unbiased std as verl and
  TRL compute it; Dr.GRPO drops the std; RLOO subtracts the mean of the other G - 1 rewards.
- DAPO: asymmetric clip [1 - eps_low, 1 + eps_high]; dynamic sampling drops groups whose
  rewards are all equal (they carry no gradient).
- AReaL's decoupled PPO: the ratio is taken to a proximal policy (the weights before the
  update), and the behaviour weight pi_prox / pi_behav (constant) multiplies the clipped term;
  a token whose behaviour weight exceeds a cap gets weight 0 (it stays in the normaliser).
- LlamaRL's AIPO: REINFORCE with a truncated importance weight min(pi / mu, rho), no clipping.
  The weight is detached here, so the gradient of log pi survives above rho (the truncation
  bounds the weight, it does not zero the token's gradient).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

Aggregation = Literal[
    "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
]


def _groups(rewards: Tensor, group_size: int) -> Tensor:
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(
            f"rewards: want [B] with B a multiple of the group size {group_size}, "
            f"got {tuple(rewards.shape)}"
        )
    return rewards.view(-1, group_size)


def grpo_advantages(
    rewards: Tensor, group_size: int, scale_by_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """[B] sequence advantages: reward minus its group's mean, divided by the group's
    (unbiased) std + eps when `scale_by_std` (GRPO), not divided (Dr.GRPO). A group of one
    gets 0."""
    g = _groups(rewards, group_size)
    centred = g - g.mean(dim=1, keepdim=True)
    if scale_by_std and group_size > 1:
        centred = centred / (g.std(dim=1, keepdim=True) + eps)
    return centred.reshape(-1)


def rloo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """[B] leave-one-out advantages: R_i - mean of the other G - 1 rewards of its group."""
    if group_size < 2:
        raise ValueError("RLOO needs groups of at least 2 completions")
    g = _groups(rewards, group_size)
    others = (g.sum(dim=1, keepdim=True) - g) / (group_size - 1)
    return (g - others).reshape(-1)


def to_segments(values: Tensor, segments: int) -> Tensor:
    """[B] per-episode values as [B x segments] per-sequence ones: every segment of a
    multi-turn episode whose context restarted (a summary) takes its episode's value (ReSum
    and SUPO's advantage broadcasting: the rollout's gradient is the sum of its segments')."""
    return values if segments == 1 else values.repeat_interleave(segments)


def overlong_mask(mask: Tensor, overlong: Tensor, segments: int) -> Tensor:
    """The loss mask [B x segments, T] with every token of an overlong episode (`overlong`
    [B], 1.0 where it ran past its tool-call, turn or summary limits) at weight 0: SUPO's
    overlong masking. Its reward still enters its group's advantage statistics, so the
    policy is not taught to summarise forever and not rewarded for it either."""
    keep = to_segments(1.0 - overlong.to(mask.dtype), segments)
    return mask * keep[:, None]


def informative_groups(rewards: Tensor, group_size: int) -> Tensor:
    """[B / G] bool: groups whose rewards are not all equal (DAPO's dynamic sampling keeps
    only these: an all-equal group has zero advantage everywhere)."""
    g = _groups(rewards, group_size)
    return g.max(dim=1).values > g.min(dim=1).values


def clipped_surrogate(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, clip_low: float, clip_high: float
) -> tuple[Tensor, Tensor]:
    """Per-token PPO/GRPO loss -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A) with
    r = exp(logp - old_logp), and where the clip bound (1.0 where it did, else 0.0).
    `advantages`: [B] (broadcast over tokens) or [B, T]."""
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = -torch.minimum(ratio * adv, clipped * adv)
    bound = (ratio * adv > clipped * adv).to(logp.dtype)  # the min took the clipped term
    return loss, bound


def decoupled_ppo(
    logp: Tensor,
    prox_logp: Tensor,
    behav_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float,
    clip_high: float,
    behav_weight_cap: float | None = 5.0,
) -> tuple[Tensor, Tensor]:
    """AReaL's objective for stale data: (per-token loss, the tokens the cap removed). The
    clipped surrogate is taken against the proximal policy and weighted by pi_prox / pi_behav
    (a constant); a token whose weight exceeds `behav_weight_cap` gets weight 0 and, as in
    AReaL, stays in the normaliser (`aggregate` with the unchanged mask). With prox = behav it
    is the clipped surrogate."""
    surrogate, _ = clipped_surrogate(logp, prox_logp, advantages, clip_low, clip_high)
    weight = torch.exp(prox_logp - behav_logp).detach()
    capped = torch.zeros_like(mask)
    if behav_weight_cap is not None:
        capped = mask * (weight > behav_weight_cap).to(mask.dtype)
        weight = weight * (1.0 - capped)
    return weight * surrogate, capped


def aipo(logp: Tensor, behav_logp: Tensor, advantages: Tensor, rho: float) -> Tensor:
    """LlamaRL's per-token loss -min(pi / mu, rho) A log pi, the weight detached."""
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    weight = torch.clamp(torch.exp(logp - behav_logp), max=rho).detach()
    return -weight * adv * logp


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token KL(pi || ref) estimate k3 = ref/pi - log(ref/pi) - 1 (>= 0, unbiased)."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1.0


def aggregate(terms: Tensor, mask: Tensor, mode: Aggregation, norm: float | None = None) -> Tensor:
    """Reduce per-token terms [B, T] to the loss:
    - token-mean: sum over every valid token / their number (DAPO, AReaL, verl's default);
    - seq-mean-token-mean: each sequence's token mean, then the mean over sequences (GRPO);
    - seq-mean-token-sum: each sequence's token sum, then the mean over sequences;
    - seq-mean-token-sum-norm: token sums / the constant `norm` (Dr.GRPO: e.g. the max length),
      then the mean over sequences."""
    masked = terms * mask
    if mode == "token-mean":
        return masked.sum() / mask.sum().clamp(min=1.0)
    per_seq = masked.sum(dim=1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / mask.sum(dim=1).clamp(min=1.0)
    elif mode == "seq-mean-token-sum-norm":
        if norm is None or norm <= 0:
            raise ValueError("seq-mean-token-sum-norm needs a positive constant `norm`")
        per_seq = per_seq / norm
    elif mode != "seq-mean-token-sum":
        raise ValueError(f"unknown loss aggregation {mode!r}")
    return per_seq.mean()


def rollout_capacity(
    version: int, max_lag: int, batch_size: int, accepted: int, running: int, max_running: int
) -> int:
    """How many more rollouts may start now (AReaL's staleness rule): at most `max_running`
    in flight, and no more than can be trained by version `version + max_lag`, i.e.
    (max_lag + version + 1) batches in all, counting those accepted and those still running.
    max_lag = 0 is synchronous: one batch per version."""
    return max(
        0, min(max_running - running, (max_lag + version + 1) * batch_size - (accepted + running))
    )
