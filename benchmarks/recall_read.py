"""How well a model reads recall's answer out of a correct summary.

    .venv/bin/python benchmarks/recall_read.py DIR [--problems 200] [--preset recall-supo]

DIR is a model directory (a warm start under `$SURGE_CACHE/warm-start/<key>`, or a run's
`run_dir/model`). Each held-out episode of the preset's `recall` runs with the env's expert
writing every fetch and every summary in full (no lazy summaries), and the model writing
the answer greedily once the question is in its context (surge/llm/sft.py
`expert_led_accuracy`, the check a recall warm start with `sft.target_accuracy` stops on).
The share answered right is the model's read: the most a policy that writes full summaries
can win. It separates the two
skills a `recall-supo` run needs, summarising (RL learns it) and reading (the warm start
must bring it).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch


def read_accuracy(model: Any, tokenizer: Any, preset: str, problems: int) -> float:
    from surge.config.load import load_config
    from surge.llm.sft import expert_led_accuracy
    from surge.llm.tasks import heldout_set, task_of

    cfg, _ = load_config(preset, [])
    task = task_of(cfg)
    return expert_led_accuracy(model, tokenizer, task, heldout_set(task, problems))


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
