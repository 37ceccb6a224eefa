"""Shared by every peer script: the env factory and the common JSONL episode log.

Every library gets its envs from `make_env`, so all of them train on the same env and log
in the same format, whatever process the env lives in (Sample Factory and RLlib step envs
in worker processes):

- `{"t": s, "steps": n, "return": R}` for each finished episode,
- `{"t": s, "steps": n}` as a heartbeat at least every 1,000 env steps,
- `{"t": s, "steps": n, "solved": true, "mean20": m}` once, when the mean of the last 20
  episodes first reaches the target (if one is set).

`t` is wall time since the run was launched (`PEER_T0`, epoch seconds, set by the harness;
else the start time of the script's process), `steps` is the number of env steps taken by
all envs of the run so far. A multi-agent env also counts agent steps (one per live agent
per env step, `add_steps(n, agents=...)`): then every record carries `agent_steps` too.
Processes share one counter: a small state file beside the log (`LOG.state`), updated under
`flock`, that also holds the last 20 returns and the solved flag, so a solve is detected
across processes and the trainer can stop on it.

For Atari the reported return is the raw game score of one full game (all lives, rewards not
clipped), measured on the raw ALE env under the preprocessing.

Configuration reaches env processes through environment variables (inherited by every
child): PEER_LOG, PEER_T0, PEER_TARGET, PEER_STICKY. Scripts call `setup()` first.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import fcntl
import json
import mmap
import os
import signal
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

HERE = Path(__file__).resolve().parent
HEARTBEAT_EVERY = 1000
WINDOW = 20
FLUSH_EVERY = 32  # a process adds its steps to the shared counter every this many steps
CARTPOLE_TARGET = 475.0
MUJOCO = {"halfcheetah": "HalfCheetah-v5", "hopper": "Hopper-v5"}
"""The MuJoCo tasks (Gymnasium v5 ids; the `mujoco` package must be installed)."""

# state file: steps, next heartbeat, episodes, solved flag, agent steps, then the last
# WINDOW returns
_HEAD = struct.Struct("<qqqqq")
_RING = struct.Struct(f"<{WINDOW}d")
_STATE_SIZE = 4096


def common_args(description: str) -> argparse.ArgumentParser:
    """The arguments every peer script takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--env", choices=["cartpole", "pong", *MUJOCO], default="cartpole")
    p.add_argument(
        "--mode",
        choices=["throughput", "solve"],
        default="throughput",
        help="throughput: the matched settings, run for --max-secs; "
        "solve: the library's recommended settings, stop when solved (CartPole)",
    )
    p.add_argument("--max-secs", type=float, default=60.0, help="stop after this wall time")
    p.add_argument("--log", type=Path, required=True, help="the common JSONL log to write")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("OMP_NUM_THREADS", "1")),
        help="torch threads in the learner (default: $OMP_NUM_THREADS or 1)",
    )
    p.add_argument(
        "--target",
        type=float,
        default=CARTPOLE_TARGET,
        help="CartPole: solved when the mean of the last 20 episodes reaches this",
    )
    p.add_argument(
        "--sticky",
        type=float,
        default=0.25,
        help="ALE repeat_action_probability (v5 default 0.25)",
    )
    return p


