"""PPO's and APPO's learner inside the trainer chassis (surge/workers/trainer.py).

Batch u is segment u of every env group (streams/sample.py), read in place from the sample
stream. The learner checks the stream's invariants, normalises the batch with the
statistics of its version (models/normalize.py), runs the update on one of two backends
(`model.backend`: numpy for MLPs, which never imports torch; torch for every model) and
reports the batch's finished episodes, whose statistics travel inside the segments.

`algo: appo` runs the same update on V-trace targets (algos/advantages.py), which correct
for the policy lag; `algo: ppo` uses GAE on the behaviour values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from surge.algos.batch import RolloutBatch
from surge.config.algorithms import load_algorithm
from surge.errors import ConfigError, UserError
from surge.learners.base import EnvLearner
from surge.models.normalize import TrainerStats, ValueNormalizer
from surge.models.numpy_policy import numpy_layout
from surge.models.recurrent_state import CORE0
from surge.seeds import derive_seed
from surge.streams.sample import SampleConsumer, lives_are_unmixed, prefixed
from surge.workers.base import Binding, RunContext
from surge.workers.trainer import TrainerWorker, Update

CHECKPOINT_FORMAT = 2  # the state's layout (2: FusedAdam's optimizer state, algos/adam.py)

Array = Any
"""numpy arrays for the numpy backend, torch tensors (sharing the memory) for the torch one."""


def build(ctx: RunContext, b: Binding) -> TrainerWorker:
    """The trainer of a PPO or APPO run (one per policy in runs with several)."""
    ctx = ctx.for_policy(b.policy)
    return TrainerWorker(ctx, b, PPOLearner(ctx, b))


def slot_batch(
    arrays: dict[str, np.ndarray], steps: int, wrap: Callable[[np.ndarray], Array] = lambda x: x
) -> RolloutBatch:
    """The batch over a sample-stream slot's arrays without copying (the slot is not
    rewritten until the trainer publishes the next version); `wrap` turns each array into
    the learner's kind (torch.from_numpy for the torch learner)."""
    obs = prefixed(arrays, "obs/")
    return RolloutBatch(
        obs={k: v[:steps] for k, v in obs.items()},
        last_obs={k: v[steps] for k, v in obs.items()},
        final_obs=prefixed(arrays, "final_obs/"),
        actions=arrays["action"],
        logp=arrays["logp"],
        values=arrays["value"],
        rewards=arrays["reward"],
        terminated=arrays["terminated"],
        truncated=arrays["truncated"],
        core0=arrays[CORE0][0] if CORE0 in arrays else None,  # [depth, 1, N, S] in the block
        active=arrays.get("active"),
    ).map(wrap)


