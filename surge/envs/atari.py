"""Atari (`ALE/*` ids): the standard preprocessing, as env groups for two backends.

Both backends give the same observations and signals (`env.atari` configures them):
no-op starts, FIRE on reset (and, with episodic life, at the start of each life:
`fire_after_life_loss`) for games that need it, each action repeated `frame_skip`
frames with the last two max-pooled, 84x84 greyscale, the last `frame_stack` frames stacked
into uint8 [frame_stack, 84, 84] (a new episode's stack repeats its first frame), sticky
actions, and the games' minimal action set.

- `ale`: `AleGroup`, one `ale_py.vector_env.AtariVectorEnv` per group. Emulation and
  preprocessing run in C++ threads; a whole group is one call.
- `envpool`: `EnvpoolAtariGroup` (surge/envs/envpool_group.py), the same on EnvPool.
- `gymnasium`: `GymAtariGroup`, `gymnasium.make(id, frameskip=1)` + `AtariPreprocessing` +
  `FrameStackObservation` per env, stepped in turn (needs opencv).

Training signal vs reported score: rewards are clipped to their sign (`clip_rewards`) and a
lost life ends the training episode (`episodic_life`: `terminated`, no reset, the game goes
on), while `score` is the raw game reward and `game_over` the real end of a game, which is
where the env is reset. The wrappers below the group never clip or end episodes on lives:
the group does both, so it can report both signals.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import AtariConfig, EnvConfig
from surge.errors import ConfigError, EnvSpecError

ALE_PREFIX = "ALE/"
DEFAULT_MAX_FRAMES = 108_000
"""ALE v5's episode limit in emulator frames (30 minutes of play); episodes are truncated."""


def is_atari_id(env_id: str) -> bool:
    """An id that gets Atari preprocessing: `ALE/<Game>-v5` with image observations."""
    if not env_id.startswith(ALE_PREFIX):
        return False
    spec = _atari_spec(env_id)
    return spec is not None and spec.kwargs.get("obs_type", "rgb") == "rgb"


def resolve_backend(cfg: EnvConfig) -> str:
    """`cfg.backend` with `auto` decided: `ale` for Atari ids, `gymnasium` otherwise."""
    atari = is_atari_id(cfg.id)
    if cfg.backend == "auto":
        return "ale" if atari else "gymnasium"
    if cfg.backend == "ale" and not atari:
        raise ConfigError(
            f"env.backend=ale steps Atari games only; env.id={cfg.id!r} is not an "
            "`ALE/<Game>-v5` id",
            "use env.backend=gymnasium (or auto) for this env",
        )
    if cfg.backend == "envpool" and importlib.util.find_spec("envpool") is None:
        raise ConfigError(
            "env.backend=envpool: envpool is not installed",
            "install surge's envpool extra (pip install -e '.[envpool]'), or use env.backend=auto",
        )
    return cfg.backend


def check_atari_config(cfg: EnvConfig) -> None:
    """Reject settings the preprocessing cannot honour, naming the field."""
    a = cfg.atari
    rules = [
        (a.noop_max >= 0, "env.atari.noop_max", a.noop_max, "must be >= 0"),
        (a.frame_skip >= 1, "env.atari.frame_skip", a.frame_skip, "must be >= 1"),
        (a.screen_size >= 36, "env.atari.screen_size", a.screen_size, "must be >= 36"),
        (a.frame_stack >= 1, "env.atari.frame_stack", a.frame_stack, "must be >= 1"),
        (
            0.0 <= a.repeat_action_probability <= 1.0,
            "env.atari.repeat_action_probability",
            a.repeat_action_probability,
            "must be in [0, 1]",
        ),
        (cfg.threads >= 0, "env.threads", cfg.threads, "must be >= 0"),
    ]
    for ok, name, value, rule in rules:
        if not ok:
            raise ConfigError(f"{name}={value!r} {rule}", f"set {name} to a value that {rule[5:]}")


def atari_observation_space(a: AtariConfig) -> gym.spaces.Box:
    return gym.spaces.Box(0, 255, (a.frame_stack, a.screen_size, a.screen_size), np.uint8)


def max_frames(cfg: EnvConfig) -> int:
    """The episode limit in emulator frames: `max_episode_steps` counts agent steps."""
    if cfg.max_episode_steps is None:
        return DEFAULT_MAX_FRAMES
    return cfg.max_episode_steps * cfg.atari.frame_skip


def ale_seed(seed: int) -> int:
    """ale-py takes positive 31-bit seeds (0 and negative mean "do not reseed")."""
    return seed % (2**31 - 1) + 1


# --- backend `ale` --------------------------------------------------------------------------


