"""The generation-engine protocol: what generation workers and evaluators ask of an engine.

An engine turns token prompts into completions, decoding in steps (continuous batching), and
records for every token it draws the behaviour log-prob (under the distribution it was drawn
from, after temperature and top-p) and the parameter version that drew it. Its weights can be
replaced between two decode steps, in three steps so that the transfer can be anything: in
process (a dict of tensors), from disk (a Hugging Face directory or a safetensors file), or,
in an engine that supports it, over a collective:

    engine.begin_weight_update(version)    # no decoding until the commit
    engine.push_weights(tensors_or_path)   # as many calls as the transfer needs
    engine.commit_weight_update(recompute)  # tokens drawn after this carry `version`

Sequences in flight when the update commits go on under the new weights (interruptible
generation): the tokens drawn before keep their old version, the later ones carry the new.

Two engines implement it: the built-in one (surge/llm/engine.py, any device torch runs on)
and the vLLM adapter (surge/llm/vllm_engine.py, CUDA, `model.path` models). `make_engine`
(surge/llm/engines.py) builds the one `rollout.engine` names; tests/unit/test_engine_contract.py
is the suite every engine must pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeAlias, runtime_checkable

import torch


@dataclass(frozen=True)
class Request:
    """One prompt to complete."""

    key: int
    """The caller's id for it (a generation worker: group x group_size + member)."""
    prompt: tuple[int, ...]
    max_new: int | None = None
    """Its own cap on new tokens (the engine's `max_new_tokens` caps it); None: the engine's."""
    follows: int | None = None
    """The key of an earlier request whose sequence this one continues (its prompt starts
    with that request's prompt and completion): that slot's cache is reused if parked."""
    keep: bool = False
    """Park the slot when the sequence ends, for a request that `follows` it."""


@dataclass
class Completion:
    """What an engine drew for one request: a log-prob and a version per token."""

    key: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    finish: str = ""
    """`eos`, `stop` or `length`."""

    def add(self, token: int, logprob: float, version: int) -> None:
        """Record a drawn token."""
        self.tokens.append(token)
        self.logprobs.append(logprob)
        self.versions.append(version)


Weights: TypeAlias = (
    Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]] | str | os.PathLike[str]
)
"""What `push_weights` takes: tensors by their Hugging Face parameter names (a state dict,
all of it or a part), or the path of a Hugging Face directory or a .safetensors file."""


@runtime_checkable
class GenerationEngine(Protocol):
    """The protocol every generation engine implements (see the module docstring).

    Step-wise use (a generation worker's continuous batching): `submit` requests, call `step`
    until they come back, load weights between steps. One call: `generate`."""

    @property
    def weight_version(self) -> int:
        """The parameter version of the weights the next token will be drawn with."""
        ...

    @property
    def paused(self) -> bool:
        """Between `pause` and `resume`."""
        ...

    @property
    def free(self) -> int:
        """Requests that can be submitted now without waiting for a slot."""
        ...

    def submit(self, requests: Sequence[Request]) -> None:
        """Queue `requests` (ValueError for one that cannot fit the engine)."""
        ...

    def step(self) -> list[Completion]:
        """Admit queued requests and draw one token in every running sequence (nothing while
        paused); the completions that ended."""
        ...

    def generate(
        self,
        requests: Sequence[Request],
        between_steps: Callable[[], None] | None = None,
    ) -> list[Completion]:
        """Complete `requests` (in their order) on an idle engine, calling `between_steps`
        after every decode step that leaves some unfinished: a weight update there is picked
        up by the next step, so later tokens carry the new version."""
        ...

    def idle(self) -> bool:
        """Nothing queued or running."""
        ...

    def release(self, key: int) -> None:
        """Nothing will continue request `key`'s sequence: its cache may go."""
        ...

    def drop_all(self) -> None:
        """Forget every queued and running request."""
        ...

    def begin_weight_update(self, version: int) -> None:
        """Start replacing the weights with `version`'s: no decode step runs until the
        commit."""
        ...

    def push_weights(self, weights: Weights) -> None:
        """Load some or all of the new weights (tensors by name, or a path)."""
        ...

    def commit_weight_update(self, recompute: bool = True) -> None:
        """Finish the update: later tokens carry the new version. In-flight sequences go on;
        with `recompute` their cache is rebuilt with the new weights, without it they keep
        the keys and values the old weights computed."""
        ...

    def pause(self) -> None:
        """Stop decoding (in-flight sequences wait, requests may still be submitted)."""
        ...

    def resume(self) -> None:
        """Decode again after `pause`."""
        ...

    def sleep(self, level: int = 1) -> None:
        """Free the accelerator memory generation holds while something else (training)
        needs it; no-op where there is nothing to free (the CPU)."""
        ...

    def wake(self) -> None:
        """Take the memory back after `sleep` (after a level-2 sleep, push weights again)."""
        ...