def process_start_epoch() -> float:
    """Epoch time at which this process started (from /proc; falls back to now)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime")
        )
        return boot + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def setup(args: argparse.Namespace, target: float | None) -> EpisodeLog:
    """Fix the run's configuration in the environment (children inherit it), start a fresh
    log, set torch threads, and return this process's handle on the log."""
    # a script started in the background by a non-interactive shell ignores SIGINT, and so
    # would its workers: the harness stops runs with SIGINT
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.setdefault("PEER_T0", repr(process_start_epoch()))
    os.environ["PEER_LOG"] = str(Path(args.log).resolve())
    os.environ["PEER_TARGET"] = "" if target is None else repr(target)
    os.environ["PEER_STICKY"] = repr(args.sticky)
    # spawned workers (Sample Factory, Ray) import this module by name
    paths = [str(HERE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    Path(args.log).parent.mkdir(parents=True, exist_ok=True)
    Path(args.log).write_text("")
    Path(str(args.log) + ".state").write_bytes(bytes(_STATE_SIZE))
    try:
        import torch

        torch.set_num_threads(max(1, args.threads))
    except ImportError:
        pass
    return EpisodeLog.get()


class EpisodeLog:
    """This process's writer of the common log (one per process, shared by its envs)."""

    _instance: EpisodeLog | None = None

    @classmethod
    def get(cls) -> EpisodeLog:
        if cls._instance is None or cls._instance._pid != os.getpid():
            cls._instance = cls()
        return cls._instance

    def __init__(self) -> None:
        path = os.environ.get("PEER_LOG")
        if not path:
            raise RuntimeError("PEER_LOG is not set: call common.setup() in the main process")
        self._pid = os.getpid()
        self.t0 = float(os.environ["PEER_T0"])
        target = os.environ.get("PEER_TARGET", "")
        self.target = float(target) if target else None
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._sfd = os.open(path + ".state", os.O_RDWR)
        self._state = mmap.mmap(self._sfd, _STATE_SIZE)
        self._pending = 0
        self._pending_agents = 0
        self._lock = threading.Lock()  # envs of one process may step in threads

    def _write(self, record: dict[str, Any]) -> None:
        os.write(self._fd, (json.dumps(record) + "\n").encode())

    def _locked_update(self, episode_return: float | None) -> None:
        with self._lock:
            fcntl.flock(self._sfd, fcntl.LOCK_EX)
            try:
                steps, next_hb, episodes, solved, agents = _HEAD.unpack_from(self._state, 0)
                steps += self._pending
                agents += self._pending_agents
                self._pending = self._pending_agents = 0
                now = round(time.time() - self.t0, 3)
                counts = {"steps": steps, **({"agent_steps": agents} if agents else {})}
                if episode_return is not None:
                    ring = list(_RING.unpack_from(self._state, _HEAD.size))
                    ring[episodes % WINDOW] = episode_return
                    episodes += 1
                    _RING.pack_into(self._state, _HEAD.size, *ring)
                    self._write({"t": now, **counts, "return": float(episode_return)})
                    mean = sum(ring) / WINDOW
                    if (
                        not solved
                        and self.target is not None
                        and episodes >= WINDOW
                        and mean >= self.target
                    ):
                        solved = 1
                        self._write({"t": now, **counts, "solved": True, "mean20": mean})
                if steps >= next_hb:
                    if episode_return is None:
                        self._write({"t": now, **counts})
                    next_hb = (steps // HEARTBEAT_EVERY + 1) * HEARTBEAT_EVERY
                _HEAD.pack_into(self._state, 0, steps, next_hb, episodes, solved, agents)
            finally:
                fcntl.flock(self._sfd, fcntl.LOCK_UN)

    def add_steps(self, n: int = 1, agents: int = 0) -> None:
        """n env steps; `agents`: the agent steps in them (multi-agent envs only)."""
        self._pending += n
        self._pending_agents += agents
        if self._pending >= FLUSH_EVERY:
            self._locked_update(None)

    def episode(self, episode_return: float) -> None:
        self._locked_update(episode_return)

    def flush(self) -> None:
        if self._pending or self._pending_agents:
            self._locked_update(None)

    @property
    def steps(self) -> int:
        return int(_HEAD.unpack_from(self._state, 0)[0]) + self._pending

    @property
    def agent_steps(self) -> int:
        return int(_HEAD.unpack_from(self._state, 0)[4]) + self._pending_agents

    @property
    def solved(self) -> bool:
        return bool(_HEAD.unpack_from(self._state, 0)[3])

    def elapsed(self) -> float:
        return time.time() - self.t0

    def mark(self, **fields: Any) -> None:
        """Write a record of the main process (e.g. `end`), with the current step count."""
        self.flush()
        agents = self.agent_steps
        counts = {"steps": self.steps, **({"agent_steps": agents} if agents else {})}
        self._write({"t": round(self.elapsed(), 3), **counts, **fields})


# ---------------------------------------------------------------- wrappers


class LogSteps(gym.Wrapper):
    """Counts env steps into the common log; with `episodes=True` also logs each episode's
    undiscounted return (for Atari the raw score is logged by `RawGameScore` instead)."""

    def __init__(self, env: gym.Env, episodes: bool) -> None:
        super().__init__(env)
        self._episodes = episodes
        self._return = 0.0

    def reset(self, **kwargs: Any) -> Any:
        self._return = 0.0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        log = EpisodeLog.get()
        log.add_steps(1)
        if self._episodes:
            self._return += float(reward)
            if terminated or truncated:
                log.episode(self._return)
                self._return = 0.0
        return obs, reward, terminated, truncated, info


class RawGameScore(gym.Wrapper):
    """Sits on the raw ALE env: sums unclipped rewards over a whole game (every life) and
    logs the score when the game ends."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._score = 0.0

    def reset(self, **kwargs: Any) -> Any:
        self._score = 0.0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._score += float(reward)
        if terminated or truncated:
            EpisodeLog.get().episode(self._score)
            self._score = 0.0
        return obs, reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """A lost life ends the training episode; the reset after it continues the same game
    with a no-op step (the DQN/PPO Atari recipe)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = bool(terminated or truncated)
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> Any:
        if self._game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self._lives = self.env.unwrapped.ale.lives()
        return obs, info


class ClipReward(gym.RewardWrapper):
    def reward(self, reward: Any) -> float:
        return float(np.sign(reward))


class StackFrames(gym.Wrapper):
    """The last k frames as one uint8 array [k, H, W] (a plain array, never LazyFrames:
    Sample Factory's workers crash on gymnasium 0.29's LazyFrames)."""

    def __init__(self, env: gym.Env, k: int) -> None:
        super().__init__(env)
        space = env.observation_space
        self._frames: collections.deque[np.ndarray] = collections.deque(maxlen=k)
        self._k = k
        self.observation_space = gym.spaces.Box(0, 255, (k, *space.shape), np.uint8)

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        for _ in range(self._k):
            self._frames.append(obs)
        return np.stack(self._frames), info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._frames.append(obs)
        return np.stack(self._frames), reward, terminated, truncated, info


class FloatHWC(gym.ObservationWrapper):
    """[k, 84, 84] uint8 -> [84, 84, k] float32 in [0, 1]: what RLlib's default CNN takes."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        k, h, w = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0.0, 1.0, (h, w, k), np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.moveaxis(observation, 0, -1).astype(np.float32) * np.float32(1 / 255)


def _register_ale() -> None:
    import ale_py

    if hasattr(gym, "register_envs"):  # gymnasium >= 1.0; 0.29 finds ALE by entry point
        gym.register_envs(ale_py)


def make_env(name: str, float_hwc: bool = False) -> gym.Env:
    """One env of the benchmark, logging into the common log.

    cartpole: CartPole-v1. halfcheetah, hopper: HalfCheetah-v5, Hopper-v5 (raw episode
    returns logged). pong: ALE/Pong-v5 with frameskip=1, sticky actions $PEER_STICKY,
    then noop reset 30, frame skip 4 with max-pool, 84x84 grey, episodic life, reward sign
    clipping, frame stack 4: obs [4, 84, 84] uint8.
    """
    if name == "cartpole":
        return LogSteps(gym.make("CartPole-v1"), episodes=True)
    if name in MUJOCO:  # raw rewards logged; the caller adds its own wrappers on top
        return LogSteps(gym.make(MUJOCO[name]), episodes=True)
    if name != "pong":
        raise ValueError(f"unknown env {name!r}")
    _register_ale()
    sticky = float(os.environ.get("PEER_STICKY", "0.25"))
    env: gym.Env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=sticky)
    env = RawGameScore(env)
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=30,
        frame_skip=4,
        screen_size=84,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,
    )
    env = EpisodicLife(env)
    env = ClipReward(env)
    env = StackFrames(env, 4)
    env = LogSteps(env, episodes=False)
    if float_hwc:
        env = FloatHWC(env)
    return env


# ---------------------------------------------------------------- stopping


def descendants(pid: int) -> list[int]:
    """Every live descendant of pid (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def signal_tree(sig: int, include_self: bool = True) -> None:
    """Send sig to every descendant of this process (and to this process)."""
    for pid in descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    if include_self:
        os.kill(os.getpid(), sig)


def start_watchdog(
    log: EpisodeLog, max_secs: float, stop_on_solve: bool, grace: float = 15.0
) -> threading.Event:
    """For libraries whose training loop we cannot enter (Sample Factory): a thread that,
    at max_secs or on a solve, sends SIGINT to the whole process tree, and SIGKILLs the
    tree if it has not exited `grace` seconds later. Returns the event set when it fires."""
    fired = threading.Event()

    def watch() -> None:
        while log.elapsed() < max_secs and not (stop_on_solve and log.solved):
            time.sleep(0.25)
        reason = "solved" if stop_on_solve and log.solved else "max_secs"
        log.mark(end=True, reason=reason)
        fired.set()
        print(f"[peer] stopping: {reason} at {log.elapsed():.1f} s", file=sys.stderr, flush=True)
        signal_tree(signal.SIGINT)
        time.sleep(grace)
        print("[peer] still running after SIGINT: SIGKILL", file=sys.stderr, flush=True)
        signal_tree(signal.SIGKILL, include_self=False)
        os._exit(0)

    threading.Thread(target=watch, name="peer-watchdog", daemon=True).start()
    return fired
