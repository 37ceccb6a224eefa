"""Value decomposition's maths (surge/models/mixers.py, surge/algos/value_mixing.py) against
hand-computed numbers: VDN's sum, QMIX's monotonic mixing, the TD targets and the mask of
padded episodes, independent Q-learning's broadcast team reward; and the learner's contracts:
its agent vector acts in `QPolicy` as the network it trained, and a checkpoint round trip
continues the updates exactly."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from surge.algos.value_mixing import (
    EpisodeBatch,
    RewardStandardiser,
    ValueMixing,
    agent_q_values,
    masked_td_loss,
    next_agent_values,
    td_targets,
    train_mask,
    unit_scaling,
)
from surge.config.load import load_config
from surge.config.qmix_schema import Mixer, QMIXConfig
from surge.config.schema import CoreName, ExperimentConfig, ModelConfig
from surge.models.mixers import QMixer, VDNMixer, make_mixer
from surge.models.q_policy import QPolicy
from surge.tracking.checkpoint import load_checkpoint, save_checkpoint

A, N, OBS, S = 3, 4, 5, 6  # agents, actions, observation floats, state floats
SPACE = gym.spaces.Dict(
    {
        "agent_id": gym.spaces.Box(0.0, 1.0, (A,), np.float32),
        "obs": gym.spaces.Box(-1.0, 1.0, (OBS,), np.float32),
    }
)


def _t(values: object) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _model(core: CoreName = "none") -> ModelConfig:
    return ModelConfig(hidden_sizes=[16], activation="relu", core=core, core_size=8)


def _random_batch(seed: int, episodes: int = 4, steps: int = 5) -> EpisodeBatch:
    """Random episodes: the second ends by termination at step 2 (padded after it), the
    third by a time limit at step 3 (padded after it, not terminated)."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(episodes, steps + 1, A, OBS, generator=g) * 2 - 1
    ids = torch.eye(A).expand(episodes, steps + 1, A, A)
    terminated = torch.zeros(episodes, steps, dtype=torch.bool)
    filled = torch.ones(episodes, steps, dtype=torch.bool)
    terminated[1, 2], filled[1, 3:], filled[2, 4:] = True, False, False
    return EpisodeBatch(
        obs={"obs": obs, "agent_id": ids},
        state=torch.rand(episodes, steps + 1, S, generator=g),
        actions=torch.randint(0, N, (episodes, steps, A), generator=g),
        reward=torch.rand(episodes, steps, generator=g) * 4 - 1,
        terminated=terminated,
        filled=filled,
    )


def _learner(mixer: Mixer, seed: int = 0, core: CoreName = "none", **cfg: Any) -> ValueMixing:
    settings = QMIXConfig(mixer=mixer, mixing_embed_dim=8, hypernet_embed=16, **cfg)
    return ValueMixing(SPACE, N, A, S, _model(core), settings, seed)


# ---------------------------------------------------------------- mixers


def test_vdn_mixer_sums_the_agents_q_values() -> None:
    agent_qs = _t([[[1.0, 2.0, 3.0], [-1.0, 0.5, 0.25]]])  # [B=1, T=2, A=3]
    out = VDNMixer()(agent_qs, torch.rand(1, 2, S))
    np.testing.assert_allclose(out.numpy(), [[6.0, -0.25]])


@pytest.mark.parametrize("layers", [1, 2])
def test_qmix_is_monotonic_in_every_agents_q_value(layers: int) -> None:
    torch.manual_seed(0)
    mixer = QMixer(A, S, embed_dim=8, hypernet_embed=16, hypernet_layers=layers)
    agent_qs = (torch.randn(16, 10, A) * 5).requires_grad_(True)
    states = torch.randn(16, 10, S) * 3  # far from the init's scale: the weights' signs vary
    q_tot = mixer(agent_qs, states)
    assert q_tot.shape == (16, 10)
    (grad,) = torch.autograd.grad(q_tot.sum(), agent_qs)  # each step's Q_tot is its own
    assert (grad >= 0).all()
    assert (grad > 0).float().mean() > 0.5  # not monotonic by being constant


def _set_linear(layer: nn.Module, weight: list[list[float]], bias: list[float]) -> None:
    assert isinstance(layer, nn.Linear)
    with torch.no_grad():
        layer.weight.copy_(_t(weight))
        layer.bias.copy_(_t(bias))


