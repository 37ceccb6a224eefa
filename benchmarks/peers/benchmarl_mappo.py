"""BenchMARL MAPPO (or IPPO) on PettingZoo's simple_spread_v3.

    benchmarks/.venvs/benchmarl/bin/python benchmarks/peers/benchmarl_mappo.py \
        --max-secs 300 --log /tmp/benchmarl_mappo.jsonl [--algorithm mappo|ippo --seed 1]

BenchMARL's own PettingZoo task (`PettingZooTask.SIMPLE_SPREAD`) builds its env through
TorchRL's `PettingZooEnv(task="simple_spread_v3")`, which looks the task up in
`pettingzoo.mpe`; PettingZoo 1.27 has moved MPE out to the `mpe2` package, and
`pettingzoo.mpe` only raises an ImportError that says so. So this script runs BenchMARL's
PettingZoo task class with one change, where its env comes from: TorchRL's
`PettingZooWrapper` around peers/spread_env.make_spread() (the mpe2 env every contender
steps), with the same arguments BenchMARL passes (parallel, categorical actions, the global
state returned: 54 floats, the 3 agents' observations).

MAPPO as BenchMARL builds it: one actor shared by the 3 agents on each agent's 18-float
observation, and a centralised critic, shared too, on the global state; IPPO: the critic on
each agent's own observation. No agent id in the observation (BenchMARL's default).

Matched settings (peers/spread_env.MATCHED): 32 envs in one process (TorchRL `SerialEnv`,
BenchMARL's default for an env that is not vectorised), 800 frames (env steps: 32 x 25,
2,400 agent steps) per batch, `on_policy_n_minibatch_iters` 10 (epochs) over minibatches of
800 frames (the whole batch, sampled without replacement), lr 7e-4, gamma .99, GAE lambda
.95, clip .2, entropy .01, critic coefficient 1, grad norm clipped at 10, 64x64 relu MLPs
(actor and critic, `MlpConfig`). BenchMARL's own: one Adam per loss (actor, critic; eps
1e-6, its default), advantages not normalised (its MAPPO's default), L2 value loss without
clipping.

Stopping: BenchMARL runs until a frame or iteration count; a callback ends the run after
the batch collected once `--max-secs` have passed since launch (BenchMARL's experiment then
closes itself).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import common
import spread_env

os.environ.setdefault("TQDM_DISABLE", "1")  # BenchMARL's per-iteration progress bar

import torch  # noqa: E402
from benchmarl.algorithms import IppoConfig, MappoConfig  # noqa: E402
from benchmarl.environments.pettingzoo.common import PettingZooClass  # noqa: E402
from benchmarl.experiment import Experiment, ExperimentConfig  # noqa: E402
from benchmarl.experiment.callback import Callback  # noqa: E402
from benchmarl.models.mlp import MlpConfig  # noqa: E402
from torchrl.envs.libs.pettingzoo import PettingZooWrapper  # noqa: E402


class SpreadTask(PettingZooClass):
    """BenchMARL's PettingZoo task class; the env is the mpe2 simple_spread of all."""

    def get_env_fun(self, num_envs, continuous_actions, seed, device):  # type: ignore[no-untyped-def]
        return lambda: PettingZooWrapper(
            env=spread_env.make_spread(),
            return_state=True,
            categorical_actions=True,
            seed=seed,
            device=device,
        )


class StopAfter(Callback):
    """Ends the run (as Ctrl+C would) at the first batch collected after max_secs. (BenchMARL
    pickles its callbacks: this one holds no handle on the log.)"""

    def __init__(self, max_secs: float) -> None:
        super().__init__()
        self.max_secs = max_secs

    def on_batch_collected(self, batch: Any) -> None:
        if common.EpisodeLog.get().elapsed() >= self.max_secs:
            raise KeyboardInterrupt


def build_experiment(args) -> Experiment:  # type: ignore[no-untyped-def]
    m = spread_env.MATCHED
    frames = args.n_envs * args.rollout_len
    config = ExperimentConfig.get_from_yaml()
    config.sampling_device = config.train_device = config.buffer_device = "cpu"
    config.prefer_continuous_actions = False
    config.max_n_frames = 10**12  # stopped by time (StopAfter)
    config.max_n_iters = None
    config.on_policy_collected_frames_per_batch = frames
    config.on_policy_n_envs_per_worker = args.n_envs
    config.on_policy_n_minibatch_iters = args.epochs
    config.on_policy_minibatch_size = frames // args.minibatches
    config.lr = m["lr"]
    config.gamma = m["gamma"]
    config.clip_grad_norm = True
    config.clip_grad_val = m["max_grad_norm"]
    config.evaluation = False
    config.render = False
    config.loggers = []
    config.create_json = False
    config.checkpoint_interval = 0
    config.checkpoint_at_end = False
    config.save_folder = args.save_folder

    algo = (MappoConfig if args.algorithm == "mappo" else IppoConfig).get_from_yaml()
    algo.share_param_critic = True
    algo.clip_epsilon = m["clip"]
    algo.entropy_coef = m["ent_coef"]
    algo.critic_coef = m["vf_coef"]
    algo.lmbda = m["gae_lambda"]

    activation = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[m["activation"]]
    mlp = MlpConfig(num_cells=m["hidden"], activation_class=activation, layer_class=torch.nn.Linear)
    task = SpreadTask(
        name="SIMPLE_SPREAD", config={"task": "simple_spread_v3", **spread_env.SPREAD_KWARGS}
    )
    return Experiment(
        task=task,
        algorithm_config=algo,
        model_config=mlp,
        critic_model_config=mlp,
        seed=args.seed,
        config=config,
        callbacks=[StopAfter(args.max_secs)],
    )


def main() -> None:
    parser = spread_env.marl_args(__doc__.split("\n\n")[0])
    parser.add_argument("--algorithm", choices=["mappo", "ippo"], default="mappo")
    args = parser.parse_args()
    log = common.setup(args, None)  # sets this process's torch threads
    with tempfile.TemporaryDirectory(prefix="benchmarl-", dir=Path(args.log).parent) as folder:
        args.save_folder = folder  # BenchMARL's experiment folder (nothing is logged there)
        experiment = build_experiment(args)
        start = time.time()
        reason = "max_secs"
        try:
            experiment.run()
            reason = "finished"
        except KeyboardInterrupt:
            pass
        wall = time.time() - start
        log.mark(
            end=True,
            reason=reason,
            iterations=experiment.n_iters_performed,
            train_s=round(wall, 2),
        )


if __name__ == "__main__":
    main()
