"""The vLLM adapter: the generation-engine protocol (surge/llm/engine_protocol.py) over vLLM.

NOT RUN ON ANY MACHINE YET: vllm does not install where this was written, so this module is
written against vLLM's documented API (the V1 engine: `LLM`, `LLMEngine.add_request` /
`step` / `abort_request`, `SamplingParams(logprobs=0)` with `logprobs_mode=
"processed_logprobs"`, `LLM.collective_rpc`, `LLM.sleep` / `wake_up`, `LLM.reset_prefix_cache`)
and has passed no test. tests/unit/test_engine_contract.py runs it where vllm imports and a
GPU is visible; run that first on a CUDA machine.

How the protocol maps onto vLLM:
- Requests go to `llm.llm_engine` one by one (token prompts, no tokenizer: the caller's token
  ids are the truth), and each `step` is one `LLMEngine.step()`. The tokens a step returns
  get the version of the weights loaded before it, so an update between steps splits a
  completion's versions as the built-in engine does.
- Log-probs: `logprobs=0` returns the sampled token's, and `logprobs_mode=
  "processed_logprobs"` makes them those of the distribution sampled (after temperature and
  top-p), the behaviour log-prob the loss needs.
- Stops: the end-of-sequence id is a vLLM stop token; multi-token stop sequences are matched
  here on token ids (vLLM's stop strings match text) and the request is aborted there.
- Weights: in process where the engine runs in this process (the model's `load_weights`
  through `llm_engine.model_executor.driver_worker`), else with `llm.collective_rpc` on every
  worker; a path is read by each worker itself from disk. `recompute` aborts the in-flight
  requests and resubmits each as prompt + tokens so far (their cache is prefilled again with
  the new weights), after emptying the prefix cache.
- Multi-turn continuation (`follows`, `keep`) is vLLM's automatic prefix caching: a
  follower's prompt starts with its predecessor's tokens, so their cached blocks are reused.
- `pause` stops stepping; `sleep(level)` / `wake` are vLLM's sleep mode (level 1 offloads the
  weights to host memory, level 2 drops them: push weights again after `wake`).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from surge.errors import ConfigError
from surge.llm.engine_protocol import (
    Completion,
    Decoding,
    PausableVersioned,
    Request,
    Weights,
    generate_by_steps,
    named_tensors,
)

log = logging.getLogger(__name__)


@dataclass
class _Running:
    request: Request
    out: Completion
    limit: int  # new tokens at most, over every resubmission
    rid: str  # vLLM's id of the request now carrying it
    seen: int = 0  # tokens of that vLLM request already recorded


def _load_tensors(worker: Any, weights: list[tuple[str, Any]]) -> None:
    """Run in each vLLM worker (collective_rpc): load named tensors into its model."""
    worker.model_runner.model.load_weights(weights=weights)


def _load_path(worker: Any, path: str) -> None:
    """Run in each vLLM worker (collective_rpc): load a directory or safetensors file."""
    worker.model_runner.model.load_weights(weights=named_tensors(path))


class VLLMEngine(PausableVersioned):
    """A `GenerationEngine` over a vLLM `LLM` of the Hugging Face directory `model_dir`."""

    def __init__(
        self,
        model_dir: str,
        slots: int,
        decoding: Decoding,
        gpu_memory_utilization: float = 0.5,
    ) -> None:
        """Up to `slots` sequences at once, as `decoding` says. `gpu_memory_utilization`:
        vLLM's share of the GPU (weights and KV cache); half by default, as the trainer may
        share the GPU."""
        try:
            import vllm
        except ImportError as e:
            raise ConfigError(
                f"rollout.engine=vllm: vllm does not import here ({e})",
                "install vllm on a machine with a CUDA GPU, or set rollout.engine=builtin",
            ) from None
        self._vllm = vllm
        self.slots, self.decoding = slots, decoding
        options: dict[str, Any] = {
            "model": model_dir,
            "skip_tokenizer_init": True,  # token ids in and out: no text on vLLM's side
            "seed": decoding.seed,
            "max_model_len": decoding.positions,
            "max_num_seqs": slots,
            "enable_prefix_caching": True,
            "enable_sleep_mode": True,
            "gpu_memory_utilization": gpu_memory_utilization,
            "logprobs_mode": "processed_logprobs",
            # Versions are stamped per step: a step must return exactly what it decoded.
            "async_scheduling": False,
        }
        known = {f.name for f in dataclasses.fields(vllm.EngineArgs)}
        if "logprobs_mode" not in known:
            raise ConfigError(
                f"rollout.engine=vllm: vllm {vllm.__version__} has no logprobs_mode, so its "
                "log-probs are not those of the distribution sampled",
                "install a newer vllm, or set rollout.engine=builtin",
            )
        self.llm = vllm.LLM(**{k: v for k, v in options.items() if k in known or k == "model"})
        self.version = 0
        self._updating: int | None = None
        self._paused = False
        self._running: dict[str, _Running] = {}  # by vLLM request id
        self._ids = itertools.count()
        self.tokens_generated = 0

    # ------------------------------------------------------------------ the protocol

    @property
    def free(self) -> int:
        return max(0, self.slots - len(self._running))

    def idle(self) -> bool:
        return not self._running

    def submit(self, requests: Sequence[Request]) -> None:
        self.decoding.check(requests)
        for r in requests:
            run = _Running(r, Completion(r.key), self.decoding.new_tokens(r), rid="")
            self._add(run, r.prompt)

    def step(self) -> list[Completion]:
        if self._updating is not None:
            raise RuntimeError("a decode step during a weight update: commit it first")
        if self._paused or not self._running:
            return []
        done = []
        for output in self.llm.llm_engine.step():
            run = self._running.get(output.request_id)
            if run is None:
                continue  # aborted (a stop, a recompute) after it was scheduled
            sample = output.outputs[0]
            ids = list(sample.token_ids)
            for i in range(run.seen, len(ids)):
                token = ids[i]
                run.seen += 1
                if self._append(run, token, sample.logprobs[i][token].logprob):
                    break
            if not run.out.finish and output.finished:
                # vLLM ended it (max_tokens, or a stop token we did not see as the last one)
                run.out.finish = "eos" if ids and ids[-1] == self.decoding.eos_id else "length"
            if run.out.finish:
                del self._running[run.rid]
                if not output.finished:
                    self.llm.llm_engine.abort_request([run.rid])
                done.append(run.out)
        return done

    def generate(
        self, requests: Sequence[Request], between_steps: Callable[[], None] | None = None
    ) -> list[Completion]:
        return generate_by_steps(self, requests, between_steps)

    def release(self, key: int) -> None:
        """Nothing to free: vLLM's prefix cache evicts blocks nobody uses."""

    def drop_all(self) -> None:
        if self._running:
            self.llm.llm_engine.abort_request(list(self._running))
        self._running.clear()

    def begin_weight_update(self, version: int) -> None:
        if self._updating is not None:
            raise RuntimeError(f"a weight update to version {self._updating} is under way")
        self._updating = version

    def push_weights(self, weights: Weights) -> None:
        if self._updating is None:
            raise RuntimeError("push_weights before begin_weight_update")
        if isinstance(weights, str) or hasattr(weights, "__fspath__"):
            path = str(weights)
            model = self._in_process_model()
            if model is not None:
                model.load_weights(weights=named_tensors(path))
            else:
                self.llm.collective_rpc(_load_path, args=(path,))
            return
        pairs = [(name, t.detach()) for name, t in named_tensors(weights)]
        model = self._in_process_model()
        if model is not None:
            model.load_weights(weights=pairs)
        else:  # pickled to each worker process: CPU tensors travel, CUDA ones may not
            self.llm.collective_rpc(_load_tensors, args=([(n, t.cpu()) for n, t in pairs],))

    def commit_weight_update(self, recompute: bool = True) -> None:
        if self._updating is None:
            raise RuntimeError("commit_weight_update before begin_weight_update")
        self.version, self._updating = self._updating, None
        running = list(self._running.values())
        if recompute and running:
            self.llm.llm_engine.abort_request([run.rid for run in running])
            self._running.clear()
        # Blocks the old weights computed must not be reused by new prompts; vLLM refuses
        # while running requests hold blocks (keep_cache: those go on with them anyway).
        if self.llm.reset_prefix_cache() is False and recompute:  # older vLLMs return None
            log.warning("vLLM kept its prefix cache at version %d", self.version)
        if recompute:
            for run in running:
                self._add(run, run.request.prompt + tuple(run.out.tokens))

    def sleep(self, level: int = 1) -> None:
        if self._running:
            raise RuntimeError("sleep with sequences in flight: their cache would be lost")
        self.llm.sleep(level=level)

    def wake(self) -> None:
        self.llm.wake_up()
        self.llm.reset_prefix_cache()

    # ------------------------------------------------------------------ internals

    def _add(self, run: _Running, prompt: tuple[int, ...]) -> None:
        """Hand `run` to vLLM as a new request for what is left of its completion."""
        d = self.decoding
        sampling = self._vllm.SamplingParams(
            n=1,
            temperature=d.temperature,
            top_p=d.top_p,
            max_tokens=run.limit - len(run.out.tokens),
            logprobs=0,
            stop_token_ids=[d.eos_id] if d.eos_id is not None and d.eos_id >= 0 else [],
            seed=d.seed * 1_000_003 + next(self._ids),  # a request's own stream, reproducible
            detokenize=False,
        )
        run.rid, run.seen = f"{run.request.key}.{next(self._ids)}", 0
        self._running[run.rid] = run
        self.llm.llm_engine.add_request(run.rid, {"prompt_token_ids": list(prompt)}, sampling)

    def _append(self, run: _Running, token: int, logprob: float) -> bool:
        """Record a token; True if the sequence ended with it (as the built-in engine ends)."""
        out = run.out
        out.add(token, float(logprob), self.version)
        self.tokens_generated += 1
        out.finish = self.decoding.finish(out.tokens, run.limit)
        return bool(out.finish)

    def _in_process_model(self) -> Any | None:
        """The model object when vLLM runs it in this process (one GPU, no engine-core
        process), else None (then weights go over `collective_rpc`)."""
        executor = getattr(self.llm.llm_engine, "model_executor", None)
        worker = getattr(executor, "driver_worker", None)
        worker = getattr(worker, "worker", worker)  # V1 wraps the worker
        runner = getattr(worker, "model_runner", None)
        return getattr(runner, "model", None)
