"""LoRA against full fine-tuning on arith-grpo, for the same wall-clock budget, from the preset's
warm start as a `model.path` model; and the saved adapters scored in plain transformers.

    .venv/bin/python benchmarks/lora.py [--seconds 600] [--full-seconds S] [--r 8] [--alpha 16]
        [--lr 0.001] [--targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]

1. The preset's supervised warm start (cached under `$SURGE_CACHE`, trained first where it is
   not) is copied to WORK/base: a Hugging Face directory, the base of both runs.
2. `surge train arith-grpo model.path=WORK/base sft.steps=0` twice, each stopped by
   `max_train_time_s` (`--seconds`; `--full-seconds` for full fine-tuning, default the same),
   under benchmarks/peers/memmon.py (peak PSS and RSS of the run's process tree): with LoRA
   (`model.lora.*`, `grpo.lr=--lr`) and with every weight trained (the preset's settings).
3. Per run: held-out greedy accuracy (the preset's 500 problems) at version 0 (the evaluation
   worker's first row) and of the last checkpoint (`surge eval`); completion tokens generated
   and trained per second; the trainer's trained parameters and the bytes they hold with their
   gradients and AdamW's two moments (16 per float32 parameter; the frozen base weights are
   held either way).
4. The LoRA run's run_dir/model loaded with PEFT onto WORK/base in plain transformers, the
   held-out problems decoded greedily with `generate` (its saved generation config) and
   scored with the task's verifier, beside `surge eval`'s score.

Writes benchmarks/results/lora.json (the machine, date and command in `provenance`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "peers"))
sys.path.insert(0, str(REPO))
import memmon  # noqa: E402
from machine import summary  # noqa: E402

PRESET = "arith-grpo"
SURGE = str(REPO / ".venv" / "bin" / "surge")
ALL_LINEAR = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
START_ALLOWANCE_S = 300.0
"""Start-up and the last checkpoint, beyond the training budget, before the monitor stops a run."""


def base_model(work: Path) -> Path:
    """The preset's warm start (trained into the cache where it is not there), copied to
    work/base."""
    from surge.config.load import load_config
    from surge.llm.setup import model_directory

    cfg, _ = load_config(PRESET, [])
    cached = model_directory(cfg, work / "warm-start-run", resuming=False)
    base = work / "base"
    shutil.copytree(cached, base)
    return base


def trained_parameters(base: Path, lora: list[str]) -> int:
    """The floats the trainer optimises (and publishes) with these overrides."""
    from transformers import AutoConfig

    from surge.config.load import load_config
    from surge.llm.setup import count_parameters

    cfg, _ = load_config(PRESET, lora)
    return count_parameters(AutoConfig.from_pretrained(base), cfg.model.lora)


def train(name: str, base: Path, work: Path, seconds: float, overrides: list[str]) -> dict:
    run_dir = work / name
    cmd = [
        SURGE, "train", PRESET, f"model.path={base}", "sft.steps=0", f"run_dir={run_dir}",
        "total_env_steps=1000000000", f"max_train_time_s={seconds}", "log.progress=false",
        "log.interval_s=5", *overrides,
    ]  # fmt: skip
    print(f"{name}: {' '.join(cmd[1:])}", flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    mem = memmon.run(cmd, timeout=seconds + START_ALLOWANCE_S, env=env, cwd=REPO)
    if mem["exit_code"] != 0:
        raise RuntimeError(f"{name}: the run failed (exit code {mem['exit_code']})")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "trained_tokens_per_s" in r]
    evals = [r for r in rows if "eval/accuracy" in r]
    start = next(r["eval/accuracy"] for r in evals if r["eval/policy_version"] == 0)
    wall, previous, generated, trained = 0.0, 0.0, 0.0, 0.0
    for r in train_rows:
        wall = r["wall_time_s"]
        generated += r["tokens_per_s"] * (wall - previous)
        trained += r["trained_tokens_per_s"] * (wall - previous)
        previous = wall
    final = evaluate(run_dir)
    n = trained_parameters(base, overrides)
    return {
        "run": name,
        "overrides": overrides,
        "train_seconds": round(wall, 1),
        "versions": train_rows[-1]["policy_version"],
        "completions": train_rows[-1]["env_steps"],
        "accuracy_start": start,
        "accuracy_final": final["accuracy"],
        "gain_points": round(100 * (final["accuracy"] - start), 1),
        "evaluations": [
            [r["wall_time_s"], r["eval/policy_version"], r["eval/accuracy"]] for r in evals
        ],
        "generated_tokens_per_s": round(generated / wall, 1),
        "trained_tokens_per_s": round(trained / wall, 1),
        "trained_parameters": n,
        "trainer_state_mb": round(16 * n / 2**20, 2),
        "peak_pss_mb": mem["peak_pss_mb"],
        "peak_rss_mb": mem["peak_rss_mb"],
        "foreign_cores": mem["foreign_cores"],
    }


def evaluate(run_dir: Path) -> dict:
    """`surge eval` of the run's last checkpoint (its eval.json)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([SURGE, "eval", str(run_dir)], check=True, env=env, cwd=REPO)
    return json.loads((run_dir / "eval.json").read_text())


