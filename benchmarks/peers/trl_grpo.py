"""TRL's GRPOTrainer on surge's arithmetic task, from the same warm-start checkpoint: the peer of
benchmarks/llm.py.

    benchmarks/.venvs/trl/bin/python benchmarks/peers/trl_grpo.py --model DIR --out LOG.jsonl \
        --seconds 480 [--prompts 16 --generations 8 --lr 1e-4 --max-new-tokens 4]

The task, its held-out problems and the scoring are surge's own (surge/llm/tasks.py, imported
from the repository: they need only the standard library), and held-out accuracy is measured
with the same greedy decoding of the same 500 problems every `--eval-every` steps. The clock
stops during evaluation, so TRL is timed on training alone (surge evaluates in a separate
process). Writes JSONL rows: `{"t", "step", "accuracy"}` per evaluation and
`{"t", "step", "completion_tokens"}` per logged step.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    AutoTokenizer,
    TrainerCallback,
)
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from surge.llm.tasks import Arithmetic, heldout_set, problem_at  # noqa: E402


def greedy_accuracy(model, tokenizer, problems, max_new_tokens: int) -> float:
    """Greedy exact match with transformers' generate (left-padded batch)."""
    prompts = [tokenizer.bos_token + p.prompt for p in problems]
    tokenizer.padding_side = "left"
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        out = model.generate(
            **batch, max_new_tokens=max_new_tokens, do_sample=False,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        )  # fmt: skip
    model.train(was_training)
    texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return sum(Arithmetic.reward(p, t) for p, t in zip(problems, texts, strict=True)) / len(
        problems
    )


class Clock(TrainerCallback):
    """Evaluates every `every` steps with the clock stopped; stops training after `seconds`."""

    def __init__(self, model, tokenizer, problems, every, seconds, log, max_new_tokens) -> None:
        self.model, self.tokenizer, self.problems = model, tokenizer, problems
        self.every, self.seconds, self.log = every, seconds, log
        self.max_new_tokens = max_new_tokens
        self.paused = 0.0
        self.started = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.started - self.paused

    def evaluate(self, step: int) -> None:
        t0 = time.monotonic()
        acc = greedy_accuracy(self.model, self.tokenizer, self.problems, self.max_new_tokens)
        self.paused += time.monotonic() - t0
        self.log({"t": round(self.now(), 3), "step": step, "accuracy": acc})

    def on_train_begin(self, args, state, control, **kw):
        self.started = time.monotonic()
        self.evaluate(0)

    def on_step_end(self, args, state, control, **kw):
        if state.global_step % self.every == 0:
            self.evaluate(state.global_step)
        if self.now() >= self.seconds:
            control.should_training_stop = True

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "num_tokens" in logs:
            self.log({"t": round(self.now(), 3), "step": state.global_step, **logs})


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seconds", type=float, default=480)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--max-new-tokens", type=int, default=4)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    task = Arithmetic(2)
    # The same stream of training problems as surge's run with this seed (problem k).
    rows = [problem_at(task, "train", args.seed, k) for k in range(200_000)]
    data = Dataset.from_list(
        [{"prompt": tokenizer.bos_token + r.prompt, "answer": r.answer} for r in rows]
    )
    out = args.out.open("w")

    def log(row: dict) -> None:
        out.write(json.dumps(row) + "\n")
        out.flush()

    def reward(prompts, completions, answer, **kw) -> list[float]:
        return [Arithmetic.reward(_Problem(a), c) for c, a in zip(completions, answer, strict=True)]

    config = GRPOConfig(
        output_dir=str(args.out.parent / "trl-out"),
        per_device_train_batch_size=args.prompts * args.generations,
        num_generations=args.generations,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        beta=0.0,
        num_iterations=1,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        logging_steps=5,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        max_steps=10**6,
        seed=args.seed,
        shuffle_dataset=False,
    )
    held = heldout_set(task, 500)
    clock = Clock(model, tokenizer, held, args.eval_every, args.seconds, log, args.max_new_tokens)
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=config, train_dataset=data,
        processing_class=tokenizer, callbacks=[clock],
    )  # fmt: skip
    trainer.train()
    clock.evaluate(trainer.state.global_step)
    out.close()
    return 0


class _Problem:
    def __init__(self, answer: str) -> None:
        self.answer = answer


if __name__ == "__main__":
    random.seed(0)
    sys.exit(main())
