"""LLM RL maths (surge/algos/llm_losses.py) against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from surge.algos import llm_losses as L

pytestmark = pytest.mark.numerics  # also run under the narrowest kernels (tests/numerics.py)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_grpo_and_dr_grpo_advantages() -> None:
    rewards = t(1, 0, 0, 1)  # one group of 4: mean 0.5, unbiased std sqrt(1/3)
    a = 0.5 / math.sqrt(1 / 3)  # 0.8660...
    torch.testing.assert_close(L.grpo_advantages(rewards, 4, eps=0.0), t(a, -a, -a, a))
    torch.testing.assert_close(
        L.grpo_advantages(rewards, 4, scale_by_std=False), t(0.5, -0.5, -0.5, 0.5)
    )
    # Two groups of 3; the all-equal one gets zero, not 0/0.
    torch.testing.assert_close(
        L.grpo_advantages(t(1, 2, 3, 5, 5, 5), 3), t(-1, 0, 1, 0, 0, 0), atol=1e-5, rtol=0
    )
    with pytest.raises(ValueError, match="multiple of the group size 4"):
        L.grpo_advantages(t(1, 2, 3), 4)


def test_rloo_subtracts_the_mean_of_the_others() -> None:
    torch.testing.assert_close(L.rloo_advantages(t(1, 0, 0, 1), 4), t(2 / 3, -2 / 3, -2 / 3, 2 / 3))
    with pytest.raises(ValueError, match="at least 2"):
        L.rloo_advantages(t(1, 0), 1)


def test_dynamic_sampling_keeps_groups_with_a_reward_spread() -> None:
    assert L.informative_groups(t(1, 2, 3, 5, 5, 5), 3).tolist() == [True, False]


def test_clipped_surrogate_takes_the_pessimistic_term_with_asymmetric_clip() -> None:
    ratios = t(1.5, 1.5, 0.5, 0.5)
    logp = torch.log(ratios).view(4, 1).requires_grad_()
    adv = t(1, -1, 1, -1)
    loss, bound = L.clipped_surrogate(logp, torch.zeros(4, 1, dtype=torch.float64), adv, 0.2, 0.28)
    # r=1.5,A=+1: min(1.5, 1.28) -> clipped; A=-1: min(-1.5, -1.28) = -1.5;
    # r=0.5,A=+1: min(0.5, 0.8) = 0.5;   A=-1: min(-0.5, -0.8) -> clipped.
    torch.testing.assert_close(loss.view(-1), t(-1.28, 1.5, -0.5, 0.8))
    assert bound.view(-1).tolist() == [1.0, 0.0, 0.0, 1.0]
    loss.sum().backward()
    # d(-r A)/dlogp = -r A where unclipped, 0 where the clip binds.
    torch.testing.assert_close(logp.grad.view(-1), t(0.0, 1.5, -0.5, 0.0))  # type: ignore[union-attr]


def test_decoupled_ppo_weights_by_behaviour_and_zeroes_above_the_cap() -> None:
    logp = torch.log(t(1.5, 1.5)).view(2, 1)
    prox = torch.zeros(2, 1, dtype=torch.float64)
    behav = torch.log(t(1.0, 0.25)).view(2, 1)  # weights pi_prox / pi_behav: 1 and 4
    mask = torch.ones(2, 1, dtype=torch.float64)
    adv = t(-1, -1)
    loss, capped = L.decoupled_ppo(logp, prox, behav, adv, mask, 0.2, 0.2, behav_weight_cap=5.0)
    torch.testing.assert_close(loss.view(-1), t(1.5, 6.0))  # 1 x 1.5, 4 x 1.5
    assert capped.view(-1).tolist() == [0.0, 0.0]
    # Above the cap the weight is 0 (AReaL); the token stays in the normaliser.
    loss, capped = L.decoupled_ppo(logp, prox, behav, adv, mask, 0.2, 0.2, behav_weight_cap=3.0)
    torch.testing.assert_close(loss.view(-1), t(1.5, 0.0))
    assert capped.view(-1).tolist() == [0.0, 1.0]
    # With the proximal policy = the behaviour policy it is the clipped surrogate.
    same, _ = L.decoupled_ppo(logp, behav, behav, adv, mask, 0.2, 0.2)
    plain, _ = L.clipped_surrogate(logp, behav, adv, 0.2, 0.2)
    torch.testing.assert_close(same, plain)


def test_aipo_truncates_the_weight_and_keeps_the_gradient_above_rho() -> None:
    behav = torch.zeros(2, 1, dtype=torch.float64)
    logp = torch.log(t(3.0, 1.5)).view(2, 1).requires_grad_()  # pi / mu = 3 (above rho 2), 1.5
    loss = L.aipo(logp, behav, t(0.5, 0.5), rho=2.0)
    torch.testing.assert_close(
        loss.view(-1), t(-2 * 0.5 * math.log(3.0), -1.5 * 0.5 * math.log(1.5))
    )
    loss.sum().backward()
    torch.testing.assert_close(logp.grad.view(-1), t(-1.0, -0.75))  # type: ignore[union-attr]


def test_k3_kl() -> None:
    logp, ref = torch.log(t(0.5, 0.3)), torch.log(t(0.25, 0.3))
    torch.testing.assert_close(L.k3_kl(logp, ref), t(0.5 + math.log(2) - 1, 0.0))


def test_loss_aggregations() -> None:
    terms = t(1, 2, 3, 4, 9, 9).view(2, 3)
    mask = t(1, 1, 1, 1, 0, 0).view(2, 3)
    assert L.aggregate(terms, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert L.aggregate(terms, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert L.aggregate(terms, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert L.aggregate(terms, mask, "seq-mean-token-sum-norm", norm=3).item() == pytest.approx(
        (2 + 4 / 3) / 2
    )
    with pytest.raises(ValueError, match="positive constant"):
        L.aggregate(terms, mask, "seq-mean-token-sum-norm")


def test_staleness_rule_admits_only_what_the_bound_can_train() -> None:
    cap = L.rollout_capacity
    assert cap(version=0, max_lag=0, batch_size=8, accepted=0, running=0, max_running=100) == 8
    # Synchronous: the next batch waits for version 1.
    assert cap(version=0, max_lag=0, batch_size=8, accepted=8, running=0, max_running=100) == 0
    assert cap(version=1, max_lag=0, batch_size=8, accepted=8, running=0, max_running=100) == 8
    # eta = 2: three batches may be in the pipeline at version 0.
    assert cap(version=0, max_lag=2, batch_size=8, accepted=5, running=3, max_running=100) == 16
    assert cap(version=0, max_lag=2, batch_size=8, accepted=5, running=3, max_running=4) == 1
