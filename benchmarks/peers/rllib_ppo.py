"""RLlib PPO (new API stack: RLModule, Learner, EnvRunner) on the benchmark envs.

    benchmarks/.venvs/rllib/bin/python benchmarks/peers/rllib_ppo.py \
        --env cartpole|pong --mode throughput|solve --max-secs 60 --log /tmp/rllib.jsonl

Ray runs as a private local cluster (never joins another one on the machine) on 127.0.0.1
with 2 CPUs, no dashboard, no usage stats. CPU accounting:
the driver (which also hosts the local learner, num_learners=0) takes 1 CPU and the env
runners share the other (1 runner: 1 CPU; 2 runners: 0.5 each). Env runner processes get
OMP_NUM_THREADS=1 (two runners with 2 threads each collapse throughput on 2 cores).

throughput (matched settings): 1 env runner; CartPole 4 envs x 128 steps (batch 512),
minibatch 128, 4 epochs, lr 2.5e-4 annealed to 0 over 500k steps, gamma .99, lambda .95,
clip .2, ent .01, vf .5, global grad norm .5, no KL loss, separate 64x64 tanh actor and
critic. RLlib's value clipping (vf_clip_param 10) is left at its default. Pong: 8 envs x 128
(batch 1024), minibatch 256, clip .1, lr annealed over 10M, the Nature CNN as "valid"-padded
conv filters plus a 7x7 conv with 512 filters (the same as the 3136->512 dense layer) shared
by both heads. RLlib's default CNN takes float32 HWC observations, so Pong observations are
given as [84, 84, 4] float32 / 255.
solve: RLlib's tuned CartPole example (rllib/tuned_examples/ppo/cartpole_ppo.py): lr 3e-4,
6 epochs, vf coefficient .01, KL loss on, one shared 32-unit linear layer, other settings at
PPO defaults (2 env runners x 1 env, batch 4000, minibatch 128, lambda 1, clip .3); its
evaluation runner is left out.
"""

from __future__ import annotations

import logging
import os
import time

import common

ENV_RUNNER_THREADS = "1"


def build_config(args, env_name: str):  # type: ignore[no-untyped-def]
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    config = (
        PPOConfig()
        .api_stack(enable_rl_module_and_learner=True, enable_env_runner_and_connector_v2=True)
        .environment(env_name)
        .framework("torch")
        .learners(num_learners=0)
        .resources(num_cpus_for_main_process=1)
        .debugging(seed=args.seed, log_level="WARN")
        .reporting(metrics_num_episodes_for_smoothing=20)
    )
    if args.mode == "solve" and args.env == "cartpole":
        return (
            config.env_runners(num_env_runners=2, num_cpus_per_env_runner=0.5)
            .training(gamma=0.99, lr=0.0003, num_epochs=6, vf_loss_coeff=0.01, use_kl_loss=True)
            .rl_module(
                model_config=DefaultModelConfig(
                    fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True
                )
            )
        )
    if args.env == "cartpole":
        n_envs, total, clip, minibatch = 4, 500_000, 0.2, 128
        model = DefaultModelConfig(
            fcnet_hiddens=[64, 64], fcnet_activation="tanh", vf_share_layers=False
        )
    else:
        n_envs, total, clip, minibatch = 8, 10_000_000, 0.1, 256
        model = DefaultModelConfig(
            conv_filters=[
                [32, 8, 4, "valid"],
                [64, 4, 2, "valid"],
                [64, 3, 1, "valid"],
                [512, 7, 1, "valid"],
            ],
            conv_activation="relu",
            head_fcnet_hiddens=[],
            vf_share_layers=True,
        )
    return (
        config.env_runners(
            num_env_runners=1,
            num_envs_per_env_runner=n_envs,
            rollout_fragment_length=128,
            num_cpus_per_env_runner=1,
        )
        .training(
            train_batch_size_per_learner=n_envs * 128,
            minibatch_size=minibatch,
            num_epochs=4,
            lr=[[0, 2.5e-4], [total, 0.0]],
            gamma=0.99,
            lambda_=0.95,
            clip_param=clip,
            entropy_coeff=0.01,
            vf_loss_coeff=0.5,
            grad_clip=0.5,
            grad_clip_by="global_norm",
            use_kl_loss=False,
            kl_coeff=0.0,
        )
        .rl_module(model_config=model)
    )


def main() -> None:
    args = common.common_args(__doc__.split("\n\n")[0]).parse_args()
    target = args.target if args.env == "cartpole" else None
    log = common.setup(args, target)  # sets this process's torch threads (the learner)
    os.environ.update(
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE="disabled",
        OMP_NUM_THREADS=ENV_RUNNER_THREADS,  # inherited by Ray's worker processes
        MKL_NUM_THREADS=ENV_RUNNER_THREADS,
    )
    import ray
    from ray import tune

    env_name = f"peer_{args.env}"
    float_hwc = args.env == "pong"
    tune.register_env(env_name, lambda _cfg: common.make_env(args.env, float_hwc=float_hwc))
    # address="local": always start a private cluster. Without it ray.init() joins any
    # cluster another user started on this machine (`ray start`), with its CPU budget.
    os.environ.pop("RAY_ADDRESS", None)
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        logging_level=logging.WARNING,
        log_to_driver=True,
    )
    algo = build_config(args, env_name).build_algo()
    start = time.time()
    reason = "max_secs"
    iterations = 0
    try:
        while log.elapsed() < args.max_secs:
            if args.mode == "solve" and log.solved:
                reason = "solved"
                break
            algo.train()
            iterations += 1
    except KeyboardInterrupt:
        reason = "interrupted"
    wall = time.time() - start
    log.mark(end=True, reason=reason, iterations=iterations, train_s=round(wall, 2))
    algo.stop()
    ray.shutdown()


if __name__ == "__main__":
    main()
