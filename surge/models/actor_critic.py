"""The actor-critic network used by PPO: encoder -> [recurrent core] -> MLP torso(s) -> policy
and value heads.

Observations are `dict[str, Tensor]` keyed like `flatten_obs_space(obs_space)`, each with a
leading batch dim. `act` is the inference path (no grad, sampling from an explicit generator
so runs are reproducible); `evaluate` is the training path (with grad). A recurrent model
(`model.core`, models/recurrent.py) takes and returns its state in `act` and `value`, and
trains on whole sequences with `evaluate_sequence`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from torch import Tensor, nn

from surge.config.schema import ModelConfig
from surge.errors import ConfigError
from surge.models.distributions import ActionHead, CategoricalHead, make_action_head
from surge.models.encoders import Encoder, make_encoder
from surge.models.grid_actions import GridActionHead, make_grid_action_head
from surge.models.inputs import (
    ACTION_MASK,
    MASKED_LOGIT,
    check_action_mask,
    input_fields,
    subspace,
)
from surge.models.layers import mlp, mlp_out_dim, orthogonal_linear
from surge.models.numpy_net import VALUE_GAIN
from surge.models.recurrent import RecurrentCore, make_core


class ActorCritic(nn.Module):
    """Policy and value function over a dict observation.

    Actor and critic have separate torsos unless `cfg.shared` (then the critic reuses the
    actor's torso and `critic_torso` is None, so the state dict holds each weight once).
    `encoder` defaults to `make_encoder(obs_space, cfg)` (`model.encoder`); pass another
    `Encoder` to change how observations become features. The encoder is shared by both
    torsos. An encoder that `is_torso` (the Nature CNN) is the shared torso itself: the
    heads sit on its features, as in CleanRL's ppo_atari.

    Timing (CartPole, hidden [64, 64], 1 torch thread, B=4, on the shared 2-core dev box):
    `act` takes about 135 us, of which the bare MLP forward is about 80 us; the same step
    built on torch.distributions.Categorical took about 280 us.
    """

    def __init__(
        self,
        obs_space: gym.Space[Any],
        action_space: gym.Space[Any],
        cfg: ModelConfig,
        *,
        encoder: Encoder | None = None,
    ) -> None:
        super().__init__()
        actor_fields, critic_fields = input_fields(obs_space, cfg)
        self.encoder: Encoder = (
            encoder if encoder is not None else make_encoder(subspace(obs_space, actor_fields), cfg)
        )
        # A centralised critic reads other fields (models/inputs.py) through its own encoder.
        self.critic_encoder: Encoder | None = None
        if critic_fields != actor_fields:
            self.critic_encoder = make_encoder(subspace(obs_space, critic_fields), cfg)
            if self.encoder.is_torso or self.critic_encoder.is_torso:
                raise ConfigError(
                    "model.critic_inputs differ from the policy's, but a Nature CNN encoder is "
                    "the shared torso of both heads",
                    "give the policy and the value function the same inputs with nature_cnn",
                )
        in_dim = self.encoder.out_dim
        # A recurrent core, shared by both torsos, between the encoder and the torsos.
        self.core: RecurrentCore | None = make_core(cfg, in_dim)
        if self.core is not None:
            in_dim = self.core.out_dim
        # A CNN's features feed the heads directly (CleanRL's ppo_atari): no MLP torso.
        sizes = [] if self.encoder.is_torso else cfg.hidden_sizes
        feat_dim = mlp_out_dim(in_dim, sizes)
        self.actor_torso = mlp(in_dim, sizes, cfg.activation)
        # Logits read per board cell (models/grid_actions.py): the torso serves the value.
        self.grid_head: GridActionHead | None = None
        if cfg.grid_actions != "none":
            self.grid_head = make_grid_action_head(
                cfg.grid_actions,
                self.encoder,
                action_space,
                self.core is not None,
                self.critic_encoder is not None,
            )
        shared = cfg.shared or self.encoder.is_torso or self.grid_head is not None
        critic_in = in_dim if self.critic_encoder is None else self.critic_encoder.out_dim
        self.critic_torso = None if shared else mlp(critic_in, sizes, cfg.activation)
        self.action_head: ActionHead
        if self.grid_head is None:
            self.action_head = make_action_head(action_space, feat_dim, cfg.log_std_init)
        else:  # no weights: it samples the grid head's logits (Discrete, checked above)
            assert isinstance(action_space, gym.spaces.Discrete)
            self.action_head = CategoricalHead(None, int(action_space.n), int(action_space.start))
        self.value_head = orthogonal_linear(feat_dim, 1, VALUE_GAIN)
        self.masked = check_action_mask(obs_space, action_space)

    def _logits(self, obs: dict[str, Tensor], x: Tensor, pi: Tensor) -> Tensor:
        """The action distribution's parameters, before masking, from the policy's input x
        and its torso's features pi."""
        if self.grid_head is None:
            out: Tensor = self.action_head(pi)
            return out
        grid = x.reshape(len(x), *self.grid_head.grid_shape)  # the flattened features
        board: Tensor = self.encoder.grid_input(obs)  # type: ignore[operator]
        return self.grid_head(grid, board)  # type: ignore[no-any-return]

    def _critic_input(self, obs: dict[str, Tensor], x: Tensor) -> Tensor:
        return x if self.critic_encoder is None else self.critic_encoder(obs)

    def _mask(self, params: Tensor, obs: dict[str, Tensor]) -> Tensor:
        """Illegal actions (`action_mask` 0) get a logit no action is ever sampled from."""
        if not self.masked:
            return params
        return params.masked_fill(obs[ACTION_MASK] == 0, MASKED_LOGIT)

    @property
    def state_size(self) -> int:
        """Floats of recurrent state per row (0: feed-forward)."""
        return 0 if self.core is None else self.core.state_size

    def _encode(self, obs: dict[str, Tensor], core: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """(the policy torso's input [B, F], the state after this step or None)."""
        x = self.encoder(obs)
        if self.core is None:
            return x, None
        if core is None:
            raise ValueError("a recurrent model needs the state before the step (`core`)")
        state = self.core.step(x, core)
        return self.core.output(state), state

    def _features(self, obs: dict[str, Tensor], x: Tensor) -> tuple[Tensor, Tensor]:
        """(the policy torso's features, the value torso's) from the policy's input x."""
        pi = self.actor_torso(x)
        if self.critic_torso is None:
            return pi, pi
        return pi, self.critic_torso(self._critic_input(obs, x))

    def act(
        self,
        obs: dict[str, Tensor],
        deterministic: bool = False,
        generator: torch.Generator | None = None,
        core: Tensor | None = None,
    ) -> tuple[Tensor, ...]:
        """Choose actions for a batch: (action, logp [B] float32, value [B] float32), and for
        a recurrent model, given the state before the step `core` [B, S], the state after
        it [B, S] last.

        Runs without grad. Actions: int64 [B] (Discrete), int64 [B, k] (MultiDiscrete),
        float32 [B, d] (Box, unclipped). `deterministic` takes the argmax / the mean; logp is
        still the log-prob of the returned action under the current policy.
        """
        with torch.no_grad():
            x, state = self._encode(obs, core)
            pi, v = self._features(obs, x)
            params = self._mask(self._logits(obs, x, pi), obs)
            action = self.action_head.sample(params, deterministic, generator)
            logp = self.action_head.log_prob(params, action)
            value = self.value_head(v).squeeze(-1)
        return (action, logp, value) if state is None else (action, logp, value, state)

    def evaluate(self, obs: dict[str, Tensor], action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(logp [B], entropy [B], value [B]) of given actions, with grad, for the loss."""
        return self.heads(self.encoder(obs), action, obs)

    def heads(
        self, x: Tensor, action: Tensor, obs: dict[str, Tensor]
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(logp, entropy, value) [B] of given actions from the policy torso's input x [B, F]
        (a centralised critic and an action mask read their fields of `obs`, [B, ...])."""
        if self.critic_torso is None:  # one torso feeds both heads
            pi = self.actor_torso(x)
            params, value = self._logits(obs, x, pi), self.value_head(pi)
        else:  # each head in its torso's autograd node (layers.MLP)
            params = self.actor_torso(x, head=self.action_head.linear)
            value = self.critic_torso(self._critic_input(obs, x), head=self.value_head)
        params = self._mask(params, obs)
        logp = self.action_head.log_prob(params, action)
        entropy = self.action_head.entropy(params)
        return logp, entropy, value.squeeze(-1)

    def unroll(
        self, obs: dict[str, Tensor], core0: Tensor, resets: Tensor, burn_in: int = 0
    ) -> tuple[Tensor, Tensor]:
        """A recurrent model over sequences: `obs` [T, B, ...] per field, from the states
        `core0` [B, S] with `resets` [T, B]. Returns (the policy torso's input [(T - burn_in)
        * B, H], time-major; the states after each step [T - burn_in, B, S]). The burn-in
        steps run without gradient (models/recurrent.py `unroll_with_burn_in`)."""
        assert self.core is not None, "unroll is for recurrent models"
        T, B = resets.shape

        def encode(part: dict[str, Tensor]) -> Tensor:
            return self.encoder(rows_of(part)).reshape(-1, B, self.encoder.out_dim)

        x = encode({k: v[burn_in:] for k, v in obs.items()})
        if burn_in:
            with torch.no_grad():
                early = encode({k: v[:burn_in] for k, v in obs.items()})
            x = torch.cat([early, x])
        states = self.core.unroll(x, core0, resets, burn_in)
        return self.core.output(states).reshape(-1, self.core.out_dim), states

    def evaluate_sequence(
        self,
        obs: dict[str, Tensor],
        action: Tensor,
        core0: Tensor,
        resets: Tensor,
        burn_in: int = 0,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """`evaluate` for a recurrent model over sequences ([T, B, ...] observations and
        actions, as `unroll`): (logp, entropy, value), each [(T - burn_in) * B] time-major,
        of the steps past the burn-in, with gradient through the unrolled core."""
        x, _ = self.unroll(obs, core0, resets, burn_in)
        trained = rows_of({k: v[burn_in:] for k, v in obs.items()})
        return self.heads(x, rows_of({"a": action[burn_in:]})["a"], trained)

    def value(self, obs: dict[str, Tensor], core: Tensor | None = None) -> Tensor:
        """V(s) [B] (from the state before the step `core`, for a recurrent model). Runs only
        the critic path (with grad unless the caller disables it)."""
        if self.critic_encoder is not None:  # the centralised critic never runs the policy's
            features = self.critic_torso(self.critic_encoder(obs))  # type: ignore[misc]
        else:
            x, _ = self._encode(obs, core)
            torso = self.actor_torso if self.critic_torso is None else self.critic_torso
            features = torso(x)
        out: Tensor = self.value_head(features).squeeze(-1)
        return out


def rows_of(obs: dict[str, Tensor]) -> dict[str, Tensor]:
    """[T, B, ...] per field -> [T * B, ...] (time-major rows; a view where it can be)."""
    return {k: v.reshape(v.shape[0] * v.shape[1], *v.shape[2:]) for k, v in obs.items()}
