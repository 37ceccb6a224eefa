"""highway-env driving with continuous actions, camera frames and state terms in `info`.

For the VLM-RL presets (SAC with a vision-language reward model): the reward model scores
the camera frame, and a synthesis reward reads the vehicle's state terms, so each step's
`info` carries both, beside highway-env's own keys (`speed` in m/s, `crashed`, `action`,
`rewards`):

- `frame`: uint8 [H, W, 3], only with `frames=True` (rendering costs time): highway-env's
  offscreen render of the scene around the ego vehicle (600x150 px by default, set by its
  `screen_width`, `screen_height`, `scaling` and `centering_position` config) resized to
  `frame_size` (an int: a square; or (height, width)). Resizing to a square stretches the
  wide default view; pass `screen_width=150, screen_height=150` (or any aspect) to avoid
  that. Drawn by the wrapper, not `env.render()`, so `render_mode` stays free for videos,
  with `FrameViewer` (surge/envs/driving_frames.py): highway-env's pixels at less cost.
- `speed_kmh` (float): the ego vehicle's speed in km/h.
- `lane_offset` (float, m): signed lateral distance from the centre of the vehicle's lane
  (the lane closest to it: the offset jumps sign on a lane change, and grows past half a
  lane width, 2 m, off the road's edge). Positive is toward the higher lane indices (the
  right-hand lanes of highway-v0).
- `lane_offset_std` (float, m): the standard deviation of the episode's last `OFFSETS` (30)
  lane offsets, this step's included (VLM-RL's steadiness term; population std).
- `heading_error` (float, rad): vehicle heading minus the lane's heading there, in [-pi, pi].
- `crashed` (bool): collided with another vehicle (terminal).
- `off_road` (bool): `not vehicle.on_road` (terminal: `offroad_terminal` is on).
- `episode_metrics` (dict, at an episode's last step only): `success` (1: the whole duration
  without a collision, on the road), `collision`, `off_road`, `speed_kmh` (the mean over the
  episode's steps) and `distance_m` (travelled along the road). Evaluations report their
  means (surge/evaluation/episodes.py).

Time: each decision runs int(simulation_frequency / policy_frequency) physics steps of
1 / simulation_frequency s, while the episode clock (`duration`) advances 1 / policy_frequency
s: pick a simulation frequency that is a multiple of the policy frequency (highway-fast-v0's 5
Hz with 2 decisions a second drives only 0.4 s per 0.5 s counted).

Traffic: highway-env gives the other cars 70-80% of the road's 30 m/s limit (76-86 km/h),
both as their start and as the speed their IDM driver keeps, and places them all ahead of
the ego car. `traffic_speed_kmh=(low, high)` draws each other car's speed (start and kept)
uniformly from that range instead, at every reset from the env's own generator: traffic
slower than the ego car's wish is traffic it must follow or pass.

Actions: highway-env's `ContinuousAction`, a Box [-1, 1]^2 of (acceleration, steering),
mapped to [-5, 5] m/s^2 and [-pi/4, pi/4] rad. Observation (what the agent learns from):
highway-env's `Kinematics` observation (5 vehicles x [presence, x, y, vx, vy], normalised
and clipped to [-1, 1], the ego vehicle's row first, the others relative to it) flattened
to a float32 Box (25,); an `observation` override of another type is passed through as
highway-env returns it.

`make_driving_env(...)`, or in a config `env.id=surge.envs.driving:surge/Highway-v0` with
the same arguments in `env.kwargs` (importing this module registers the id; highway_env
itself is imported only when an env is made). `DrivingInfo` alone also fits
`env.wrappers` over `env.id=highway_env:...` (configured through `env.kwargs.config`).
Needs the `highway` extra.
"""

from __future__ import annotations

import math
import os
import sys
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "surge/Highway-v0"
OFFSETS = 30
"""Recent lane offsets whose spread is `lane_offset_std` (VLM-RL's code keeps 30 steps)."""
INSTALL_HINT = "pip install -e '.[highway]'"


def make_driving_env(
    env_id: str = "highway-fast-v0",
    frames: bool = False,
    frame_size: int | tuple[int, int] | list[int] = 64,
    render_mode: str | None = None,
    traffic_speed_kmh: tuple[float, float] | list[float] | None = None,
    **config_overrides: Any,
) -> gym.Env[Any, Any]:
    """A highway-env env (`env_id`) driven by continuous actions, with `DrivingInfo` terms.

    `config_overrides` update highway-env's config (top-level keys replace the defaults
    here: `action` is ContinuousAction, `offroad_terminal` True), e.g. `vehicles_count=30`.
    `render_mode` is only for `env.render()` (episode videos): `frames` are drawn apart.
    `traffic_speed_kmh`: the other cars' speed range (see the module docstring)."""
    size = _frame_size(frame_size)
    traffic = _traffic_speed(traffic_speed_kmh)
    try:
        import highway_env  # noqa: F401 - registers highway-env's ids with gymnasium
    except ImportError as e:
        raise ImportError(
            f"surge.envs.driving needs highway-env ({e}); install it: {INSTALL_HINT}"
        ) from e
    config: dict[str, Any] = {
        "action": {"type": "ContinuousAction"},
        "offroad_terminal": True,
        **config_overrides,
    }
    env = gym.make(env_id, config=config, render_mode=render_mode)
    flatten = env.unwrapped.config["observation"].get("type") == "Kinematics"  # type: ignore[attr-defined]
    return DrivingInfo(
        env, frames=frames, frame_size=size, flatten=flatten, traffic_speed_kmh=traffic
    )


