"""The actor-critic's inference path in numpy, for MLP policies: fast, and no torch import.

For the few-row batches of acting (a group of 2-16 envs), torch's per-operator dispatch costs
more than the arithmetic: `ActorCritic.act` takes about 135 us on CartPole where the same
maths in numpy takes about 20 us. So actors that run their policy inline, and policy workers
serving MLP policies, act through this module. It reads the trainer's flat parameter vector
directly (weights are views into it, no copy per reload).

`numpy_layout` mirrors `ActorCritic`'s parameter order and shapes from the config and spaces
alone (FlatEncoder -> MLP torso(s) -> action head, value head); it returns None for models it
does not cover (the CNN encoders, recurrent cores), and callers fall back to torch.
tests/unit/test_numpy_policy.py checks the mirror against the torch model for every supported
space.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property, partial
from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import ModelConfig
from surge.envs.spaces import flatten_obs_space
from surge.models.images import choose_encoder, chw, grid_field, image_layout
from surge.models.inputs import (
    ACTION_MASK,
    MASKED_LOGIT,
    check_action_mask,
    input_fields,
    subspace,
)
from surge.models.numpy_grid import GridFeatures, GridLayout, GridLogits
from surge.models.numpy_recurrent import step

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True)
class NumpyLayout:
    """Where each parameter sits in the flat vector, and how the network is wired."""

    params: list[tuple[str, tuple[int, ...]]]  # in ActorCritic.parameters() order
    fields: list[tuple[str, int, int]]  # the policy's FlatEncoder: (key, one-hot n or 0, start)
    critic_fields: list[tuple[str, int, int]]  # the value function's (models/inputs.py)
    activation: str
    layers: int
    shared: bool
    head: str  # "categorical" | "multi_categorical" | "gaussian"
    nvec: tuple[int, ...]  # categorical sizes (one entry for Discrete)
    start: tuple[int, ...]  # action offsets per component
    masked: bool = False  # the observation's `action_mask` masks the logits
    core: str = "none"  # a recurrent core on the policy's features (acting only)
    core_size: int = 0
    grid: GridLayout | None = None  # a grid_cnn encoder for both heads (acting only)

    @cached_property  # asked per forward pass, by the learner too
    def central_critic(self) -> bool:
        """The value function reads other fields than the policy."""
        return self.critic_fields != self.fields


def core_params(cfg: ModelConfig, width: int) -> list[tuple[str, tuple[int, ...]]]:
    """The recurrent core's parameters on inputs of `width` (torch's GRUCell / LSTMCell,
    gates stacked), as the state dict names them."""
    gates = (3 if cfg.core == "gru" else 4) * cfg.core_size
    return [
        ("core.cell.weight_ih", (gates, width)),
        ("core.cell.weight_hh", (gates, cfg.core_size)),
        ("core.cell.bias_ih", (gates,)),
        ("core.cell.bias_hh", (gates,)),
    ]


def numpy_layout(
    obs_space: gym.Space[Any], action_space: gym.Space[Any], cfg: ModelConfig
) -> NumpyLayout | None:
    """The layout for this model, or None when the numpy path (acting and learning: the
    numpy learner, models/numpy_net.py) does not cover it."""
    if cfg.core != "none":
        return None  # a recurrent core: the numpy learner does not train it
    layout = acting_layout(obs_space, action_space, cfg)
    return None if layout is None or layout.grid is not None else layout  # nor convolutions


def acting_layout(
    obs_space: gym.Space[Any], action_space: gym.Space[Any], cfg: ModelConfig
) -> NumpyLayout | None:
    """`numpy_layout`, and also for flat models with a recurrent core (`model.core`), which
    act in numpy (`NumpyPolicy`) and learn in torch: None only for the CNN encoders."""
    actor_fields, critic_fields = input_fields(obs_space, cfg)
    leaves = flatten_obs_space(obs_space)
    if choose_encoder(subspace(obs_space, actor_fields), cfg) == "grid_cnn":
        return _grid_layout(obs_space, action_space, cfg, actor_fields, critic_fields)
    encoders = []
    for names in (actor_fields, critic_fields):
        if choose_encoder(subspace(obs_space, names), cfg) != "flat":
            return None  # a CNN (an image, [C, H, W] or [H, W, C]): torch's job
        encoded = flat_fields(leaves, names)
        if encoded is None:
            return None
        encoders.append(encoded)
    params: list[tuple[str, tuple[int, ...]]] = []
    nvec: tuple[int, ...]
    start: tuple[int, ...]
    actor_in, critic_in = encoders[0][1], encoders[1][1]
    if cfg.core != "none":  # ActorCritic registers the core after the encoders
        params += core_params(cfg, actor_in)
        # the torsos read the core's output; a central critic its own fields, feed-forward
        critic_in = critic_in if critic_fields != actor_fields else cfg.core_size
        actor_in = cfg.core_size

    def torso(name: str, in_dim: int) -> int:
        width = in_dim
        for i, h in enumerate(cfg.hidden_sizes):
            params.extend([(f"{name}.{2 * i}.weight", (h, width)), (f"{name}.{2 * i}.bias", (h,))])
            width = h
        return width

    feat = torso("actor_torso", actor_in)
    if not cfg.shared:
        torso("critic_torso", critic_in)
    if isinstance(action_space, gym.spaces.Discrete):
        head, nvec, start = "categorical", (int(action_space.n),), (int(action_space.start),)
        out = nvec[0]
    elif isinstance(action_space, gym.spaces.MultiDiscrete) and action_space.nvec.ndim == 1:
        head = "multi_categorical"
        nvec = tuple(int(n) for n in action_space.nvec)
        start = tuple(int(s) for s in action_space.start)
        out = sum(nvec)
    elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        head, nvec, start = "gaussian", (), ()
        out = int(action_space.shape[0])
    else:
        return None
    if head == "gaussian":  # registered before the linear layer in GaussianHead
        params.append(("action_head.log_std", (out,)))
    params += [("action_head.linear.weight", (out, feat)), ("action_head.linear.bias", (out,))]
    params += [("value_head.weight", (1, feat)), ("value_head.bias", (1,))]
    masked = check_action_mask(obs_space, action_space)
    return NumpyLayout(
        params,
        encoders[0][0],
        encoders[1][0],
        cfg.activation,
        len(cfg.hidden_sizes),
        cfg.shared,
        head,
        nvec,
        start,
        masked,
        cfg.core,
        cfg.core_size if cfg.core != "none" else 0,
    )


def _grid_layout(
    obs_space: gym.Space[Any],
    action_space: gym.Space[Any],
    cfg: ModelConfig,
    actor_fields: list[str],
    critic_fields: list[str],
) -> NumpyLayout | None:
    """A grid_cnn model's acting layout: the convolutions' parameters (first, as `ActorCritic`
    registers its encoder first), then the flat model's on their features; None when the
    value function reads other fields (its own encoder: torch acts). With `model.grid_actions`
    the logits' parameters (`grid_head.*`) take the action head's place before the value
    head's, as `ActorCritic` registers them, and the torso is shared."""
    if critic_fields != actor_fields or cfg.core != "none":
        return None
    grid = grid_field(subspace(obs_space, actor_fields))
    assert grid is not None
    key, space = grid
    hwc = image_layout(space.shape, cfg.image_layout) == "hwc"
    c, h, w = chw(space.shape, "hwc" if hwc else "chw")
    prefix = "encoder.inner.convs" if hwc else "encoder.convs"
    params: list[tuple[str, tuple[int, ...]]] = []
    for i, out in enumerate(cfg.grid_channels):
        params += [(f"{prefix}.{i}.weight", (out, c, 3, 3)), (f"{prefix}.{i}.bias", (out,))]
        c = out
    # The rest is the flat model's on `c * h * w` features: its layout for a Box of that size.
    features = gym.spaces.Box(-np.inf, np.inf, (c * h * w,), np.float32)
    spaces: dict[str, gym.Space[Any]] = {"features": features}
    if ACTION_MASK in flatten_obs_space(obs_space):
        spaces[ACTION_MASK] = flatten_obs_space(obs_space)[ACTION_MASK]
    per_cell = cfg.grid_actions != "none"
    flat_cfg = replace(
        cfg, encoder="flat", actor_inputs=[], critic_inputs=[], shared=cfg.shared or per_cell
    )
    rest = acting_layout(gym.spaces.Dict(spaces), action_space, flat_cfg)
    assert rest is not None
    rest_params = rest.params
    if per_cell:
        n = sum(rest.nvec)
        cells = [("grid_head.bias", (n,)), ("grid_head.cells.weight", (1, c, 1, 1))]
        cells.append(("grid_head.cells.bias", (1,)))
        torso = [p for p in rest_params if p[0].startswith("actor_torso.")]
        value = [p for p in rest_params if p[0].startswith("value_head.")]
        rest_params = torso + cells + value
    return replace(
        rest,
        params=params + rest_params,
        grid=GridLayout(key, hwc, prefix, tuple(cfg.grid_channels), cfg.grid_actions),
    )


