"""R2D2's pieces: the sequence replay (surge/algos/sequence_replay.py) serves exactly the
stream's steps with the state stored at their start, through ring wrap-around and frame
stacks; its n-step targets, masks and resets; the learner's targets (learners/r2d2.py)
against hand values; the numpy recurrent Q-policy against the torch network's unroll."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from surge.algos.sequence_replay import SequenceStore
from surge.algos.transition_store import SAMPLED, Spec, storage_fields
from surge.config.schema import ExperimentConfig
from surge.learners.r2d2 import sequence_targets
from surge.models.q_network import QNetwork
from surge.models.q_policy import QPolicy
from surge.models.weights import model_to_flat

C, T, SEQ, S = 3, 4, 12, 2  # columns, segment, sequence, state floats


def _store(length: int, n: int = 1, episode: int = 1000, **kw) -> tuple[SequenceStore, Writer]:  # type: ignore[no-untyped-def]
    spec = Spec(
        C,
        length,
        {"x": ((2,), "<f4")},
        ((), "<i8"),
        T,
        sequence=SEQ,
        trained=SEQ - 4,
        core_size=S,
        **kw,
    )
    arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in storage_fields(spec).items()}
    store = SequenceStore(
        spec, arrays, 0.5, n, prioritized=False, alpha=0.6, priority_eps=1e-6, seed=0
    )
    return store, Writer(episode)


class Writer:
    """Column c's step t observes [t, c], is rewarded t + 100 c, and ends its episode after
    `episode` steps (terminated); each segment's starting state is [t0, c]."""

    def __init__(self, episode: int) -> None:
        self.t, self.episode = 0, episode

    def segment(self) -> dict[str, np.ndarray]:
        ts = np.arange(self.t, self.t + T)
        cols = np.arange(C)
        ends = np.tile(((ts + 1) % self.episode == 0)[:, None], (1, C))
        obs = np.stack([np.stack([[t, c] for c in cols]) for t in range(self.t, self.t + T + 1)])
        seg = {
            "obs/x": obs.astype(np.float32),
            "final_obs/x": obs[:T].astype(np.float32),
            "action": np.tile((ts % 2)[:, None], (1, C)).astype(np.int64),
            "reward": (ts[:, None] + 100 * cols[None, :]).astype(np.float32),
            "terminated": ends,
            "truncated": np.zeros((T, C), bool),
            "core0": np.stack([[self.t, c] for c in cols])[None].astype(np.float32),
        }
        self.t += T
        return seg


