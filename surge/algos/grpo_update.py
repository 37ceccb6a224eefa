"""One GRPO-family update on a batch of completion groups: the advantages, the loss of
surge/algos/llm_losses.py on the lean forward (surge/llm/lean.py), backward, gradient clipping,
the optimizer step, and the statistics a run logs.

Groups with no gradient are not computed. Without a KL term, a group whose rewards are all
equal has zero advantage, so each of its loss terms is zero and so is its gradient. The update
leaves such groups out of the forward and the backward, and keeps their tokens in the loss's
normaliser, so the step is the one of the whole batch. Late in a run most groups are all
correct, and they were most of the trainer's work. Entropy, clip fraction and behaviour weight
are then means over the computed completions.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from surge.algos import llm_losses as L


def advantages(rewards: Tensor, group_size: int, kind: str) -> Tensor:
    """Per-completion advantages [S] of `grpo`, `dr_grpo` or `rloo`."""
    if kind == "rloo":
        return L.rloo_advantages(rewards, group_size)
    return L.grpo_advantages(rewards, group_size, scale_by_std=kind == "grpo")


def computed_groups(rewards: Tensor, group_size: int, kl_coef: float) -> Tensor:
    """[groups] bool: the groups whose loss has a gradient. All of them with a KL term (it
    does not vanish with the advantage), and at least one: with none, the batch is computed
    whole, so the optimizer still takes its (zero-gradient) step exactly as before."""
    informative = L.informative_groups(rewards, group_size)
    if kl_coef > 0 or not bool(informative.any()):
        return torch.ones_like(informative)
    return informative


def grpo_update(
    lean: Any,
    optimizer: torch.optim.Optimizer,
    data: dict[str, Tensor],
    g: Any,
    group_size: int,
    skip_zero_advantage: bool = True,
) -> dict[str, float]:
    """Train on one batch (`surge.learners.grpo.grouped_batch`'s tensors) with the
    settings `g` (GRPOConfig) and return its statistics. A multi-turn batch has several
    sequences (segments) per episode: `completions` [episodes x segments, N] against
    `reward` [episodes]; each segment takes its episode's advantage.
    `skip_zero_advantage=False` computes every group (the reference the tests compare the
    skipping with)."""
    completions, rewards = data["completions"], data["reward"]
    S, N = completions.shape
    segments = S // rewards.numel()  # sequences per episode (multi-turn: its contexts)
    per_group = group_size * segments
    mask = data["mask"]
    if "overlong" in data:
        mask = L.overlong_mask(mask, data["overlong"], segments)
    adv = L.to_segments(advantages(rewards, group_size, g.advantage), segments)
    informative = L.informative_groups(rewards, group_size)
    if g.dynamic_sampling:
        mask = mask * informative.repeat_interleave(per_group)[:, None].to(mask.dtype)
    groups = (
        computed_groups(rewards, group_size, g.kl_coef)
        if skip_zero_advantage
        else torch.ones_like(informative)
    )
    computed, groups, counts = computed_rows(groups, mask, per_group, segments)
    rows = computed.nonzero()[:, 0]
    picked = groups.nonzero()[:, 0]
    tokens = completions[rows]
    logits = lean.forward_groups(
        data["prompts"][picked], data["prompt_lens"][picked], tokens, counts
    )
    # At least float32 for the log-probs (a half-precision model's logits are upcast).
    logp_all = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), -1)
    logp = logp_all.gather(2, tokens[..., None])[..., 0]
    m, behav, a = mask[rows], data["behav"][rows], adv[rows]
    terms, capped, clipped = loss_terms(logp, behav, a, m, g)
    n = m.sum().clamp(min=1)
    kl = torch.zeros((), device=logp.device)
    if g.kl_coef > 0:
        kl_terms = L.k3_kl(logp, data["ref"][rows])
        terms = terms + g.kl_coef * kl_terms
        kl = (kl_terms * m).sum() / n
    # The whole batch's loss: skipped rows add zero terms and their tokens to the normaliser.
    loss = L.aggregate(terms.new_zeros(S, N).index_copy(0, rows, terms), mask, g.aggregation)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    parameters = lean.model.parameters()
    grad_norm = torch.nn.utils.clip_grad_norm_(parameters, g.max_grad_norm)
    optimizer.step()
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        weight = torch.exp(logp.detach() - behav)
        return {
            "loss": float(loss),
            "reward_mean": float(rewards.mean()),
            "accuracy": float((rewards >= 1.0).float().mean()),
            "response_length_mean": float(data["mask"].sum(1).sum() / rewards.numel()),
            "entropy": float((entropy * m).sum() / n),
            "kl": float(kl),
            "clip_fraction": float((clipped * m).sum() / n),
            "behav_weight_mean": float((weight * m).sum() / n),
            "capped_fraction": float(capped.sum() / n),
            "grad_norm": float(grad_norm),
            "learned_tokens": float(mask.sum() - capped.sum()),
            "informative_groups": float(informative.float().mean()),
            "computed_groups": float(groups.float().mean()),
        }


def loss_terms(
    logp: Tensor, behav: Tensor, adv: Tensor, mask: Tensor, g: Any
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-token policy loss terms of `grpo.loss`, and where the behaviour weight was capped
    and where the surrogate clipped (zeros for AIPO, which does neither)."""
    if g.loss == "aipo":
        zeros = torch.zeros_like(mask)
        return L.aipo(logp, behav, adv, g.aipo_rho), zeros, zeros
    prox = logp.detach()  # one update per batch: the proximal policy is this one
    terms, capped = L.decoupled_ppo(
        logp, prox, behav, adv, mask, g.clip_low, g.clip_high, g.behav_cap
    )
    _, clipped = L.clipped_surrogate(logp, prox, adv, g.clip_low, g.clip_high)
    return terms, capped, clipped


def computed_rows(
    groups: Tensor, mask: Tensor, per_group: int, segments: int
) -> tuple[Tensor, Tensor, Tensor | None]:
    """(the sequences [S] the forward runs, the groups [groups] it runs some of, how many of
    each such group's sequences it runs, or None when all) from the groups with a gradient.
    With several segments per episode, a segment with no trained token (unused, or of an
    overlong episode) adds nothing to the loss or its normaliser: it is left out too."""
    computed = groups.repeat_interleave(per_group)
    if segments == 1:
        return computed, groups, None
    trained = computed & (mask.sum(1) > 0)
    if not bool(trained.any()):
        # Nothing trains (every computed episode overlong): the loss, its gradient and the
        # statistics are zero whichever rows run, so one segment stands for all.
        trained = torch.zeros_like(computed)
        trained[0] = True
    counts = trained.view(-1, per_group).sum(1)
    ran = counts > 0
    return trained, ran, counts[ran]
