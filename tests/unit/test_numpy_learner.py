"""The numpy learner (models/numpy_net.py, algos/numpy_ppo.py) computes what the torch one
computes: network outputs, every gradient, Adam, and whole PPO / APPO updates.

The two implementations are compared in float64 (tests/numerics.py says why); the float32
path each backend runs in training is compared with a float64 reference, one step at a time.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from surge.algos.adam import FusedAdam
from surge.algos.batch import RolloutBatch
from surge.algos.flat_params import FlatParameters
from surge.algos.numpy_ppo import NumpyAdam, NumpyPPOUpdater
from surge.algos.ppo import PPOUpdater
from surge.config.schema import APPOConfig, ModelConfig, PPOConfig
from surge.models.actor_critic import ActorCritic
from surge.models.numpy_net import NumpyActorCritic, initial_parameters
from surge.models.numpy_policy import numpy_layout
from tests.numerics import assert_float32_close, float64_torch
from tests.unit.test_numpy_policy import SPACES

pytestmark = pytest.mark.numerics  # also run under the narrowest kernels (tests/numerics.py)

B = 24


def _sample(space: gym.Space[Any], n: int, seed: int) -> np.ndarray | dict[str, np.ndarray]:
    space.seed(seed)
    rows = [space.sample() for _ in range(n)]
    if isinstance(space, gym.spaces.Dict):
        return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in space.spaces}
    return np.stack(rows)


def _obs(space: gym.Space[Any], n: int, seed: int) -> dict[str, np.ndarray]:
    x = _sample(space, n, seed)
    return x if isinstance(x, dict) else {"obs": x.astype(np.float32)}


def _flat64(model: ActorCritic) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double().numpy()


def _pair(
    obs_space: Any, action_space: Any, cfg: ModelConfig, dtype: type[np.floating] = np.float64
) -> tuple[ActorCritic, NumpyActorCritic]:
    """A float64 torch model and a numpy network (`dtype`) with the same parameters."""
    torch.manual_seed(0)
    with float64_torch():
        model = ActorCritic(obs_space, action_space, cfg)
    layout = numpy_layout(obs_space, action_space, cfg)
    assert layout is not None
    return model, NumpyActorCritic(layout, _flat64(model).astype(dtype))


def _grads(model: ActorCritic) -> np.ndarray:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy()  # type: ignore[union-attr]


def _accumulations(layout_widths: list[int], rows: int) -> int:
    """Terms summed along the network (the fan-ins) and over the batch (a gradient)."""
    return sum(layout_widths) + rows


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize(("name", "obs_space", "action_space", "cfg"), SPACES)
def test_outputs_and_gradients_match_autograd(
    name: str,
    obs_space: gym.Space[Any],
    action_space: gym.Space[Any],
    cfg: ModelConfig,
    dtype: type[np.floating],
) -> None:
    """float64: the numpy maths equals autograd's; float32: within rounding of it."""
    model, net = _pair(obs_space, action_space, cfg, dtype)
    obs = _obs(obs_space, B, 1)
    actions = _sample(action_space, B, 2)
    t_obs = {k: torch.from_numpy(v) for k, v in obs.items()}
    in_dim = sum(net.views(net.flat)["actor_torso.0.weight"].shape[1:]) if cfg.hidden_sizes else 0
    widths = [in_dim, *cfg.hidden_sizes, 8]

    def check(mine: np.ndarray, ref: torch.Tensor | np.ndarray, what: str) -> None:
        ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else ref
        if dtype == np.float64:
            np.testing.assert_allclose(mine, ref, rtol=1e-10, atol=1e-12, err_msg=what)
        else:
            assert_float32_close(mine, ref, _accumulations(widths, B), what)

    logp, entropy, value, fwd = net.evaluate(obs, actions)
    t_logp, t_entropy, t_value = model.evaluate(t_obs, torch.from_numpy(actions))
    for mine, ref, what in ((logp, t_logp, "logp"), (entropy, t_entropy, "entropy"),
                            (value, t_value, "value")):  # fmt: skip
        assert mine.dtype == dtype
        check(mine, ref, what)
    check(net.value(obs), t_value, "value()")

    rng = np.random.default_rng(3)
    g_logp, g_entropy, g_value = (rng.standard_normal(B) for _ in range(3))
    grad = net.backward(fwd, *(g.astype(dtype) for g in (g_logp, g_entropy, g_value))).copy()
    loss = sum(
        (torch.from_numpy(g) * t).sum()
        for g, t in ((g_logp, t_logp), (g_entropy, t_entropy), (g_value, t_value))
    )
    loss.backward(retain_graph=True)
    check(grad, _grads(model), "gradient")

    # Without an entropy term, no gradient comes from it.
    model.zero_grad()
    grad = net.backward(fwd, g_logp.astype(dtype), None, g_value.astype(dtype)).copy()
    sum(
        (torch.from_numpy(g) * t).sum() for g, t in ((g_logp, t_logp), (g_value, t_value))
    ).backward()
    check(grad, _grads(model), "gradient without entropy")


