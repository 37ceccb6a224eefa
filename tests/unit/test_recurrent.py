"""Recurrent policies: the state bookkeeping (reset masks, the stored state, burn-in) and the
unroll maths, each against a hand-unrolled reference (a loop over time steps, one column at a
time, with explicit resets), and the fused numpy unroll against torch's cells."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from surge.algos.batch import RolloutBatch
from surge.algos.sequences import (
    policy_on_sequences,
    sequence_minibatches,
    sequence_next_values,
)
from surge.config.schema import ModelConfig
from surge.models.actor_critic import ActorCritic
from surge.models.numpy_recurrent import unroll_backward, unroll_forward
from surge.models.recurrent import RecurrentCore, StepFn, unroll, unroll_with_burn_in
from surge.models.recurrent_state import (
    CORE0,
    CORE_IN,
    CORE_OUT,
    StateCarry,
    carry,
    resets_before,
    state_size,
)
from tests.numerics import assert_float32_close, float64_torch

pytestmark = pytest.mark.numerics

T, B, F, H = 7, 4, 3, 5
RESETS = torch.tensor(
    [  # [T, B]: column 0 never resets, column 1 at t=1 and t=5, column 2 at every step
        [0, 0, 1, 0],
        [0, 1, 1, 0],
        [0, 0, 1, 0],
        [0, 0, 1, 1],
        [0, 0, 1, 0],
        [0, 1, 1, 0],
        [0, 0, 1, 0],
    ],
    dtype=torch.bool,
)


def hand_unroll(
    step: StepFn, x: torch.Tensor, state: torch.Tensor, resets: torch.Tensor
) -> torch.Tensor:
    """The reference: each column on its own, step by step, the state set to zero by an `if`."""
    out = []
    for b in range(x.shape[1]):
        h = state[b : b + 1]
        column = []
        for t in range(x.shape[0]):
            if resets[t, b]:
                h = torch.zeros_like(h)
            h = step(x[t, b : b + 1], h)
            column.append(h[0])
        out.append(torch.stack(column))
    return torch.stack(out, dim=1)


def _core(kind: str, seed: int = 0) -> RecurrentCore:
    torch.manual_seed(seed)
    return RecurrentCore(kind, F, H)


def _inputs(core: RecurrentCore, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, B, F, generator=g, dtype=torch.get_default_dtype())
    s0 = torch.randn(B, core.state_size, generator=g, dtype=torch.get_default_dtype())
    return x, s0


# --- the bookkeeping: resets, the actor's carry, the stored state --------------------------


def test_resets_before_shifts_episode_ends_by_one_step() -> None:
    terminated = np.array([[0, 0], [1, 0], [0, 0], [0, 1]], bool)
    truncated = np.array([[0, 1], [0, 0], [0, 0], [1, 0]], bool)
    # the state is zeroed before the step after each end; never before step 0 (core0 is)
    expected = np.array([[0, 0], [0, 1], [1, 0], [0, 0]], bool)
    np.testing.assert_array_equal(resets_before(terminated, truncated), expected)
    as_tensors = resets_before(torch.from_numpy(terminated), torch.from_numpy(truncated))
    np.testing.assert_array_equal(as_tensors.numpy(), expected)


def test_state_size_per_core() -> None:
    assert state_size(ModelConfig()) == 0
    assert state_size(ModelConfig(core="gru", core_size=32)) == 32
    assert state_size(ModelConfig(core="lstm", core_size=32)) == 64


def test_carry_zeroes_the_rows_whose_episode_ended() -> None:
    core_out = np.arange(6, dtype=np.float32).reshape(3, 2) + 1
    core_in = np.full((3, 2), -7.0, np.float32)
    carry(core_out, np.array([False, True, False]), core_in)
    np.testing.assert_array_equal(core_in, [[1, 2], [0, 0], [5, 6]])


def test_actor_carry_against_a_hand_run_actor() -> None:
    """Two env groups of two envs, a segment of 3 steps, a 'policy' whose state after a step
    is the state before it plus (step number + 1): what each request carries and what each
    segment stores, checked against the rule written out by hand."""
    groups, G, S, steps = 2, 2, 3, 3
    arrays = {
        CORE_IN: np.full((groups, G, S), 99.0, np.float32),  # a dead actor's leftovers
        CORE_OUT: np.zeros((groups, G, S), np.float32),
    }
    state = StateCarry.of(arrays)
    assert state is not None and StateCarry.of({"logp": arrays[CORE_IN]}) is None
    ends = {(0, 0): [1], (0, 1): [], (1, 0): [0, 2], (1, 1): [2]}  # (group, env): steps ended
    used = {key: [] for key in ends}  # the state each request carried, per (group, env)
    for g in range(groups):
        state.start(g)
    segments = []
    for segment in range(2):
        cols = {g: {CORE0: np.zeros((1, G, S), np.float32)} for g in range(groups)}
        for t in range(steps):
            for g in range(groups):
                for e in range(G):
                    used[(g, e)].append(arrays[CORE_IN][g, e].copy())
                arrays[CORE_OUT][g] = arrays[CORE_IN][g] + (segment * steps + t + 1)  # "policy"
                state.record(g, t, cols[g])
                ended = np.array([t in ends[(g, e)] for e in range(G)])
                state.advance(g, ended)
        segments.append(cols)
    # by hand: zero at the start, +k after step k-1, back to zero after an episode's end
    for (g, e), end_steps in ends.items():
        h, expected = 0.0, []
        for k in range(2 * steps):
            expected.append(h)
            h = 0.0 if k % steps in end_steps else h + k + 1
        np.testing.assert_array_equal(np.array(used[(g, e)])[:, 0], expected)
        for segment in range(2):  # core0: the state of each segment's first step
            stored = segments[segment][g][CORE0][0, e]
            np.testing.assert_array_equal(stored, np.full(S, expected[segment * steps]))


# --- the unroll maths --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_unroll_matches_the_hand_unrolled_reference(kind: str) -> None:
    with float64_torch():
        core = _core(kind)
        x, s0 = _inputs(core)
        got = unroll(core.cell_step, x, s0, RESETS)
        want = hand_unroll(core.cell_step, x, s0, RESETS)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    # column 2 resets at every step: its states do not depend on s0 at all
    with float64_torch():
        again = unroll(core.cell_step, x, s0 * 5.0, RESETS)
    torch.testing.assert_close(again[:, 2], got[:, 2], rtol=0, atol=0)
    assert not torch.allclose(again[:, 0], got[:, 0])


@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("burn_in", [1, 3])
def test_burn_in_rebuilds_the_state_without_gradient(kind: str, burn_in: int) -> None:
    with float64_torch():
        core = _core(kind)
        x, s0 = _inputs(core)
        x.requires_grad_(True)
        s0.requires_grad_(True)
        got = unroll_with_burn_in(core.cell_step, x, s0, RESETS, burn_in)
        full = hand_unroll(core.cell_step, x, s0, RESETS)
        torch.testing.assert_close(got, full[burn_in:], rtol=0, atol=1e-12)
        weights = torch.randn(got.shape, generator=torch.Generator().manual_seed(3))
        (got * weights).sum().backward()
        grad_x = x.grad.clone()  # type: ignore[union-attr]
        # by hand: the state after the burn-in as a constant, then the rest with gradient
        x.grad = None
        start = full[burn_in - 1].detach()
        rest = hand_unroll(core.cell_step, x[burn_in:], start, RESETS[burn_in:])
        (rest * weights).sum().backward()
    assert s0.grad is None  # the stored state gets no gradient
    assert torch.count_nonzero(grad_x[:burn_in]) == 0  # nor do the burn-in steps' inputs
    torch.testing.assert_close(grad_x, x.grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_numpy_unroll_and_its_backward_match_torch_cells_in_float64(kind: str) -> None:
    with float64_torch():
        core = _core(kind)
        x, s0 = _inputs(core)
        x.requires_grad_(True)
        s0.requires_grad_(True)
        want = unroll(core.cell_step, x, s0, RESETS)
        grad = torch.randn(want.shape, generator=torch.Generator().manual_seed(4))
        (want * grad).sum().backward()
    w_ih, w_hh, b_ih, b_hh = (t.detach().numpy() for t in core._weights())
    xn = x.detach().numpy()
    xp = xn @ w_ih.T + b_ih
    keep = (~RESETS).numpy().astype(np.float64)
    states, cache = unroll_forward(kind, xp, s0.detach().numpy(), keep, w_hh, b_hh)
    np.testing.assert_allclose(states, want.detach().numpy(), rtol=0, atol=1e-12)
    dxp, d_s0, d_w_hh, d_b_hh = unroll_backward(grad.numpy(), cache, w_hh)
    flat = dxp.reshape(T * B, -1)

    def grad_of(t: torch.Tensor) -> np.ndarray:
        assert t.grad is not None
        return t.grad.numpy()

    cell = core.cell
    for got, tensor in [
        (dxp @ w_ih, x),
        (d_s0, s0),
        (d_w_hh, cell.weight_hh),
        (d_b_hh, cell.bias_hh),
        (flat.T @ xn.reshape(T * B, F), cell.weight_ih),
        (flat.sum(0), cell.bias_ih),
    ]:
        np.testing.assert_allclose(got, grad_of(tensor), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("burn_in", [0, 2])
def test_fused_float32_node_matches_the_float64_reference(kind: str, burn_in: int) -> None:
    core = _core(kind)
    reference = copy.deepcopy(core).double()
    x, s0 = _inputs(core)
    x.requires_grad_(True)
    x64 = x.detach().double().requires_grad_(True)
    got = core.unroll(x, s0, RESETS, burn_in)  # CPU float32: the fused node
    want = reference.unroll(x64, s0.double(), RESETS, burn_in)  # float64: torch's cells
    grad = torch.randn(want.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    (got * grad.float()).sum().backward()
    (want * grad).sum().backward()
    # a state is a chain of T steps of fan-in F + H sums; gradients sum over T * B rows too
    steps = T * (F + H + 4)
    assert_float32_close(got, want, steps, "states")
    assert_float32_close(x.grad, x64.grad, steps * 4, "input grad")  # type: ignore[arg-type]
    for (name, p), p64 in zip(core.named_parameters(), reference.parameters(), strict=True):
        assert_float32_close(p.grad, p64.grad, steps * B * 4, name)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_acting_step_uses_the_same_maths_as_the_cell(kind: str) -> None:
    core = _core(kind)
    x, s0 = _inputs(core)
    with torch.no_grad():
        fused = core.step(x[0], s0)  # acting: numpy, no graph
    torch.testing.assert_close(fused, core.cell_step(x[0], s0).detach(), rtol=1e-5, atol=1e-6)


# --- the model and the learner's pieces ---------------------------------------------------

OBS = gym.spaces.Box(-np.inf, np.inf, (F,), np.float32)
ACTIONS = gym.spaces.Discrete(3)


def _model(kind: str = "gru") -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(OBS, ACTIONS, ModelConfig(core=kind, core_size=H, hidden_sizes=[8]))


def _acted_batch(model: ActorCritic, seed: int = 2) -> tuple[RolloutBatch, torch.Tensor]:
    """A batch acted step by step as an actor does (the state carried, zeroed after every
    episode end), and the state each step's request carried [T, B, S]."""
    g = torch.Generator().manual_seed(seed)
    terminated = torch.zeros(T, B, dtype=torch.bool)
    truncated = torch.zeros(T, B, dtype=torch.bool)
    terminated[2, 1] = terminated[4, 3] = True
    truncated[0, 2] = truncated[3, 0] = True
    obs = torch.randn(T, B, F, generator=g)
    core = torch.randn(B, model.state_size, generator=g) * 0.5  # a segment mid-episode
    carried, actions, logps, values = [], [], [], []
    for t in range(T):
        carried.append(core)
        a, lp, v, after = model.act({"obs": obs[t]}, generator=g, core=core)
        actions.append(a)
        logps.append(lp)
        values.append(v)
        ended = (terminated[t] | truncated[t]).numpy()
        nxt = after.numpy().copy()
        carry(after.numpy(), ended, nxt)
        core = torch.from_numpy(nxt)
    batch = RolloutBatch(
        obs={"obs": obs},
        last_obs={"obs": torch.randn(B, F, generator=g)},
        final_obs={"obs": torch.randn(T, B, F, generator=g)},
        actions=torch.stack(actions),
        logp=torch.stack(logps),
        values=torch.stack(values),
        rewards=torch.randn(T, B, generator=g),
        terminated=terminated,
        truncated=truncated,
        core0=carried[0],
    )
    return batch, torch.stack(carried)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_learner_recomputes_what_the_actor_acted(kind: str) -> None:
    """From core0 and the episode ends alone, the learner's unroll gives every step the state,
    log-prob and value the acting policy had."""
    model = _model(kind)
    batch, carried = _acted_batch(model)
    resets = resets_before(batch.terminated, batch.truncated)
    logp, values, states = policy_on_sequences(model, batch, resets, chunk=3)
    torch.testing.assert_close(logp, batch.logp, rtol=0, atol=1e-6)
    torch.testing.assert_close(values, batch.values, rtol=0, atol=1e-6)
    for burn_in in (0, 3):
        new_logp, entropy, new_values = model.evaluate_sequence(
            batch.obs,
            batch.actions,
            batch.core0,
            resets,
            burn_in,  # type: ignore[arg-type]
        )
        assert new_logp.shape == entropy.shape == ((T - burn_in) * B,)
        for new, old in ((new_logp, batch.logp), (new_values, batch.values)):
            torch.testing.assert_close(new.view(-1, B), old[burn_in:], atol=1e-6, rtol=0)
    # the state after step t, reset where an episode ended, is the next request's state
    ended = (batch.terminated | batch.truncated)[:-1].unsqueeze(-1)
    torch.testing.assert_close(states[:-1] * ~ended, carried[1:], rtol=0, atol=1e-6)


