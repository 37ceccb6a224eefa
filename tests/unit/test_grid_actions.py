"""`model.grid_actions`: logits read per board cell (surge/models/grid_actions.py)."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.spaces import Box

from surge.config.schema import ModelConfig
from surge.errors import ConfigError
from surge.models.actor_critic import ActorCritic
from surge.models.flat_policy import FlatPolicy
from surge.models.grid_actions import landing_rows, landing_scores
from surge.models.numpy_policy import NumpyPolicy, acting_layout
from surge.models.weights import model_to_flat
from tests.numerics import assert_float32_close

C4_OBS = gym.spaces.Dict(
    {"observation": Box(0, 1, (6, 7, 2), np.int8), "action_mask": Box(0, 1, (7,), np.int8)}
)


def _board(rows: list[str]) -> torch.Tensor:
    """[1, 2, 6, 7] from six strings, top row first: x (channel 0), o (channel 1), '.'."""
    board = torch.zeros(1, 2, 6, 7)
    for r, line in enumerate(rows):
        for c, ch in enumerate(line):
            if ch != ".":
                board[0, "xo".index(ch), r, c] = 1
    return board


def test_a_column_lands_on_its_lowest_empty_cell() -> None:
    board = _board(["x......", "o......", "x......", "o.....x", "xo....o", "ox.o..x"])
    # column 0 full (0: the mask rules it out), 1 has two pieces, 3 one, 6 three, others none
    assert landing_rows(board).tolist() == [[0, 3, 5, 4, 5, 5, 2]]
    scores = torch.arange(42.0).reshape(1, 6, 7)  # cell (r, c) scores 7 r + c
    expected = [7 * r + c for c, r in enumerate([0, 3, 5, 4, 5, 5, 2])]
    assert landing_scores(scores, board).tolist() == [expected]


def test_columns_reads_each_logit_at_the_landing_cell_of_the_grid_features() -> None:
    """The model's logit for column c is the 1x1 convolution of the last features at c's
    landing cell plus c's bias: changing features elsewhere in the column changes nothing."""
    cfg = ModelConfig(
        encoder="grid_cnn", grid_channels=[4], hidden_sizes=[8], grid_actions="columns"
    )
    torch.manual_seed(0)
    model = ActorCritic(C4_OBS, gym.spaces.Discrete(7), cfg)
    assert model.grid_head is not None and model.critic_torso is None  # the torso: value only
    board = _board(["......."] * 3 + ["...x...", "...o...", "..xox.."])
    obs = {"observation": board.permute(0, 2, 3, 1), "action_mask": torch.ones(1, 7)}
    x = model.encoder(obs)
    features = x.reshape(1, 4, 6, 7)
    head = model.grid_head
    cell = head.cells(features)[0, 0]  # [6, 7]
    logits = model._logits(obs, x, model.actor_torso(x))
    landing = [5, 5, 4, 2, 4, 5, 5]
    want = torch.stack([cell[r, c] for c, r in enumerate(landing)]) + head.bias
    torch.testing.assert_close(logits[0], want)
    logp, _, _ = model.evaluate(obs, torch.tensor([3]))
    torch.testing.assert_close(logp, torch.log_softmax(want, -1)[3:4])


@pytest.mark.numerics  # also run under the narrowest kernels (tests/numerics.py)
@pytest.mark.parametrize(("mode", "rows"), [("columns", 9), ("columns", 3), ("cells", 9)])
def test_numpy_acts_as_torch_does(mode: str, rows: int) -> None:
    """The numpy policy reads the trainer's vector in `ActorCritic`'s order and computes the
    same logits and values, for an [H, W, C] board (columns) and a [C, H, W] one (cells), by
    both ways to convolve (`GridFeatures.SHIFTED_FROM`: 9 rows and 3)."""
    shape, n = ((6, 7, 2), 7) if mode == "columns" else ((2, 3, 3), 9)
    obs_space = gym.spaces.Dict(
        {"observation": Box(0, 1, shape, np.int8), "action_mask": Box(0, 1, (n,), np.int8)}
    )
    cfg = ModelConfig(
        encoder="grid_cnn", grid_channels=[8, 4], hidden_sizes=[16], grid_actions=mode
    )
    torch.manual_seed(0)
    model = ActorCritic(obs_space, gym.spaces.Discrete(n), cfg)
    with torch.no_grad():  # scores away from zero, so that argmax ties cannot decide
        for p in model.grid_head.parameters():  # type: ignore[union-attr]
            p.normal_(0.0, 1.0)
    layout = acting_layout(obs_space, gym.spaces.Discrete(n), cfg)
    assert layout is not None and layout.grid is not None and layout.grid.actions == mode
    assert [(k, tuple(p.shape)) for k, p in model.named_parameters()] == layout.params
    policy = NumpyPolicy(layout, model_to_flat(model), np.random.default_rng(0))
    rng = np.random.default_rng(3)
    board = (rng.random((rows, *shape)) < 0.3).astype(np.int8)
    if mode == "columns":  # a legal position: pieces stacked from the bottom row
        board = np.sort(board, axis=1)
        board[..., 1] &= 1 - board[..., 0]
    mask = np.ones((rows, n), np.int8)
    obs = {"observation": board, "action_mask": mask}
    reference = copy.deepcopy(model).double()
    t_obs = {k: torch.from_numpy(v) for k, v in obs.items()}
    action, logp, value = policy.act(obs, deterministic=True)
    t_action, t_logp, t_value = reference.act(t_obs, deterministic=True)
    np.testing.assert_array_equal(action, t_action.numpy())
    accumulations = 2 * 9 * 8 + 9 * 8 + 4 * len(board[0].reshape(-1)) + 16
    assert_float32_close(logp, t_logp, accumulations, "logp")
    assert_float32_close(value, t_value, accumulations, "value")
    assert isinstance(FlatPolicy(obs_space, gym.spaces.Discrete(n), cfg, 0).policy, NumpyPolicy)


@pytest.mark.parametrize(
    ("cfg", "actions", "match"),
    [
        (ModelConfig(encoder="grid_cnn", grid_actions="cells"), 7, "means 42 actions"),
        (ModelConfig(encoder="grid_cnn", grid_actions="columns"), 6, "means 7 actions"),
        (ModelConfig(encoder="flat", grid_actions="columns"), 7, "encoder is not grid_cnn"),
        (ModelConfig(encoder="grid_cnn", grid_actions="columns", core="gru"), 7, "recurrent"),
    ],
)
def test_grid_actions_that_do_not_fit_name_the_setting(
    cfg: ModelConfig, actions: int, match: str
) -> None:
    with pytest.raises(ConfigError, match="model.grid_actions") as err:
        ActorCritic(C4_OBS, gym.spaces.Discrete(actions), cfg)
    assert match in str(err.value)