def peft_accuracy(base: Path, run_dir: Path) -> dict:
    """The run's saved adapters loaded with PEFT onto `base` in plain transformers; greedy
    `generate` on the held-out problems, scored by the task's verifier."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from surge.config.load import load_config
    from surge.llm.tasks import heldout_set, task_of

    torch.set_num_threads(1)
    adapter = run_dir / "model"
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(adapter)
    generation = GenerationConfig.from_pretrained(adapter)
    cfg, _ = load_config(str(run_dir / "config.yaml"), [])
    task = task_of(cfg)
    problems = heldout_set(task, cfg.task.heldout)
    started, solved = time.perf_counter(), 0
    with torch.no_grad():
        for problem in problems:
            inputs = tokenizer(problem.prompt, return_tensors="pt")
            out = model.generate(**inputs, generation_config=generation)
            text = tokenizer.decode(
                out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True
            )
            solved += task.reward(problem, text) >= 1.0
    return {
        "problems": len(problems),
        "accuracy": solved / len(problems),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=600.0, help="training budget of each run")
    p.add_argument("--full-seconds", type=float, help="full fine-tuning's (default --seconds)")
    p.add_argument("--r", type=int, default=8)
    p.add_argument("--alpha", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3, help="LoRA's grpo.lr")
    p.add_argument("--targets", default=ALL_LINEAR)
    p.add_argument("--work", type=Path, help="where the runs go (default: a new temp dir)")
    p.add_argument("--out", type=Path, default=HERE / "results" / "lora.json")
    args = p.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="surge-lora-"))
    work.mkdir(parents=True, exist_ok=True)
    full_seconds = args.full_seconds or args.seconds
    base = base_model(work)
    lora = [
        f"model.lora.r={args.r}", f"model.lora.alpha={args.alpha}",
        f"model.lora.target_modules=[{args.targets}]", f"grpo.lr={args.lr}",
    ]  # fmt: skip
    runs = [
        train("lora", base, work, args.seconds, lora),
        train("full", base, work, full_seconds, []),
    ]
    peft = peft_accuracy(base, work / "lora")
    surge_eval = runs[0]["accuracy_final"]
    result = {
        "provenance": {
            "machine": summary(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": " ".join(["python benchmarks/lora.py", *sys.argv[1:]]),
        },
        "preset": PRESET,
        "seconds": {"lora": args.seconds, "full": full_seconds},
        "runs": runs,
        "peft": {
            **peft,
            "surge_eval_accuracy": surge_eval,
            "difference_points": round(100 * (peft["accuracy"] - surge_eval), 1),
        },
        "work": str(work),
    }
    if full_seconds != args.seconds:
        result["note"] = (
            f"Full fine-tuning trained for {full_seconds:.0f} s, LoRA for {args.seconds:.0f} s "
            "(`--full-seconds`)."
        )
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for r in runs:
        print(
            f"{r['run']}: {r['accuracy_start']:.1%} -> {r['accuracy_final']:.1%} in "
            f"{r['train_seconds']:.0f} s ({r['versions']} versions), {r['trained_parameters']:,} "
            f"trained parameters, {r['generated_tokens_per_s']:,.0f} tokens/s, peak PSS "
            f"{r['peak_pss_mb']:,.0f} MB"
        )
    print(f"PEFT in plain transformers: {peft['accuracy']:.1%} (surge eval {surge_eval:.1%})")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
