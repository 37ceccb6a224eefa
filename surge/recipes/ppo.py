"""PPO and APPO as plug-ins (surge/recipes/base.py), and their graph: SRL's
actor-policy-trainer dataflow.

    actor-i  --(inference: obs -> actions)-->  policy-(i % P)   (or inline in actor-i)
    actor-i  --(samples: segments)---------->  trainer-0
    trainer-0 --(params.default: versions)--->  policy-* (or the actors, inline)

A multi-agent run with several `policies` has these three streams once per policy (named
`inference.<policy>`, `samples.<policy>`, `params.<policy>`), a trainer per policy
(`trainer-<k>` for the k-th) and P policy workers per policy; every actor steps its envs once
for all policies and writes each policy's agents into that policy's streams.

Plus evaluation workers when `eval.workers` > 0 (surge/recipes/evaluation.py), and a league
worker for self-play games (surge/recipes/selfplay.py). The trainer runs PPO's learner
(surge/learners/ppo.py) in the trainer chassis; actors, policy workers and evaluators act
with `FlatPolicy` (models/flat_policy.py): numpy for MLPs, torch for the CNNs.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import numpy as np

from surge.config.schema import ExperimentConfig
from surge.envs.make import probe_policies
from surge.envs.selfplay import is_selfplay_id
from surge.envs.spaces import EnvInfo
from surge.errors import ConfigError, UserError
from surge.models.flat_policy import FlatPolicy
from surge.models.images import choose_encoder
from surge.models.normalize import ValueNormalizer, published_stats_size, stats_vector
from surge.models.numpy_policy import layout_size, numpy_layout
from surge.models.recurrent_state import inference_state_fields, segment_state_fields
from surge.recipes.acting import ActingHalf, acting_half, inference_stream, params_stream
from surge.recipes.base import Algorithm
from surge.recipes.checkpoint_fit import params_misfit, require_fit, torch_flat
from surge.recipes.evaluation import add_evaluators
from surge.recipes.selfplay import add_league
from surge.streams.flow import VersionBound
from surge.streams.inference import inference_layout
from surge.streams.params import params_block, params_layout
from surge.streams.sample import sample_layout
from surge.streams.transport import BlockLayout
from surge.tracking.checkpoint import latest_checkpoint, load_checkpoint
from surge.tracking.run_dir import policy_home
from surge.workers.base import PolicyContext, RunContext
from surge.workers.graph import Graph, StreamSpec, WorkerSpec, worker

POLICY = "default"
"""The one policy of a PPO graph without `policies`."""


TRAINER = "surge.learners.ppo:build"
"""The trainer's factory: the chassis with PPO's learner."""


def ppo_graph(ctx: RunContext, trainer: str = TRAINER, steps: int = 0) -> Graph:
    """The graph of `ctx`'s run: one set of streams and a trainer per policy. `trainer`: the
    trainers' factory (an on-policy plug-in of one's own puts its learner there:
    examples/my_algorithm.py); `steps`: the segments' length (0: `ppo.rollout_len`)."""
    cfg = ctx.cfg
    policies = ctx.policies or {cfg.policy_names[0]: PolicyContext(ctx.env, ctx.n_params)}
    single = len(policies) == 1
    tags = ["" if single else name for name in policies]
    trainers = [_trainer(cfg, k, tag, trainer) for k, tag in enumerate(tags)]
    half = acting_half(cfg, tags)
    streams: list[StreamSpec] = []
    layouts: dict[str, BlockLayout] = {}
    steps = steps or cfg.ppo.rollout_len
    for k, (name, policy) in enumerate(policies.items()):
        more, more_layouts = _policy_streams(
            ctx, half, trainers[k], k, name, tags[k], policy, steps
        )
        streams += more
        layouts.update(more_layouts)
    graph = Graph([*trainers, *half.servers, *half.actors], layouts, streams)
    lead, lead_params = trainers[0], params_block(next(iter(policies)))
    if is_selfplay_id(cfg.env.id):
        graph = add_league(graph, cfg, lead, lead_params, ctx.n_params)
    others = [params_block(name) for name in list(policies)[1:]]
    return add_evaluators(graph, cfg, trainer=lead, params=lead_params, more_params=others)


def _trainer(cfg: ExperimentConfig, k: int, tag: str, factory: str) -> WorkerSpec:
    """The trainer of the k-th policy: a learner in the chassis; it ends the run."""
    w, r = cfg.workers, cfg.ray
    return worker(
        "trainer", k, factory=factory, threads=w.trainer_threads, restartable=False,
        ends_run=True, cpus=r.trainer_cpus, gpus=r.trainer_gpus,
        pod="trainer" if k == 0 else f"trainer-{k}", policy=tag,
    )  # fmt: skip