class PPOLearner(EnvLearner):
    """The chassis' `Learner` for PPO and APPO."""

    wait: Callable[[float], object]
    """The sample stream's own wait (bound once: the trainer waits in every idle poll)."""

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        super().__init__(ctx)
        cfg = self.cfg
        self.ctx = ctx
        self.backend = make_backend(ctx)  # model.backend: numpy for MLPs (no torch), else torch
        self.name = self.backend.name
        self.value_norm = self.backend.value_norm
        # Observation and return statistics (models/normalize.py): published with the weights
        self.stats = TrainerStats(
            ctx.env.observation_space,
            ctx.total_rows,
            normalize_obs=cfg.model.normalize_obs,
            clip_obs=cfg.model.clip_obs,
            normalize_reward=cfg.ppo.normalize_reward,
            clip_reward=cfg.ppo.clip_reward,
            gamma=cfg.ppo.gamma,
        )
        samples = b.port_of_kind("segments")
        self.consumer = SampleConsumer(b.transport, samples, b.inbox, ctx.start_version)
        self.wait = self.consumer.poll
        self.flow = self.consumer.flow
        self.steps = cfg.ppo.rollout_len
        self.batch_steps = self.steps * cfg.total_envs  # env steps in a batch
        alone = cfg.workers.trainer_threads_alone
        self._version = 0
        if alone and alone != cfg.workers.trainer_threads:
            self.backend.use_threads(self._threads)
        self.env_steps = 0  # for the learning rate's decay
        self._lag_sum = 0.0
        self._lag_count = 0
        self._lag_max = 0
        self._life_max = 0  # highest actor life seen in a batch (> 0: restarted actors' data)
        self._latest: dict[str, float] = {}

    # ------------------------------------------------------------------ the chassis' calls

    def ready(self, version: int) -> bool:
        return self.consumer.ready(version)

    def update(self, version: int) -> Update:
        """One update on batch `version`. Everything needed from the slot is read before
        returning: actors refill it once the chassis publishes the next version."""
        self._version = version
        arrays = self.consumer.batch(version)
        self._check_batch(arrays, version)
        update = self._account(arrays, version)
        # normalised with the statistics of this version, rewards scaled (models/normalize.py)
        batch = self.stats.prepare(arrays)
        self._latest = self.backend.update(batch, self._learning_rate())
        self._latest.update(self.stats.metrics())
        self.stats.observe(arrays, self.steps)  # the next version's statistics
        self.env_steps += update.env_steps
        return update

    def parameters(self) -> np.ndarray:
        """The weights, then the observation statistics and the value statistics (each if
        the model has them; models/normalize.py)."""
        flat = self.backend.flat_parameters()
        extra = [self.stats.published()] if self.stats.obs is not None else []
        if self.value_norm is not None:
            extra.append(self.value_norm.published())
        return np.concatenate([flat, *extra]) if extra else flat

    def state(self) -> dict[str, Any]:
        model, learner = self.backend.state()
        return {
            "format": CHECKPOINT_FORMAT,
            "backend": self.backend.name,
            "model": model,
            "learner": learner,
            "normalizer": self.stats.state_dict(),
        }

    def load(self, state: dict[str, Any]) -> None:
        if state.get("format") != CHECKPOINT_FORMAT:
            raise UserError(
                f"this checkpoint has format {state.get('format')}, this surge writes and "
                f"reads format {CHECKPOINT_FORMAT}",
                "resume it with the surge version that wrote it, or start a new run",
            )
        backend = state.get("backend", "torch")
        if backend != self.backend.name:
            raise UserError(
                f"this checkpoint was written by the {backend} learner, and this run's "
                f"model.backend selects the {self.backend.name} one",
                f"resume with model.backend={backend}",
            )
        self.backend.load(state["model"], state["learner"])
        self._restore_stats(state.get("normalizer"))
        self.env_steps = int(state["env_steps"])

    def metrics(self, seconds: float) -> dict[str, Any]:
        lag = self._lag_sum / max(self._lag_count, 1)
        record = {
            "policy_lag_mean": lag,
            "policy_lag_max": self._lag_max,
            "actor_life_max": self._life_max,
            **self._latest,
        }
        self._lag_sum, self._lag_count, self._lag_max = 0.0, 0, 0
        return record

    def settings_changed(self, keys: list[str]) -> None:
        """The trainer set new values of mutable settings (recipes/ppo.py `PPO_MUTABLE`):
        the updaters read theirs at every update; the reward statistics keep a discount."""
        self.stats.gamma = self.cfg.ppo.gamma

    # ------------------------------------------------------------------ the batch

    def _check_batch(self, arrays: dict[str, np.ndarray], version: int) -> None:
        """The sample stream's invariants (broken ones are bugs, never user errors): no
        segment mixes two lives of an actor, and the stream's version bound admits every
        step (its slots make older samples impossible, streams/flow.py)."""
        if not lives_are_unmixed(arrays["life"], self.ctx.group_rows):
            raise RuntimeError(f"batch {version} holds a segment written by two lives of an actor")
        rejected = int((~self.flow.admits(version, arrays["version"])).sum())
        if rejected:
            raise RuntimeError(
                f"batch {version} holds {rejected} step(s) older than the sample "
                f"stream's bound ({self.flow.describe()})"
            )

    def _account(self, arrays: dict[str, np.ndarray], version: int) -> Update:
        """Policy lag, actor lives and finished episodes of a batch."""
        self._life_max = max(self._life_max, int(arrays["life"].max()))
        lag = version - arrays["version"]
        self._lag_sum += float(lag.mean())
        self._lag_max = max(self._lag_max, int(lag.max()))
        self._lag_count += 1
        agent_steps = int(arrays["active"].sum()) if "active" in arrays else 0
        done = arrays["game_over"]
        if not done.any():
            return Update(self.batch_steps, agent_steps=agent_steps)
        return Update(
            self.batch_steps,
            arrays["episode_return"][done].tolist(),
            arrays["episode_length"][done].tolist(),
            agent_steps,
        )

    def _learning_rate(self) -> float:
        p = self.cfg.ppo
        if not p.anneal_lr:
            return p.lr
        return p.lr * max(0.0, 1.0 - self.env_steps / self.cfg.total_env_steps)

    def _threads(self) -> int:
        """`workers.trainer_threads_alone` once every actor waits for this update (it has
        published the last batch it may fill ahead, `version + max_policy_lag`), else
        `workers.trainer_threads`."""
        w = self.cfg.workers
        alone = self.consumer.ready(self._version + self.cfg.max_policy_lag)
        return w.trainer_threads_alone if alone else w.trainer_threads

    def _restore_stats(self, saved: dict[str, Any] | None) -> None:
        """The running statistics continue where the checkpoint left them."""
        if saved is None:  # written before normalisation existed
            if self.stats.obs is not None:
                raise UserError(
                    "this checkpoint holds no observation statistics (it was written by a "
                    "surge without them), and this run's model.normalize_obs needs them",
                    "start a new run with `surge train`",
                )
            return  # reward statistics, if switched on now, start fresh
        self.stats.load_state_dict({k: _numpy(v) for k, v in saved.items()})