def generate_by_steps(
    engine: GenerationEngine,
    requests: Sequence[Request],
    between_steps: Callable[[], None] | None = None,
) -> list[Completion]:
    """`generate` written once over `submit` and `step`, for any engine."""
    keys = [r.key for r in requests]
    if len(set(keys)) != len(keys):
        raise ValueError("generate: every request needs its own key")
    if engine.paused:
        raise RuntimeError("generate: the engine is paused (resume it first)")
    if not engine.idle():  # their completions would end here, and go to nobody
        raise RuntimeError("generate on an engine with requests in flight: step it instead")
    engine.submit(requests)
    done: dict[int, Completion] = {}
    while len(done) < len(keys):
        ended = engine.step()
        if not ended and engine.idle():
            raise RuntimeError("generate: the engine went idle with requests unfinished")
        for c in ended:
            done[c.key] = c
        if len(done) < len(keys) and between_steps is not None:
            between_steps()
        if engine.paused:
            raise RuntimeError("generate: the engine is paused (resume it to go on)")
    return [done[k] for k in keys]


def named_tensors(weights: Weights) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of any `Weights`: a path is read with safetensors (a directory:
    every *.safetensors file in it, as `save_pretrained` writes them)."""
    if isinstance(weights, str | os.PathLike):
        from safetensors.torch import load_file

        path = Path(weights)
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
        if not files:
            raise FileNotFoundError(f"{path}: no .safetensors file to load weights from")
        for f in files:
            yield from load_file(str(f)).items()
        return
    yield from weights.items() if isinstance(weights, Mapping) else weights


@dataclass(frozen=True)
class Decoding:
    """What an engine decodes and how, fixed when it is built: prompts of at most
    `max_prompt` tokens; completions of at most `max_new_tokens`, ending early at `eos_id`
    or at a `stop` sequence of token ids; tokens drawn at `temperature` (0: greedy) from the
    `top_p` nucleus, with random streams seeded by `seed`. `max_length`: the positions of a
    sequence, prompt and completion (None: `max_prompt + max_new_tokens`); a multi-turn
    caller whose contexts and turns never exceed a window W together passes W."""

    max_prompt: int
    max_new_tokens: int
    eos_id: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[tuple[int, ...], ...] = ()
    seed: int = 0
    max_length: int | None = None

    @property
    def positions(self) -> int:
        """The positions a sequence may take, prompt and completion."""
        return self.max_length or self.max_prompt + self.max_new_tokens

    def new_tokens(self, request: Request) -> int:
        """The most tokens `request`'s completion may have (its own `max_new`, within ours)."""
        return min(request.max_new or self.max_new_tokens, self.max_new_tokens)

    def check(self, requests: Sequence[Request]) -> None:
        """ValueError for a request an engine of these limits cannot take: a prompt of 0 or
        more than `max_prompt` tokens, `max_new` below 1, or a prompt and completion longer
        than the `positions` of a sequence."""
        for r in requests:
            if not 0 < len(r.prompt) <= self.max_prompt:
                raise ValueError(
                    f"a prompt of {len(r.prompt)} tokens: this engine takes 1 to "
                    f"{self.max_prompt} (raise the task's prompt length limit)"
                )
            if r.max_new is not None and r.max_new < 1:
                raise ValueError(f"max_new={r.max_new}: a request's max_new must be at least 1")
            new = self.new_tokens(r)
            if len(r.prompt) + new > self.positions:
                raise ValueError(
                    f"a prompt of {len(r.prompt)} tokens and {new} new ones: this engine's "
                    f"sequences hold {self.positions} positions"
                )

    def finish(self, tokens: Sequence[int], limit: int) -> str:
        """Why a completion of `tokens` (at most `limit`) ends with its last one: `eos`,
        `stop` (it ends with a stop sequence) or `length`; "" if it goes on."""
        if tokens[-1] == self.eos_id:
            return "eos"
        if any(len(tokens) >= len(s) and tuple(tokens[-len(s) :]) == s for s in self.stop):
            return "stop"
        return "length" if len(tokens) >= limit else ""


class PausableVersioned:
    """What every engine keeps the same way: the version of its weights and whether it is
    paused (`pause`: its `step` decodes nothing until `resume`)."""

    version = 0
    _paused = False

    @property
    def weight_version(self) -> int:
        return self.version

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
