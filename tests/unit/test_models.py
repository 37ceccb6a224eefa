"""ActorCritic: shapes and dtypes per space, reproducible sampling, and the distribution math
checked against torch.distributions."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from surge.config.schema import ModelConfig
from surge.errors import EnvSpecError
from surge.models import gemm
from surge.models.actor_critic import ActorCritic
from surge.models.distributions import GaussianHead, categorical_sample
from surge.models.encoders import Encoder, FlatEncoder
from surge.models.gemm import Library
from surge.models.layers import mlp, parallel_mlps
from tests.numerics import assert_float32_close

pytestmark = pytest.mark.numerics  # also run under the narrowest kernels (tests/numerics.py)

VEC = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
B = 5


def _vec_obs(b: int = B, seed: int = 0) -> dict[str, torch.Tensor]:
    return {"obs": torch.randn(b, 4, generator=torch.Generator().manual_seed(seed))}


def _model(action_space: gym.Space[Any], obs_space: gym.Space[Any] = VEC, **kw: Any) -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(obs_space, action_space, ModelConfig(**kw))


@pytest.mark.parametrize(
    ("space", "shape", "dtype"),
    [
        (gym.spaces.Discrete(3), (B,), torch.int64),
        (gym.spaces.MultiDiscrete([3, 4, 2]), (B, 3), torch.int64),
        (gym.spaces.Box(-1.0, 1.0, (2,), np.float64), (B, 2), torch.float32),
    ],
)
def test_act_shapes_and_dtypes(space: gym.Space[Any], shape: tuple[int, ...], dtype: Any) -> None:
    model = _model(space)
    action, logp, value = model.act(_vec_obs(), generator=torch.Generator().manual_seed(1))
    assert action.shape == shape and action.dtype == dtype
    assert logp.shape == (B,) and logp.dtype == torch.float32
    assert value.shape == (B,) and value.dtype == torch.float32
    assert not (action.requires_grad or logp.requires_grad or value.requires_grad)
    if dtype == torch.int64:
        high = torch.as_tensor(np.asarray(getattr(space, "nvec", getattr(space, "n", 0))))
        assert bool((action >= 0).all()) and bool((action < high).all())
    torch.testing.assert_close(model.value(_vec_obs()), value)


@pytest.mark.parametrize(
    "space",
    [gym.spaces.Discrete(6), gym.spaces.MultiDiscrete([5, 3]), gym.spaces.Box(-1, 1, (3,))],
)
def test_sampling_is_reproducible_with_a_generator(space: gym.Space[Any]) -> None:
    model = _model(space)
    obs = _vec_obs(64)
    a1, lp1, _ = model.act(obs, generator=torch.Generator().manual_seed(42))
    a2, lp2, _ = model.act(obs, generator=torch.Generator().manual_seed(42))
    a3, _, _ = model.act(obs, generator=torch.Generator().manual_seed(43))
    assert torch.equal(a1, a2) and torch.equal(lp1, lp2)
    assert not torch.equal(a1, a3)


def test_deterministic_takes_argmax_and_mean() -> None:
    obs = _vec_obs()
    disc = _model(gym.spaces.Discrete(4))
    a, _, _ = disc.act(obs, deterministic=True)
    logits = disc.action_head(disc.actor_torso(disc.encoder(obs)))
    assert torch.equal(a, logits.argmax(-1))

    cont = _model(gym.spaces.Box(-1, 1, (2,)))
    a, _, _ = cont.act(obs, deterministic=True)
    torch.testing.assert_close(a, cont.action_head(cont.actor_torso(cont.encoder(obs))))


def _perturb(model: ActorCritic) -> None:
    """Move the policy away from its near-uniform init so the checks are not trivial."""
    with torch.no_grad():
        for p in model.action_head.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(5)))


def test_discrete_matches_torch_distributions() -> None:
    model = _model(gym.spaces.Discrete(4))
    _perturb(model)
    obs = _vec_obs()
    action, logp_act, _ = model.act(obs, generator=torch.Generator().manual_seed(0))
    logp, entropy, value = model.evaluate(obs, action)
    ref = torch.distributions.Categorical(logits=model.action_head(model.actor_torso(obs["obs"])))
    torch.testing.assert_close(logp, ref.log_prob(action))
    torch.testing.assert_close(entropy, ref.entropy())
    torch.testing.assert_close(logp.detach(), logp_act)
    assert logp.requires_grad and entropy.requires_grad and value.requires_grad


def test_multidiscrete_sums_independent_categoricals() -> None:
    model = _model(gym.spaces.MultiDiscrete([3, 2]))
    _perturb(model)
    obs = _vec_obs()
    action, _, _ = model.act(obs, generator=torch.Generator().manual_seed(0))
    logp, entropy, _ = model.evaluate(obs, action)
    logits = model.action_head(model.actor_torso(obs["obs"]))
    d0 = torch.distributions.Categorical(logits=logits[:, :3])
    d1 = torch.distributions.Categorical(logits=logits[:, 3:])
    torch.testing.assert_close(logp, d0.log_prob(action[:, 0]) + d1.log_prob(action[:, 1]))
    torch.testing.assert_close(entropy, d0.entropy() + d1.entropy())


def test_gaussian_matches_torch_distributions_and_starts_at_log_std_init() -> None:
    model = _model(gym.spaces.Box(-1, 1, (3,)), log_std_init=-0.5)
    head = model.action_head
    assert isinstance(head, GaussianHead)
    torch.testing.assert_close(head.log_std.detach(), torch.full((3,), -0.5))
    _perturb(model)
    obs = _vec_obs()
    action, _, _ = model.act(obs, generator=torch.Generator().manual_seed(0))
    logp, entropy, _ = model.evaluate(obs, action)
    mean = head(model.actor_torso(obs["obs"]))
    ref = torch.distributions.Normal(mean, head.log_std.exp())
    torch.testing.assert_close(logp, ref.log_prob(action).sum(-1))
    torch.testing.assert_close(entropy, ref.entropy().sum(-1))
    assert entropy.shape == (B,)


def test_categorical_sample_frequencies_match_probabilities() -> None:
    probs = torch.tensor([0.1, 0.6, 0.0, 0.3])
    logits = probs.clamp_min(1e-30).log().expand(40_000, 4)
    draws = categorical_sample(logits, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=4).float() / len(draws)
    torch.testing.assert_close(freq, probs, atol=0.01, rtol=0)
    assert int((draws == 2).sum()) == 0


def test_initial_policy_is_near_uniform_and_layers_are_orthogonal() -> None:
    model = _model(gym.spaces.Discrete(5))
    _, entropy, _ = model.evaluate(_vec_obs(), torch.zeros(B, dtype=torch.int64))
    torch.testing.assert_close(entropy, torch.full((B,), math.log(5)), atol=1e-3, rtol=0)
    first, second = model.actor_torso[0], model.actor_torso[2]
    assert isinstance(first, torch.nn.Linear) and isinstance(second, torch.nn.Linear)
    w = second.weight  # 64 x 64 hidden layer with gain sqrt(2): W W^T = 2 I
    torch.testing.assert_close(w @ w.T, 2.0 * torch.eye(64), atol=1e-4, rtol=0)
    assert bool((first.bias == 0).all())


def test_dict_obs_with_discrete_uint8_and_float64_fields() -> None:
    space = gym.spaces.Dict(
        {
            "pix": gym.spaces.Box(0, 255, (2, 3), np.uint8),
            "id": gym.spaces.Discrete(4, start=1),
            "vel": gym.spaces.Box(-1.0, 1.0, (2,), np.float64),
        }
    )
    obs = {
        "pix": torch.arange(12, dtype=torch.uint8).reshape(2, 2, 3),
        "id": torch.tensor([1, 4]),
        "vel": torch.tensor([[0.5, -0.5], [1.0, 0.0]], dtype=torch.float64),
    }
    enc = FlatEncoder(space)
    feats = enc(obs)
    assert enc.out_dim == 6 + 4 + 2 and feats.shape == (2, 12) and feats.dtype == torch.float32
    # sorted keys: id (one-hot, start subtracted), pix (flattened), vel
    torch.testing.assert_close(feats[:, :4], torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, 1.0]]))
    torch.testing.assert_close(feats[1, 4:10], torch.arange(6, 12, dtype=torch.float32))
    torch.testing.assert_close(feats[:, 10:], obs["vel"].float())

    reordered = gym.spaces.Dict({k: space[k] for k in ("vel", "id", "pix")})
    assert torch.equal(FlatEncoder(reordered)(obs), feats)

    action, _, value = _model(gym.spaces.Discrete(2), space).act(obs)
    assert action.shape == (2,) and value.shape == (2,)


def test_shared_torso_holds_each_weight_once() -> None:
    shared = _model(gym.spaces.Discrete(2), shared=True)
    separate = _model(gym.spaces.Discrete(2))
    assert shared.critic_torso is None
    n_shared = sum(p.numel() for p in shared.parameters())
    n_sep = sum(p.numel() for p in separate.parameters())
    assert n_sep - n_shared == sum(p.numel() for p in separate.actor_torso.parameters())
    torch.autograd.backward(shared.value(_vec_obs()).sum())
    assert shared.actor_torso[0].weight.grad is not None


def test_no_hidden_layers_and_discrete_action_start() -> None:
    model = _model(gym.spaces.Discrete(3, start=-1), hidden_sizes=[])
    action, logp, _ = model.act(_vec_obs(200), generator=torch.Generator().manual_seed(0))
    assert set(action.tolist()) == {-1, 0, 1}
    logp2, _, _ = model.evaluate(_vec_obs(200), action)
    torch.testing.assert_close(logp2.detach(), logp)


def test_custom_encoder_seam() -> None:
    class Doubler(Encoder):
        def __init__(self) -> None:
            super().__init__()
            self.out_dim = 8

        def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
            return torch.cat([obs["obs"], obs["obs"]], dim=-1)

    model = ActorCritic(VEC, gym.spaces.Discrete(2), ModelConfig(), encoder=Doubler())
    assert model.actor_torso[0].in_features == 8
    assert model.act(_vec_obs())[0].shape == (B,)


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Box(-1, 1, (2, 2)),
        gym.spaces.MultiDiscrete(np.array([[2, 2], [2, 2]])),
        gym.spaces.Tuple([gym.spaces.Discrete(2)]),
    ],
)
def test_unsupported_action_spaces_raise_env_spec_error(space: gym.Space[Any]) -> None:
    with pytest.raises(EnvSpecError):
        _model(space)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("input_grad", [False, True])
@pytest.mark.parametrize("with_head", [False, True])
def test_mlp_torso_matches_plain_autograd(
    activation: str, input_grad: bool, with_head: bool
) -> None:
    """The torso's numpy forward and hand-written backward (layers.py `_MLPFunction`), with
    and without a head layer in the same node, against nn.Sequential with the same layers
    run by autograd in float64: outputs, every parameter's gradient and the input's
    gradient, within float32 rounding (tests/numerics.py)."""
    torch.manual_seed(0)
    fused = mlp(5, [32, 16], activation)  # type: ignore[arg-type]
    head = torch.nn.Linear(16, 3)
    assert list(fused.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    layers = [*fused, head] if with_head else list(fused)
    plain = copy.deepcopy(torch.nn.Sequential(*layers)).double()  # the reference
    x = torch.randn(64, 5)
    upstream = torch.randn(64, 3 if with_head else 16)
    results = []
    for run, params, dtype in (
        (plain, list(plain.parameters()), torch.float64),
        (lambda inp: fused(inp, head=head if with_head else None),
         [p for layer in layers for p in layer.parameters()], torch.float32),
    ):  # fmt: skip
        inp = x.to(dtype).requires_grad_(input_grad)
        out = run(inp)
        (out * upstream.to(dtype)).sum().backward()
        grads = [p.grad.clone() for p in params]  # type: ignore[union-attr]
        results.append((out.detach(), grads, inp.grad))
    (ref_out, ref_grads, ref_in), (out, grads, in_grad) = results
    accumulations = 5 + 32 + 16 + 3 + 64  # fan-ins along the network, rows of a gradient
    assert out.dtype == torch.float32
    assert_float32_close(out, ref_out, accumulations, "output")
    assert len(grads) == (6 if with_head else 4)
    for i, (g, ref) in enumerate(zip(grads, ref_grads, strict=True)):
        assert_float32_close(g, ref, accumulations, f"gradient {i}")
    if input_grad:
        assert_float32_close(in_grad, ref_in, accumulations, "input gradient")
    else:
        assert in_grad is None
    assert torch.equal(mlp(5, [], "tanh")(x), x)  # no hidden layers: the identity


def test_evaluate_runs_each_head_in_its_torso_node() -> None:
    """Separate torsos: evaluate's logits and values come from one layers.MLP node each, and
    match the module-by-module forward (torso, then head) that `act` uses."""
    model = _model(gym.spaces.Discrete(3))
    obs = _vec_obs(16)
    action = torch.randint(0, 3, (16,))
    logp, entropy, value = model.evaluate(obs, action)
    assert type(value.grad_fn).__name__ == "SqueezeBackward1"
    assert "MLPFunction" in type(value.grad_fn.next_functions[0][0]).__name__  # type: ignore[union-attr]
    with torch.no_grad():
        x = model.encoder(obs)
        plain = torch.nn.Sequential.forward  # module by module, no fused node
        logits = model.action_head(plain(model.actor_torso, x))
        ref_logp = torch.log_softmax(logits, -1).gather(-1, action[:, None])[:, 0]
        assert model.critic_torso is not None
        ref_value = model.value_head(plain(model.critic_torso, x))[:, 0]
    torch.testing.assert_close(logp.detach(), ref_logp)
    torch.testing.assert_close(value.detach(), ref_value)


@pytest.fixture(params=["numpy", "torch"])
def library(request: pytest.FixtureRequest) -> Iterator[Library]:
    """The MLP passes' products in numpy, then in torch (models/gemm.py); numpy after."""
    gemm.use(request.param)
    yield request.param
    gemm.use("numpy")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("held", [False, True])