def test_initial_parameters_are_scaled_orthogonal_like_the_torch_model() -> None:
    obs_space, action_space = gym.spaces.Box(-1, 1, (5,)), gym.spaces.Box(-1, 1, (2,))
    cfg = ModelConfig(hidden_sizes=[32, 8], log_std_init=-0.5)
    layout = numpy_layout(obs_space, action_space, cfg)
    assert layout is not None
    net = NumpyActorCritic(layout, initial_parameters(layout, np.random.default_rng(0), -0.5))
    gains = {
        "actor_torso.0": 2.0,
        "actor_torso.2": 2.0,
        "action_head.linear": 1e-4,
        "value_head": 1.0,
    }
    for prefix, gain_sq in gains.items():
        w = net.w[f"{prefix}.weight"].astype(np.float64)
        small = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
        np.testing.assert_allclose(small, gain_sq * np.eye(len(small)), atol=1e-5 * max(1, gain_sq))
        assert not net.w[f"{prefix}.bias"].any()
    np.testing.assert_array_equal(net.w["action_head.log_std"], [-0.5, -0.5])
    again = initial_parameters(layout, np.random.default_rng(0), -0.5)
    np.testing.assert_array_equal(net.flat, again)  # the seed fixes the init


def test_adam_matches_torch() -> None:
    model = torch.nn.Linear(7, 3)
    flat = FlatParameters(model)
    ref = FusedAdam(flat, lr=3e-3, eps=1e-5)
    params = flat.data.numpy().copy()
    mine = NumpyAdam(params, lr=3e-3, eps=1e-5)
    rng = np.random.default_rng(0)
    for _ in range(5):
        g = rng.standard_normal(params.shape).astype(np.float32)
        flat.grad.copy_(torch.from_numpy(g))
        ref.step()
        mine.step(g)
    np.testing.assert_allclose(params, flat.data.numpy(), rtol=1e-6, atol=1e-7)
    state = mine.state_dict(lambda x: [x[:21], x[21:]])
    other = NumpyAdam(params.copy(), lr=1.0)
    other.load_state_dict(state)
    assert other.steps == 5 and other.lr == 3e-3
    np.testing.assert_array_equal(other.exp_avg_sq, mine.exp_avg_sq)


OBS = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (3,)), "mode": gym.spaces.Discrete(3)})
T, N = 8, 4


def _batch(model: ActorCritic, action_space: gym.Space[Any]) -> RolloutBatch:
    """A [T, N] batch in the model's dtype, acted by the model under a shifted log-prob."""
    g = torch.Generator().manual_seed(1)
    dtype = next(model.parameters()).dtype

    def obs(*lead: int) -> dict[str, torch.Tensor]:
        return {
            "pos": torch.rand((*lead, 3), generator=g, dtype=dtype) * 2 - 1,
            "mode": torch.randint(0, 3, lead, generator=g),
        }

    o = obs(T, N)
    actions, logp, values = model.act(
        {k: v.reshape(T * N, *v.shape[2:]) for k, v in o.items()}, generator=g
    )
    terminated = torch.zeros(T, N, dtype=torch.bool)
    truncated = torch.zeros(T, N, dtype=torch.bool)
    terminated[2, 0] = truncated[5, 1] = truncated[T - 1, 3] = True
    return RolloutBatch(
        obs=o,
        last_obs=obs(N),
        final_obs=obs(T, N),
        actions=actions.reshape(T, N, *actions.shape[1:]),
        logp=logp.reshape(T, N) - 0.05,  # a behaviour policy that is not the current one
        values=values.reshape(T, N),
        rewards=torch.randn(T, N, generator=g, dtype=dtype),
        terminated=terminated,
        truncated=truncated,
    )


