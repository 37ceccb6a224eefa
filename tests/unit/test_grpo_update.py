"""The GRPO-family update (surge/algos/grpo_update.py) leaves groups with zero advantage out of
its forward and backward; the step must be the one of the whole batch."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from surge.algos.grpo_update import computed_groups, grpo_update
from surge.config.llm_schema import GRPOConfig
from surge.llm.lean import LeanLlama
from surge.llm.tiny import tiny_llama

pytestmark = pytest.mark.numerics  # also run under the narrowest kernels (tests/numerics.py)

G = 4
# Groups 0 and 2 have all-equal rewards (zero advantage), 1 and 3 do not.
REWARDS = [[0, 0, 0, 0], [1, 0, 0, 1], [1, 1, 1, 1], [0, 1, 0, 0]]


def batch(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    groups, P, N = len(REWARDS), 5, 4
    S = groups * G
    lengths = torch.randint(1, N + 1, (S,), generator=gen)
    return {
        "prompts": torch.randint(3, 16, (groups, P), generator=gen),
        "prompt_lens": torch.tensor([5, 3, 4, 5]),
        "completions": torch.randint(3, 16, (S, N), generator=gen),
        "mask": (torch.arange(N)[None, :] < lengths[:, None]).double(),
        # Behaviour log-probs near uniform (vocab 16): behaviour weights around 1, some > 5.
        "behav": torch.log(torch.full((S, N), 1 / 16.0, dtype=torch.float64))
        + 0.3 * torch.randn(S, N, generator=gen, dtype=torch.float64),
        "reward": torch.tensor(REWARDS, dtype=torch.float64).reshape(-1),
        "ref": torch.log(torch.full((S, N), 1 / 16.0, dtype=torch.float64)),
    }


def step(model, g: GRPOConfig, skip: bool) -> tuple[dict[str, float], list[torch.Tensor]]:
    model = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    stats = grpo_update(LeanLlama(model), optimizer, batch(), g, G, skip_zero_advantage=skip)
    grads = [p.grad.clone() for p in model.parameters()]
    return stats, grads + [p.detach().clone() for p in model.parameters()]


SETTINGS = {
    "decoupled, token-mean": GRPOConfig(),
    "decoupled, capped behaviour weight": GRPOConfig(behav_cap=1.2),
    "aipo, seq-mean-token-mean": GRPOConfig(loss="aipo", aggregation="seq-mean-token-mean"),
    "rloo, seq-mean-token-sum": GRPOConfig(advantage="rloo", aggregation="seq-mean-token-sum"),
    "dynamic sampling": GRPOConfig(dynamic_sampling=True),
    "kl": GRPOConfig(kl_coef=0.1),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_skipping_zero_advantage_groups_gives_the_whole_batch_step(name: str) -> None:
    model = tiny_llama(16, hidden=64, layers=2, heads=2, max_length=16).double()
    g = SETTINGS[name]
    skipped, after_skipping = step(model, g, skip=True)
    whole, after_whole = step(model, g, skip=False)
    assert whole["computed_groups"] == 1.0
    assert skipped["computed_groups"] == (1.0 if g.kl_coef > 0 else 0.5)
    assert skipped["loss"] == pytest.approx(whole["loss"], rel=1e-12, abs=1e-15)
    # Trained tokens: those in the loss less those the cap zeroed (known for computed groups).
    if g.behav_cap >= 5.0:
        assert skipped["learned_tokens"] == whole["learned_tokens"]
    else:
        assert skipped["learned_tokens"] > whole["learned_tokens"]
    for a, b in zip(after_skipping, after_whole, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)


def test_a_batch_with_no_gradient_is_computed_whole() -> None:
    """Every group all-equal: the optimizer still steps (AdamW's momentum moves the weights),
    as it did before groups were skipped."""
    equal = torch.tensor([1.0, 1.0, 0.0, 0.0])
    assert computed_groups(equal, 2, kl_coef=0.0).tolist() == [True, True]
    assert computed_groups(torch.tensor([1.0, 0.0, 1.0, 1.0]), 2, 0.0).tolist() == [True, False]
    assert computed_groups(torch.tensor([1.0, 0.0, 1.0, 1.0]), 2, 0.1).tolist() == [True, True]


def test_the_skipped_tokens_count_in_the_normaliser() -> None:
    """A loss normalised by the computed tokens only would be larger: the check above fails
    for it. Here: the token-mean loss of the whole batch is the computed rows' sum over all
    tokens, not over the computed ones."""
    model = tiny_llama(16, hidden=64, layers=2, heads=2, max_length=16).double()
    g = replace(GRPOConfig(), dynamic_sampling=False)
    skipped, _ = step(model, g, skip=True)
    dropped, _ = step(model, replace(g, dynamic_sampling=True), skip=True)
    data = batch()
    share = float(data["mask"][4:8].sum() + data["mask"][12:16].sum()) / float(data["mask"].sum())
    assert skipped["loss"] == pytest.approx(dropped["loss"] * share, rel=1e-9)
