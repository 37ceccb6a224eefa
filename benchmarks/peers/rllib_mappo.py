"""RLlib PPO (new API stack) on PettingZoo's simple_spread_v3, one policy shared by the 3 agents.

    benchmarks/.venvs/rllib/bin/python benchmarks/peers/rllib_mappo.py \
        --max-secs 300 --log /tmp/rllib_mappo.jsonl [--seed 1 --threads 1]

RLlib 2.60 has no centralised critic on its new API stack (RLModule, Learner, EnvRunner):
its only one is an example on the deprecated old stack (`examples/_old_api_stack/
centralized_critic.py`), which is not an option of PPO. So this is shared-policy PPO
(parameter-sharing IPPO): one RLModule, "shared", maps every agent; its critic sees the
agent's own 18-float observation, like its actor. The agent's identity is not added to the
observation (RLlib's default; simple_spread's observation is egocentric).

Matched settings (peers/spread_env.MATCHED): 1 env runner process stepping 32 envs, 25 env
steps per env per batch, counted in agent steps (`count_steps_by="agent_steps"`: the batch
is 32 x 25 x 3 = 2,400 agent steps, `rollout_fragment_length` 75 agent steps per env), 10
epochs over one minibatch of 2,400 (the whole batch), lr 7e-4 constant, gamma .99, lambda
.95, clip .2, entropy .01, vf 1, global grad norm 10, no KL loss, separate 64x64 relu actor
and critic. RLlib's own: value clipping at 10 (`vf_clip_param`, its default).

Ray runs as a private local cluster on 127.0.0.1 with 2 CPUs, no dashboard: the driver holds
the learner (num_learners=0, 1 CPU, `--threads` torch threads), the env runners the other CPU
(`--env-runners`, default 1; 2 get half a CPU each and half the envs) with OMP_NUM_THREADS=1
(as benchmarks/peers/rllib_ppo.py) and niceness 0 (`RAY_worker_niceness`; Ray's default
is 15, which on a shared machine hands the env runners' CPU to other jobs).
"""

from __future__ import annotations

import logging
import os
import time

import common
import spread_env

ENV_RUNNER_THREADS = "1"
SHARED = "shared"


def build_config(args, env_name: str):  # type: ignore[no-untyped-def]
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    m = spread_env.MATCHED
    agent_steps_per_env = args.rollout_len * spread_env.N_AGENTS
    batch = args.n_envs * agent_steps_per_env
    return (
        PPOConfig()
        .api_stack(enable_rl_module_and_learner=True, enable_env_runner_and_connector_v2=True)
        .environment(env_name)
        .framework("torch")
        .learners(num_learners=0)
        .resources(num_cpus_for_main_process=1)
        .debugging(seed=args.seed, log_level="WARN")
        .reporting(metrics_num_episodes_for_smoothing=20)
        .env_runners(
            num_env_runners=args.env_runners,
            num_envs_per_env_runner=args.n_envs // args.env_runners,
            rollout_fragment_length=agent_steps_per_env,
            num_cpus_per_env_runner=1 / args.env_runners,
        )
        .multi_agent(
            policies={SHARED},
            policy_mapping_fn=lambda _agent_id, *_a, **_k: SHARED,
            count_steps_by="agent_steps",
        )
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(rl_module_specs={SHARED: RLModuleSpec()}),
            model_config=DefaultModelConfig(
                fcnet_hiddens=m["hidden"], fcnet_activation=m["activation"], vf_share_layers=False
            ),
        )
        .training(
            train_batch_size_per_learner=batch,
            minibatch_size=batch // args.minibatches,
            num_epochs=args.epochs,
            lr=m["lr"],
            gamma=m["gamma"],
            lambda_=m["gae_lambda"],
            clip_param=m["clip"],
            entropy_coeff=m["ent_coef"],
            vf_loss_coeff=m["vf_coef"],
            grad_clip=m["max_grad_norm"],
            grad_clip_by="global_norm",
            use_kl_loss=False,
            kl_coeff=0.0,
        )
    )


def main() -> None:
    parser = spread_env.marl_args(__doc__.split("\n\n")[0])
    parser.add_argument(
        "--env-runners", type=int, default=1, help="env runner processes (the envs split evenly)"
    )
    args = parser.parse_args()
    if args.n_envs % args.env_runners:
        parser.error(f"--n-envs {args.n_envs} does not split evenly over {args.env_runners}")
    log = common.setup(args, None)  # sets this process's torch threads (the learner)
    os.environ.update(
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE="disabled",
        # Ray starts its workers at niceness 15: on a machine shared with other jobs its env
        # runners would lose the CPU to them where every other contender's processes do not
        RAY_worker_niceness="0",
        OMP_NUM_THREADS=ENV_RUNNER_THREADS,  # inherited by Ray's worker processes
        MKL_NUM_THREADS=ENV_RUNNER_THREADS,
    )
    import ray
    from ray import tune
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    env_name = "peer_simple_spread"
    tune.register_env(env_name, lambda _cfg: ParallelPettingZooEnv(spread_env.make_spread()))
    # address="local": a private cluster, never one another user started on this machine
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
            result = algo.train()
            iterations += 1
            if iterations == 1:  # what one iteration trained on, for the record
                learner = result.get("learners", {}).get(SHARED, {})
                print(
                    f"[rllib_mappo] first iteration: {learner.get('num_module_steps_trained')}"
                    " module steps trained",
                    flush=True,
                )
    except KeyboardInterrupt:
        reason = "interrupted"
    wall = time.time() - start
    log.mark(end=True, reason=reason, iterations=iterations, train_s=round(wall, 2))
    algo.stop()
    ray.shutdown()


if __name__ == "__main__":
    main()