class VectorAtariGroup:
    """A group on a C++ vectorised Atari env (backends `ale` and `envpool`); see `EnvGroup`
    for the contract. Subclasses build `self.env` and say how to reset some of its envs.

    The group stacks frames itself, in place in the actor's slot: a new episode's stack
    repeats its first frame, as gymnasium's FrameStackObservation and CleanRL do (the vector
    envs would pad it with zero frames). Both vector envs autoreset in "next step" mode: a
    finished env would spend the following step (and its action) on the reset. Instead the
    group resets finished envs right away, so after `step` the slot holds the observation to
    act on, and the one that ended the episode is in `final_obs`. Episodic life and reward
    clipping are done here (see the module docstring), from the vector env's `lives` and raw
    rewards: the vector env runs with neither.
    """

    env: Any

    def __init__(self, cfg: EnvConfig, seeds: list[int], obs_out: dict[str, np.ndarray]) -> None:
        check_atari_config(cfg)
        self.cfg = cfg
        self.size = len(seeds)
        self.observation_space: gym.Space[Any] = atari_observation_space(cfg.atari)
        self.obs_out = obs_out
        self._obs = obs_out["obs"]  # [G, stack, H, W] uint8
        self.final_obs = {"obs": np.zeros_like(self._obs)}
        self.score = np.zeros(self.size, np.float32)
        self.rewards = np.zeros(self.size, np.float32) if cfg.atari.clip_rewards else self.score
        self.terminated = np.zeros(self.size, bool)
        self.truncated = np.zeros(self.size, bool)
        self.game_over = np.zeros(self.size, bool)
        self._lives = np.zeros(self.size, np.int32)
        self._fire = fire_after_life_loss(cfg)
        self._fire_next = np.zeros(self.size, bool)  # envs whose next step starts a life

    def _reset_all(self) -> tuple[np.ndarray, np.ndarray]:
        """Reset every env: (frames [G, 1, H, W], lives [G])."""
        raise NotImplementedError

    def _reset_some(self, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Reset the envs where `mask`: (frames [k, 1, H, W], lives [k]) of those k envs."""
        raise NotImplementedError

    def reset(self) -> None:
        frames, lives = self._reset_all()
        self._obs[:] = frames  # [G, 1, H, W]: every slot of the stack holds the first frame
        self._lives[:] = lives
        self._fire_next[:] = False  # a reset presses FIRE itself (`fire_reset`)

    def step(self, actions: np.ndarray) -> None:
        if self._fire is not None and self._fire_next.any():  # a life's first step: FIRE
            actions = np.where(self._fire_next, self._fire, actions)
        frames, reward, terminated, truncated, info = self.env.step(actions)
        np.copyto(self.score, reward)
        if self.rewards is not self.score:
            np.sign(self.score, out=self.rewards)
        np.logical_or(terminated, truncated, out=self.game_over)
        lives = info["lives"]
        if self.cfg.atari.episodic_life:
            life_lost = lives < self._lives
            np.logical_or(terminated, life_lost, out=self.terminated)
            if self._fire is not None:  # games without FIRE (Pong) skip it in the step loop
                np.logical_and(life_lost, ~self.game_over, out=self._fire_next)
        else:
            np.copyto(self.terminated, terminated)
        np.copyto(self.truncated, truncated)
        self._lives[:] = lives
        self._obs[:, :-1] = self._obs[:, 1:]  # numpy buffers the overlapping copy
        self._obs[:, -1] = frames[:, 0]
        ended = self.terminated | self.truncated
        if ended.any():
            self.final_obs["obs"][ended] = self._obs[ended]
        if self.game_over.any():
            over = self.game_over.copy()
            frames, lives = self._reset_some(over)
            self._obs[over] = frames
            self._lives[over] = lives

    def close(self) -> None:
        self.env.close()


class AleGroup(VectorAtariGroup):
    """Backend `ale`: one `ale_py.vector_env.AtariVectorEnv` per group."""

    def __init__(self, cfg: EnvConfig, seeds: list[int], obs_out: dict[str, np.ndarray]) -> None:
        from ale_py.vector_env import AtariVectorEnv

        super().__init__(cfg, seeds, obs_out)
        a = cfg.atari
        self.seeds = np.array([ale_seed(s) for s in seeds], np.int64)
        self.env = AtariVectorEnv(
            _game(cfg.id),
            self.size,
            num_threads=cfg.threads,
            max_num_frames_per_episode=max_frames(cfg),
            repeat_action_probability=a.repeat_action_probability,
            full_action_space=a.full_action_space,
            img_height=a.screen_size,
            img_width=a.screen_size,
            stack_num=1,  # stacked here: ale-py pads a new stack with zero frames
            frameskip=a.frame_skip,
            maxpool=True,
            noop_max=a.noop_max,
            use_fire_reset=a.fire_reset,
            episodic_life=False,  # it would restart the game on a life loss
            life_loss_info=False,
            reward_clipping=False,  # the raw reward is the reported score
            autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
            **cfg.kwargs,
        )
        self.action_space: gym.Space[Any] = self.env.single_action_space

    def _reset_all(self) -> tuple[np.ndarray, np.ndarray]:
        frames, info = self.env.reset(seed=self.seeds)
        return frames, info["lives"]

    def _reset_some(self, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        frames, info = self.env.reset(options={"reset_mask": mask})
        return frames[mask], info["lives"][mask]


# --- backend `gymnasium` --------------------------------------------------------------------


def fire_after_life_loss(cfg: EnvConfig) -> int | None:
    """The action that starts each new life, or None.

    Games such as Breakout wait for FIRE after a lost life as after a reset: an agent that
    has not learned to press it stands still until the episode's frame limit (measured:
    Breakout under NOOPs lost its first life after 23 steps and no other in 3,000). When
    `episodic_life` ends a training episode at a lost life, the next one starts as a reset
    does with `fire_reset`: its first step presses FIRE whatever the agent chose (the
    recorded action stays the agent's; the game ignores actions there), as the
    EpisodicLifeEnv + FireResetEnv wrappers of SB3 and CleanRL do through a reset; the
    evaluation env, which plays whole games, does the same (`FireOnLifeLoss`), so a policy
    evaluates in the game it trained in. The index is FIRE's in the game's action set; None
    without `fire_reset`, without `episodic_life`, or for a game with no FIRE."""
    a = cfg.atari
    if not (a.fire_reset and a.episodic_life):
        return None
    meanings = _action_meanings(cfg.id, a.full_action_space)
    return meanings.index("FIRE") if "FIRE" in meanings else None


@functools.lru_cache(maxsize=16)
def _action_meanings(env_id: str, full_action_space: bool) -> tuple[str, ...]:
    register_ale()
    env = gym.make(env_id, full_action_space=full_action_space)
    try:
        return tuple(env.unwrapped.get_action_meanings())  # type: ignore[attr-defined]
    finally:
        env.close()


class FireOnLifeLoss(gym.Wrapper[Any, Any, Any, Any]):
    """The first step after a lost life presses `fire`, whatever the action
    (`fire_after_life_loss`): the single-env form of what `VectorAtariGroup` does, for the
    gymnasium backend and the evaluation env, which plays whole games."""

    def __init__(self, env: gym.Env[Any, Any], fire: int) -> None:
        super().__init__(env)
        self.fire = fire
        self._lives = 0
        self._fire_next = False

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self._lives, self._fire_next = info["lives"], False
        return obs, info

    def step(self, action: Any) -> Any:
        if self._fire_next:
            action = self.fire
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = info["lives"]
        self._fire_next = lives < self._lives and not (terminated or truncated)
        self._lives = lives
        return obs, reward, terminated, truncated, info


class FireOnReset(gym.Wrapper[Any, Any, Any, Any]):
    """Press FIRE for one frame after each reset (below the frame skip), as ale-py's vector
    env does: games such as Breakout wait for it before the ball appears."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.fire = env.unwrapped.get_action_meanings().index("FIRE")  # type: ignore[attr-defined]

    def reset(self, **kwargs: Any) -> Any:
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(self.fire)
        if terminated or truncated:
            return self.env.reset()
        return obs, info


def make_atari_env(cfg: EnvConfig) -> gym.Env[Any, Any]:
    """One preprocessed Atari env (backend `gymnasium`): raw rewards, real game ends."""
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    check_atari_config(cfg)
    a = cfg.atari
    env = gym.make(
        cfg.id,
        frameskip=1,  # AtariPreprocessing skips (and max-pools)
        repeat_action_probability=a.repeat_action_probability,
        full_action_space=a.full_action_space,
        max_num_frames_per_episode=max_frames(cfg),
        **cfg.kwargs,
    )
    if a.fire_reset and "FIRE" in env.unwrapped.get_action_meanings():  # type: ignore[attr-defined]
        env = FireOnReset(env)
    env = AtariPreprocessing(
        env,
        noop_max=a.noop_max,
        frame_skip=a.frame_skip,
        screen_size=a.screen_size,
        terminal_on_life_loss=False,  # the group ends training episodes on lives
        grayscale_obs=True,
    )
    stacked = FrameStackObservation(env, a.frame_stack)
    fire = fire_after_life_loss(cfg)
    return stacked if fire is None else FireOnLifeLoss(stacked, fire)


def register_ale() -> None:
    """Make gymnasium know the `ALE/*` ids (ale-py registers them when asked)."""
    import ale_py

    gym.register_envs(ale_py)


def _atari_spec(env_id: str) -> Any:
    try:
        register_ale()
    except ImportError:
        raise EnvSpecError(
            f"env.id={env_id!r} needs ale-py, which is not installed",
            "install surge's Atari extra: pip install -e '.[atari]'",
        ) from None
    try:
        return gym.spec(env_id)
    except gym.error.Error:
        return None  # unknown: gymnasium.make reports it with suggestions


def _game(env_id: str) -> str:
    """The ROM name ale-py uses (`pong`, `ms_pacman`), from the id's registration."""
    spec = _atari_spec(env_id)
    if spec is None:
        raise EnvSpecError(f"env.id={env_id!r} is not a registered Atari game", "")
    return str(spec.kwargs["game"])