class DrivingInfo(gym.Wrapper[Any, Any, Any, Any]):
    """Adds the ego vehicle's state terms (and with `frames`, the resized frame) to `info`
    at reset and at every step; with `flatten`, flattens a Box observation to a vector.
    Wraps a highway-env env (one controlled vehicle).

    Frames come from a viewer of its own, offscreen whatever the env's render_mode: the
    env's `render()` (for videos) is untouched, and no global pygame state is torn down on
    close (highway-env's viewer calls `pygame.quit()`). The viewer is dropped when pickled.

    With `traffic_speed_kmh`, each reset redraws the other cars' speeds in that range (their
    start and the speed their driver keeps) and observes the road again."""

    def __init__(
        self,
        env: gym.Env[Any, Any],
        frames: bool = False,
        frame_size: int | tuple[int, int] | list[int] = 64,
        flatten: bool = False,
        traffic_speed_kmh: tuple[float, float] | list[float] | None = None,
    ) -> None:
        super().__init__(env)
        self.frames = frames
        self.frame_size = _frame_size(frame_size)
        self.traffic_speed_kmh = _traffic_speed(traffic_speed_kmh)
        self.flatten = flatten and isinstance(env.observation_space, gym.spaces.Box)
        if self.flatten:
            self.observation_space = gym.spaces.flatten_space(env.observation_space)
        self._viewer: Any = None
        self._offsets: deque[float] = deque(maxlen=OFFSETS)
        self._start_x = 0.0
        self._speeds: list[float] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, info = self.env.reset(seed=seed, options=options)
        if self.traffic_speed_kmh is not None:
            obs = set_traffic_speeds(self.env.unwrapped, self.traffic_speed_kmh)
        self._offsets.clear()
        self._speeds = []
        self._start_x = float(self.env.unwrapped.vehicle.position[0])  # type: ignore[attr-defined]
        return self._obs(obs), self._add_terms(info)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = self._add_terms(info)
        self._speeds.append(info["speed_kmh"])
        if terminated or truncated:
            x = float(self.env.unwrapped.vehicle.position[0])  # type: ignore[attr-defined]
            info["episode_metrics"] = episode_metrics(
                info, bool(terminated), self._speeds, x - self._start_x
            )
        return self._obs(obs), reward, terminated, truncated, info

    def close(self) -> None:
        self._viewer = None
        super().close()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_viewer": None}  # pygame surfaces do not pickle

    def _obs(self, obs: Any) -> Any:
        return np.asarray(obs, self.observation_space.dtype).reshape(-1) if self.flatten else obs

    def _add_terms(self, info: dict[str, Any]) -> dict[str, Any]:
        info = dict(info)
        info.update(vehicle_terms(self.env.unwrapped.vehicle))  # type: ignore[attr-defined]
        self._offsets.append(info["lane_offset"])
        info["lane_offset_std"] = float(np.std(self._offsets))
        if self.frames:
            info["frame"] = self._frame()
        return info

    def _frame(self) -> np.ndarray:
        if self._viewer is None:
            from surge.envs.driving_frames import FrameViewer

            # Offscreen drawing needs no display: SDL's dummy driver spares the search for
            # one (and its warnings). highway-env then skips drawing altogether (every frame
            # would be the same blank image) unless the viewer is enabled by hand.
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
            base = self.env.unwrapped
            config = {**base.config, "offscreen_rendering": True}  # type: ignore[attr-defined]
            self._viewer = FrameViewer(base, config)
            self._viewer.enabled = True
        self._viewer.display()
        return surface_frame(self._viewer.sim_surface, self.frame_size)


def set_traffic_speeds(base: Any, speed_kmh: tuple[float, float]) -> Any:
    """Draws every other car's speed on `base`'s road (a highway-env env just reset) from
    `speed_kmh` with the env's own generator, as its start and (IDM drivers) kept speed;
    returns the observation of the road as it is now."""
    low, high = (v / 3.6 for v in speed_kmh)
    ego = set(map(id, base.controlled_vehicles))
    for vehicle in base.road.vehicles:
        if id(vehicle) not in ego:
            vehicle.speed = float(base.np_random.uniform(low, high))
            if hasattr(vehicle, "target_speed"):
                vehicle.target_speed = vehicle.speed
    return base.observation_type.observe()


