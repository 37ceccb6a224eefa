"""SAC's learner inside the trainer chassis (surge/workers/trainer.py): soft actor-critic
(Haarnoja et al. 2018) for Box actions, on batches the replay workers serve.

Batch u is the row of the batches block that holds it (streams/replay_blocks.py, through
learners/replay_batches.py `ReplayBatches`). One update per batch, as CleanRL's
sac_continuous_action.py does per env step after learning starts:

- the twin critics step on the soft clipped double-Q target of the target critics
  (algos/sac.py `critic_target`, `critic_loss`); a row's reward and discount are already
  the n-step return and its discount (n = 1 for SAC);
- every `sac.policy_every` updates the actor takes that many steps on the same batch
  (CleanRL's delayed update with its compensation), each followed, with `sac.autotune`, by
  a step of the temperature on a fresh sample of the updated actor (`temperature_loss`);
- the target critics follow the critics by Polyak averaging with `sac.tau`, every update.

With MLP networks on flat observations on the CPU these steps run in numpy without
autograd (learners/sac_numpy.py: the same maths, parameters, optimizers and noise); the
torch steps below serve CNN encoders and GPUs. The published vector is the actor's
parameters (models/sac_policy.py acts with them).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from surge.algos.adam import FusedAdam
from surge.algos.flat_params import FlatParameters
from surge.algos.sac import (
    actor_loss,
    bounded_log_std,
    critic_loss,
    critic_target,
    default_target_entropy,
    squashed_gaussian,
    temperature_loss,
)
from surge.algos.staging import DeviceStaging
from surge.config.schema import ExperimentConfig
from surge.devices import cpu_bfloat16, trainer_device
from surge.learners.base import ReplayLearner
from surge.learners.sac_numpy import NumpySteps
from surge.models import gemm
from surge.models.gemm import ProductTrial
from surge.models.sac_network import SACActor, TwinQ
from surge.models.sac_policy import box_dims, box_scale_bias
from surge.seeds import derive_seed
from surge.workers.base import Binding, RunContext
from surge.workers.trainer import TrainerWorker, Update

CHECKPOINT_FORMAT = 2  # 2: FusedAdam's optimizer states (algos/adam.py)
MATMUL_TRIAL = 15  # `sac.matmul: auto`: timed cycles of `policy_every` updates per library

Obs = dict[str, torch.Tensor]


def build(ctx: RunContext, b: Binding) -> TrainerWorker:
    return TrainerWorker(ctx, b, SACLearner(ctx, b))


@dataclass(frozen=True)
class SACBatch:
    """One replay batch on the learner's device: a row's reward and discount are already the
    n-step return and its discount."""

    obs: Obs
    action: torch.Tensor
    next_obs: Obs
    reward: torch.Tensor
    discount: torch.Tensor


class SACUpdate:
    """SAC's networks, optimizers and temperature, and one update on a batch: the learner's
    maths without the replay and the chassis (benchmarks/sac_update_speed.py times it)."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        obs_space: gym.Space[Any],
        space: gym.Space[Any],
        device: torch.device,
    ) -> None:
        self.settings = s = cfg.sac
        torch.manual_seed(derive_seed(cfg.seed, "model"))
        self.device = device
        self.actor = SACActor(obs_space, space, cfg.model).to(device)
        self.critic = TwinQ(obs_space, space, cfg.model, threads=s.threads).to(device)
        # MLP critics take the threads side by side (models/layers.py `parallel_mlps`) and
        # torch keeps one; a CNN's large operations are torch's to spread.
        torch.set_num_threads(1 if self.critic.shared_input else s.threads)
        self.target = copy.deepcopy(self.critic)
        # Each network's weights and gradients in two flat buffers: zeroing, Adam and the
        # Polyak average are one kernel each (algos/flat_params.py, algos/adam.py), and
        # the actor's buffer is the published vector as it is.
        self.actor_flat = FlatParameters(self.actor)
        self.critic_flat = FlatParameters(self.critic)
        self.target_flat = FlatParameters(self.target)
        self.target.requires_grad_(False)
        scale, bias = box_scale_bias(space)
        self.scale = torch.from_numpy(scale).to(device)
        self.bias = torch.from_numpy(bias).to(device)
        self.actor_optimizer = FusedAdam(self.actor_flat, lr=s.policy_lr)
        self.critic_optimizer = FusedAdam(self.critic_flat, lr=s.q_lr)
        # log alpha 0: alpha starts at 1 (CleanRL); without autotune alpha stays `sac.alpha`.
        temperature = nn.ParameterList(
            [nn.Parameter(torch.zeros(1, device=device), requires_grad=s.autotune)]
        )
        self.log_alpha = temperature[0]
        self.alpha_optimizer = (
            FusedAdam(FlatParameters(temperature), lr=s.q_lr) if s.autotune else None
        )
        self.target_entropy = (
            s.target_entropy
            if s.target_entropy is not None
            else default_target_entropy(box_dims(space))
        )
        self.updates = 0
        on_cpu = device.type == "cpu"
        # MLPs on flat observations step in numpy, without autograd (learners/sac_numpy.py)
        self.numpy_steps = NumpySteps(self) if NumpySteps.fits(self) else None
        self.products = self.product_trial(s.matmul if on_cpu else "numpy")
        self.bf16 = on_cpu and cpu_bfloat16(s.precision)
        gemm.use_bfloat16(self.bf16)

    def product_trial(self, choice: Literal["auto", "numpy", "torch"]) -> ProductTrial:
        """The MLPs' products in numpy or torch, and with `auto` the twin critics on one
        thread or `sac.threads`, whichever updates fastest on this CPU (models/gemm.py)."""
        s = self.settings
        trial_threads = self.critic.shared_input and choice == "auto"
        return ProductTrial(
            choice,
            rounds=MATMUL_TRIAL,
            cycle=s.policy_every,
            threads=sorted({1, s.threads}) if trial_threads else (s.threads,),
            set_threads=self.critic.use_threads,
        )

    @property
    def alpha(self) -> torch.Tensor:
        """The temperature now (a constant for the losses that use it)."""
        if self.alpha_optimizer is None:
            return torch.tensor(self.settings.alpha, device=self.device)
        return self.log_alpha.detach().exp()

    def sample(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor]:
        """(action [B, A] in env units, its log-probability [B]) drawn from the actor."""
        mean, raw = self.actor(obs)
        noise = torch.randn_like(mean)
        return squashed_gaussian(mean, bounded_log_std(raw), self.scale, self.bias, noise)

    def __call__(self, batch: SACBatch) -> dict[str, float]:
        """One update on a batch; its losses and statistics."""
        return self.products.run(lambda: self._update(batch))

    def _update(self, batch: SACBatch) -> dict[str, float]:
        s = self.settings
        in_numpy = self.numpy_steps
        stats = in_numpy.critic_step(batch) if in_numpy is not None else self._critic_step(batch)
        self.updates += 1
        if self.updates % s.policy_every == 0:  # CleanRL: the 2nd, 4th, ... update
            # that many steps: compensates for the delay
            if in_numpy is not None:
                stats.update(in_numpy.policy_steps(batch.obs, s.policy_every))
            else:
                for _ in range(s.policy_every):
                    stats.update(self._policy_step(batch.obs))
        with torch.no_grad():  # target <- tau * critic + (1 - tau) * target
            self.target_flat.data.lerp_(self.critic_flat.data, s.tau)
        stats["alpha"] = float(self.alpha)
        return stats

    def _critic_step(self, batch: SACBatch) -> dict[str, float]:
        with torch.no_grad():
            next_action, next_logp = self.sample(batch.next_obs)
            q1_next, q2_next = self.target(batch.next_obs, next_action)
            target = critic_target(
                batch.reward, batch.discount, q1_next, q2_next, next_logp, self.alpha
            )
        q1, q2 = self.critic(batch.obs, batch.action)
        loss = critic_loss(q1, q2, target)
        self.critic_optimizer.zero_grad()
        loss.backward()
        self.critic_optimizer.step()
        q_mean = 0.5 * (q1.detach().mean() + q2.detach().mean())
        return {"qf_loss": loss.item(), "q_mean": q_mean.item()}

    def _policy_step(self, obs: Obs) -> dict[str, float]:
        action, logp = self.sample(obs)
        q1, q2 = self.critic.held(obs, action)  # the actor's loss moves the actor only
        loss = actor_loss(logp, q1, q2, self.alpha)
        self.actor_optimizer.zero_grad()
        loss.backward()
        self.actor_optimizer.step()
        stats = {"actor_loss": loss.item(), "entropy": -logp.detach().mean().item()}
        if self.alpha_optimizer is not None:
            with torch.no_grad():  # the updated actor's log-probabilities (CleanRL)
                _, logp = self.sample(obs)
            alpha_loss = temperature_loss(self.log_alpha, logp, self.target_entropy)
            self.alpha_optimizer.zero_grad()
            alpha_loss.backward()
            self.alpha_optimizer.step()
            stats["alpha_loss"] = alpha_loss.item()
        return stats

    def state(self) -> dict[str, Any]:
        optimizers = {
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
        }
        if self.alpha_optimizer is not None:
            optimizers["alpha_optimizer"] = self.alpha_optimizer.state_dict()
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "target": self.target.state_dict(),
            **optimizers,
            "log_alpha": float(self.log_alpha.item()),
            "updates": self.updates,
        }

    def load(self, state: dict[str, Any]) -> None:
        for name, net in (("actor", self.actor), ("critic", self.critic), ("target", self.target)):
            net.load_state_dict({k: torch.as_tensor(v) for k, v in state[name].items()})
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        if self.alpha_optimizer is not None and "alpha_optimizer" in state:
            self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        with torch.no_grad():
            self.log_alpha.fill_(float(state["log_alpha"]))
        self.updates = int(state["updates"])