def test_qmix_output_of_a_hand_set_mixer() -> None:
    # Two agents, a 1-float state s, embed 1, linear hypernetworks:
    # W1(s) = |(s - 1, 3)|, b1 = -1, w_final(s) = |2 s|, V(s) = relu(s) + 0.5.
    mixer = QMixer(n_agents=2, state_dim=1, embed_dim=1, hypernet_embed=4, hypernet_layers=1)
    _set_linear(mixer.hyper_w_1, [[1.0], [0.0]], [-1.0, 3.0])
    _set_linear(mixer.hyper_b_1, [[0.0]], [-1.0])
    _set_linear(mixer.hyper_w_final, [[2.0]], [0.0])
    _set_linear(mixer.V[0], [[1.0]], [0.0])
    _set_linear(mixer.V[2], [[1.0]], [0.5])
    agent_qs = _t([[[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]]])
    states = _t([[[-1.0], [-1.0], [2.0]]])
    # s = -1: W1 = (2, 3), w_final = 2, V = 0.5 (the hypernetworks' raw outputs are negative)
    #   q = (1, 0): 2 * elu(2 - 1) + 0.5 = 2.5;  q = (0, 0): 2 * elu(-1) + 0.5 = 2 (e^-1 - 1) + 0.5
    # s = 2: W1 = (1, 3), w_final = 4, V = 2.5;  q = (1, 1): 4 * elu(1 + 3 - 1) + 2.5 = 14.5
    want = [[2.5, 2 * (math.exp(-1) - 1) + 0.5, 14.5]]
    np.testing.assert_allclose(mixer(agent_qs, states).detach().numpy(), want, rtol=1e-6)


def test_make_mixer_builds_the_named_mixer() -> None:
    assert isinstance(make_mixer("qmix", A, S, 8, 16, 2), QMixer)
    assert isinstance(make_mixer("vdn", A, S, 8, 16, 2), VDNMixer)
    assert make_mixer("none", A, S, 8, 16, 2) is None
    with pytest.raises(ValueError, match="unknown mixer"):
        make_mixer("qtran", A, S, 8, 16, 2)


# ---------------------------------------------------------------- targets, mask, loss