def _policy_streams(
    ctx: RunContext,
    half: ActingHalf,
    trainer: WorkerSpec,
    k: int,
    name: str,
    tag: str,
    policy: PolicyContext,
    steps: int,
) -> tuple[list[StreamSpec], dict[str, BlockLayout]]:
    """A policy's inference, sample and parameter streams, and their blocks' layouts."""
    cfg, w = ctx.cfg, ctx.cfg.workers
    suffix = f".{tag}" if tag else ""
    flow = VersionBound(cfg.max_policy_lag)
    params = params_block(name)
    penv = policy.env
    rows = w.envs_per_group * penv.rows_per_env  # per env group: an env's agents are rows
    group = f"{w.envs_per_group} envs"
    if penv.agents:
        n = len(penv.agents)
        group += f" x {n} agent{'s' if n > 1 else ''}" + (f" ({name})" if tag else "")
    streams = [
        inference_stream(
            half, f"inference{suffix}", flow,
            f"a slot per env group ({cfg.total_groups} of {group}); the acting policy is "
            f"{flow.describe()}", k, tag,
        ),
        StreamSpec(
            f"samples{suffix}", "segments", f"samples{suffix}",
            half.edges({a.name: trainer.name for a in half.actors}), flow,
            f"segments of {steps} steps x {group}, each step stamped with its "
            f"policy version; {flow.depth} slot(s) per group (max_policy_lag {flow.max_lag})",
            policy=tag,
        ),
        params_stream(half, params, trainer.name, policy.n_params, tag),
    ]  # fmt: skip
    layouts = {
        f"inference{suffix}": inference_layout(
            penv.obs, penv.action, FlatPolicy.OUTPUTS, groups=cfg.total_groups,
            group_size=rows, state=inference_state_fields(cfg.model),
        ),
        f"samples{suffix}": sample_layout(
            penv.obs, penv.action, FlatPolicy.OUTPUTS, depth=flow.depth,
            steps=steps, envs=cfg.total_groups * rows, groups=cfg.total_groups,
            active=bool(penv.agents), state=segment_state_fields(cfg.model), info=penv.info,
        ),
        params: params_layout(policy.n_params),
    }  # fmt: skip
    return streams, layouts


# ---------------------------------------------------------------------- the plug-in


class PPOFamily(Algorithm):
    """`algo: ppo` (GAE on the behaviour values) and `algo: appo` (V-trace targets): the
    same graph and acting policy; their learners differ in the targets (learners/ppo.py)."""

    warm_module = "surge.learners.ppo"

    def __init__(self, name: str, vtrace: bool, mutable: tuple[str, ...] = ()) -> None:
        self.name = name
        self.vtrace = vtrace
        """V-trace targets and advantages (`appo` settings) instead of GAE."""
        self.mutable_settings = mutable

    def validate(self, cfg: ExperimentConfig) -> None:
        _check_minibatches(cfg)
        _check_recurrent(cfg)
        several = len(cfg.policy_names) > 1
        if cfg.stop_return is not None and cfg.stop_confirm and several and not cfg.eval.workers:
            raise ConfigError(
                f"stop_return with {len(cfg.policy_names)} policies: the stop check plays "
                "every policy's newest version, which only evaluation workers can",
                "set eval.workers=1, or stop_confirm=false to stop on the training mean",
            )

    def prepare(
        self, cfg: ExperimentConfig, run_dir: Path | None, checkpoint: Path | None
    ) -> RunContext:
        envs = probe_policies(cfg)  # fails on a bad env before anything runs
        for env in envs.values():
            choose_encoder(env.observation_space, cfg.model)  # and on images no encoder fits
        first = next(iter(envs.values()))
        start_version, resumes = _resume_point(cfg, first, checkpoint)
        policies = {}
        if len(envs) > 1:  # several policies: each its own size, home and resume point
            policies = _policy_contexts(cfg, envs, run_dir, checkpoint)
        return RunContext(
            cfg=cfg,
            env=first,
            run_dir=run_dir or Path("."),
            n_params=count_params(cfg, first),
            start_version=start_version,
            checkpoint=str(checkpoint) if checkpoint else None,
            resumes=resumes,
            policies=policies,
            acting_policy=ACTING,
        )

    def graph(self, ctx: RunContext) -> Graph:
        return ppo_graph(ctx)

    def describe(self, ctx: RunContext, graph: Graph) -> list[str]:
        from surge.learners.ppo import backend_name

        cfg, w = ctx.cfg, ctx.cfg.workers
        learner = backend_name(cfg, ctx.env)  # here, so a backend the model cannot use fails
        if learner == "torch":
            learner += f" {importlib.metadata.version('torch')}"
        names = ", ".join(s.name for s in graph.workers)
        return [
            f"workers: {names}; {cfg.total_envs} envs ({w.actors} actors x {w.ring_size} groups "
            f"x {w.envs_per_group}); max_policy_lag={cfg.max_policy_lag}; inference "
            f"{w.inference}; learner {learner}"
        ]

    def evaluate(self, run_dir: Path, options: list[str], video: bool) -> str:
        from surge.evaluation.checkpoint import evaluate_command

        return evaluate_command(run_dir, ACTING, checkpoint_flat, options, video)


