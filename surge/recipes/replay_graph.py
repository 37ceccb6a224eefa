"""The graph of replay-based algorithms (the DQN family, SAC), and what they share: the
replay's setup, its settings' checks, the run's context.

    actor-a   --(inference: obs -> actions)-->  policy-(a % P)   (or inline in actor-a)
    actor-a   --(samples: segments)---------->  replay-(a % S)   [acknowledged; RatioBound]
    replay-s  --(batches: sampled rows)------>  trainer-0         (and trained rows back)
    replay-s  keeps its transitions in its storage block, replay.<s>
    trainer-0 --(params.default: versions)--->  policy-* (or the actors), evaluators

The actors pace themselves on the trainer's versions (the insert half of the rate limiter,
streams/flow.py `RatioBound`); the replay workers hold samples (the other half) and keep the
actors' slots by acknowledging each segment they consumed (streams/sample.py). Plus
evaluation workers when `eval.workers` > 0 (surge/recipes/evaluation.py).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from surge.algos.replay_stores import store_fields
from surge.algos.transition_store import ReplaySetup, Spec, replay_of, ring_length
from surge.config.schema import ExperimentConfig
from surge.envs.atari import is_atari_id
from surge.envs.make import probe_policies
from surge.envs.spaces import EnvInfo
from surge.errors import ConfigError, UserError
from surge.models.images import choose_encoder
from surge.models.recurrent_state import inference_state_fields, segment_state_fields
from surge.recipes.acting import ActingHalf, acting_half, inference_stream, params_stream
from surge.recipes.evaluation import add_evaluators
from surge.rewards.models import check_scorer
from surge.streams.flow import RatioBound, SampleToInsertRatio
from surge.streams.inference import inference_layout
from surge.streams.params import params_block, params_layout
from surge.streams.replay_blocks import (
    BATCHES,
    batch_layout,
    saved_replay,
    storage_block,
    storage_layout,
    stored_layout,
)
from surge.streams.sample import Outputs, output_fields, sample_layout
from surge.streams.stats import stats_layout
from surge.streams.transport import BlockLayout
from surge.tracking.checkpoint import load_checkpoint
from surge.workers.base import RunContext
from surge.workers.graph import Edge, Graph, StreamSpec, worker
from surge.workers.replay_shard import error_buffer, min_error_buffer
from surge.workers.reward_model import STAT_NAMES, STATS

POLICY = "default"
SLOTS = 2
"""Segments in flight per env group: the actor writes one while the replay copies the other."""


def check_replay(cfg: ExperimentConfig, nstep: int = 1, per_item: int = 1) -> None:
    """The replay settings any replay-based algorithm needs to hold (ConfigError naming the
    field otherwise). `per_item`: transitions a sampled item trains (a sequence's)."""
    r, w = cfg.replay, cfg.workers
    least = min_error_buffer(cfg, nstep, per_item)
    if r.error_buffer and r.error_buffer < least:
        raise ConfigError(
            f"replay.error_buffer={r.error_buffer:g} is below {least:g}: with segments of "
            f"replay.segment_len={r.segment_len} steps from {cfg.total_envs} envs, "
            f"{r.ratio:g} samples per insert and batches of {r.batch_size}, the actors and "
            "the replay could wait for each other forever",
            f"set replay.error_buffer to at least {least:g}, or 0 for the default",
        )
    if r.capacity < r.batch_size:
        raise ConfigError(
            f"replay.capacity={r.capacity} is below replay.batch_size={r.batch_size}: a batch "
            "would hold the same transitions many times",
            f"raise replay.capacity to at least {r.batch_size} (or lower replay.batch_size)",
        )
    if r.min_size > r.capacity:
        raise ConfigError(
            f"replay.min_size={r.min_size} exceeds replay.capacity={r.capacity}: sampling "
            "would never start",
            "lower replay.min_size below replay.capacity",
        )
    if cfg.total_env_steps < r.min_size:
        raise ConfigError(
            f"total_env_steps={cfg.total_env_steps} is below replay.min_size={r.min_size}: "
            "the run would end before its first update (none trains until that many "
            "transitions are stored)",
            f"raise total_env_steps above {r.min_size} or lower replay.min_size",
        )
    if r.shards > w.actors:
        raise ConfigError(
            f"replay.shards={r.shards} with workers.actors={w.actors}: each shard takes the "
            "segments of its own actors",
            f"set replay.shards to at most {w.actors}",
        )
    if cfg.policies:
        raise ConfigError(
            f"policies: algo {cfg.algo} trains one policy", "remove policies and policy_mapping"
        )


def probe(cfg: ExperimentConfig, run: bool = True) -> EnvInfo:
    """The env's spaces (and a check that an encoder fits its observations). `run` False:
    only the graph is drawn, and no reward model is trained for it."""
    env = next(iter(probe_policies(cfg).values()))
    choose_encoder(env.observation_space, cfg.model)
    _check_frames(cfg, env)
    check_scorer(cfg.reward_model, log=lambda text: print(f"  {text}", file=sys.stderr), build=run)
    if env.agents:
        raise ConfigError(
            f"env.id={cfg.env.id}: algo {cfg.algo} trains single-agent envs",
            "use algo=ppo (or mappo settings) for multi-agent envs",
        )
    return env


def _check_frames(cfg: ExperimentConfig, env: EnvInfo) -> None:
    """A mode that scores frames needs the env's recorded frame to be an RGB image, uint8
    [H, W, 3], as vision-language models read them."""
    r = cfg.reward_model
    if r.mode not in ("clg", "clg+state"):
        return
    spec = env.info[r.frame_key]  # recorded: config/load.py checked env.info_keys
    if spec.dtype != np.uint8 or len(spec.shape) != 3 or spec.shape[2] != 3:
        raise ConfigError(
            f"reward_model.frame_key={r.frame_key!r}: env {cfg.env.id} records it as "
            f"{spec.dtype} {list(spec.shape)}, not an RGB frame (uint8 [H, W, 3]); "
            f"reward_model.mode={r.mode} scores RGB frames",
            "record the env's camera image as uint8 [H, W, 3] in its info (surge/envs/"
            "driving.py does with frames=true)",
        )


def frame_field(cfg: ExperimentConfig, env: EnvInfo) -> str | None:
    """An Atari frame stack, stored one frame per step (algos/transition_store.py), or None."""
    obs = env.obs
    if not is_atari_id(cfg.env.id) or list(obs) != ["obs"]:
        return None
    spec = obs["obs"]
    stacked = len(spec.shape) == 3 and spec.shape[0] == cfg.env.atari.frame_stack > 1
    return "obs" if stacked else None


def shard_actors(cfg: ExperimentConfig, shard: int) -> list[int]:
    return [a for a in range(cfg.workers.actors) if a % cfg.replay.shards == shard]


def replay_setup(
    cfg: ExperimentConfig,
    env: EnvInfo,
    gamma: float,
    nstep: int,
    outputs: Outputs,
    run_dir: Path | None = None,
    checkpoint: Path | None = None,
    sequence: int = 0,
    trained: int = 1,
    core_size: int = 0,
) -> ReplaySetup:
    """Each shard's storage: its actors' env columns, rings sized to its share of
    `replay.capacity` (ConfigError when that is too short for a segment, or a sequence). A
    resumed run (`checkpoint`) with `replay.checkpoint` starts from the replay saved beside
    it, if every shard's file fits this config. `sequence` > 0: sequence replay of that many
    steps (R2D2), each training `trained` of them, with `core_size` floats of stored state."""
    r, w = cfg.replay, cfg.workers
    fields = output_fields(outputs)
    specs = []
    for s in range(r.shards):
        columns = len(shard_actors(cfg, s)) * w.ring_size * w.envs_per_group * env.rows_per_env
        frames = frame_field(cfg, env)
        stack = env.obs["obs"].shape[0] if frames else 1
        # rings hold the shard's share of `replay.capacity` whole, plus the steps a write
        # makes unsampleable ahead of it (algos/transition_store.py `_invalidated`) and the n-step
        # tail (a sequence's length: what is stored before its first item is whole)
        margin = r.segment_len + stack + (sequence or nstep)
        share = ring_length(r.capacity // r.shards, columns)  # steps per column
        length = share + margin
        need = 2 * margin  # the share of the capacity holds a margin's worth
        if sequence:  # and a whole sequence; rings of whole segments (sequences start there)
            need = margin + sequence
            length = -(-length // r.segment_len) * r.segment_len
        spec = Spec(
            columns=columns,
            length=length,
            obs={k: (a.shape, a.dtype.str) for k, a in env.obs.items()},
            action=(env.action.shape, env.action.dtype.str),
            segment=r.segment_len,
            frames=frames,
            outputs=tuple(fields),
            output_shapes=tuple(shape for _, shape in fields.values()),
            sequence=sequence,
            trained=trained,
            core_size=core_size,
            store="sequences" if sequence else "transitions",
        )
        if share + margin < need:
            what = (
                f"a whole sequence of dqn.sequence_len={sequence} steps"
                if sequence
                else f"a segment of replay.segment_len={r.segment_len}, the n-step tail and "
                "the frame stack"
            )
            raise ConfigError(
                f"replay.capacity={r.capacity}: {share} steps per env column over "
                f"{columns * r.shards} columns, and a column's ring needs {need - margin} "
                f"({what})",
                f"raise replay.capacity to at least {(need - margin) * columns * r.shards}, or "
                "shorten the segments" + (" or sequences" if sequence else ""),
            )
        specs.append(spec)
    restored = (
        checkpoint is not None
        and run_dir is not None
        and cfg.replay.checkpoint
        and all(
            stored_layout(saved_replay(run_dir, s)) == store_fields(spec)
            for s, spec in enumerate(specs)
        )
    )
    return ReplaySetup(tuple(specs), gamma, nstep, restored, batch=r.batch_size)


def replay_context(
    cfg: ExperimentConfig,
    env: EnvInfo,
    run_dir: Path | None,
    checkpoint: Path | None,
    n_params: int,
    setup: ReplaySetup,
    acting: str,
    explore: str,
    kind: str,
) -> RunContext:
    """The run's context, resuming at a checkpoint's version (written by the learner of
    `kind`) when given one."""
    start_version = resumes = env_steps = 0
    if checkpoint is not None:
        state = load_checkpoint(checkpoint)
        if state.get("kind") != kind:
            raise UserError(
                f"{checkpoint} was not written by an algo {cfg.algo} run",
                "resume it with the config it was trained with",
            )
        start_version, resumes = int(state["version"]), int(state["resumes"]) + 1
        env_steps = int(state["env_steps"])
    return RunContext(
        cfg=cfg,
        env=env,
        run_dir=run_dir or Path("."),
        n_params=n_params,
        start_version=start_version,
        checkpoint=str(checkpoint) if checkpoint else None,
        resumes=resumes,
        acting_policy=acting,
        explore=explore,
        start_env_steps=env_steps,
        family=setup,
    )


def replay_graph(ctx: RunContext, trainer_factory: str, threads: int, outputs: Outputs) -> Graph:
    """Trainer, replay shards, policy workers (or inline inference), actors, evaluators."""
    cfg, w, r, ray = ctx.cfg, ctx.cfg.workers, ctx.cfg.replay, ctx.cfg.ray
    trainer = worker(
        "trainer", 0, factory=trainer_factory, threads=threads, restartable=False,
        ends_run=True, cpus=ray.trainer_cpus, gpus=ray.trainer_gpus, pod="trainer",
    )  # fmt: skip
    # The replay shards share the trainer's pod: the batches (and their priorities) cross
    # no node; the actors' segments do, by the segment bridge (surge/streams/ray_bridge.py).
    replays = [worker("replay", s, cpus=ray.actor_cpus, pod="trainer") for s in range(r.shards)]
    half = acting_half(cfg, [""])
    round_ = cfg.total_groups * ctx.group_rows * r.segment_len  # one segment per group
    # a restored replay samples at once: the actors need not fill min_size again
    setup = replay_of(ctx)
    min_size = 0 if setup.restored else r.min_size
    spec = setup.shards[0]
    batch = setup.batch_items
    buffer = error_buffer(cfg, setup.nstep, spec.trained, batch, ctx.env.rows_per_env)
    limiter = SampleToInsertRatio(r.ratio, min_size, buffer)
    # a version trains a batch of items, each `trained` transitions
    flow = RatioBound(limiter, batch * spec.trained, round_, ctx.start_version, SLOTS)
    params = params_block(POLICY)
    scoring = cfg.reward_model.mode != "env"  # a reward-model worker between actors and replay
    reward_model = worker("reward-model", 0, threads=1, cpus=ray.actor_cpus, pod="trainer")
    shard_of = {a.name: f"replay-{a.index % r.shards}" for a in half.actors}
    streams = [
        inference_stream(
            half, "inference", flow,
            f"a slot per env group ({cfg.total_groups} of {w.envs_per_group} envs): the "
            "newest version's action, explored by the actor",
        ),
        _samples_stream(ctx, half, flow, shard_of, reward_model.name if scoring else None),
        *[
            StreamSpec(
                storage_block(s.index), "storage", storage_block(s.index),
                (Edge(s.name, s.name),),
                note=f"{setup.shards[s.index].capacity:,} items: "
                f"{setup.shards[s.index].columns} env columns x "
                f"{setup.shards[s.index].length} steps",
            )
            for s in replays
        ],
        StreamSpec(
            BATCHES, "batches", BATCHES,
            tuple(Edge(s.name, trainer.name, (s.index,)) for s in replays),
            note=f"batches of {batch} {spec.store}, {r.prefetch} sampled ahead per shard; batch u "
            f"from shard u % {r.shards}; the trainer writes each transition's TD error back",
        ),
        params_stream(half, params, trainer.name, ctx.n_params),
    ]  # fmt: skip
    if scoring:
        m, scored_slots = cfg.reward_model, _scored_slots(cfg)
        streams += [
            StreamSpec(
                "scored", "segments", "scored", half.edges(shard_of, reward_model.name),
                replace(flow, slots=scored_slots),
                f"the segments with scored rewards ({m.mode}), acknowledged by the replay "
                f"shard that takes them ({scored_slots} slots per group: room for what one "
                "call scores)",
            ),
            StreamSpec(
                STATS, "stats", STATS, (Edge(reward_model.name, trainer.name, wake=False),),
                note="the reward model's counters, read by the trainer when it logs",
            ),
        ]  # fmt: skip
    layouts = _replay_layouts(ctx, outputs, scoring)
    stages = [reward_model] if scoring else []
    workers = [trainer, *replays, *stages, *half.servers, *half.actors]
    graph = Graph(workers, layouts, streams)
    return add_evaluators(graph, cfg, trainer=trainer, params=params)


def _samples_stream(
    ctx: RunContext,
    half: ActingHalf,
    flow: RatioBound,
    shard_of: dict[str, str],
    reward_model: str | None,
) -> StreamSpec:
    """The actors' segments to their replay shards, or, with a reward model, to it."""
    r, m = ctx.cfg.replay, ctx.cfg.reward_model
    if reward_model is None:
        return StreamSpec(
            "samples", "segments", "samples", half.edges(shard_of), flow,
            f"segments of {r.segment_len} steps, acknowledged by the replay shard that "
            f"takes them ({SLOTS} slots per group); {flow.describe()}",
        )  # fmt: skip
    return StreamSpec(
        "samples", "segments", "samples",
        half.edges({a.name: reward_model for a in half.actors}),
        replace(flow, slots=m.max_pending),
        f"segments of {r.segment_len} steps with each step's {', '.join(ctx.env.info)}, "
        "acknowledged by the reward model once scored and handed on "
        f"({m.max_pending} slots per group: the segments that may wait for scoring)",
    )  # fmt: skip


def _scored_slots(cfg: ExperimentConfig) -> int:
    """What the model scores in one call is handed on at once: as many slots as wait for it."""
    return max(SLOTS, cfg.reward_model.max_pending)


def _replay_layouts(ctx: RunContext, outputs: Outputs, scoring: bool) -> dict[str, BlockLayout]:
    """The blocks of the replay graph's streams."""
    cfg, env, r = ctx.cfg, ctx.env, ctx.cfg.replay
    setup = replay_of(ctx)
    spec = setup.shards[0]
    recurrent = cfg.model.core != "none"  # the actors carry a state (models/recurrent_state.py)

    def segments(depth: int, info: Any = None) -> BlockLayout:
        """The layout of a stream of the actors' segments, `depth` slots per group."""
        return sample_layout(
            env.obs, env.action, outputs, depth=depth, steps=r.segment_len,
            envs=cfg.total_groups * ctx.group_rows, groups=cfg.total_groups,
            state=segment_state_fields(cfg.model) if recurrent else None, acked=True, info=info,
        )  # fmt: skip

    layouts: dict[str, BlockLayout] = {
        "inference": inference_layout(
            env.obs, env.action, outputs, groups=cfg.total_groups, group_size=ctx.group_rows,
            state=inference_state_fields(cfg.model) if recurrent else None,
        ),
        "samples": segments(SLOTS),
        BATCHES: batch_layout(r.shards, r.prefetch, setup.batch_items, spec),
        params_block(POLICY): params_layout(ctx.n_params),
        **{storage_block(s): storage_layout(shard) for s, shard in enumerate(setup.shards)},
    }  # fmt: skip
    if scoring:  # the actors' stream holds the segments waiting for the model, with info
        layouts["scored"] = segments(_scored_slots(cfg))
        layouts["samples"] = segments(cfg.reward_model.max_pending, env.info)
        layouts[STATS] = stats_layout(STAT_NAMES)
    return layouts


def describe_replay(ctx: RunContext, graph: Graph, learner: str) -> list[str]:
    cfg, w, r = ctx.cfg, ctx.cfg.workers, ctx.cfg.replay
    names = ", ".join(spec.name for spec in graph.workers)
    lines = [
        f"workers: {names}; {cfg.total_envs} envs ({w.actors} actors x {w.ring_size} groups x "
        f"{w.envs_per_group}); inference {w.inference}; learner {learner}",
        f"replay: {r.capacity:,} transitions in {r.shards} shard(s), batches of "
        f"{r.batch_size}, {r.ratio:g} samples per insert after {r.min_size:,}, "
        + ("prioritised" if r.prioritized else "uniform"),
    ]
    m = cfg.reward_model
    if m.mode != "env":
        model = "no model" if m.mode == "state" else m.fn or m.path
        lines.append(
            f"reward model: {m.mode} ({model}), batches of {m.batch_size} frames, up to "
            f"{m.max_pending} segments per group waiting"
        )
    if ctx.checkpoint is not None:
        if replay_of(ctx).restored:
            lines.append("the replay is restored from the one saved with the checkpoint")
        elif r.checkpoint:
            lines.append("the replay starts empty: no saved replay fits this config")
        else:
            lines.append("the replay starts empty (replay.checkpoint is off)")
    return lines
