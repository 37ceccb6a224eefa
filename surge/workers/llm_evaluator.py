"""The evaluation worker of LLM RL: held-out accuracy of the newest published version.

Greedy decoding of the task's held-out problems (the same `task.heldout` problems in every
evaluation and every run of the task), scored by the task's verifier: `eval/accuracy`; with
`task.pass_k` > 0 also `eval/pass@k`. It keeps the schedule of every evaluation worker
(surge/workers/evaluation.py): every `eval.every_versions` versions, and once at the start, so
the first row is the starting weights (version 0: the warm start).
"""

from __future__ import annotations

import numpy as np

from surge.llm.evaluate import score
from surge.llm.lora import trained_parameters
from surge.llm.model import load_model
from surge.llm.run import model_dir_of
from surge.llm.tasks import heldout_set, more_summaries, task_of
from surge.models.weights import flat_to_tensors
from surge.seeds import derive_seed
from surge.streams.params import ParameterService
from surge.streams.results import ResultWriter
from surge.threads import limit_torch_threads
from surge.workers.base import Binding, RunContext
from surge.workers.evaluation import ScheduledEvaluations

# Sequences decoded at once. Training gets the CPU first, so a background evaluation may take
# its time: 128 instead of 512 takes 30% longer and halves its memory (1M-parameter model).
SLOTS = 128


def build(ctx: RunContext, b: Binding) -> LLMEvaluator:
    return LLMEvaluator(ctx, b)


class LLMEvaluator(ScheduledEvaluations):
    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = self.cfg = ctx.cfg
        self.name = b.name
        self.finished = False
        self.control = b.control
        self.params = ParameterService(b.transport, b.port_of_kind("versions").block)
        self.inbox = b.transport.channel(b.inbox)
        self.results = ResultWriter(b.transport, b.port("evaluations"))
        self.model, self.tokenizer = load_model(model_dir_of(ctx), cfg.model.lora, cfg.seed)
        self.trained = trained_parameters(self.model)  # the flat vector's layout
        self.model.eval()
        limit_torch_threads(1)
        self.flat = np.zeros(ctx.n_params, np.float32)
        self.task = task_of(cfg)
        # A multi-turn task with more summaries allowed in evaluation is also scored so.
        more = task_of(cfg, evaluation=True) if more_summaries(cfg) else None
        self.task_more_summaries = more
        self.problems = heldout_set(self.task, cfg.task.heldout)
        self.seed = derive_seed(cfg.seed, "eval-llm", b.index)
        self.index, self.workers = b.index, cfg.eval.workers
        self.fresh = ctx.start_version == 0
        self._start_schedule(from_version_zero=True)

    def _evaluate(self, number: int) -> None:
        if number == 0 and self.fresh:
            version = 0  # the loaded starting weights are version 0, however far training is
        else:
            version = self.params.read(self.flat)
            flat_to_tensors(self.flat, self.trained)
        beat = self.control.beat  # a long evaluation is not a hang
        args = (self.model, self.tokenizer, self.task, self.problems, self.cfg.rollout)
        greedy = score(*args, temperature=0.0, on_step=beat, slots=SLOTS)
        more = float("nan")
        if self.task_more_summaries is not None:
            more = score(
                self.model, self.tokenizer, self.task_more_summaries, self.problems,
                self.cfg.rollout, temperature=0.0, on_step=beat, slots=SLOTS,
            ).accuracy  # fmt: skip
        k = self.cfg.task.pass_k
        pass_at_k = float("nan")
        if k:
            t = self.cfg.rollout.temperature
            pass_at_k = score(*args, t, k, self.seed, beat, SLOTS).pass_at_k
        self.results.write(
            {
                "version": version,
                "problems": len(self.problems),
                "accuracy": greedy.accuracy,
                "pass_at_k": pass_at_k,
                "length_mean": float(greedy.lengths.mean()),
                "accuracy_eval_summaries": more,
            }
        )

    def close(self) -> None:
        pass