def test_targets_mask_and_loss_of_padded_episodes() -> None:
    # Episode 0 ends by a time limit after its step 2: not terminated, it bootstraps from
    # the observation after it. Episode 1 terminates at step 1; its step 2 is padding.
    reward = _t([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]])
    terminated = torch.tensor([[False, False, False], [False, True, False]])
    filled = torch.tensor([[True, True, True], [True, True, False]])
    next_q_mixed = _t([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    targets = td_targets(reward, terminated, next_q_mixed, gamma=0.5)
    # r + 0.5 next, except at the termination (5 alone); the padding's value is masked
    np.testing.assert_allclose(targets.numpy(), [[6.0, 12.0, 18.0], [24.0, 5.0, 30.0]])
    mask = train_mask(filled, terminated)
    np.testing.assert_array_equal(mask.numpy(), [[True, True, True], [True, True, False]])
    as_bytes = terminated.to(torch.uint8)  # a store may keep its flags as 0/1 bytes
    np.testing.assert_array_equal(td_targets(reward, as_bytes, next_q_mixed, 0.5), targets)
    np.testing.assert_array_equal(train_mask(filled.to(torch.uint8), as_bytes), mask)
    chosen = _t([[6.0, 12.0, 20.0], [24.0, 4.0, 999.0]]).requires_grad_(True)
    loss, td_abs = masked_td_loss(chosen, targets, mask)
    assert loss.item() == pytest.approx((2.0**2 + 1.0**2) / 5)  # the 999 is not counted
    assert td_abs.item() == pytest.approx(3.0 / 5)
    loss.backward()
    assert chosen.grad is not None and chosen.grad[1, 2] == 0.0


def test_mask_drops_every_step_after_a_termination() -> None:
    filled = torch.ones(1, 5, dtype=torch.bool)  # a producer that filled past the end
    terminated = torch.tensor([[False, True, False, True, False]])
    np.testing.assert_array_equal(train_mask(filled, terminated).numpy(), [[1, 1, 0, 0, 0]])


def test_next_values_double_q_and_available_actions() -> None:
    online = _t([[[[1.0, 5.0, 2.0], [1.0, 5.0, 2.0]]]])  # [B=1, T=1, A=2, N=3]
    target = _t([[[[7.0, 3.0, 4.0], [7.0, 3.0, 4.0]]]])
    # agent 0 may not take action 1; agent 1 has no available action (its episode ended):
    # it counts them all, so its value stays finite
    avail = torch.tensor([[[[True, False, True], [False, False, False]]]])
    double = next_agent_values(online, target, avail, double_q=True)
    np.testing.assert_allclose(double.numpy(), [[[4.0, 3.0]]])  # online argmax: 2, then 1
    plain = next_agent_values(online, target, avail, double_q=False)
    np.testing.assert_allclose(plain.numpy(), [[[7.0, 7.0]]])
    np.testing.assert_allclose(
        next_agent_values(online, target, None, double_q=True).numpy(), [[[3.0, 3.0]]]
    )


def test_independent_q_learning_gives_every_agent_the_team_reward() -> None:
    reward, terminated = _t([[1.0, 2.0]]), torch.tensor([[False, True]])
    next_q = _t([[[10.0, 20.0], [30.0, 40.0]]])  # [B=1, T=2, A=2]: each agent's own
    targets = td_targets(reward, terminated, next_q, gamma=0.5)
    np.testing.assert_allclose(targets.numpy(), [[[6.0, 11.0], [2.0, 2.0]]])
    loss, _ = masked_td_loss(_t([[[6.0, 13.0], [0.0, 0.0]]]), targets, torch.tensor([[1, 0]]) > 0)
    assert loss.item() == pytest.approx(2.0**2 / 2)  # one step of two agents: 2 errors


def test_iql_learner_trains_each_agents_q_on_the_team_reward() -> None:
    learner = _learner("none", gamma=0.9, standardise_rewards=False, double_q=False)
    assert learner.mixer is None
    batch = _random_batch(1)
    with torch.no_grad():
        q = agent_q_values(learner.agent, batch.obs)
        chosen = q[:, :-1].gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)  # [B, T, A]
        next_max = agent_q_values(learner.target_agent, batch.obs)[:, 1:].max(-1).values
    targets = batch.reward.unsqueeze(-1) + 0.9 * (~batch.terminated).unsqueeze(-1) * next_max
    mask = train_mask(batch.filled, batch.terminated).unsqueeze(-1).expand(-1, -1, A)
    stats = learner.update(batch)
    assert stats["target_mean"] == pytest.approx(targets[mask].mean().item(), rel=1e-5)
    assert stats["q_taken_mean"] == pytest.approx(chosen[mask].mean().item(), rel=1e-5)
    assert stats["loss"] == pytest.approx((chosen - targets)[mask].square().mean().item(), rel=1e-5)


def test_reward_standardiser_is_epymarls_running_mean_std() -> None:
    stats = RewardStandardiser()  # prior: mean 0, variance 1, pseudo-count 1e-4
    stats.update(np.array([1.0, 3.0]))  # mean 2, variance 1, count 2
    count = 2 + 1e-4
    mean = 2.0 * 2 / count  # Chan et al.'s merge of the two sets' moments
    var = (1e-4 * 1.0 + 2 * 1.0 + 2.0**2 * 1e-4 * 2 / count) / count
    assert (stats.mean, stats.var, stats.count) == pytest.approx((mean, var, count))
    out = stats.standardise(_t([5.0, -1.0]))
    want = (np.array([5.0, -1.0]) - mean) / math.sqrt(var + 1e-8)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


def test_update_standardises_the_rewards_of_the_steps_that_train() -> None:
    learner = _learner("vdn", standardise_rewards=True)
    seen = []
    for seed, shift in ((3, 0.0), (4, 2.0)):  # the second batch's rewards above the first's
        batch = _random_batch(seed)
        batch.reward += shift
        batch.terminated[:, 0] = True  # only step 0 trains: its target is its reward alone
        stats = learner.update(batch)
        seen.append(batch.reward[:, 0].numpy().astype(np.float64))
    rewards = np.concatenate(seen)  # padding and the steps after the terminations left out
    count = len(rewards) + 1e-4
    assert learner.rewards.count == pytest.approx(count)
    assert learner.rewards.mean == pytest.approx(rewards.sum() / count)
    standardised = (seen[-1] - learner.rewards.mean) / math.sqrt(learner.rewards.var + 1e-8)
    assert stats["target_mean"] == pytest.approx(standardised.mean(), rel=1e-5)


def test_padding_and_steps_after_a_termination_do_not_train() -> None:
    batch = _random_batch(2)
    garbage = _random_batch(2)
    garbage.reward[1, 3:], garbage.reward[2, 4] = 1e3, -1e3  # padded steps
    garbage.actions[1, 3:] = (garbage.actions[1, 3:] + 1) % N
    garbage.filled[1, 3] = True  # "filled" after the termination: the mask still drops it
    first, second = _learner("qmix"), _learner("qmix")
    a, b = first.update(batch), second.update(garbage)
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
    np.testing.assert_allclose(first.agent_flat(), second.agent_flat(), rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- the learner's contracts


@pytest.mark.parametrize("core", ["none", "gru"])
def test_agent_flat_acts_in_q_policy_as_the_online_network(core: CoreName) -> None:
    learner = _learner("qmix", core=core)
    for seed in range(3):  # trained weights, not the initial ones
        learner.update(_random_batch(seed))
    cfg = ExperimentConfig(model=_model(core))
    assert not cfg.replay.prioritized and not cfg.dqn.dueling
    policy = QPolicy(SPACE, gym.spaces.Discrete(N), cfg, seed=0)
    policy.load(learner.agent_flat())
    batch = _random_batch(5)
    with torch.no_grad():
        want = agent_q_values(learner.agent, batch.obs).numpy()  # [B, T+1, A, N]
    B, steps = want.shape[:2]
    state = policy.initial_state(B * A)  # each (episode, agent) row from a zero state
    for t in range(steps):
        obs = {k: v[:, t].reshape(B * A, -1).numpy() for k, v in batch.obs.items()}
        q, state = policy.q_values(obs, state)
        np.testing.assert_allclose(q.reshape(B, A, N), want[:, t], atol=1e-5)


def test_networks_do_not_depend_on_the_global_seed() -> None:
    torch.manual_seed(1)
    first = _learner("qmix", seed=3)
    torch.manual_seed(2)
    second = _learner("qmix", seed=3)
    np.testing.assert_array_equal(first.flat.data.numpy(), second.flat.data.numpy())
    assert not np.array_equal(_learner("qmix", seed=4).agent_flat(), first.agent_flat())


@pytest.mark.parametrize("mixer", ["qmix", "vdn", "none"])
def test_checkpoint_round_trip_reproduces_the_updates(mixer: Mixer, tmp_path: Path) -> None:
    def learner(seed: int) -> ValueMixing:
        return _learner(mixer, seed=seed, target_update_interval=2, core="gru")

    original = learner(0)
    for seed in range(3):  # optimiser moments, reward statistics, a target copy
        original.update(_random_batch(seed))
    saved = save_checkpoint(tmp_path, original.state_dict(), version=3, keep=1)
    restored = learner(1)  # other initial weights: everything must come from the checkpoint
    restored.load_state_dict(load_checkpoint(saved))
    assert restored.updates == 3
    for seed in range(3, 6):  # across the next target copy, at update 4
        batch = _random_batch(seed)
        assert restored.update(batch) == original.update(batch)
    np.testing.assert_array_equal(restored.flat.data.numpy(), original.flat.data.numpy())
    np.testing.assert_array_equal(
        restored.target_flat.data.numpy(), original.target_flat.data.numpy()
    )


def test_state_dict_holds_only_arrays_numbers_and_string_keyed_dicts() -> None:
    def check(node: object, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                assert isinstance(key, str), path
                check(value, f"{path}/{key}")
        elif isinstance(node, (list, tuple)):
            for i, value in enumerate(node):
                check(value, f"{path}/{i}")
        else:
            assert isinstance(node, (np.ndarray, int, float, str)), (path, type(node))

    learner = _learner("qmix", core="gru")
    learner.update(_random_batch(0))
    check(learner.state_dict(), "")


def test_unit_scaling_maps_finite_bounds_to_the_unit_interval_and_leaves_the_rest() -> None:
    low = np.array([-1.0, 0.0, -np.inf, 3.0])
    high = np.array([7.0, 4.0, np.inf, 3.0])  # the last: no width to scale by
    offset, scale = unit_scaling(low, high)
    x = np.array([[-1.0, 4.0, 5.0, 3.0], [7.0, 2.0, -2.0, 3.0]], np.float32)
    np.testing.assert_allclose((x - offset) * scale, [[0, 1, 5, 3], [1, 0.5, -2, 3]])
    assert offset.dtype == scale.dtype == np.float32


def test_a_scaled_state_starts_the_mixer_near_zero_where_a_raw_one_does_not() -> None:
    """All-zero rewards: QMIX's Q_tot should stay near 0. From LBF-sized raw states (0..7)
    the mixer starts far from it (its hypernetworks square the state's scale); scaled to
    [0, 1] it does not."""

    def q_tot_after_zero_rewards(state_scale: float) -> float:
        cfg, _ = load_config("lbf-qmix", ["model.core=none", "qmix.standardise_rewards=false"])
        space = gym.spaces.Dict(
            {
                "obs": gym.spaces.Box(-1, 7, (12,), np.float32),
                "agent_id": gym.spaces.Box(0, 1, (2,)),
            }
        )
        mixing = ValueMixing(space, 6, 2, 24, cfg.model, cfg.qmix, seed=0)
        rng = np.random.default_rng(0)
        B, T = 8, 10
        obs = torch.from_numpy(rng.integers(-1, 8, (B, T + 1, 2, 12)).astype(np.float32))
        batch = EpisodeBatch(
            obs={"obs": obs, "agent_id": torch.eye(2).expand(B, T + 1, 2, 2).contiguous()},
            state=obs.reshape(B, T + 1, 24) * state_scale,
            actions=torch.from_numpy(rng.integers(0, 6, (B, T, 2))),
            reward=torch.zeros(B, T),
            terminated=torch.zeros(B, T, dtype=torch.bool),
            filled=torch.ones(B, T, dtype=torch.bool),
        )
        return mixing.update(batch)["q_taken_mean"]

    assert abs(q_tot_after_zero_rewards(1.0)) > 5.0  # 9.2 here
    assert abs(q_tot_after_zero_rewards(1 / 8)) < 1.5  # 0.49 here
