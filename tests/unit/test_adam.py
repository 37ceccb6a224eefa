"""FusedAdam over FlatParameters makes the same updates as torch.optim.Adam, its state
round-trips, and the flat buffers keep each parameter's layout and clip like torch."""

from __future__ import annotations

import pytest
import torch

from surge.algos.adam import FusedAdam
from surge.algos.flat_params import FlatParameters

pytestmark = pytest.mark.numerics  # also run under the narrowest kernels (tests/numerics.py)


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
    _train(a, FusedAdam(FlatParameters(a), lr=lrs[0], eps=1e-5), len(lrs), lrs)
    _train(b, torch.optim.Adam(b.parameters(), lr=lrs[0], eps=1e-5), len(lrs), lrs)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)
    assert not torch.equal(a[0].weight, _model()[0].weight)  # it did train


def test_state_round_trips_and_resumes_identically() -> None:
    lrs = [1e-2] * 6
    a, b = _model(), _model()
    opt_a = FusedAdam(FlatParameters(a), lr=1e-2, eps=1e-5)
    _train(a, opt_a, 3, lrs)
    b.load_state_dict(a.state_dict())
    opt_b = FusedAdam(FlatParameters(b), lr=1.0, eps=1e-5)
    opt_b.load_state_dict(opt_a.state_dict())
    assert opt_b.lr == 1e-2
    _train(a, opt_a, 3, lrs)
    _train(b, opt_b, 3, lrs)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb)


def test_flat_views_keep_layout_and_gradients_accumulate_in_them() -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3).to(memory_format=torch.channels_last)
    model = torch.nn.Sequential(conv, torch.nn.Flatten(), torch.nn.LazyLinear(2))
    x = torch.randn(4, 3, 6, 6).to(memory_format=torch.channels_last)
    model(x)  # materialise the lazy layer
    before = [p.detach().clone() for p in model.parameters()]
    out_before = model(x).detach()
    flat = FlatParameters(model)
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert conv.weight.data_ptr() == flat.data.data_ptr()  # the first view starts the buffer
    for p, b in zip(model.parameters(), before, strict=True):
        torch.testing.assert_close(p, b)
    torch.testing.assert_close(model(x), out_before)

    flat.zero_grad()
    model(x).square().sum().backward()
    reference = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 2)
    )
    reference.load_state_dict(model.state_dict())
    reference(x).square().sum().backward()
    grads = [p.grad for p in reference.parameters()]
    for p, g, view in zip(model.parameters(), grads, flat.split(flat.grad), strict=True):
        assert p.grad is not None and p.grad.data_ptr() == view.data_ptr()  # still a view
        torch.testing.assert_close(p.grad, g)

    expected = torch.nn.utils.clip_grad_norm_(list(reference.parameters()), 0.5)
    norm = flat.clip_grad_norm_(0.5)
    torch.testing.assert_close(norm, expected)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    assert float(torch.linalg.vector_norm(flat.grad)) <= 0.5 + 1e-5
