"""The fused PPO loss (algos/losses.py) against the reference loss functions
in the same module: same value, same gradients, same statistics."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from surge.algos.losses import (
    clipped_surrogate_loss,
    normalize,
    ppo_loss,
    value_loss,
)
from surge.algos.numpy_ppo import ppo_loss_numpy
from surge.algos.ppo_common import LOSS_STATS
from tests.numerics import assert_float32_close

pytestmark = pytest.mark.numerics  # also run under the narrowest kernels (tests/numerics.py)

B = 256
CLIP = 0.2


def _inputs(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    old_logp = -torch.rand(B, generator=g) * 2
    old_values = torch.randn(B, generator=g)
    return {
        # log-ratios of +-0.5: many ratios fall outside [0.8, 1.2], on both sides
        "new_logp": old_logp + 0.5 * torch.randn(B, generator=g),
        "entropy": torch.rand(B, generator=g),
        "new_values": old_values + 0.4 * torch.randn(B, generator=g),
        "old_logp": old_logp,
        "advantages": torch.randn(B, generator=g),
        "old_values": old_values,
        "returns": old_values + torch.randn(B, generator=g),
    }


def _reference(
    x: dict[str, torch.Tensor], clip_vloss: bool, ent_coef: float, vf_coef: float, norm_adv: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    adv = normalize(x["advantages"]) if norm_adv else x["advantages"]
    pg, clipfrac, approx_kl = clipped_surrogate_loss(x["new_logp"], x["old_logp"], adv, CLIP)
    v = value_loss(x["new_values"], x["old_values"], x["returns"], CLIP, clip_vloss)
    ent = x["entropy"].mean()
    loss = pg - ent_coef * ent + vf_coef * v
    return loss, torch.stack([pg, v, ent, approx_kl, clipfrac])


@pytest.mark.parametrize(
    ("clip_vloss", "ent_coef", "norm_adv"),
    [(True, 0.0, True), (True, 0.01, False), (False, 0.0, False), (False, 0.01, True)],
)
def test_fused_loss_matches_the_reference_functions(
    clip_vloss: bool, ent_coef: float, norm_adv: bool
) -> None:
    """The loss, statistics and gradients of `ppo_loss_numpy` equal the reference functions'
    in float64, and the fused float32 node the trainer runs is within float32 rounding of
    them (tests/numerics.py)."""
    vf_coef = 0.5
    settings = dict(clip_vloss=clip_vloss, ent_coef=ent_coef, vf_coef=vf_coef, norm_adv=norm_adv)
    ratio = (_inputs(0)["new_logp"] - _inputs(0)["old_logp"]).exp()
    # no sample within rounding of a clip edge, where float32 may take the other side
    assert float(((ratio - 1).abs() - CLIP).abs().min()) > 1e-4

    def run(dtype: torch.dtype, fused: bool) -> tuple[torch.Tensor, torch.Tensor, list[Any]]:
        x = {k: v.to(dtype).requires_grad_(k in ("new_logp", "entropy", "new_values"))
             for k, v in _inputs(0).items()}  # fmt: skip
        if fused:
            loss, stats = ppo_loss(*x.values(), clip_coef=CLIP, **settings)  # type: ignore[arg-type]
            assert loss.grad_fn is not None and "PPOLoss" in type(loss.grad_fn).__name__
        else:
            loss, stats = _reference(x, clip_vloss, ent_coef, vf_coef, norm_adv)
        (loss * 3.0).backward()  # a non-unit upstream gradient
        return (
            loss.detach(),
            stats.detach(),
            [x[k].grad for k in ("new_logp", "entropy", "new_values")],
        )

    ref_loss, ref_stats, ref_grads = run(torch.float64, fused=False)
    loss, stats, grads = run(torch.float32, fused=True)
    assert len(stats) == len(LOSS_STATS)
    assert 0.2 < float(stats[LOSS_STATS.index("clipfrac")]) < 0.8  # both branches are taken
    accumulations = 2 * B  # a mean over the minibatch (and the advantages' mean and std)
    assert_float32_close(loss, ref_loss, accumulations, "loss")
    assert_float32_close(stats, ref_stats, accumulations, "stats")
    for i in (0, 2):
        assert_float32_close(grads[i], ref_grads[i], accumulations, f"gradient {i}")
    if ent_coef == 0.0:
        assert grads[1] is None  # no gradient flows into the entropy at all
    else:
        assert_float32_close(grads[1], ref_grads[1], accumulations, "entropy gradient")

    x64 = {k: v.double().numpy() for k, v in _inputs(0).items()}
    out = ppo_loss_numpy(*x64.values(), clip_coef=CLIP, **settings)  # type: ignore[arg-type]
    assert out.loss * 3.0 == pytest.approx(3.0 * float(ref_loss), rel=1e-12)
    np.testing.assert_allclose(out.grad_logp * 3.0, ref_grads[0].numpy(), rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(out.grad_values * 3.0, ref_grads[2].numpy(), rtol=1e-10, atol=1e-15)


def test_fused_loss_gradient_is_zero_exactly_where_the_clip_binds() -> None:
    x = _inputs(1)
    new_logp = x["new_logp"].clone().requires_grad_()
    new_values = x["new_values"].clone().requires_grad_()
    loss, _ = ppo_loss(
        new_logp, x["entropy"], new_values, x["old_logp"], x["advantages"], x["old_values"],
        x["returns"], clip_coef=CLIP, clip_vloss=True, ent_coef=0.0, vf_coef=1.0,
    )  # fmt: skip
    loss.backward()
    ratio = (x["new_logp"] - x["old_logp"]).exp()
    adv = x["advantages"]
    policy_clipped = ((adv > 0) & (ratio > 1 + CLIP)) | ((adv < 0) & (ratio < 1 - CLIP))
    assert policy_clipped.any() and (~policy_clipped).any()
    assert new_logp.grad is not None and new_values.grad is not None
    assert bool((new_logp.grad[policy_clipped] == 0).all())
    assert bool((new_logp.grad[~policy_clipped] != 0).all())
    # the value gradient vanishes where the clip binds (V outside old +- c) and the clipped
    # value's error is the larger one; everywhere else it flows
    delta = x["new_values"] - x["old_values"]
    clipped_v = x["old_values"] + delta.clamp(-CLIP, CLIP)
    larger = (clipped_v - x["returns"]) ** 2 > (x["new_values"] - x["returns"]) ** 2
    value_clipped = larger & (delta.abs() > CLIP)
    assert value_clipped.any()
    assert bool((new_values.grad[value_clipped] == 0).all())
    assert bool((new_values.grad[~value_clipped] != 0).all())


def test_value_gradient_inside_the_clip_range_survives_rounding() -> None:
    """Inside old +- c the clipped value is old + (V - old), which float32 rounding can leave
    a hair away from V, so its error may come out the larger. Such a sample keeps its value
    gradient: which samples rounding hits differs between CPUs' kernels, and dropping their
    gradient made the learner's results depend on the CPU."""
    rng = np.random.default_rng(0)
    n = 4096
    # values near 0 with unrelated exponents: V - old is then rounded (Sterbenz's lemma
    # makes it exact for values within a factor 2 of each other), all within the clip range
    old = rng.uniform(-CLIP / 2, CLIP / 2, n).astype(np.float32)
    new = rng.uniform(-CLIP / 2, CLIP / 2, n).astype(np.float32)
    returns = new + (rng.standard_normal(n) * 1e-7).astype(np.float32)  # squares nearly tie
    error = new - returns
    clipped_error = old + np.clip(new - old, -CLIP, CLIP) - returns
    hair = clipped_error * clipped_error > error * error
    assert hair.sum() > 10  # rounding does tip the comparison for some samples
    zeros = np.zeros(n, np.float32)
    out = ppo_loss_numpy(
        zeros, zeros, new, zeros, zeros, old, returns,
        clip_coef=CLIP, clip_vloss=True, ent_coef=0.0, vf_coef=1.0, norm_adv=False,
    )  # fmt: skip
    np.testing.assert_array_equal(out.grad_values, error / np.float32(n))


def test_off_the_cpu_path_is_the_reference_composition() -> None:
    """float64 inputs stand in for a GPU: ppo_loss composes the reference functions, which
    autograd differentiates (and gives the same numbers as the fused node on float32)."""
    x = {k: v.double().requires_grad_(k == "new_logp") for k, v in _inputs(2).items()}
    loss, stats = ppo_loss(
        *x.values(), clip_coef=CLIP, clip_vloss=True, ent_coef=0.01, vf_coef=0.5, norm_adv=True
    )
    assert loss.dtype == torch.float64 and "PPOLoss" not in type(loss.grad_fn).__name__
    ref_loss, ref_stats = _reference(x, True, 0.01, 0.5, True)
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(stats, ref_stats.detach())
    x32 = {k: v.detach().float() for k, v in x.items()}
    loss32, _ = ppo_loss(
        *x32.values(), clip_coef=CLIP, clip_vloss=True, ent_coef=0.01, vf_coef=0.5, norm_adv=True
    )
    torch.testing.assert_close(loss32.double(), loss.detach(), rtol=1e-5, atol=1e-6)
