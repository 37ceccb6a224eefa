"""surge/envs/driving.py: highway-env with continuous actions, frames and state terms."""

from __future__ import annotations

import pickle
import sys
import typing
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("highway_env", reason="needs highway-env: pip install -e '.[highway]'")

from surge.config.schema import EnvConfig  # noqa: E402
from surge.envs.driving import BGRX_LAYOUT, make_driving_env, resize_frame, surface_frame  # noqa: E402
from surge.envs.make import probe_env  # noqa: E402
from surge.errors import ConfigError  # noqa: E402


def straight() -> np.ndarray:
    # A new array each step: highway-env returns the action in `info`, and gymnasium's env
    # checker warns when two steps' infos share an object.
    return np.zeros(2, np.float32)


def _vehicle(env: gym.Env) -> Any:
    """highway-env's ego vehicle."""
    return typing.cast(Any, env.unwrapped).vehicle


def _rollout(env: gym.Env, action: np.ndarray, seed: int, steps: int) -> list[dict]:
    """The infos of up to `steps` steps of a constant action, ending at the episode end."""
    _, info = env.reset(seed=seed)
    infos = [info]
    for _ in range(steps):
        _, _, terminated, truncated, info = env.step(action.copy())
        infos.append({**info, "terminated": terminated, "truncated": truncated})
        if terminated or truncated:
            break
    return infos


def test_spaces_and_state_terms() -> None:
    env = make_driving_env()
    assert env.observation_space == gym.spaces.Box(-np.inf, np.inf, (25,), np.float32)
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    obs, reward, terminated, truncated, info = env.step(np.array([0.5, 0.0], np.float32))
    assert env.observation_space.contains(obs) and np.isfinite(float(reward))
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    assert "frame" not in info  # frames only when asked
    for key in ("speed_kmh", "lane_offset", "lane_offset_std", "heading_error"):
        assert type(info[key]) is float, key
    for key in ("crashed", "off_road"):
        assert type(info[key]) is bool, key
    vehicle = _vehicle(env)
    assert info["speed_kmh"] == pytest.approx(vehicle.speed * 3.6)
    assert info["speed_kmh"] > 25 * 3.6  # accelerated from highway-env's 25 m/s start
    assert abs(info["heading_error"]) <= np.pi
    env.close()


def test_frames() -> None:
    env = make_driving_env(frames=True)
    _, info = env.reset(seed=0)
    frames = [info["frame"]]
    for _ in range(3):
        frames.append(env.step(straight())[4]["frame"])
    for frame in frames:
        assert frame.dtype == np.uint8 and frame.shape == (64, 64, 3)
        assert frame.std() > 5  # road, lane markings and cars, not a blank image
    assert not np.array_equal(frames[0], frames[-1])  # traffic moves relative to the ego car
    env.close()
    wide = make_driving_env(frames=True, frame_size=(32, 128))
    assert wide.reset(seed=0)[1]["frame"].shape == (32, 128, 3)
    wide.close()


def test_frames_read_from_the_surface_are_highway_envs_own_image_resized() -> None:
    """`surface_frame` reads the viewer's surface in row-major order; the pixels are those of
    highway-env's `get_image()` resized by `resize_frame`, at any size, by either reading."""
    env = make_driving_env(frames=True)
    env.reset(seed=2)
    env.step(straight())
    viewer = typing.cast(Any, env)._viewer
    full = np.asarray(viewer.get_image(), np.uint8)
    surface = viewer.sim_surface
    # The usual 32-bit layout is read in place; a 24-bit copy goes through `tobytes`.
    assert (surface.get_bitsize(), surface.get_masks(), sys.byteorder) == BGRX_LAYOUT
    packed = surface.convert(24)
    assert packed.get_bitsize() == 24
    for size in ((64, 64), (32, 128), full.shape[:2]):
        for source in (surface, packed):
            np.testing.assert_array_equal(surface_frame(source, size), resize_frame(full, size))
    env.close()