PPO_MUTABLE = (
    "ppo.lr", "ppo.ent_coef", "ppo.clip_coef", "ppo.vf_coef", "ppo.gamma", "ppo.gae_lambda",
    "ppo.max_grad_norm",
)  # fmt: skip
"""What PPO's updaters (algos/numpy_ppo.py, algos/ppo.py) read from `ppo` at every update,
and the learner's reward statistics take on change (learners/ppo.py `settings_changed`)."""
PPO = PPOFamily("ppo", vtrace=False, mutable=PPO_MUTABLE)
APPO = PPOFamily("appo", vtrace=True, mutable=(*PPO_MUTABLE, "appo.rho_bar", "appo.c_bar"))
ACTING = "surge.models.flat_policy:flat_policy"
"""PPO's acting policy (models/flat_policy.py): numpy for MLPs, torch for the CNNs."""


def checkpoint_flat(cfg: ExperimentConfig, env: Any, state: dict[str, Any]) -> np.ndarray:
    """The published vector of the checkpoint's version: the model's parameters in the
    trainer's order, then (with `model.normalize_obs`) its observation statistics as the
    policy of that version applied them, then (with `model.value_norm`) its value
    statistics. MLPs need no torch: their parameters go in the layout's order
    (models/numpy_policy.py), which is the trainer's."""
    layout = numpy_layout(env.observation_space, env.action_space, cfg.model)
    if layout is not None:
        model = state["model"]
        flat = np.concatenate([np.asarray(model[name]).reshape(-1) for name, _ in layout.params])
        flat = flat.astype(np.float32)
    else:
        from surge.models.actor_critic import ActorCritic

        net = ActorCritic(env.observation_space, env.action_space, cfg.model)
        flat = torch_flat(net, state["model"])
    parts = [flat]
    if cfg.model.normalize_obs:
        saved = state.get("normalizer")
        if saved is None or "obs_mean" not in saved:
            raise UserError(
                "this run normalises observations (model.normalize_obs) but its checkpoint "
                "holds no observation statistics",
                "evaluate a checkpoint written by this version of surge",
            )
        mean = np.asarray(saved["obs_mean"], np.float64)
        var = np.asarray(saved["obs_var"], np.float64)
        parts.append(stats_vector(mean, var))
    if cfg.model.value_norm:
        value_norm = ValueNormalizer()
        value_norm.load_state_dict(state["learner"]["value_norm"])
        parts.append(value_norm.published())
    return np.concatenate(parts).astype(np.float32)


def batch_steps(cfg: ExperimentConfig) -> int:
    """Env steps in one training batch: one segment of every env."""
    return cfg.ppo.rollout_len * cfg.total_envs


def count_params(cfg: ExperimentConfig, env: EnvInfo) -> int:
    """Size of the published flat vector: the weights, then the observation and value
    statistics (models/normalize.py). MLP policies are counted without importing torch (the
    controller stays small: it only watches); other models are built once to count."""
    m = cfg.model
    stats = published_stats_size(env.observation_space, m.normalize_obs, m.value_norm)
    layout = numpy_layout(env.observation_space, env.action_space, cfg.model)
    if layout is not None:
        return layout_size(layout) + stats
    from surge.models.actor_critic import ActorCritic
    from surge.models.weights import count_params as count

    return count(ActorCritic(env.observation_space, env.action_space, cfg.model)) + stats


def _resume_point(cfg: ExperimentConfig, env: EnvInfo, checkpoint: Path | None) -> tuple[int, int]:
    """(the version to start from, how many times the run has been resumed), after checking
    that the checkpoint fits the network this config builds."""
    if checkpoint is None:
        return 0, 0
    state = load_checkpoint(checkpoint)
    require_fit(checkpoint, "network", _misfit(cfg, env, state["model"]))
    return int(state["version"]), int(state["resumes"]) + 1