class SACLearner(ReplayLearner):
    kind = "sac"
    checkpoint_format = CHECKPOINT_FORMAT

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        super().__init__(ctx, b)
        self.device = trainer_device(self.cfg)
        self.staging = DeviceStaging(self.device)  # the batch row, copied once per update
        env = ctx.env
        self.sac = SACUpdate(self.cfg, env.observation_space, env.action_space, self.device)

    def update(self, version: int) -> Update:
        row, f = self.batches.take(version)
        put = self.staging
        put.begin()
        batch = SACBatch(
            obs={k[4:]: put(v) for k, v in f.items() if k.startswith("obs/")},
            action=put(f["action"]),
            next_obs={k[9:]: put(v) for k, v in f.items() if k.startswith("next_obs/")},
            reward=put(f["reward"]),
            discount=put(f["discount"]),
        )
        self._stats.append(self.sac(batch))
        return self.batches.give_back(version, row)  # after the last read of the row

    def parameters(self) -> np.ndarray:
        return self.sac.actor_flat.published().cpu().numpy()  # `parameters()` order, row-major

    def metrics(self, seconds: float) -> dict[str, Any]:
        record = self.stats_record(seconds)
        trial = self.sac.products
        if trial.chosen is not None:  # 1: the products run in torch, 0: in numpy
            record["matmul/torch"] = float(trial.chosen.library == "torch")
            record["matmul/threads"] = float(trial.chosen.threads)
            record.update({f"matmul/{k}_ms": v for k, v in trial.medians_ms().items()})
        record["matmul/bfloat16"] = float(self.sac.bf16)
        return record

    def state(self) -> dict[str, Any]:
        return self.marked(self.sac.state())

    def load(self, state: dict[str, Any]) -> None:
        self.check_state(state)
        self.sac.load(state)

    def close(self) -> None:
        super().close()
        gemm.use("numpy")  # the process-wide defaults again (a serial run's process goes on)
        gemm.use_bfloat16(False)
