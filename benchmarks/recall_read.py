"""How well a model reads recall's answer out of a correct summary.

    .venv/bin/python benchmarks/recall_read.py DIR [--problems 200] [--preset recall-supo]

DIR is a model directory (a warm start under `$SURGE_CACHE/warm-start/<key>`, or a run's
`run_dir/model`). Each held-out episode of the preset's `recall` runs with the env's expert
writing every fetch and every summary in full (no lazy summaries), and the model writing
the answer greedily once the question is in its context. The share answered right is the
model's read: the most a policy that writes full summaries can win. It separates the two
skills a `recall-supo` run needs, summarising (RL learns it) and reading (the warm start
must bring it).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np
import torch


def read_accuracy(model: Any, tokenizer: Any, preset: str, problems: int) -> float:
    from surge.config.load import load_config
    from surge.llm.episodes import EpisodeEngine
    from surge.llm.tasks import heldout_set, task_of

    cfg, _ = load_config(preset, ["task.kwargs.lazy=0.0"])
    task = task_of(cfg)
    engine = EpisodeEngine(tokenizer)
    held = heldout_set(task, problems)
    right = sum(
        read_once(model, engine, task, int(p.meta["seed"]), np.random.default_rng([7, n]))
        for n, p in enumerate(held)
    )
    return right / problems


def read_once(model: Any, engine: Any, task: Any, seed: int, rng: np.random.Generator) -> bool:
    """One episode: the expert fetches and summarises in full, the model answers greedily."""
    from surge.llm.textenv import run_now, text_episode

    env = task.make_env()
    prompt, _ = env.reset(seed)
    newline = engine.encode("\n")[0]

    async def write(context: list[int], max_new: int, summarize: bool) -> Any:
        if env.knows_question and not summarize:  # the answer: the model's, greedy
            ids, out = list(context), []
            with torch.no_grad():
                while len(out) < max_new and newline not in out:
                    out.append(int(model(torch.tensor([ids + out])).logits[0, -1].argmax()))
            finish = "stop" if out[-1] == newline else "length"
            return out, [0.0] * len(out), [0] * len(out), finish
        tokens = engine.encode(env.expert(rng, summarize=summarize))[:max_new]
        return tokens, [0.0] * len(tokens), [0] * len(tokens), "stop"

    trajectory = run_now(text_episode(env, engine, prompt, task.limits, write))
    return trajectory is not None and trajectory.reward > 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--problems", type=int, default=200)
    parser.add_argument("--preset", default="recall-supo")
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    accuracy = read_accuracy(model, tokenizer, args.preset, args.problems)
    json.dump({"model": args.model_dir, "problems": args.problems, "read": accuracy}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