def test_sequences_become_items_when_whole_and_carry_their_stored_state() -> None:
    store, w = _store(length=40)
    cols = np.arange(C)
    for _ in range(SEQ // T):
        assert store.size == 0, "no sequence is whole before its last step is written"
        store.add(cols, w.segment())
    assert store.size == C  # one sequence per column, starting at step 0
    store.add(cols, w.segment())
    assert store.size == 2 * C  # and the next, starting a segment later
    assert store.inserted == 4 * T * C  # inserts count steps
    batch = store.sample(64, beta=1.0)
    x = batch["obs/x"]  # [B, SEQ, 2]
    start, col = x[:, 0, 0], x[:, 0, 1]
    assert set(start.tolist()) == {0.0, T}
    np.testing.assert_array_equal(x[:, :, 0], start[:, None] + np.arange(SEQ))  # contiguous
    np.testing.assert_array_equal(x[:, :, 1], np.repeat(col[:, None], SEQ, axis=1))
    np.testing.assert_array_equal(batch["core0"], np.stack([start, col], axis=1))
    assert store.a["counts"][SAMPLED] == 64 * (SEQ - 4)  # samples count trained steps
    # no episode ends: the last step's bootstrap lies past the sequence, so it does not train
    assert (batch["mask"] == (np.arange(SEQ) < SEQ - 1)).all()


def test_ring_wrap_leaves_only_whole_sequences_of_consecutive_steps() -> None:
    store, w = _store(length=SEQ + 3 * T)
    cols = np.arange(C)
    for _ in range(40):
        store.add(cols, w.segment())
        if store.size:
            x = store.sample(32, beta=1.0)["obs/x"][:, :, 0]
            np.testing.assert_array_equal(np.diff(x, axis=1), 1.0)  # never a torn sequence
            assert x[:, -1].max() <= w.t - 1  # nothing from the future
            np.testing.assert_array_equal(x[:, 0] % T, 0)  # starts on segment starts
    # whole sequences inside the ring: (L - SEQ) / T + 1 starts, minus the one the next
    # write breaks
    assert store.size == C * ((store.spec.length - SEQ) // T)


def test_nstep_targets_masks_and_resets_within_the_sequence() -> None:
    gamma, n = 0.5, 2
    store, w = _store(length=40, n=n, episode=6)  # episodes of 6 steps: ends at t = 5, 11
    cols = np.arange(C)
    for _ in range(SEQ // T):
        store.add(cols, w.segment())
    batch = store.sample(8, beta=1.0)
    i = int(np.flatnonzero(batch["obs/x"][:, 0, 1] == 1)[0])  # a column-1 sequence from t=0
    r = np.arange(SEQ) + 100.0
    end = (np.arange(SEQ) + 1) % 6 == 0
    for t in range(SEQ):
        if end[t]:  # terminates here: the return is its own reward, no bootstrap
            assert batch["reward"][i, t] == pytest.approx(r[t])
            assert batch["discount"][i, t] == 0.0 and batch["horizon"][i, t] == 1
        elif t + 2 <= SEQ - 1:
            assert batch["reward"][i, t] == pytest.approx(r[t] + gamma * r[t + 1])
            assert batch["horizon"][i, t] == 2 or end[t + 1]
    # steps 9 and 10 bootstrap from step 11 (inside), step 11 terminates (no bootstrap)
    assert batch["mask"][i].all()
    np.testing.assert_array_equal(batch["resets"][i], np.r_[False, end[:-1]])


def test_frame_stacks_of_sequences_are_rebuilt() -> None:
    spec = Spec(
        1, SEQ + 2 * T, {"f": ((2, 1), "<f4")}, ((), "<i8"), T, frames="f",
        sequence=SEQ, trained=SEQ, core_size=S,
    )  # fmt: skip
    arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in storage_fields(spec).items()}
    store = SequenceStore(spec, arrays, 0.9, 1, False, 0.6, 1e-6, seed=0)
    t = 0
    for _ in range(10):
        ts = np.arange(t, t + T + 1)
        frames = np.stack([np.maximum(ts - 1, -1), ts], axis=1).astype(np.float32)  # [T+1, 2]
        seg = {
            "obs/f": frames[:, None, :, None],
            "final_obs/f": frames[:T, None, :, None],
            "action": np.zeros((T, 1), np.int64),
            "reward": np.zeros((T, 1), np.float32),
            "terminated": np.zeros((T, 1), bool),
            "truncated": np.zeros((T, 1), bool),
            "core0": np.zeros((1, 1, S), np.float32),
        }
        store.add(np.array([0]), seg)
        t += T
    stacks = store.sample(16, beta=1.0)["obs/f"][..., 0]  # [B, SEQ, 2]
    np.testing.assert_array_equal(stacks[:, :, 0], stacks[:, :, 1] - 1)


def test_sequence_targets_hand_values() -> None:
    # T = 3 steps, B = 1, A = 2; step 0 bootstraps from step 2 (horizon 2), step 1 from 2.
    q_online = torch.tensor([[[0.0, 1.0]], [[2.0, 0.0]], [[1.0, 3.0]]])
    q_target = torch.tensor([[[5.0, 6.0]], [[7.0, 8.0]], [[9.0, 4.0]]])
    returns = torch.tensor([[1.0], [2.0], [3.0]])
    discount = torch.tensor([[0.25], [0.5], [0.0]])
    horizon = torch.tensor([[2], [1], [1]])
    plain = sequence_targets(q_online, q_target, returns, discount, horizon, False, False)
    # max of target at step 2 is 9; step 2 clamps to itself with discount 0
    torch.testing.assert_close(plain, torch.tensor([[1 + 0.25 * 9], [2 + 0.5 * 9], [3.0]]))
    double = sequence_targets(q_online, q_target, returns, discount, horizon, True, False)
    # online argmax at step 2 is action 1: target Q 4
    torch.testing.assert_close(double, torch.tensor([[1 + 0.25 * 4], [2 + 0.5 * 4], [3.0]]))
    rescaled = sequence_targets(q_online, q_target, returns, discount, horizon, True, True)

    def h(x: float) -> float:
        return float(np.sign(x) * (np.sqrt(abs(x) + 1) - 1) + 1e-3 * x)

    def h_inv(x: float) -> float:
        root = (np.sqrt(1 + 4e-3 * (abs(x) + 1 + 1e-3)) - 1) / 2e-3
        return float(np.sign(x) * (root**2 - 1))

    want = [h(1 + 0.25 * h_inv(4)), h(2 + 0.5 * h_inv(4)), h(3.0)]
    torch.testing.assert_close(rescaled.reshape(-1), torch.tensor(want), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("core", ["gru", "lstm"])
@pytest.mark.parametrize("dueling", [False, True])
def test_numpy_recurrent_q_policy_matches_the_network_unroll(core: str, dueling: bool) -> None:
    cfg = ExperimentConfig()
    cfg.model.core, cfg.model.core_size, cfg.model.hidden_sizes = core, 8, [16]
    cfg.dqn.dueling = dueling
    space = gym.spaces.Box(-1, 1, (3,))
    torch.manual_seed(0)
    net = QNetwork(space, 4, cfg.model, dueling)
    policy = QPolicy(space, gym.spaces.Discrete(4), cfg, 0)
    policy.load(model_to_flat(net))
    steps, rows = 6, 5
    obs = torch.randn(steps, rows, 3)
    resets = torch.zeros(steps, rows, dtype=torch.bool)
    resets[3, 1] = True
    state0 = torch.randn(rows, policy.state_size)
    with torch.no_grad():
        want = net.unroll({"obs": obs}, state0, resets).numpy()
    state = state0.numpy().copy()
    for t in range(steps):
        state[resets[t].numpy()] = 0.0  # as the actors carry it (models/recurrent_state.py)
        q, after = policy.q_values({"obs": obs[t].numpy()}, state)
        np.testing.assert_allclose(q, want[t], atol=1e-5)
        action, acted = policy.act({"obs": obs[t].numpy()}, core=state)
        np.testing.assert_array_equal(action, want[t].argmax(-1))
        np.testing.assert_array_equal(acted, after)
        state = after