def test_next_values_bootstrap_from_the_state_the_policy_would_have() -> None:
    model = _model()
    batch, _ = _acted_batch(model)
    resets = resets_before(batch.terminated, batch.truncated)
    _, values, states = policy_on_sequences(model, batch, resets)
    got = sequence_next_values(model, batch, values, states)
    with torch.no_grad():
        for b in range(B):
            for t in range(T):
                if batch.truncated[t, b]:  # the final obs, from the episode's own state
                    obs = {"obs": batch.final_obs["obs"][t, b : b + 1]}
                    want = model.value(obs, states[t, b : b + 1])
                elif t == T - 1:  # the next segment's first obs, from its first state
                    keep = 0.0 if batch.terminated[t, b] else 1.0
                    obs = {"obs": batch.last_obs["obs"][b : b + 1]}
                    want = model.value(obs, states[t, b : b + 1] * keep)
                elif batch.terminated[t, b]:
                    continue  # not used: no bootstrap after a terminal step
                else:
                    want = values[t + 1, b : b + 1]
                torch.testing.assert_close(got[t, b : b + 1], want, rtol=0, atol=1e-6)


def test_minibatches_are_whole_shuffled_sequences() -> None:
    model = _model()
    batch, _ = _acted_batch(model)
    resets = resets_before(batch.terminated, batch.truncated)
    column = torch.arange(B, dtype=torch.float32).expand(T, B)
    step = torch.arange(T, dtype=torch.float32).unsqueeze(1).expand(T, B)
    scalars = torch.stack([column, step], dim=2)
    g = torch.Generator().manual_seed(0)
    seen = []
    for evaluate, rows in sequence_minibatches(model, batch, resets, scalars, 2, 1, g):
        cols = rows[:, 0].view(T - 1, -1)  # time-major: every row of a step, step after step
        assert (cols == cols[0]).all()  # the same columns at every step: whole sequences
        assert (rows[:, 1].view(T - 1, -1) == torch.arange(1, T).unsqueeze(1)).all()
        logp, _, _ = evaluate()
        idx = cols[0].long()
        torch.testing.assert_close(logp.view(T - 1, -1), batch.logp[1:, idx], atol=1e-6, rtol=0)
        seen += idx.tolist()
    assert sorted(seen) == list(range(B))
    with pytest.raises(ValueError, match="do not divide"):
        next(sequence_minibatches(model, batch, resets, scalars, 3, 0, g))