def layout_size(layout: NumpyLayout) -> int:
    return sum(math.prod(shape) for _, shape in layout.params)


def param_views(layout: NumpyLayout, buffer: np.ndarray) -> dict[str, np.ndarray]:
    """Per-parameter views (state-dict names and shapes) of a flat buffer in the layout."""
    views: dict[str, np.ndarray] = {}
    offset = 0
    for name, shape in layout.params:
        n = math.prod(shape)
        views[name] = buffer[offset : offset + n].reshape(shape)
        offset += n
    return views


def flat_fields(
    leaves: dict[str, gym.Space[Any]], names: list[str]
) -> tuple[list[tuple[str, int, int]], int] | None:
    """How `FlatEncoder` encodes the fields `names`: (key, one-hot n or 0, start) each, and
    the feature width; None if a field is neither Box nor Discrete."""
    fields: list[tuple[str, int, int]] = []
    width = 0
    for key in names:
        space = leaves[key]
        if isinstance(space, gym.spaces.Discrete):
            fields.append((key, int(space.n), int(space.start)))
            width += int(space.n)
        elif isinstance(space, gym.spaces.Box):
            fields.append((key, 0, 0))
            width += math.prod(space.shape)
        else:
            return None
    return fields, width


def flat_features(
    layout: NumpyLayout,
    obs: dict[str, np.ndarray],
    dtype: type[np.floating] = np.float32,
    critic: bool = False,
) -> np.ndarray:
    """`FlatEncoder` in numpy: [B, features] of `dtype` from a dict of [B, ...] fields (the
    policy's fields, or with `critic` the value function's)."""
    return encode_fields(layout.critic_fields if critic else layout.fields, obs, dtype)


