"""The generation engine: batched sampling with a KV cache and continuous batching.

A fixed number of slots decode together, one token each per `step`. A sequence that ends
(end-of-sequence token, a stop string, or its new-token limit) frees its slot, and the next
queued prompt is prefilled into it before the following step, so the batch never waits for
its longest sequence. Every sampled token comes with its behaviour log-prob (under the
distribution it was drawn from, after temperature and top-p) and the parameter version that
drew it.

New weights mid-sequence (AReaL's interruptible generation): `set_version(v, recompute=True)`
recomputes the cache of every in-flight prefix with the new weights, and decoding continues;
the tokens drawn before keep their old version. `recompute=False` keeps the cache the old
weights computed (PipelineRL's in-flight weight update): no prefill, at the price of later
tokens attending to slightly stale keys and values. The generation worker chooses between
these and finishing in-flight sequences under the old weights first (`rollout.interrupt`,
`rollout.keep_cache`).

Multi-turn episodes continue a sequence instead of prefilling its whole context again each
turn: a request with `keep` parks its slot when it finishes (the cache stays; parked slots
count as free, and a new sequence that finds no empty slot evicts the least recently parked
one), and a later request that `follows` it, whose prompt starts with the parked tokens,
runs only the tokens after them. A follower whose predecessor was evicted or whose prompt
does not start with its tokens is prefilled in full: the result is the same, only slower.

`Engine` is the built-in implementation of the generation-engine protocol
(surge/llm/engine_protocol.py; vLLM's adapter is the other): it runs the Hugging Face model's
own weights through surge/llm/lean.py. Callers build engines with `make_engine`
(surge/llm/engines.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from surge.llm.engine_protocol import (
    Completion,
    Decoding,
    PausableVersioned,
    Request,
    Weights,
    generate_by_steps,
    named_tensors,
)
from surge.llm.lean import KVCache, LeanLlama

__all__ = ["Completion", "Decoding", "Engine", "Request", "nucleus"]


@dataclass
class _Slot:
    request: Request
    out: Completion
    position: int  # where the last sampled token goes in the cache
    limit: int  # new tokens at most


@dataclass
class _Parked:
    """A finished sequence left in its slot: the cache holds every token but the last."""

    row: int
    tokens: tuple[int, ...]  # prompt and completion

    def continued_by(self, prompt: tuple[int, ...]) -> bool:
        n = len(self.tokens)
        return len(prompt) >= n and tuple(prompt[:n]) == self.tokens


class Engine(PausableVersioned):
    """The built-in generation engine (module docstring): a `GenerationEngine`."""

    def __init__(self, model: object, slots: int, decoding: Decoding) -> None:
        """`model` decodes up to `slots` sequences at once as `decoding` says; each request
        must fit its `positions`."""
        self.lean = LeanLlama(model)
        self.slots: list[_Slot | None] = [None] * slots
        self.parked: dict[int, _Parked] = {}  # by request key, least recently parked first
        self.decoding = decoding
        self.cache = self.lean.new_cache(slots, decoding.positions)
        # No sequence writes the cache's last position (its last token is never run through
        # the model): idle rows decode there, harmlessly.
        self.scratch = decoding.positions - 1
        self.queue: deque[Request] = deque()
        self.version = 0
        self._updating: int | None = None  # the version being loaded, between begin and commit
        self._paused = False
        self.device = self.lean.device  # the model's: every tensor made here goes there
        self.rng = torch.Generator(device=self.device).manual_seed(decoding.seed)
        self.tokens_generated = 0
        self.prefill_tokens = 0  # tokens prefilled (admission and recompute)
        self.extend_tokens = 0  # tokens run to continue parked sequences

    # ------------------------------------------------------------------ the caller's side

    def submit(self, requests: Sequence[Request]) -> None:
        self.decoding.check(requests)
        self.queue.extend(requests)

    @property
    def active(self) -> int:
        return sum(s is not None for s in self.slots)

    @property
    def free(self) -> int:
        return len(self.slots) - self.active - len(self.queue)

    def idle(self) -> bool:
        """Nothing queued or decoding (parked slots wait for nobody)."""
        return not self.queue and self.active == 0

    def release(self, key: int) -> None:
        """Free the slot of request `key` if it is parked: nothing will continue it."""
        self.parked.pop(key, None)

    def generate(
        self, requests: Sequence[Request], between_steps: Callable[[], None] | None = None
    ) -> list[Completion]:
        """Complete `requests` (in their order); `between_steps` runs after each decode step
        (a weight update there is picked up by the next one)."""
        return generate_by_steps(self, requests, between_steps)

    def sleep(self, level: int = 1) -> None:
        """A no-op: the cache stays allocated (on the CPU there is nothing to hand back, and
        in-flight sequences live in it)."""

    def wake(self) -> None:
        """A no-op (see `sleep`)."""

    def begin_weight_update(self, version: int) -> None:
        if self._updating is not None:
            raise RuntimeError(f"a weight update to version {self._updating} is under way")
        self._updating = version

    def push_weights(self, weights: Weights) -> None:
        """Copy tensors into the model's parameters by their Hugging Face names (a path: its
        safetensors files); tied weights are one tensor, so either name updates both."""
        if self._updating is None:
            raise RuntimeError("push_weights before begin_weight_update")
        own = self.lean.model.state_dict()  # detached tensors sharing the parameters' storage
        with torch.no_grad():
            for name, tensor in named_tensors(weights):
                if name not in own:
                    raise ValueError(f"push_weights: the model has no parameter {name!r}")
                if own[name].shape != tensor.shape:
                    raise ValueError(
                        f"push_weights: {name} is {tuple(own[name].shape)}, got "
                        f"{tuple(tensor.shape)}"
                    )
                if own[name].data_ptr() != tensor.data_ptr():  # the model's own: written
                    own[name].copy_(tensor)

    def commit_weight_update(self, recompute: bool = True) -> None:
        if self._updating is None:
            raise RuntimeError("commit_weight_update before begin_weight_update")
        version, self._updating = self._updating, None
        self.set_version(version, recompute)

    def set_version(self, version: int, recompute: bool) -> None:
        """The model's weights were replaced in place by version `version` (a caller that
        writes the model itself; others go through begin/push/commit). In-flight sequences
        go on under them: with `recompute` their cache is rebuilt with the new weights (AReaL);
        without, they keep the keys and values the old weights computed (PipelineRL's
        in-flight update), and each later token is drawn by the new weights attending to them.
        Either way a token's log-prob is that of the distribution it was drawn from."""
        self.version = version
        self.lean.refresh()
        if recompute:
            self.parked.clear()  # their cache is the old weights': a follower prefills anew
        busy = [(i, s) for i, s in enumerate(self.slots) if s is not None]
        if not busy or not recompute:
            return
        # The cache holds every token but the last sampled one of each sequence: the prompt,
        # computed once for the sequences that share it (a group), then each one's own tokens.
        with torch.inference_mode():
            self._prefill([i for i, _ in busy], [list(s.request.prompt) for _, s in busy])
            grown = [(i, s) for i, s in busy if len(s.out.tokens) > 1]
            if not grown:
                return
            width = max(len(s.out.tokens) - 1 for _, s in grown)
            tokens = self._padded([s.out.tokens[:-1] for _, s in grown], width)
            rows = self._tensor([i for i, _ in grown])
            starts = self._tensor([len(s.request.prompt) for _, s in grown])
            lengths = self._tensor([len(s.out.tokens) - 1 for _, s in grown])
            self.lean.extend(self.cache, rows, tokens, starts, lengths)

    def drop_all(self) -> None:
        self.queue.clear()
        self.slots = [None] * len(self.slots)
        self.parked.clear()

    def step(self) -> list[Completion]:
        """Fill free slots from the queue, then decode one token in every busy slot; the
        sequences that ended. Nothing while paused."""
        if self._updating is not None:
            raise RuntimeError("a decode step during a weight update: commit it first")
        if self._paused:
            return []
        with torch.inference_mode():
            done = self._admit()
            busy = [i for i, s in enumerate(self.slots) if s is not None]
            if not busy:
                return done
            width = busy[-1] + 1  # decode rows 0..width-1: a prefix view, no gather
            tokens, positions = [0] * width, [self.scratch] * width  # one tensor each
            for i in busy:
                slot = self.slots[i]
                assert slot is not None
                tokens[i] = slot.out.tokens[-1]
                positions[i] = slot.position
            logits = self.lean.decode(
                self._rows(width), self._tensor(tokens), self._tensor(positions)
            )
            sampled, logprobs = self._sample(logits[busy])
            for i, token, logprob in zip(busy, sampled.tolist(), logprobs.tolist(), strict=True):
                slot = self.slots[i]
                assert slot is not None
                slot.position += 1
                finished = self._append(slot, token, logprob)
                if finished:
                    done.append(slot.out)
                    self.slots[i] = None
                    if slot.request.keep:
                        self._park(i, slot)
            return done

    # ------------------------------------------------------------------ internals

    def _tensor(self, values: list[int]) -> torch.Tensor:
        """A list of ints as a tensor on the engine's device (one copy)."""
        return torch.tensor(values, device=self.device)

    def _padded(self, rows: list[list[int]] | list[tuple[int, ...]], width: int) -> torch.Tensor:
        """Token rows right-padded with 0 to `width`, as one [len(rows), width] tensor built
        on the host and copied to the device once."""
        out = torch.zeros(len(rows), width, dtype=torch.long)
        for n, row in enumerate(rows):
            out[n, : len(row)] = torch.tensor(row)
        return out.to(self.device)

    def _rows(self, width: int) -> KVCache:
        c = self.cache
        return KVCache([k[:width] for k in c.keys], [v[:width] for v in c.values])

    def _admit(self) -> list[Completion]:
        """Start queued requests: followers of parked sequences in their slots, the others in
        empty slots, evicting the least recently parked sequences when none is empty."""
        if not self.queue:
            return []
        held = {p.row for p in self.parked.values()}
        empty = [i for i, s in enumerate(self.slots) if s is None and i not in held]
        take = min(len(empty) + len(held), len(self.queue))
        if take == 0:
            return []
        continued: list[tuple[_Parked, Request]] = []
        fresh: list[Request] = []
        for _ in range(take):
            r = self.queue.popleft()
            parked = None if r.follows is None else self.parked.pop(r.follows, None)
            if parked is not None and parked.continued_by(r.prompt):
                continued.append((parked, r))
                continue
            if parked is not None:
                empty.append(parked.row)  # superseded by its follower
            fresh.append(r)
        while len(empty) < len(fresh):
            empty.append(self.parked.pop(next(iter(self.parked))).row)
        rows = empty[: len(fresh)] + [p.row for p, _ in continued]
        requests = fresh + [r for _, r in continued]
        if not continued:
            logits = self._prefill(rows, [list(r.prompt) for r in fresh])
        elif not fresh:
            logits = self._continue(continued)
        else:
            fresh_logits = self._prefill(rows[: len(fresh)], [list(r.prompt) for r in fresh])
            logits = torch.cat([fresh_logits, self._continue(continued)])
        sampled, logprobs = self._sample(logits)
        done = []
        drawn = zip(rows, requests, sampled.tolist(), logprobs.tolist(), strict=True)
        for i, r, token, logprob in drawn:
            limit = self.decoding.new_tokens(r)
            slot = _Slot(r, Completion(r.key), position=len(r.prompt), limit=limit)
            if self._append(slot, token, logprob):
                done.append(slot.out)
                if r.keep:
                    self._park(i, slot)
            else:
                self.slots[i] = slot
        return done

    def _park(self, row: int, slot: _Slot) -> None:
        key = slot.request.key
        self.parked.pop(key, None)  # a reused key: the newest sequence is the one kept
        self.parked[key] = _Parked(row, slot.request.prompt + tuple(slot.out.tokens))

    def _continue(self, continued: list[tuple[_Parked, Request]]) -> torch.Tensor:
        """Run each follower's tokens after its parked sequence's cache (the parked last
        sampled token first: it was never run) into that slot; the next-token logits."""
        missing = [r.prompt[len(p.tokens) - 1 :] for p, r in continued]
        tokens = self._padded(missing, max(len(m) for m in missing))
        lengths = [len(m) for m in missing]
        self.extend_tokens += sum(lengths)
        return self.lean.extend(
            self.cache,
            self._tensor([p.row for p, _ in continued]),
            tokens,
            self._tensor([len(p.tokens) - 1 for p, _ in continued]),
            self._tensor(lengths),
        )

    def _prefill(self, rows: list[int], prefixes: list[list[int]]) -> torch.Tensor:
        """Run `prefixes` into cache `rows`; the next-token logits of each. A prefix shared by
        several rows (a GRPO group's G samples of one prompt) runs once, and its keys and
        values are copied to the other rows: G times less prefill work for a group."""
        first: dict[tuple[int, ...], int] = {}
        which = [first.setdefault(tuple(p), len(first)) for p in prefixes]
        unique = list(first)
        width = max(len(p) for p in unique)
        tokens = self._padded(unique, width)
        lengths = self._tensor([len(p) for p in unique])
        self.prefill_tokens += sum(len(p) for p in unique)
        if len(unique) == len(prefixes):
            return self.lean.prefill(self.cache, self._tensor(rows), tokens, lengths)
        owner = [rows[which.index(u)] for u in range(len(unique))]  # a row that runs prefix u
        logits = self.lean.prefill(self.cache, self._tensor(owner), tokens, lengths)
        source = self._tensor([owner[u] for u in which])
        target = self._tensor(rows)
        for layer in self.cache.keys + self.cache.values:
            layer[target, :, :width] = layer[source, :, :width]
        return logits[self._tensor(which)]

    def _sample(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens and their log-probs under the distribution they were drawn from."""
        temperature, top_p = self.decoding.temperature, self.decoding.top_p
        if temperature == 0:
            logp = torch.log_softmax(logits, dim=-1)
            tokens = logp.argmax(dim=-1)
            return tokens, logp.gather(1, tokens[:, None])[:, 0]
        logp = torch.log_softmax(logits / temperature, dim=-1)
        if top_p < 1.0:
            logp = nucleus(logp, top_p)
        tokens = torch.multinomial(logp.exp(), 1, generator=self.rng)[:, 0]
        return tokens, logp.gather(1, tokens[:, None])[:, 0]

    def _append(self, slot: _Slot, token: int, logprob: float) -> bool:
        """Record a sampled token; True if the sequence ended with it."""
        out = slot.out
        out.add(token, logprob, self.version)
        self.tokens_generated += 1
        out.finish = self.decoding.finish(out.tokens, slot.limit)
        return bool(out.finish)


def nucleus(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """Log-probs renormalised over the smallest set of most likely tokens whose probability
    reaches `top_p` (the most likely token always stays)."""
    sorted_logp, order = logp.sort(dim=-1, descending=True)
    before = sorted_logp.exp().cumsum(dim=-1) - sorted_logp.exp()  # mass above each token
    drop_sorted = before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    kept = logp.masked_fill(drop, float("-inf"))
    return torch.log_softmax(kept, dim=-1)
