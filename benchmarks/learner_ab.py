"""PPO's torch learner on the CPU, two revisions side by side: APPO updates (Nature CNN,
1,024 frames, 4 epochs x 4 minibatches, 2 threads) timed in fresh processes, alternating
base and head, each importing its own tree's surge. Isolates the learner from the rest of
a training run, whose own noise (about 5% here) can hide a small change.

    .venv/bin/python benchmarks/learner_ab.py --base da1d210 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

TIMED = """
import time, numpy as np, torch, gymnasium as gym
torch.set_num_threads(2)
from surge.algos.batch import RolloutBatch
from surge.algos.ppo import PPOUpdater
from surge.config.schema import APPOConfig, ModelConfig, PPOConfig
from surge.models.actor_critic import ActorCritic
T, N = 128, 8
torch.manual_seed(0)
space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
model = ActorCritic(space, gym.spaces.Discrete(6), ModelConfig(encoder="nature_cnn"))
cfg = PPOConfig(rollout_len=T, epochs=4, minibatches=4)
learner = PPOUpdater(model, cfg, torch.Generator().manual_seed(1), APPOConfig())
g = torch.Generator().manual_seed(2)
obs = torch.randint(0, 256, (T, N, 4, 84, 84), generator=g, dtype=torch.uint8)
batch = RolloutBatch(obs={"obs": obs}, last_obs={"obs": obs[-1]}, final_obs={"obs": obs},
    actions=torch.randint(0, 6, (T, N), generator=g), logp=torch.full((T, N), -float(np.log(6))),
    values=torch.zeros(T, N), rewards=torch.randn(T, N, generator=g),
    terminated=torch.zeros(T, N, dtype=torch.bool), truncated=torch.zeros(T, N, dtype=torch.bool))
learner.update(batch, 2.5e-4)
start = time.perf_counter()
for _ in range(UPDATES):
    learner.update(batch, 2.5e-4)
print(UPDATES * T * N / (time.perf_counter() - start))
"""


def samples_per_s(tree: Path, updates: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "2"}
    code = TIMED.replace("UPDATES", str(updates))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True, check=True
    )
    return float(out.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=4)
    args = parser.parse_args()
    head = HERE.parent
    with tempfile.TemporaryDirectory(prefix="surge-learner-ab-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(base), args.base],
                       cwd=head, check=True)  # fmt: skip
        try:
            ratios = []
            for r in range(args.rounds):
                order = [("base", base), ("head", head)][:: 1 if r % 2 == 0 else -1]
                rate = {side: samples_per_s(tree, args.updates) for side, tree in order}
                ratios.append(rate["head"] / rate["base"])
                print(f"round {r}: base {rate['base']:,.0f}, head {rate['head']:,.0f} samples/s, "
                      f"head/base {ratios[-1]:.3f}", flush=True)  # fmt: skip
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=head)
    print(f"median head/base {statistics.median(ratios):.3f} "
          f"({min(ratios):.3f}..{max(ratios):.3f}, {args.rounds} rounds)")  # fmt: skip


if __name__ == "__main__":
    main()
