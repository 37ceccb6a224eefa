"""Sample Factory 2 APPO on the benchmark envs.

    benchmarks/.venvs/sf/bin/python benchmarks/peers/sf_appo.py \
        --env cartpole|pong --mode throughput|solve --max-secs 60 --log /tmp/sf.jsonl \
        [-- extra Sample Factory arguments, which override ours]

throughput (matched settings): CartPole 2 rollout workers x 2 envs (4 envs), rollout 128,
4 minibatches of 128 (512 steps per training batch), 4 epochs, lr 2.5e-4 constant (2.1.1
has no linear decay), gamma .99, lambda .95, clip .2, ent .01, vf .5, grad norm .5, no
V-trace, no RNN, separate 64x64 tanh actor and critic, no input or return normalisation.
Pong: 2 workers x 4 envs (8 envs), rollout 128, batch 256 x 4 minibatches, 4 epochs, clip
.1, the Atari conv net (Nature CNN + 512 FC, shared), obs scaled by 1/255, relu, returns
normalised (SF's Atari default), async_rl.
solve: Sample Factory's own recommended CartPole command line (the docstring of
sf_examples/train_gym_env.py: 20 envs per worker, 2 policy workers, batch 512, reward scale
.1, no V-trace, no RNN, other settings at SF defaults).

Sample Factory's own stop (--train_for_seconds) does not reliably end the run, so a
watchdog thread sends SIGINT to the whole process tree at --max-secs (or at a solve in
solve mode) and SIGKILLs it 15 s later if it is still alive.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import common

COMMON = [
    "--algo=APPO",
    "--device=cpu",
    "--use_rnn=False",
    "--recurrence=1",
    "--with_wandb=False",
    "--save_every_sec=100000",
    "--save_best_every_sec=100000",
    "--experiment_summaries_interval=10",
]

MATCHED = {
    "cartpole": [
        "--num_workers=2",
        "--num_envs_per_worker=2",
        "--rollout=128",
        "--batch_size=128",
        "--num_batches_per_epoch=4",
        "--num_epochs=4",
        "--learning_rate=0.00025",
        "--lr_schedule=constant",
        "--gamma=0.99",
        "--gae_lambda=0.95",
        "--ppo_clip_ratio=0.2",
        "--exploration_loss_coeff=0.01",
        "--value_loss_coeff=0.5",
        "--max_grad_norm=0.5",
        "--encoder_mlp_layers",
        "64",
        "64",
        "--nonlinearity=tanh",
        "--actor_critic_share_weights=False",
        "--with_vtrace=False",
        "--normalize_input=False",
        "--normalize_returns=False",
        "--adam_eps=1e-5",
    ],
    "pong": [
        "--num_workers=2",
        "--num_envs_per_worker=4",
        "--worker_num_splits=2",
        "--rollout=128",
        "--batch_size=256",
        "--num_batches_per_epoch=4",
        "--num_epochs=4",
        "--learning_rate=0.00025",
        "--lr_schedule=constant",
        "--gamma=0.99",
        "--gae_lambda=0.95",
        "--ppo_clip_ratio=0.1",
        "--exploration_loss_coeff=0.01",
        "--value_loss_coeff=0.5",
        "--max_grad_norm=0.5",
        "--encoder_conv_architecture=convnet_atari",
        "--encoder_conv_mlp_layers",
        "512",
        "--obs_scale=255",
        "--nonlinearity=relu",
        "--actor_critic_share_weights=True",
        "--with_vtrace=False",
        "--normalize_input=False",
        "--normalize_returns=True",
        "--async_rl=True",
        "--adam_eps=1e-5",
    ],
}

# sf_examples/train_gym_env.py's example command line for CartPole-v1
RECOMMENDED_CARTPOLE = [
    "--num_envs_per_worker=20",
    "--policy_workers_per_policy=2",
    "--with_vtrace=False",
    "--batch_size=512",
    "--reward_scale=0.1",
]


def make_env_func(full_env_name, cfg=None, env_config=None, render_mode=None):  # type: ignore[no-untyped-def]
    return common.make_env(full_env_name.removeprefix("peer_"))


def main() -> int:
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    args = common.common_args(__doc__.split("\n\n")[0]).parse_args(argv)
    target = args.target if args.env == "cartpole" else None
    log = common.setup(args, target)

    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import run_rl

    env_name = f"peer_{args.env}"
    register_env(env_name, make_env_func)
    if args.mode == "solve" and args.env == "cartpole":
        settings = RECOMMENDED_CARTPOLE
    else:
        settings = MATCHED[args.env]
    train_dir = Path(str(args.log) + ".sf")
    shutil.rmtree(train_dir, ignore_errors=True)
    sf_argv = [
        f"--env={env_name}",
        f"--experiment={args.env}_{args.mode}",
        f"--train_dir={train_dir}",
        f"--seed={args.seed}",
        *COMMON,
        *settings,
        *extra,
    ]
    print("[peer] sample factory args:", " ".join(sf_argv), file=sys.stderr, flush=True)
    parser, _ = parse_sf_args(argv=sf_argv)
    cfg = parse_full_cfg(parser, sf_argv)

    common.start_watchdog(log, args.max_secs, stop_on_solve=args.mode == "solve")
    try:
        status = run_rl(cfg)
    except KeyboardInterrupt:
        status = "interrupted"
    log.mark(end=True, reason=f"run_rl returned {status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
