"""A discrete-event simulation of surge's LLM RL pipeline: N generation workers with
continuous batching feed one trainer under the staleness rule, each stage on its own device.

It answers what two cores cannot show: the speedup of asynchronous over synchronous training
when there are 4 or 16 generation workers per trainer (the regime of LlamaRL and AReaL). It is
fed with stage costs measured on this machine (benchmarks/llm_async.py calibrates them) and
follows surge's rules, not an idealised pipeline:
- a group (G completions of one prompt) is admitted while at most (max_lag + v + 1) batches
  have been admitted by trainer version v (`rollout_capacity` in surge/algos/llm_losses.py);
  max_lag = 0 is synchronous training, which admits batch v + 1 only once v is trained;
- batch v is groups v*B .. v*B + B - 1 in admission order, trained when all of them are done;
- a generation worker decodes one token of each of its active sequences per step, costing
  `step_fixed + step_per_seq * active`; admitting a group costs the prefill of its prompt once;
- on each new version, a worker with sequences in flight recomputes their cache (surge's
  `rollout.interrupt: true`): the prefill of their groups' prompts (once per group) and of
  each sequence's tokens so far but the last; with `keep_cache` (`rollout.keep_cache: true`)
  it keeps the old cache and pays nothing;
- the trainer's update costs `train_fixed + train_per_token * tokens`, plus `publish`.
Completion lengths are drawn from measured ones. Nothing here is parallel: the clock is
simulated.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Costs:
    """Seconds, measured by benchmarks/llm_async.py (one thread per stage)."""

    step_fixed: float
    step_per_seq: float
    prefill_per_token: float
    train_fixed: float
    train_per_token: float
    publish: float
    prompt_tokens: int


@dataclass
class _Seq:
    group: int
    length: int
    done: int = 0


@dataclass
class _Worker:
    slots: int
    active: list[_Seq] = field(default_factory=list)
    joining: list[_Seq] = field(default_factory=list)  # admitted during a step: next one
    busy: bool = False
    pending_cost: float = 0.0  # prefill and cache recomputation due at its next step
    busy_s: float = 0.0


@dataclass(frozen=True)
class Result:
    trained_tokens_per_s: float
    versions_per_s: float
    trainer_busy: float
    generator_busy: float


def simulate(
    costs: Costs,
    lengths: list[int],
    workers: int,
    max_lag: int,
    groups_per_batch: int = 16,
    group_size: int = 8,
    versions: int = 200,
    slots_per_worker: int | None = None,
    seed: int = 0,
    keep_cache: bool = False,
) -> Result:
    """Run the pipeline until the trainer has made `versions` updates."""
    rng = random.Random(seed)
    B, G = groups_per_batch, group_size
    slots = slots_per_worker or max(G, 2 * B * G // workers)
    gens = [_Worker(slots) for _ in range(workers)]
    remaining: dict[int, int] = {}  # group -> sequences still generating
    tokens_of: dict[int, int] = {}  # group -> its completion tokens
    admitted = 0
    version, trained_tokens = 0, 0
    trainer_busy_until, trainer_busy_s = 0.0, 0.0
    training = False
    events: list[tuple[float, int, str, int]] = []  # (time, tiebreak, kind, worker)
    tick = 0

    def push(t: float, kind: str, w: int = -1) -> None:
        nonlocal tick
        tick += 1
        heapq.heappush(events, (t, tick, kind, w))

    def admit(now: float) -> None:
        """Admit what the staleness rule and the free slots allow, then start idle workers."""
        nonlocal admitted
        while admitted < (max_lag + version + 1) * B:
            gen = max(gens, key=free)
            if free(gen) < G:
                break
            seqs = [_Seq(admitted, rng.choice(lengths)) for _ in range(G)]
            gen.joining += seqs
            gen.pending_cost += costs.prefill_per_token * costs.prompt_tokens
            remaining[admitted] = G
            tokens_of[admitted] = sum(s.length for s in seqs)
            admitted += 1
        for w, gen in enumerate(gens):
            if gen.joining and not gen.busy:
                start_step(now, w)

    def free(gen: _Worker) -> int:
        return gen.slots - len(gen.active) - len(gen.joining)

    def start_step(now: float, w: int) -> None:
        gen = gens[w]
        gen.active += gen.joining
        gen.joining = []
        cost = costs.step_fixed + costs.step_per_seq * len(gen.active) + gen.pending_cost
        gen.pending_cost, gen.busy = 0.0, True
        gen.busy_s += cost
        push(now + cost, "step", w)

    def try_train(now: float) -> None:
        nonlocal training, trainer_busy_until, trainer_busy_s
        if training:
            return
        batch = range(version * B, (version + 1) * B)
        if any(remaining.get(g, 1) for g in batch):
            return
        tokens = sum(tokens_of[g] for g in batch)
        cost = costs.train_fixed + costs.train_per_token * tokens + costs.publish
        training, trainer_busy_until = True, now + cost
        trainer_busy_s += cost
        push(trainer_busy_until, "trained")

    now = 0.0
    admit(now)
    while version < versions:
        now, _, kind, w = heapq.heappop(events)
        if kind == "step":
            gen = gens[w]
            gen.busy = False
            still = []
            for s in gen.active:
                s.done += 1
                if s.done < s.length:
                    still.append(s)
                else:
                    remaining[s.group] -= 1
            gen.active = still
            try_train(now)
            admit(now)
            if (gen.active or gen.joining) and not gen.busy:
                start_step(now, w)
        else:  # the trainer published a version
            batch = range(version * B, (version + 1) * B)
            trained_tokens += sum(tokens_of.pop(g) for g in batch)
            for g in batch:
                del remaining[g]
            version += 1
            training = False
            for gen in gens:  # in-flight sequences continue under the new weights
                if not keep_cache:  # their cache is recomputed
                    groups = len({s.group for s in gen.active})
                    own = sum(max(s.done - 1, 0) for s in gen.active)
                    inflight = groups * costs.prompt_tokens + own
                    gen.pending_cost += costs.prefill_per_token * inflight
            admit(now)
            try_train(now)
    return Result(
        trained_tokens_per_s=trained_tokens / now,
        versions_per_s=version / now,
        trainer_busy=trainer_busy_s / now,
        generator_busy=sum(g.busy_s for g in gens) / (workers * now),
    )