def _lane_keeper(info: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
    """A noisy driver of `make_driving_env` that keeps near its lane's centre."""
    steer = -0.05 * info["lane_offset"] - 0.4 * info["heading_error"] + rng.normal(0, 0.02)
    return np.array([rng.uniform(-0.6, 0.4), np.clip(steer, -1, 1)], np.float32)


def _merging_env() -> tuple[gym.Env, Any]:
    """merge-v0 as highway-env makes it (its reward reads discrete meta-actions), driven by
    idle / faster / slower picks."""
    env = gym.make("merge-v0")
    return env, lambda info, rng: int(rng.choice([1, 3, 4]))


ROADS = {
    "highway-fast-v0": lambda: (
        make_driving_env(
            action={"type": "ContinuousAction", "steering_range": [-0.2, 0.2]},
            policy_frequency=2,
            simulation_frequency=4,
        ),
        _lane_keeper,
    ),
    "merge-v0": _merging_env,
}


@pytest.mark.filterwarnings("ignore:.*merge-v0 is out of date")
@pytest.mark.parametrize("road", sorted(ROADS))
def test_frame_viewer_draws_the_pixels_of_highway_envs_viewer(
    road: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frames' viewer draws straight lanes by its own arithmetic: over whole episodes
    (the road's start and, on merge-v0, short lanes clipped at both ends and a sine lane left
    to highway-env), its surface is byte for byte that of highway-env's
    `EnvViewer.display()`. One lane gets a continuous marking, so every line kind is drawn."""
    import pygame
    from highway_env.envs.common.graphics import EnvViewer
    from highway_env.road.lane import LineType

    from surge.envs.driving_frames import FrameViewer

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # offscreen: no display to look for
    env, driver = ROADS[road]()
    base = typing.cast(Any, env.unwrapped)
    rng = np.random.default_rng(0)
    compared, kinds = 0, set()
    for seed in range(12):  # whole episodes, until 60 frames or more are compared
        if compared >= 60:
            break
        _, info = env.reset(seed=seed)
        graph = base.road.network.graph
        lanes = [lane for ends in graph.values() for ls in ends.values() for lane in ls]
        lanes[0].line_types = (LineType.CONTINUOUS, lanes[0].line_types[1])
        kinds |= {(type(lane).__name__, t) for lane in lanes for t in lane.line_types}
        config = {**base.config, "offscreen_rendering": True}
        theirs, ours = EnvViewer(base, config), FrameViewer(base, config)
        theirs.enabled = ours.enabled = True
        while True:
            theirs.display()
            ours.display()
            assert pygame.image.tobytes(ours.sim_surface, "RGB") == pygame.image.tobytes(
                theirs.sim_surface, "RGB"
            ), f"seed {seed}, frame {compared}"
            compared += 1
            _, _, terminated, truncated, info = env.step(driver(info, rng))
            if terminated or truncated:
                break
    assert compared >= 60
    every_kind = {LineType.NONE, LineType.STRIPED, LineType.CONTINUOUS, LineType.CONTINUOUS_LINE}
    assert {t for name, t in kinds if name == "StraightLane"} == every_kind
    env.close()


@pytest.mark.parametrize("bad", [0, -3, (64,), (64, 0), 64.0, True, "64"])
def test_bad_frame_size(bad: object) -> None:
    with pytest.raises(ValueError, match="frame_size"):
        make_driving_env(frames=True, frame_size=bad)  # type: ignore[arg-type]


def test_steering_moves_off_the_lane_and_off_the_road() -> None:
    """Steering one way moves the car sideways that way (a lateral offset of that sign; a lane
    change flips it), then past the road's edge (more than half a lane width, 2 m, off the
    edge lane's centre): off_road, and the episode terminates there. No traffic to hit."""
    env = make_driving_env(vehicles_count=0)
    ends = {}
    for sign in (1.0, -1.0):
        infos = _rollout(env, np.array([0.0, 0.02 * sign], np.float32), seed=3, steps=20)
        start, first, last = infos[0], infos[1], infos[-1]
        assert abs(start["lane_offset"]) < 0.1 and abs(start["heading_error"]) < 0.01
        assert 0.2 < first["lane_offset"] * sign < 2.0  # drifted toward the steered side
        assert first["heading_error"] * sign > 0.02
        assert last["terminated"] and last["off_road"] and not last["crashed"]
        assert last["lane_offset"] * sign > 2.0
        assert not any(info["off_road"] for info in infos[:-1])
        assert not any("episode_metrics" in info for info in infos[:-1])  # the last step only
        metrics = last["episode_metrics"]
        assert metrics["success"] == 0.0 and metrics["off_road"] == 1.0
        assert metrics["collision"] == 0.0
        assert metrics["speed_kmh"] == pytest.approx(np.mean([i["speed_kmh"] for i in infos[1:]]))
        ends[sign] = last["lane_offset"]
        offsets = [info["lane_offset"] for info in infos]
        for k, info in enumerate(infos):  # the spread of the episode's last 30 offsets
            assert info["lane_offset_std"] == pytest.approx(np.std(offsets[max(0, k - 29) : k + 1]))
        assert infos[0]["lane_offset_std"] == 0.0 < last["lane_offset_std"]
    assert ends[1.0] > 0 > ends[-1.0]
    env.close()


def test_crash_in_dense_traffic() -> None:
    env = make_driving_env(vehicles_density=2.0)
    crashes = 0
    for seed in range(3):
        last = _rollout(env, np.array([1.0, 0.0], np.float32), seed=seed, steps=30)[-1]
        assert last["crashed"] == _vehicle(env).crashed
        if last["crashed"]:
            assert last["terminated"]
            assert last["episode_metrics"]["collision"] == 1.0
            assert last["episode_metrics"]["success"] == 0.0
            crashes += 1
    assert crashes >= 1  # full throttle into dense traffic hits someone
    env.close()


def test_traffic_speed_range() -> None:
    """`traffic_speed_kmh` sets every other car's speed and its driver's kept speed in the
    range, the same for the same seed, and the first observation already sees them (the
    Kinematics rows' vx, relative to the ego car's)."""
    env = make_driving_env(traffic_speed_kmh=[50, 60])
    obs, _ = env.reset(seed=4)
    base = typing.cast(Any, env.unwrapped)
    others = [v for v in base.road.vehicles if v is not base.vehicle]
    speeds = np.array([v.speed * 3.6 for v in others])
    assert len(others) == 20 and np.all((speeds >= 50) & (speeds <= 60)) and speeds.std() > 1
    assert all(v.target_speed == v.speed for v in others)
    assert base.vehicle.speed == 25.0  # the ego car keeps highway-env's start
    np.testing.assert_array_equal(obs, base.observation_type.observe().reshape(-1))
    default = make_driving_env()
    default_obs, _ = default.reset(seed=4)
    rows, default_rows = obs.reshape(5, 5), default_obs.reshape(5, 5)
    np.testing.assert_array_equal(rows[:, :3], default_rows[:, :3])  # same places
    assert np.all(rows[1:, 3] < default_rows[1:, 3])  # slower than highway-env's 76-86 km/h
    again, _ = env.reset(seed=4)
    np.testing.assert_array_equal(obs, again)
    # slower traffic ahead: holding highway-env's start speed in lane runs into it
    crashed = False
    for _ in range(60):
        *_, terminated, truncated, info = env.step(straight())
        if terminated or truncated:
            crashed = info["crashed"]
            break
    assert crashed
    env.close()
    default.close()


@pytest.mark.parametrize("bad", [[60, 50], [-1, 5], [50], [50, float("nan")], "50-60", [True, 2]])
def test_bad_traffic_speed(bad: object) -> None:
    with pytest.raises(ValueError, match="traffic_speed_kmh"):
        make_driving_env(traffic_speed_kmh=bad)  # type: ignore[arg-type]


def test_a_bad_value_in_env_kwargs_is_a_config_error() -> None:
    cfg = EnvConfig(id="surge.envs.driving:surge/Highway-v0", kwargs={"traffic_speed_kmh": [9, 1]})
    with pytest.raises(ConfigError, match=r"rejected env.kwargs \(traffic_speed_kmh\): ValueError"):
        probe_env(cfg, seed=0)


def test_a_whole_episode_on_the_road_is_a_success() -> None:
    """Held in its lane with no traffic, the car drives the episode's whole duration (3 s at
    2 decisions a second): truncated, a success, and its distance is its speed x time."""
    env = make_driving_env(vehicles_count=0, duration=3, policy_frequency=2, simulation_frequency=4)
    infos = _rollout(env, straight(), seed=0, steps=50)
    last = infos[-1]
    assert last["truncated"] and not last["terminated"] and len(infos) == 7
    metrics = last["episode_metrics"]
    assert metrics["success"] == 1.0 and metrics["collision"] == metrics["off_road"] == 0.0
    # 6 steps of 0.5 s at the mean speed (m/s), within the speed's change over a step
    assert metrics["distance_m"] == pytest.approx(metrics["speed_kmh"] / 3.6 * 3.0, rel=0.05)
    env.close()


def test_registered_id_probe_and_pickle() -> None:
    cfg = EnvConfig(
        id="surge.envs.driving:surge/Highway-v0",
        kwargs={"frames": True, "frame_size": 32},
        max_episode_steps=5,
    )
    info = probe_env(cfg, seed=0)
    assert info.observation_space.shape == (25,)
    env = gym.make(cfg.id, frames=True, frame_size=32)
    env.reset(seed=0)
    env.step(straight())  # its frame viewer exists now: dropped on pickling, remade on use
    clone = pickle.loads(pickle.dumps(env))
    assert clone.step(straight())[4]["frame"].shape == (32, 32, 3)
    env.close()
    clone.close()


def test_missing_highway_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "highway_env", None)  # import raises ImportError
    with pytest.raises(ImportError, match=r"pip install -e '\.\[highway\]'"):
        make_driving_env()
