"""LLM RL with your own model directory, dataset file and reward function.

Three things replace the built-ins, each by a setting:
- `model.path`: a Hugging Face causal LM directory (weights, config.json, tokenizer files),
  loaded offline. Any Llama, Mistral or Qwen2 checkpoint works; here, so that the example
  runs on a machine with no downloads, the model a `surge train arith-grpo` run wrote
  (run_dir/model), which already knows how to add.
- `task.name`: a local .jsonl (or .parquet) file with `prompt` and `answer` columns; other
  columns are passed to the reward function. `make_dataset` writes one: additions whose
  answers are also scored for being close.
- `task.reward_fn`: `module:function` with the signature `f(prompt, completion, **meta)`
  returning a float; `meta` holds `answer` and the file's other columns.

Run from the repository root (surge puts it on sys.path, so `examples` imports):

    .venv/bin/surge train arith-grpo                                   # once: a trained model
    .venv/bin/python -m examples.llm_own_task runs/sums.jsonl          # the dataset
    .venv/bin/surge train arith-grpo model.path=runs/<that run>/model \\
        task.name=runs/sums.jsonl task.kwargs={} task.reward_fn=examples.llm_own_task:close_sum
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path


def close_sum(prompt: str, completion: str, answer: str, **meta: object) -> float:
    """1 for the exact sum, partial credit for being within `tolerance`, else 0."""
    digits = ""
    for ch in completion.strip():
        if not ch.isdigit():
            break
        digits += ch
    if not digits:
        return 0.0
    error = abs(int(digits) - int(answer))
    tolerance = int(str(meta.get("tolerance", 5)))
    return 1.0 if error == 0 else max(0.0, 0.5 * (1 - error / tolerance))


def make_dataset(path: Path, rows: int = 5000, seed: int = 0) -> None:
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for _ in range(rows):
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            f.write(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b), "tolerance": 5}))
            f.write("\n")


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("runs/sums.jsonl")
    make_dataset(out)
    print(f"wrote {out}")