def encode_fields(
    fields: list[tuple[str, int, int]],
    obs: dict[str, np.ndarray],
    dtype: type[np.floating] = np.float32,
) -> np.ndarray:
    """`FlatEncoder` in numpy for the fields `flat_fields` describes."""
    parts = []
    for key, n, start in fields:
        x = obs[key]
        if n:
            idx = x.reshape(len(x)).astype(np.int64) - start
            parts.append(np.eye(n, dtype=dtype)[idx])
        else:
            parts.append(x.reshape(len(x), -1).astype(dtype, copy=False))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)


def mask_logits(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Logits [B, n] with illegal actions (mask 0) set to `MASKED_LOGIT` (a new array)."""
    return np.where(mask.reshape(logits.shape) != 0, logits, np.asarray(MASKED_LOGIT, logits.dtype))


FUSE_MAX_WIDTH = 256
"""Separate actor and critic torsos run as one network (block-diagonal weights) when their
widths add up to at most this: one matmul per layer instead of two, for twice the flops,
which is the better trade while the matmuls are small."""


class NumpyPolicy:
    """`act(obs) -> (action, logp, value)` with the same maths as `ActorCritic.act`; with a
    recurrent core, `act(obs, deterministic, core)` takes the state before the step [B, S]
    and returns the state after it last (models/numpy_recurrent.py `step`: torch's cell
    equations).

    `flat` is the parameter vector (float32). The policy computes from its own arrangement
    of the weights: after writing new parameters into `flat`, call `reload()`.

    Why the arrangement: acting batches are a few rows, so the cost is the number of numpy
    calls, not flops. The two heads become one matrix (logits and value in one matmul) and
    separate actor and critic torsos one network with block-diagonal weights
    (`FUSE_MAX_WIDTH`): a CartPole `act` is three matmuls and two tanh.
    """

    def __init__(self, layout: NumpyLayout, flat: np.ndarray, rng: np.random.Generator) -> None:
        if flat.dtype != np.float32 or flat.size != layout_size(layout):
            raise ValueError(f"flat parameters: want {layout_size(layout)} float32 values")
        self.layout = layout
        self.rng = rng
        self.flat = flat
        self._w = param_views(layout, flat)
        self._grid = GridFeatures(layout.grid) if layout.grid is not None else None
        per_cell = layout.grid is not None and layout.grid.actions != "none"
        self._grid_logits = GridLogits(layout.grid) if per_cell else None  # type: ignore[arg-type]
        widths = [shape[0] for name, shape in layout.params if name.startswith("actor_torso")]
        widths = widths[0::2]  # weight, bias, weight, ...
        self._fused = not layout.shared and 2 * max(widths, default=0) <= FUSE_MAX_WIDTH
        self._act = np.tanh if layout.activation == "tanh" else _relu
        self._arange = np.arange(0)
        # What `act` does is decided here, once: acting batches are a few rows, so each
        # question asked per call costs as much as arithmetic.
        self._forward = (
            self._forward_grid_actions
            if self._grid_logits is not None
            else self._forward_plain
            if layout.core == "none" and not layout.central_critic
            else self._forward_general
        )
        self._features = (
            partial(flat_features, layout) if self._grid is None else self._grid_features
        )
        self._sample = (
            self._sample_gaussian
            if layout.head == "gaussian"
            else self._sample_multi_categorical
            if layout.head == "multi_categorical"
            else self._draw  # Discrete(n, start=0): the index drawn is the action
            if layout.start[0] == 0
            else self._sample_categorical
        )
        self.reload()

    def reload(self) -> None:
        """Rebuild the policy's weights from `flat` (after new parameters were written)."""
        w, lay = self._w, self.layout

        def layer(torso: str, i: int) -> tuple[np.ndarray, np.ndarray]:
            return w[f"{torso}.{2 * i}.weight"].T, w[f"{torso}.{2 * i}.bias"]

        def joint_bias() -> np.ndarray:  # of one matrix making [logits | value]
            return np.concatenate([w["action_head.linear.bias"], w["value_head.bias"]])

        Layers = list[tuple[np.ndarray, np.ndarray]]
        torsos: list[Layers]
        if self._grid is not None:
            self._grid.load(w)
        if self._grid_logits is not None:  # logits per cell: the torso feeds the value only
            self._grid_logits.load(w)
            torsos = [[layer("actor_torso", i) for i in range(lay.layers)]]
            heads = [(w["value_head.weight"].T.copy(), w["value_head.bias"])]
        elif lay.shared:
            heads_w = [w["action_head.linear.weight"], w["value_head.weight"]]
            torsos = [[layer("actor_torso", i) for i in range(lay.layers)]]
            heads = [(np.concatenate(heads_w).T.copy(), joint_bias())]
        elif self._fused:
            torso: Layers = []
            for i in range(lay.layers):
                (wa, ba), (wc, bc) = layer("actor_torso", i), layer("critic_torso", i)
                # layer 0 reads the shared input, or [policy's | critic's] fields side by side
                rows_a = 0 if i == 0 and not lay.central_critic else wa.shape[0]
                fused = np.zeros((rows_a + wc.shape[0], wa.shape[1] + wc.shape[1]), np.float32)
                fused[: wa.shape[0], : wa.shape[1]] = wa
                fused[rows_a:, wa.shape[1] :] = wc
                torso.append((fused, np.concatenate([ba, bc])))
            torsos = [torso]
            wh, wv = w["action_head.linear.weight"], w["value_head.weight"]
            head = np.zeros((wh.shape[1] + wv.shape[1], wh.shape[0] + 1), np.float32)
            head[: wh.shape[1], :-1] = wh.T
            head[wh.shape[1] :, -1:] = wv.T
            heads = [(head, joint_bias())]
        else:
            torsos = [
                [layer(t, i) for i in range(lay.layers)] for t in ("actor_torso", "critic_torso")
            ]
            heads = [
                (w["action_head.linear.weight"].T, w["action_head.linear.bias"]),
                (w["value_head.weight"].T, w["value_head.bias"]),
            ]
        self._torsos, self._heads = torsos, heads
        # One network ends in [logits | value] (or the value alone, beside per-cell logits).
        self._outputs = self._one_network if len(torsos) == 1 else self._two_networks
        self._log_std = w.get("action_head.log_std")
        if lay.core != "none":  # transposed once per version, for [B, F] @ [F, G*H]
            self._core = (
                w["core.cell.weight_ih"].T.copy(),
                w["core.cell.bias_ih"],
                w["core.cell.weight_hh"].T.copy(),
                w["core.cell.bias_hh"],
            )

    @property
    def state_size(self) -> int:
        """Floats of recurrent state per row (0: feed-forward)."""
        size = self.layout.core_size
        return {"none": 0, "gru": size, "lstm": 2 * size}[self.layout.core]

    def core_step(self, x: np.ndarray, core: np.ndarray) -> np.ndarray:
        """The recurrent state after a step: features [B, F], state before [B, S] -> [B, S]."""
        w_ih_t, b_ih, w_hh_t, b_hh = self._core
        xp = x @ w_ih_t
        xp += b_ih
        rows, H = len(x), self.layout.core_size
        state = np.empty((rows, self.state_size), np.float32)
        gates = np.empty_like(xp)
        extra = np.empty((rows, H), np.float32)
        step(self.layout.core, xp, core, w_hh_t, b_hh, gates, extra, state)
        return state

    def act(
        self, obs: dict[str, np.ndarray], deterministic: bool = False, core: Any = None
    ) -> tuple[np.ndarray, ...]:
        """(action, logp, value); for a recurrent core (given the state before the step
        `core` [B, S]) also the state after it, last."""
        params, value, state = self._forward(obs, core)
        if self.layout.masked:
            params = mask_logits(params, obs[ACTION_MASK])
        action, logp = self._sample(params, deterministic)
        return (action, logp, value) if state is None else (action, logp, value, state)

    # The forward passes: (action distribution parameters [B, out], value [B], the recurrent
    # state after the step or None). `__init__` picks one.

    def _grid_features(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        assert self._grid is not None
        return self._grid(obs[self._grid.grid.key])

    def _forward_plain(self, obs: dict[str, np.ndarray], core: Any) -> tuple[Any, ...]:
        """Feed-forward, the critic reading the policy's features."""
        x = self._features(obs)
        return (*self._outputs(x, x), None)

    def _forward_general(self, obs: dict[str, np.ndarray], core: Any) -> tuple[Any, ...]:
        """With a recurrent core on the features, or a centralised critic on its own fields."""
        x = self._features(obs)
        state = None
        if self.layout.core != "none":
            state = self.core_step(x, core)
            x = state[:, : self.layout.core_size]
        xc = x
        if self.layout.central_critic:
            xc = flat_features(self.layout, obs, critic=True)
            if self._fused:  # one network reads [policy's | critic's] features
                x = xc = np.concatenate([x, xc], axis=-1)
        return (*self._outputs(x, xc), state)

    def _forward_grid_actions(self, obs: dict[str, np.ndarray], core: Any) -> tuple[Any, ...]:
        """Logits per board cell from the grid features; the value from the torso on them."""
        assert self._grid is not None and self._grid_logits is not None
        board = obs[self._grid_logits.grid.key]
        maps = self._grid.maps(board)
        flat = self._grid.flatten(maps)
        _, value = self._outputs(flat, flat)
        return self._grid_logits(maps, board), value, None

    def _torso(self, h: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        for lw, lb in layers:
            z = h @ lw
            z += lb
            h = self._act(z, out=z)
        return h

    def _one_network(self, x: np.ndarray, xc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A shared or fused torso ending in [params | value]: reads `x` only."""
        head_w, head_b = self._heads[0]
        out = self._torso(x, self._torsos[0]) @ head_w
        out += head_b
        return out[:, :-1], out[:, -1]

    def _two_networks(self, x: np.ndarray, xc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Separate torsos: the policy's reads `x`, the critic's `xc`."""
        (actor, critic), ((wa, ba), (wc, bc)) = self._torsos, self._heads
        params = self._torso(x, actor) @ wa
        params += ba
        value = self._torso(xc, critic) @ wc
        value += bc
        return params, value[:, 0]

    # Sampling: (action, log-probability) from the distribution's parameters.

    def _sample_gaussian(self, params: np.ndarray, deterministic: bool) -> tuple[Any, Any]:
        log_std = self._log_std
        assert log_std is not None
        if deterministic:
            action = params
        else:
            noise = self.rng.standard_normal(params.shape, dtype=np.float32)
            action = params + np.exp(log_std) * noise
        z = (action - params) * np.exp(-log_std)
        logp = (-0.5 * z * z - log_std - LOG_SQRT_2PI).sum(-1)
        return action.astype(np.float32), logp.astype(np.float32)

    def _draw(self, logits: np.ndarray, deterministic: bool) -> tuple[np.ndarray, np.ndarray]:
        """One categorical per row: (index [B] int64, log-probability [B] float32)."""
        rows = len(logits)
        if len(self._arange) != rows:
            self._arange = np.arange(rows)
        shifted = logits - logits.max(-1, keepdims=True)
        weights = np.exp(shifted)
        total = weights.sum(-1)
        if deterministic:
            idx = logits.argmax(-1)
        else:  # inverse CDF, one uniform per row, as surge.models.distributions does
            u = self.rng.random(rows, dtype=np.float32) * total
            idx = np.minimum((weights.cumsum(-1) < u[:, None]).sum(-1), logits.shape[1] - 1)
        return idx, shifted[self._arange, idx] - np.log(total)

    def _sample_categorical(self, params: np.ndarray, deterministic: bool) -> tuple[Any, Any]:
        idx, logp = self._draw(params, deterministic)
        return idx + self.layout.start[0], logp

    def _sample_multi_categorical(self, params: np.ndarray, deterministic: bool) -> tuple[Any, Any]:
        """One categorical per component of the logits: the log-probabilities add up."""
        idx_parts, logp, col = [], np.zeros(len(params), np.float32), 0
        for n in self.layout.nvec:
            idx, part = self._draw(params[:, col : col + n], deterministic)
            logp += part
            idx_parts.append(idx)
            col += n
        action = np.stack(idx_parts, axis=-1) + np.asarray(self.layout.start)
        return action.astype(np.int64), logp


def _relu(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=out)