def vehicle_terms(vehicle: Any) -> dict[str, Any]:
    """The state terms of a highway-env vehicle (see the module docstring for units)."""
    lane = vehicle.lane
    longitudinal, lateral = lane.local_coordinates(vehicle.position)
    heading_error = float(vehicle.heading) - float(lane.heading_at(longitudinal))
    return {
        "speed_kmh": float(vehicle.speed) * 3.6,
        "lane_offset": float(lateral),
        "heading_error": (heading_error + math.pi) % (2 * math.pi) - math.pi,
        "crashed": bool(vehicle.crashed),
        "off_road": not bool(vehicle.on_road),
    }


def episode_metrics(
    info: dict[str, Any], terminated: bool, speeds: list[float], distance_m: float
) -> dict[str, float]:
    """An ended episode's driving measures from its last step's `info` (success: it ran its
    whole duration, not ended by a collision or by leaving the road)."""
    collision, off_road = bool(info["crashed"]), bool(info["off_road"])
    return {
        "success": float(not (terminated or collision or off_road)),
        "collision": float(collision),
        "off_road": float(off_road),
        "speed_kmh": float(np.mean(speeds)) if speeds else 0.0,
        "distance_m": distance_m,
    }


def surface_frame(surface: Any, size: tuple[int, int]) -> np.ndarray:
    """A pygame surface as a uint8 [H, W, 3] frame resized to `size` = (height, width): the
    pixels of highway-env's `get_image()` through `resize_frame`. PIL decodes the surface's
    own 32-bit pixels in place where their layout is the usual one (bytes B, G, R, unused:
    one copy, into RGB), else reads them through `pygame.image.tobytes` (row-major; two
    copies). `get_image` copies them column-major first, then PIL copies them back: 2.4 ms
    a frame against 1.0 ms through `tobytes`, for the same frame."""
    import pygame
    from PIL import Image  # a dependency of highway-env (through matplotlib)

    width, height = surface.get_size()
    if (surface.get_bitsize(), surface.get_masks(), sys.byteorder) == BGRX_LAYOUT:
        pixels = surface.get_buffer()
        image = Image.frombuffer(
            "RGB", (width, height), pixels, "raw", "BGRX", surface.get_pitch(), 1
        )
    else:
        image = Image.frombytes("RGB", (width, height), pygame.image.tobytes(surface, "RGB"))
    if image.size != (size[1], size[0]):
        image = image.resize((size[1], size[0]), Image.Resampling.BILINEAR)
    return np.asarray(image, np.uint8)


BGRX_LAYOUT = (32, (0xFF0000, 0xFF00, 0xFF, 0), "little")
"""A surface's bits per pixel, (R, G, B, A) masks and the host's byte order when its pixels
lie in memory as B, G, R, unused: PIL's raw mode "BGRX"."""


def resize_frame(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """`frame` (uint8 [H, W, 3]) resized to `size` = (height, width), antialiased."""
    if frame.shape[:2] == size:
        return frame
    from PIL import Image  # a dependency of highway-env (through matplotlib)

    resized = Image.fromarray(frame).resize((size[1], size[0]), Image.Resampling.BILINEAR)
    return np.asarray(resized, np.uint8)


def _frame_size(frame_size: Any) -> tuple[int, int]:
    """`frame_size` as (height, width): an int is a square."""
    dims = (frame_size, frame_size) if isinstance(frame_size, int) else frame_size
    if (
        isinstance(dims, (tuple, list))
        and len(dims) == 2
        and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)
    ):
        return (dims[0], dims[1])
    raise ValueError(
        f"frame_size={frame_size!r}: expected a positive int (a square frame) or "
        "(height, width), e.g. frame_size=64 or frame_size=[64, 128]"
    )


def _traffic_speed(speed_kmh: Any) -> tuple[float, float] | None:
    """`traffic_speed_kmh` as (low, high) km/h, 0 <= low <= high; None: highway-env's own."""
    if speed_kmh is None:
        return None
    if (
        isinstance(speed_kmh, (tuple, list))
        and len(speed_kmh) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in speed_kmh)
        and all(math.isfinite(v) for v in speed_kmh)
        and 0 <= speed_kmh[0] <= speed_kmh[1]
    ):
        return (float(speed_kmh[0]), float(speed_kmh[1]))
    raise ValueError(
        f"traffic_speed_kmh={speed_kmh!r}: expected [low, high] in km/h with "
        "0 <= low <= high, e.g. traffic_speed_kmh=[50, 65]"
    )


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=make_driving_env)  # type: ignore[arg-type]
