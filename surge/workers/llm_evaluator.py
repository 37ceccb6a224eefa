"""The evaluation worker of LLM RL: held-out accuracy of the newest published version.

Greedy decoding of the task's held-out problems (the same `task.heldout` problems in every
evaluation and every run of the task), scored by the task's verifier: `eval/accuracy`; with
`task.pass_k` > 0 also `eval/pass@k`. It keeps the schedule of every evaluation worker
(surge/workers/evaluation.py): every `eval.every_versions` versions, and once at the start, so
the first row is the starting weights (version 0: the warm start).
"""

from __future__ import annotations

import numpy as np

from surge.llm.engine import Engine, Request
from surge.llm.model import decode_completion, encode_prompt, load_model, stop_sequences
from surge.llm.tasks import Problem, heldout_set, make_task
from surge.streams.params import ParameterService
from surge.streams.results import ResultWriter
from surge.workers.base import Binding, RunContext, derive_seed, limit_torch_threads
from surge.workers.evaluation import ScheduledEvaluations
from surge.workers.weights import flat_to_model


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
        assert ctx.model_dir is not None
        self.model, self.tokenizer = load_model(ctx.model_dir)
        self.model.eval()
        limit_torch_threads(1)
        self.flat = np.zeros(ctx.n_params, np.float32)
        self.task = make_task(cfg.task.name, cfg.task.kwargs, cfg.task.reward_fn)
        self.problems = heldout_set(self.task, cfg.task.heldout)
        self.prompts = [tuple(encode_prompt(self.tokenizer, p.prompt)) for p in self.problems]
        self.seed = derive_seed(cfg.seed, "eval-llm", b.index)
        self.index, self.workers = b.index, cfg.eval.workers
        self.fresh = ctx.start_version == 0
        self._start_schedule(from_version_zero=True)

    def _engine(self, temperature: float, slots: int) -> Engine:
        r = self.cfg.rollout
        return Engine(
            self.model,
            slots=slots,
            max_prompt=max(len(p) for p in self.prompts),
            max_new_tokens=r.max_new_tokens,
            eos_id=self.tokenizer.eos_token_id,
            temperature=temperature,
            top_p=r.top_p,
            stop=stop_sequences(self.tokenizer, r.stop),
            seed=self.seed,
        )

    def _scores(self, temperature: float, samples: int) -> tuple[np.ndarray, np.ndarray]:
        """[problems, samples] rewards and completion lengths."""
        n = len(self.prompts)
        engine = self._engine(temperature, slots=min(n * samples, 512))
        engine.submit([Request(i, self.prompts[i // samples]) for i in range(n * samples)])
        rewards, lengths = np.zeros(n * samples), np.zeros(n * samples)
        while not engine.idle():
            self.control.beat()  # a long evaluation is not a hang
            for c in engine.step():
                problem: Problem = self.problems[c.key // samples]
                text = decode_completion(self.tokenizer, c.tokens)
                rewards[c.key] = self.task.reward(problem, text)
                lengths[c.key] = len(c.tokens)
        return rewards.reshape(n, samples), lengths.reshape(n, samples)

    def _evaluate(self, number: int) -> None:
        if number == 0 and self.fresh:
            version = 0  # the loaded starting weights are version 0, however far training is
        else:
            version = self.params.read(self.flat)
            flat_to_model(self.flat, self.model)
        greedy, lengths = self._scores(temperature=0.0, samples=1)
        k = self.cfg.task.pass_k
        pass_at_k = float("nan")
        if k:
            sampled, _ = self._scores(self.cfg.rollout.temperature, samples=k)
            pass_at_k = float((sampled >= 1.0).any(axis=1).mean())
        self.results.write(
            {
                "version": version,
                "problems": len(self.problems),
                "accuracy": float((greedy >= 1.0).mean()),
                "pass_at_k": pass_at_k,
                "length_mean": float(lengths.mean()),
            }
        )

    def close(self) -> None:
        pass
