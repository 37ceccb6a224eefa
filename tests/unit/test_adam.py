"""FusedAdam makes the same updates as torch.optim.Adam, and its state round-trips."""

from __future__ import annotations

import torch

from surge.algos.adam import FusedAdam


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _train(model: torch.nn.Module, opt: object, steps: int, lr_at: list[float]) -> None:
    g = torch.Generator().manual_seed(1)
    for i in range(steps):
        loss = model(torch.randn(8, 5, generator=g)).pow(2).mean()
        loss.backward()
        if isinstance(opt, FusedAdam):
            opt.lr = lr_at[i]
            opt.step()
            opt.zero_grad()
        else:
            assert isinstance(opt, torch.optim.Adam)
            for group in opt.param_groups:
                group["lr"] = lr_at[i]
            opt.step()
            opt.zero_grad()


def test_fused_adam_matches_torch_adam() -> None:
    lrs = [1e-2, 5e-3, 2e-3, 1e-3, 1e-3, 5e-4]
    a, b = _model(), _model()
    _train(a, FusedAdam(a.parameters(), lr=lrs[0], eps=1e-5), len(lrs), lrs)
    _train(b, torch.optim.Adam(b.parameters(), lr=lrs[0], eps=1e-5), len(lrs), lrs)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)
    assert not torch.equal(a[0].weight, _model()[0].weight)  # it did train


def test_state_round_trips_and_resumes_identically() -> None:
    lrs = [1e-2] * 6
    a, b = _model(), _model()
    opt_a = FusedAdam(a.parameters(), lr=1e-2, eps=1e-5)
    _train(a, opt_a, 3, lrs)
    b.load_state_dict(a.state_dict())
    opt_b = FusedAdam(b.parameters(), lr=1.0, eps=1e-5)
    opt_b.load_state_dict(opt_a.state_dict())
    assert opt_b.lr == 1e-2
    _train(a, opt_a, 3, lrs)
    _train(b, opt_b, 3, lrs)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb)