def test_parallel_mlps_match_plain_autograd(threads: int, held: bool, library: Library) -> None:
    """Two networks on one input in one node (layers.py `parallel_mlps`, a SAC learner's twin
    critics), on one thread or two, with the products in numpy or torch (models/gemm.py),
    against each network run by float64 autograd: outputs, the input's gradient (the sum of
    both networks') and every weight's gradient; `held` networks get none, and their weights
    stay untouched by the backward."""
    torch.manual_seed(1)
    nets = [(mlp(7, [32, 24], "relu"), torch.nn.Linear(24, 1)) for _ in range(2)]
    refs = [copy.deepcopy(torch.nn.Sequential(*torso, head)).double() for torso, head in nets]
    x = torch.randn(96, 7)
    upstream = [torch.randn(96, 1) for _ in nets]

    inp = x.clone().requires_grad_(True)
    outs = parallel_mlps(inp, nets, threads=threads, held=held)
    sum((o * u).sum() for o, u in zip(outs, upstream, strict=True)).backward()  # type: ignore[union-attr]

    ref_in = x.double().requires_grad_(True)
    ref_outs = [ref(ref_in) for ref in refs]
    sum((o * u.double()).sum() for o, u in zip(ref_outs, upstream, strict=True)).backward()  # type: ignore[union-attr]
    accumulations = 7 + 32 + 24 + 96
    for out, ref_out in zip(outs, ref_outs, strict=True):
        assert_float32_close(out.detach(), ref_out.detach(), accumulations, "output")
    assert_float32_close(inp.grad, ref_in.grad, 2 * accumulations, "input gradient")
    for (torso, head), ref in zip(nets, refs, strict=True):
        params = [p for layer in (*torso, head) for p in layer.parameters()]
        if held:
            assert all(p.grad is None for p in params)
        else:
            for i, (p, r) in enumerate(zip(params, ref.parameters(), strict=True)):
                assert_float32_close(p.grad, r.grad, accumulations, f"gradient {i}")


def test_parallel_mlps_threads_give_the_same_numbers() -> None:
    """Each network's pass is the same arithmetic on any thread: two threads reproduce one
    thread's outputs and gradients bit for bit."""
    torch.manual_seed(2)
    nets = [(mlp(5, [16], "tanh"), torch.nn.Linear(16, 2)) for _ in range(3)]
    x = torch.randn(40, 5)
    results = []
    for threads in (1, 2):
        for torso, head in nets:
            torso.zero_grad()
            head.zero_grad()
        inp = x.clone().requires_grad_(True)
        outs = parallel_mlps(inp, nets, threads=threads)
        sum(o.square().sum() for o in outs).backward()  # type: ignore[union-attr]
        grads = [
            p.grad.clone()
            for torso, head in nets
            for p in (*torso.parameters(), *head.parameters())
        ]  # type: ignore[union-attr]
        results.append(([o.detach() for o in outs], inp.grad, grads))
    (o1, g1, w1), (o2, g2, w2) = results
    assert all(torch.equal(a, b) for a, b in zip(o1, o2, strict=True))
    assert torch.equal(g1, g2)  # type: ignore[arg-type]
    assert all(torch.equal(a, b) for a, b in zip(w1, w2, strict=True))