def _numpy(value: Any) -> Any:
    """A checkpoint array as a numpy array (format-2 checkpoints hold tensors)."""
    return value.numpy() if hasattr(value, "numpy") else value


# ---------------------------------------------------------------------- the two backends


class Backend(Protocol):
    """The PPO update on one of two array libraries (`model.backend`): both run the same
    update on a sample-stream slot, publish the same flat parameter vector, and checkpoint
    the same torch state dict."""

    name: str
    value_norm: ValueNormalizer | None
    """`model.value_norm`'s statistics (published after the weights), or None."""

    def update(self, arrays: dict[str, np.ndarray], lr: float) -> dict[str, float]:
        """Train on the batch in a slot's arrays; the stats of the update."""
        ...

    def flat_parameters(self) -> np.ndarray:
        """The parameters as the float32 vector the parameter service publishes."""
        ...

    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(model state dict, learner state) for a checkpoint (numpy arrays or tensors)."""
        ...

    def load(self, model: dict[str, Any], learner: dict[str, Any]) -> None: ...

    def use_threads(self, threads: Callable[[], int]) -> None:
        """Ask `threads()` for the thread count before each step of an update (see
        `workers.trainer_threads_alone`)."""
        ...


def backend_name(cfg: Any, env: Any) -> str:
    """The backend `model.backend` selects for this model (`env`: its spaces)."""
    choice = cfg.model.backend
    if choice == "torch" or cfg.workers.trainer_device.startswith("cuda"):
        return "torch"  # numpy learners run on the CPU only (config/load.py checks numpy)
    covered = numpy_layout(env.observation_space, env.action_space, cfg.model) is not None
    if choice == "numpy" and not covered:
        why = (
            f"a recurrent core (model.core={cfg.model.core})"
            if cfg.model.core != "none"
            else "a CNN encoder (an image observation, or model.encoder=nature_cnn / small_cnn)"
        )
        raise ConfigError(
            f"model.backend=numpy covers feed-forward MLP models on the flat encoder; this "
            f"model uses {why}",
            "set model.backend to auto or torch",
        )
    return "numpy" if covered else "torch"


def make_backend(ctx: RunContext) -> Backend:
    if backend_name(ctx.cfg, ctx.env) == "numpy":
        return NumpyBackend(ctx)
    return TorchBackend(ctx)


def _vtrace(ctx: RunContext) -> Any:
    """The V-trace settings where the algorithm learns on V-trace targets (APPO), or None
    (PPO: GAE)."""
    return ctx.cfg.appo if getattr(load_algorithm(ctx.cfg.algo), "vtrace", False) else None


class NumpyBackend:
    name = "numpy"

    def __init__(self, ctx: RunContext) -> None:
        from surge.algos.numpy_ppo import NumpyPPOUpdater
        from surge.models.numpy_net import NumpyActorCritic, initial_parameters

        cfg = self.cfg = ctx.cfg
        layout = numpy_layout(ctx.env.observation_space, ctx.env.action_space, cfg.model)
        assert layout is not None
        init_rng = np.random.default_rng(derive_seed(cfg.seed, "model"))
        flat = initial_parameters(layout, init_rng, cfg.model.log_std_init)
        self.net = NumpyActorCritic(layout, flat)
        rng = np.random.default_rng(derive_seed(cfg.seed, "trainer"))
        self.value_norm = ValueNormalizer() if cfg.model.value_norm else None
        self.learner = NumpyPPOUpdater(self.net, cfg.ppo, rng, _vtrace(ctx), self.value_norm)

    def update(self, arrays: dict[str, np.ndarray], lr: float) -> dict[str, float]:
        return self.learner.update(slot_batch(arrays, self.cfg.ppo.rollout_len), lr)

    def flat_parameters(self) -> np.ndarray:
        return self.net.flat

    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.net.state_dict(), self.learner.state_dict()

    def load(self, model: dict[str, Any], learner: dict[str, Any]) -> None:
        self.net.load_state_dict({k: np.asarray(v) for k, v in model.items()})
        self.learner.load_state_dict(learner)

    def use_threads(self, threads: Callable[[], int]) -> None:
        pass  # the numpy learner computes on one BLAS thread


class TorchBackend:
    name = "torch"

    def __init__(self, ctx: RunContext) -> None:
        import torch

        from surge.algos.ppo import PPOUpdater as TorchPPO
        from surge.algos.staging import DeviceStaging
        from surge.devices import trainer_device
        from surge.models.actor_critic import ActorCritic

        cfg = self.cfg = ctx.cfg
        torch.set_num_threads(cfg.workers.trainer_threads)
        torch.manual_seed(derive_seed(cfg.seed, "model"))
        self.device = trainer_device(cfg)
        model = ActorCritic(ctx.env.observation_space, ctx.env.action_space, cfg.model)
        self.model = model.to(self.device)  # before its parameters move into flat buffers
        self.staging = DeviceStaging(self.device)
        # on the CPU whatever the device: the same shuffles, and a CPU-loadable checkpoint
        generator = torch.Generator().manual_seed(derive_seed(cfg.seed, "trainer"))
        self.value_norm = ValueNormalizer() if cfg.model.value_norm else None
        self.learner = TorchPPO(self.model, cfg.ppo, generator, _vtrace(ctx), self.value_norm)

    def update(self, arrays: dict[str, np.ndarray], lr: float) -> dict[str, float]:

        self.staging.begin()
        batch = slot_batch(arrays, self.cfg.ppo.rollout_len, self.staging)
        return self.learner.update(batch, lr)

    def flat_parameters(self) -> np.ndarray:
        from surge.models.weights import model_to_flat

        return model_to_flat(self.model)

    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.model.state_dict(), self.learner.state_dict()

    def load(self, model: dict[str, Any], learner: dict[str, Any]) -> None:
        self.model.load_state_dict(model)
        self.learner.load_state_dict(learner)

    def use_threads(self, threads: Callable[[], int]) -> None:
        self.learner.threads = threads


def warm_up() -> None:
    """What a PPO trainer's process can do before it knows its run (surge/runtime/warm.py):
    import the numpy learner and make numpy's first LAPACK and BLAS calls (the orthogonal
    init's QR), which load state on first use. torch is not imported here: a numpy-backend
    run never needs it (models/numpy_net.py), and a torch-backend one imports it when its
    learner is built. TensorBoard's import is left to MetricsWriter's thread, which overlaps
    it with the first updates."""
    from surge.algos.numpy_ppo import NumpyPPOUpdater  # noqa: F401
    from surge.models.numpy_net import orthogonal

    orthogonal(np.random.default_rng(0), (16, 8), 1.0) @ np.ones((8, 4), np.float32)