class _InOrder:
    """A 'generator' that does not shuffle, so both learners see the same minibatches."""

    def permutation(self, n: int) -> np.ndarray:
        return np.arange(n)


@pytest.mark.parametrize("algo", ["ppo", "appo"])
@pytest.mark.parametrize(
    "action_space",
    [gym.spaces.Discrete(4), gym.spaces.MultiDiscrete([3, 2]), gym.spaces.Box(-1, 1, (2,))],
    ids=["discrete", "multidiscrete", "box"],
)
@pytest.mark.parametrize("clip_vloss", [True, False])
def test_update_matches_the_torch_learner(
    algo: str, action_space: gym.Space[Any], clip_vloss: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two updates of 2 epochs x 4 minibatches, in float64: 16 Adam steps through the clips
    give the same parameters and statistics. (In float32 they need not: a ratio rounded to
    the other side of a clip, or a near-zero gradient whose sign Adam's first step takes
    at full size, sends the two runs apart, differently on each CPU.)"""
    cfg = PPOConfig(epochs=2, minibatches=4, ent_coef=0.01, clip_vloss=clip_vloss, lr=1e-3)
    vtrace = APPOConfig() if algo == "appo" else None
    model, net = _pair(OBS, action_space, ModelConfig(hidden_sizes=[16, 16]))
    batch = _batch(model, action_space)
    np_batch = batch.map(lambda t: t.numpy())
    monkeypatch.setattr(torch, "randperm", lambda n, generator=None: torch.arange(n))
    ref = PPOUpdater(model, cfg, torch.Generator(), vtrace)
    mine = NumpyPPOUpdater(net, cfg, _InOrder(), vtrace)  # type: ignore[arg-type]
    for _ in range(2):
        ref_stats = ref.update(batch, lr=1e-3)
        stats = mine.update(np_batch, lr=1e-3)
    assert net.flat.dtype == np.float64
    np.testing.assert_allclose(net.flat, _flat64(model), rtol=1e-9, atol=1e-12)
    assert stats.keys() == ref_stats.keys()
    for key, value in ref_stats.items():  # the stats are summed in float32 on both sides
        assert stats[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


@pytest.mark.parametrize("algo", ["ppo", "appo"])
@pytest.mark.parametrize(
    "action_space",
    [gym.spaces.Discrete(4), gym.spaces.MultiDiscrete([3, 2]), gym.spaces.Box(-1, 1, (2,))],
    ids=["discrete", "multidiscrete", "box"],
)
def test_float32_update_step_is_within_rounding_of_float64(
    algo: str, action_space: gym.Space[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The float32 numpy learner as the trainer runs it: one minibatch step from the same
    parameters moves them to within rounding of the float64 step. (Adam's first step is
    lr * g / (|g| + eps): its rounding error is at most lr/eps times the gradient's.)"""
    cfg = PPOConfig(epochs=1, minibatches=4, ent_coef=0.01, lr=1e-3, adam_eps=1e-5)
    vtrace = APPOConfig() if algo == "appo" else None
    model, net64 = _pair(OBS, action_space, ModelConfig(hidden_sizes=[16, 16]))
    _, net32 = _pair(OBS, action_space, ModelConfig(hidden_sizes=[16, 16]), np.float32)
    batch = _batch(model, action_space).map(lambda t: t.numpy())
    start = net64.flat.copy()
    grads = {}
    for net in (net64, net32):
        learner = NumpyPPOUpdater(net, cfg, _InOrder(), vtrace)  # type: ignore[arg-type]
        learner.optimizer.step = lambda g, net=net: grads.__setitem__(net.dtype, g.copy())  # type: ignore[method-assign]
        b = batch.map(lambda x, net=net: x.astype(net.dtype) if x.dtype.kind == "f" else x)
        learner.update(b, lr=1e-3)  # every minibatch step: the gradient of the last one
    accumulations = _accumulations([8, 16, 16, 8], T * N) + T  # + the advantage recursion
    assert_float32_close(grads[np.float32], grads[np.float64], accumulations, "gradient")
    assert np.array_equal(net64.flat, start)  # the stub optimizer stepped nothing


def test_learner_state_round_trips() -> None:
    space = gym.spaces.Discrete(4)
    _, net = _pair(OBS, space, ModelConfig(hidden_sizes=[8]))
    model, _ = _pair(OBS, space, ModelConfig(hidden_sizes=[8]))
    np_batch_src = _batch(model, space)
    np_batch = np_batch_src.map(lambda t: t.numpy())
    cfg = PPOConfig(epochs=1, minibatches=2)
    first = NumpyPPOUpdater(net, cfg, np.random.default_rng(5))
    first.update(np_batch, 1e-3)
    saved, params = first.state_dict(), net.flat.copy()
    first.update(np_batch, 1e-3)
    after = net.flat.copy()

    net.flat[...] = params
    second = NumpyPPOUpdater(net, cfg, np.random.default_rng(99))
    second.load_state_dict(saved)
    second.update(np_batch, 1e-3)
    np.testing.assert_array_equal(net.flat, after)  # same moments, same shuffles


def test_a_numpy_backend_trainer_never_imports_torch() -> None:
    """The real trainer and actor workers, driven in one process for a few updates."""
    script = """
import sys, tempfile
from pathlib import Path
from surge.config.load import load_config
from surge.recipes import algorithm_of
from surge.streams.control import Control
from surge.runtime.launch import start_worker
from surge.streams.transport import InlineTransport

cfg, _ = load_config("cartpole-appo", ["log.progress=false"])
algorithm = algorithm_of(cfg)
ctx = algorithm.prepare(cfg, Path(tempfile.mkdtemp()), checkpoint=None)
graph = algorithm.graph(ctx)
transport = InlineTransport(graph.all_layouts(), graph.channels)
Control(transport).reset()
workers = [start_worker(ctx, graph, i, transport)[2] for i in range(len(graph.workers))]
trainer = workers[0]
for _ in range(10_000):
    for w in workers:
        w.poll(0.0)
    if trainer.version >= 5:
        break
assert trainer.version >= 5, trainer.version
assert trainer.learner.name == "numpy"
trainer.learner.evaluate(2, seed=0)  # the stop check's episodes too
trainer.save_checkpoint(wait=True)  # checkpoints need no torch either
trainer.close()
print("torch" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# --- multi-agent rows: a centralised critic, value normalisation, inactive samples -----------

MA_OBS = gym.spaces.Dict(
    {
        "obs": gym.spaces.Box(-1, 1, (3,)),
        "agent_id": gym.spaces.Box(0, 1, (2,)),
        "global_state": gym.spaces.Box(-1, 1, (5,)),
    }
)
MA_MODEL = ModelConfig(
    hidden_sizes=[16, 16],
    actor_inputs=["agent_id", "obs"],
    critic_inputs=["agent_id", "global_state"],
    value_norm=True,
)


def _ma_batch(model: ActorCritic) -> RolloutBatch:
    """A [T, N] multi-agent batch: column 1's agent leaves after step 3, column 2's joins at
    step 5 (inactive steps are recorded as terminated, as surge/envs/multiagent.py does)."""
    g = torch.Generator().manual_seed(2)
    dtype = next(model.parameters()).dtype

    def obs(*lead: int) -> dict[str, torch.Tensor]:
        return {
            k: torch.rand((*lead, *s.shape), generator=g, dtype=dtype) * 2 - 1
            for k, s in MA_OBS.spaces.items()
        }

    o = obs(T, N)
    actions, logp, values = model.act(
        {k: v.reshape(T * N, *v.shape[2:]) for k, v in o.items()}, generator=g
    )
    active = np.ones((T, N), bool)
    active[4:, 1] = False
    active[:5, 2] = False
    terminated = torch.zeros(T, N, dtype=torch.bool)
    terminated[3, 1] = True  # the agent's last step
    terminated[torch.from_numpy(~active)] = True
    return RolloutBatch(
        obs=o,
        last_obs=obs(N),
        final_obs=obs(T, N),
        actions=actions.reshape(T, N),
        logp=logp.reshape(T, N) - 0.05,
        values=values.reshape(T, N) * 3 + 1,  # recorded in reward units
        rewards=torch.randn(T, N, generator=g, dtype=dtype) * 3,
        terminated=terminated,
        truncated=torch.zeros(T, N, dtype=torch.bool),
        active=active,
    )


@pytest.mark.parametrize("algo", ["ppo", "appo"])
def test_multiagent_update_matches_the_torch_learner(
    algo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A centralised critic on other fields than the policy, value normalisation and
    inactive samples: the two learners still agree in float64, and minibatches are cut from
    the active samples only (23 of 32 here, so 4 minibatches of 5 or 6)."""
    cfg = PPOConfig(epochs=2, minibatches=4, ent_coef=0.01, lr=1e-3)
    vtrace = APPOConfig() if algo == "appo" else None
    space = gym.spaces.Discrete(3)
    model, net = _pair(MA_OBS, space, MA_MODEL)
    layout = numpy_layout(MA_OBS, space, MA_MODEL)
    assert layout is not None and layout.central_critic
    batch = _ma_batch(model)
    np_batch = batch.map(lambda t: t.numpy())
    monkeypatch.setattr(torch, "randperm", lambda n, generator=None: torch.arange(n))
    from surge.models.normalize import ValueNormalizer

    ref = PPOUpdater(model, cfg, torch.Generator(), vtrace, ValueNormalizer())
    mine = NumpyPPOUpdater(net, cfg, _InOrder(), vtrace, ValueNormalizer())  # type: ignore[arg-type]
    for _ in range(2):
        ref_stats = ref.update(batch, lr=1e-3)
        stats = mine.update(np_batch, lr=1e-3)
    np.testing.assert_allclose(net.flat, _flat64(model), rtol=1e-9, atol=1e-12)
    assert ref.value_norm is not None and mine.value_norm is not None
    assert mine.value_norm.count == pytest.approx(ref.value_norm.count)
    assert mine.value_norm.count == pytest.approx(2 * 23, abs=1e-3)  # active samples only
    for key, value in ref_stats.items():
        assert stats[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_inactive_samples_do_not_change_the_update(backend: str) -> None:
    """Whatever an inactive sample holds (its agent was out of the episode), the update is
    the same: it is left out of the minibatches, the value statistics and the advantages."""
    from surge.models.normalize import ValueNormalizer

    space = gym.spaces.Discrete(3)
    cfg = PPOConfig(epochs=2, minibatches=4, ent_coef=0.01, lr=1e-3)
    results = []
    for garbage in (False, True):
        model, net = _pair(MA_OBS, space, MA_MODEL)
        batch = _ma_batch(model)
        if garbage:
            off = torch.from_numpy(~batch.active)  # type: ignore[operator]
            g = torch.Generator().manual_seed(9)
            for x in (batch.rewards, batch.values, batch.logp):
                x[off] = torch.randn(int(off.sum()), generator=g, dtype=x.dtype) * 100
            for x in batch.obs.values():
                x[off] = torch.rand(x[off].shape, generator=g, dtype=x.dtype)
            batch.actions[off] = 0
        if backend == "numpy":
            learner = NumpyPPOUpdater(net, cfg, np.random.default_rng(0), None, ValueNormalizer())
            learner.update(batch.map(lambda t: t.numpy()), 1e-3)
            results.append(net.flat.copy())
        else:
            ref = PPOUpdater(model, cfg, torch.Generator().manual_seed(0), None, ValueNormalizer())
            ref.update(batch, 1e-3)
            results.append(_flat64(model))
    np.testing.assert_array_equal(results[0], results[1])
    assert not np.array_equal(results[0], _flat64(_pair(MA_OBS, space, MA_MODEL)[0]))
