"""Can a connect-four model learn the tactics the heuristic player punishes? Supervised.

    .venv/bin/python benchmarks/connect4_tactics.py            # ~10 min on 2 cores

Positions come from uniformly random games (surge/envs/connect_four.py rules): every
position where the player to move can win at once, or must block the opponent's one
immediate win. Each model of the table, built by `ActorCritic` from the connect4-selfplay
preset with the overrides shown, learns to put its policy's mass on the right moves (the
log of the probability of any winning move, or of the block) with Adam; the report gives the
share of held-out positions where its most likely legal move is right. The heuristic player
never misses either, so a learner that does loses to it. Writes
benchmarks/results/connect4_tactics.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import summary  # noqa: E402  (benchmarks/, next to this file)

from surge.config.load import load_config  # noqa: E402
from surge.envs.connect_four import landing_row, wins_with  # noqa: E402
from surge.envs.make import probe_env  # noqa: E402
from surge.models.actor_critic import ActorCritic  # noqa: E402

MODELS = {
    "dense head, two conv layers (the preset before)": [
        "model.grid_actions=none",
        "model.grid_channels=[32,32]",
    ],
    "dense head, three conv layers": ["model.grid_actions=none"],
    "per-cell head (columns), two conv layers": ["model.grid_channels=[32,32]"],
    "per-cell head (columns), three conv layers (the preset)": [],
}


def positions(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """`n` positions with a right move: observation [n, 6, 7, 2] (the mover's pieces, then
    the opponent's), action_mask [n, 7], right [n, 7] (bool), block [n] (else: a win)."""
    out: dict[str, list[np.ndarray]] = {"observation": [], "action_mask": [], "right": []}
    block: list[bool] = []
    while len(block) < n:
        board = np.zeros((2, 6, 7), bool)
        p = 0
        for _ in range(42):
            mine, theirs = board[p], board[1 - p]
            occupied = mine | theirs
            legal = [c for c in range(7) if not occupied[0, c]]
            rows = {c: landing_row(occupied, c) for c in legal}
            wins = [c for c in legal if wins_with(mine, rows[c], c)]
            threats = [c for c in legal if wins_with(theirs, rows[c], c)]
            right = wins or (threats if len(threats) == 1 else [])
            if right:
                out["observation"].append(np.stack([mine, theirs], -1).astype(np.int8))
                out["action_mask"].append(np.isin(np.arange(7), legal).astype(np.int8))
                out["right"].append(np.isin(np.arange(7), right))
                block.append(not wins)
            c = int(rng.choice(legal))
            if c in wins:
                break
            board[p][rows[c], c] = True
            p = 1 - p
    arrays = {k: np.stack(v[:n]) for k, v in out.items()}
    arrays["block"] = np.array(block[:n])
    return arrays


def train_and_score(
    overrides: list[str], train: dict[str, np.ndarray], test: dict[str, np.ndarray], steps: int
) -> tuple[float, float, float]:
    """(held-out share of wins found, of blocks found, seconds)."""
    cfg, _ = load_config("connect4-selfplay", overrides)
    info = probe_env(cfg.env, 0)
    torch.manual_seed(0)
    model = ActorCritic(info.observation_space, info.action_space, cfg.model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    t = {k: torch.from_numpy(v) for k, v in train.items()}
    started = time.perf_counter()
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        b = torch.randint(0, len(t["right"]), (256,), generator=gen)
        obs = {"observation": t["observation"][b], "action_mask": t["action_mask"][b]}
        x = model.encoder(obs)
        logits = model._mask(model._logits(obs, x, model.actor_torso(x)), obs)
        logp = logits.log_softmax(-1).masked_fill(~t["right"][b], -1e9)
        loss = -logp.logsumexp(-1).mean()  # the probability of any right move
        opt.zero_grad()
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - started
    obs = {k: torch.from_numpy(test[k]) for k in ("observation", "action_mask")}
    with torch.no_grad():
        chosen = model.act(obs, deterministic=True)[0].numpy()
    found = test["right"][np.arange(len(chosen)), chosen]
    return float(found[~test["block"]].mean()), float(found[test["block"]].mean()), seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=72_000)
    parser.add_argument("--test", type=int, default=8_000)
    parser.add_argument("--steps", type=int, default=4_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = positions(args.train + args.test, np.random.default_rng(0))
    train = {k: v[args.test :] for k, v in data.items()}
    test = {k: v[: args.test] for k, v in data.items()}
    lines = [
        "# Connect four tactics, supervised: which model learns what the heuristic punishes",
        "",
        f"Machine: {summary()}",
        f"Command: `.venv/bin/python benchmarks/connect4_tactics.py --train {args.train} "
        f"--test {args.test} --steps {args.steps}`.",
        "",
        f"{args.train:,} training and {args.test:,} held-out positions from uniformly random "
        f"games ({test['block'].mean():.0%} blocks, the rest wins); {args.steps:,} Adam steps "
        "of 256 positions (lr 1e-3), one torch thread. Found: the model's most likely legal "
        "move is a right one.",
        "",
        "| model (connect4-selfplay with) | wins found | blocks found | train s |",
        "|---|---|---|---|",
    ]
    for name, overrides in MODELS.items():
        wins, blocks, seconds = train_and_score(overrides, train, test, args.steps)
        shown = ", ".join(f"`{o}`" for o in overrides) or "the preset"
        lines.append(f"| {name}: {shown} | {wins:.1%} | {blocks:.1%} | {seconds:.0f} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    (ROOT / "benchmarks" / "results" / "connect4_tactics.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