def _policy_contexts(
    cfg: ExperimentConfig,
    envs: dict[str, EnvInfo],
    run_dir: Path | None,
    checkpoint: Path | None,
) -> dict[str, PolicyContext]:
    """Every policy's view, size and resume point; a resumed run finds each policy's newest
    checkpoint in its home (the first policy's is `checkpoint`)."""
    contexts = {}
    for k, (name, env) in enumerate(envs.items()):
        own = checkpoint
        if checkpoint is not None and k > 0:
            assert run_dir is not None, "a resumed run has its directory"
            own = latest_checkpoint(policy_home(run_dir, name))
            if own is None:
                raise UserError(
                    f"{run_dir} has a checkpoint of policy {cfg.policy_names[0]} but none of "
                    f"policy {name} (in {policy_home(run_dir, name)})",
                    "resume a run whose trainers all wrote a checkpoint",
                )
        start, _ = _resume_point(cfg, env, own)
        contexts[name] = PolicyContext(
            env, count_params(cfg, env), start, str(own) if own else None
        )
    return contexts


def _misfit(cfg: ExperimentConfig, env: EnvInfo, saved: dict[str, Any]) -> str:
    """Why a checkpoint's model state does not fit the model this config builds ("" if it
    does). MLPs are compared by parameter names and shapes without importing torch."""
    layout = numpy_layout(env.observation_space, env.action_space, cfg.model)
    if layout is not None:
        return params_misfit(layout.params, saved)
    import torch

    from surge.models.actor_critic import ActorCritic

    model = ActorCritic(env.observation_space, env.action_space, cfg.model)
    try:
        model.load_state_dict({k: torch.as_tensor(v) for k, v in saved.items()})
    except RuntimeError as e:
        return str(e)
    return ""


def _check_minibatches(cfg: ExperimentConfig) -> None:
    batch, p = batch_steps(cfg), cfg.ppo
    if batch % p.minibatches:
        divisors = [d for d in range(1, min(batch, 4096) + 1) if batch % d == 0]
        near = sorted(divisors, key=lambda d: abs(d - p.minibatches))[:3]
        raise ConfigError(
            f"ppo.minibatches: the batch of {batch} steps (ppo.rollout_len {p.rollout_len} x "
            f"{cfg.total_envs} envs) does not divide into {p.minibatches} minibatches",
            f"set ppo.minibatches to a divisor of {batch} (e.g. "
            f"{', '.join(map(str, sorted(near)))}), or change ppo.rollout_len or "
            "workers.actors / workers.ring_size / workers.envs_per_group",
        )


def _check_recurrent(cfg: ExperimentConfig) -> None:
    """A recurrent core's settings: burn-in inside a segment, minibatches of whole
    sequences, and the torch backend."""
    m, p = cfg.model, cfg.ppo
    if m.core == "none":
        if p.burn_in:
            raise ConfigError(
                f"ppo.burn_in={p.burn_in} applies to recurrent models, and model.core is none",
                "set model.core=gru or lstm, or ppo.burn_in=0",
            )
        return
    if p.burn_in >= p.rollout_len:
        raise ConfigError(
            f"ppo.burn_in={p.burn_in} must be below ppo.rollout_len={p.rollout_len}: the "
            "burn-in steps of a segment are left out of the loss, so none would remain",
            f"set ppo.burn_in below {p.rollout_len} (or raise ppo.rollout_len)",
        )
    envs = cfg.total_envs
    if envs % p.minibatches:
        divisors = [d for d in range(1, envs + 1) if envs % d == 0]
        raise ConfigError(
            f"ppo.minibatches={p.minibatches}: with model.core={m.core} a minibatch is whole "
            f"segments, and the {envs} envs do not divide into {p.minibatches} minibatches",
            f"set ppo.minibatches to a divisor of {envs} ({', '.join(map(str, divisors))}), "
            "or change workers.actors / workers.ring_size / workers.envs_per_group",
        )
    if m.backend == "numpy":
        raise ConfigError(
            f"model.backend=numpy covers feed-forward MLPs; model.core={m.core} is recurrent",
            "set model.backend to auto or torch (auto picks torch for recurrent models)",
        )
    if is_selfplay_id(cfg.env.id):
        # a league opponent is one player object per snapshot, shared by the games that
        # drew it: it has nowhere to keep a per-game recurrent state (surge/streams/league.py)
        raise ConfigError(
            f"model.core={m.core} with a self-play env ({cfg.env.id}): league opponents play "
            "feed-forward only",
            "set model.core=none for self-play",
        )
