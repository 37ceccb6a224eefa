"""GRPO as a plug-in (surge/recipes/base.py), and the LLM RL graph (the asynchronous GRPO
family; LlamaRL / AReaL / verl's dataflow):

    generator-i --(rollouts: finished groups)--> rewarder-0 --(scored)--> trainer-0
        (with grpo.kl_coef > 0: rewarder-0 --(scored)--> reference-0 --(referenced)--> trainer-0)
    trainer-0 --(params.default: versions)--> generator-* (and the evaluators)
    evaluator-j --(evaluations: held-out accuracy)--> trainer-0

Generation is SRL's policy worker and actor in one (the prompt is the observation, the verifier
the environment), the reward worker is its own stage so a slow verifier never stalls
generation, and the rollout stream's version bound is AReaL's staleness rule
(streams/rollouts.py). The trainer runs GRPO's learner (surge/learners/grpo.py) in the
trainer chassis.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from surge.config.schema import ExperimentConfig
from surge.envs.spaces import EnvInfo
from surge.errors import ConfigError, UserError
from surge.llm.run import LLMRun
from surge.recipes.base import Algorithm
from surge.recipes.evaluation import EVALUATIONS
from surge.recipes.ppo import POLICY
from surge.streams.flow import VersionBound
from surge.streams.params import params_block, params_layout
from surge.streams.results import results_layout
from surge.streams.rollouts import rollout_layout
from surge.workers.base import RunContext
from surge.workers.graph import Edge, Graph, StreamSpec, WorkerSpec, worker

LLM_EVAL_FIELDS = (
    "version",
    "problems",
    "accuracy",
    "pass_at_k",
    "length_mean",
    "accuracy_eval_summaries",  # multi-turn: at context.eval_max_summaries (NaN: not set)
)


def grpo_graph(ctx: RunContext) -> Graph:
    cfg, env, n_params = ctx.cfg, ctx.env, ctx.n_params
    r, g, ray = cfg.rollout, cfg.grpo, cfg.ray
    # Placement on a Ray cluster (runtime/placement.py): the stages that read every group
    # (reward, reference) and the evaluators share the trainer's pod; each generation worker
    # is a pod of its own, so generators spread over the nodes as PPO's policy pods do. The
    # rollout stream and the parameter versions cross nodes by surge/streams/ray_bridge.py.
    pod = "trainer"
    trainer = worker(
        "trainer", 0, factory="surge.learners.grpo:build", threads=g.threads,
        restartable=False, ends_run=True, cpus=ray.trainer_cpus, gpus=ray.trainer_gpus, pod=pod,
    )  # fmt: skip
    generators = [
        worker(
            "generator", i, threads=r.threads, cpus=ray.policy_cpus, gpus=ray.policy_gpus, pod=""
        )
        for i in range(r.workers)
    ]
    rewarder = worker("rewarder", 0, cpus=ray.actor_cpus, pod=pod)
    # The KL term's reference log-probs come from a stage of their own, after the rewards.
    references = (
        [worker("reference", 0, threads=g.threads, cpus=ray.actor_cpus, pod=pod)]
        if g.kl_coef > 0
        else []
    )
    evaluators = [
        worker("llm-evaluator", i, cpus=ray.eval_cpus, pod=pod, nice=cfg.eval.nice)
        for i in range(cfg.eval.workers)
    ]
    flow = VersionBound(cfg.max_policy_lag)
    rows = flow.depth * r.prompts_per_batch
    params = params_block(POLICY)
    streams = _row_streams(cfg, flow, rows, generators, rewarder, references, trainer)
    streams.append(
        StreamSpec(
            params,
            "versions",
            params,
            tuple(Edge(trainer.name, gen.name) for gen in generators)
            + tuple(Edge(trainer.name, ev.name, wake=False) for ev in evaluators),
            note=f"the latest version, {n_params:,} float32 values, announced on each publish",
        )  # fmt: skip
    )
    layouts = {
        "rollouts": rollout_layout(rows, r.group_size, _width(env), *_episode_shape(env)),
        params: params_layout(n_params),
    }
    if evaluators:
        streams.append(
            StreamSpec(
                EVALUATIONS,
                "results",
                EVALUATIONS,
                tuple(Edge(ev.name, trainer.name, (ev.index,)) for ev in evaluators),
                note=f"greedy accuracy on {cfg.task.heldout} held-out problems every "
                f"{cfg.eval.every_versions or cfg.eval.every_s} "
                f"{'versions' if cfg.eval.every_versions else 's'}, and at the start",
            )  # fmt: skip
        )
        layouts[EVALUATIONS] = results_layout(len(evaluators), LLM_EVAL_FIELDS)
    workers = [trainer, *generators, rewarder, *references, *evaluators]
    return Graph(workers, layouts, streams, shared_imports=shared_imports(workers))


def _row_streams(
    cfg: ExperimentConfig,
    flow: VersionBound,
    rows: int,
    generators: list[WorkerSpec],
    rewarder: WorkerSpec,
    references: list[WorkerSpec],
    trainer: WorkerSpec,
) -> list[StreamSpec]:
    """The rollout rows' hand-over, one block through every stage: generated, scored, and
    (with a KL term) referenced, then trained."""
    r, B = cfg.rollout, cfg.rollout.prompts_per_batch
    streams = [
        StreamSpec(
            "rollouts", "groups", "rollouts",
            tuple(Edge(gen.name, rewarder.name) for gen in generators), flow,
            f"{rows} rows of {r.group_size} completions (a prompt each); group k is trained by "
            f"version k // {B}, and starts {flow.describe()}",
        ),
        StreamSpec(
            "scored", "groups", "rollouts",
            (Edge(rewarder.name, (references or [trainer])[0].name),), flow,
            "the same rows, scored"
            + ("" if references else ": the trainer takes batch v's groups in order"),
        ),
    ]  # fmt: skip
    if references:
        streams.append(
            StreamSpec(
                "referenced",
                "groups",
                "rollouts",
                (Edge(references[0].name, trainer.name),),
                flow,
                "the same rows with the reference model's log-probs (grpo.kl_coef "
                f"{cfg.grpo.kl_coef}): the trainer takes batch v's groups in order",
            )  # fmt: skip
        )
    return streams


def shared_imports(workers: list[WorkerSpec]) -> tuple[str, ...]:
    """Every LLM worker imports torch and transformers' model and tokenizer code (about
    250 MB per process): the local runtime imports them once and forks the workers."""
    modules = dict.fromkeys(spec.factory.partition(":")[0] for spec in workers)
    return (*MODEL_LOADING_MODULES, *modules)


# `from_pretrained` also imports torch._dynamo and torch.distributed on its first call (about
# 1,100 modules, sympy among them, ~90 MB per process): imported once in the fork server, a
# worker's model load adds ~11 MB instead of ~135 MB.
MODEL_LOADING_MODULES = (
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.llama.modeling_llama",
    "torch._dynamo",
    "torch.distributed",
)


def _width(env: EnvInfo) -> int:
    """The prompt rows' width: the task's observation is the prompt's tokens (llm/setup.py)."""
    shape = env.observation_space.shape
    assert shape is not None
    return int(shape[0])


def _episode_shape(env: EnvInfo) -> tuple[int, int]:
    """Tokens after the prompt per sequence, and sequences (segments) per episode: the
    action space is [tokens] for a single-turn task, [segments, tokens] for a multi-turn one
    (llm/setup.py)."""
    shape = env.action_space.shape
    assert shape is not None
    return (int(shape[-1]), int(shape[0])) if len(shape) == 2 else (int(shape[0]), 1)


# ---------------------------------------------------------------------- the plug-in


class GRPOFamily(Algorithm):
    """`algo: grpo`: LLM RL on a task with a verifier (the sections `task`, `rollout`, `grpo`,
    `sft`, `tiny_model`; docs/llm.md)."""

    name = "grpo"
    # No warm trainer process: every LLM worker is forked from one process that imported
    # torch and transformers once (`shared_imports`).
    warm_module = None
    # The reference model, if any, sits beside the trainer; generation has its own device.
    device_roles = (("trainer", "workers.trainer_device"), ("generation", "rollout.device"))

    def validate(self, cfg: ExperimentConfig) -> None:
        if cfg.policies:
            raise ConfigError("policies: LLM RL (algo: grpo) has one policy", "remove policies")
        _check_llm(cfg)

    def prepare(
        self, cfg: ExperimentConfig, run_dir: Path | None, checkpoint: Path | None
    ) -> RunContext:
        from surge.llm import setup
        from surge.llm.tasks import task_of

        setup.check_context(cfg, task_of(cfg))  # a bad task fails before any model loads
        if run_dir is None:  # the graph only: the model's shapes, no weights
            model = Path(cfg.model.path) if cfg.model.path else None
            env, n_params = setup.shapes_and_size(cfg, model)
            return RunContext(cfg=cfg, env=env, run_dir=Path("."), n_params=n_params)
        model_dir, env, n_params = setup.prepare(cfg, run_dir, resuming=checkpoint is not None)
        start_version, resumes = _resume_point(checkpoint)
        return RunContext(
            cfg=cfg,
            env=env,
            run_dir=run_dir,
            n_params=n_params,
            start_version=start_version,
            checkpoint=str(checkpoint) if checkpoint else None,
            resumes=resumes,
            family=LLMRun(str(model_dir)),
        )

    def graph(self, ctx: RunContext) -> Graph:
        return grpo_graph(ctx)

    def subject(self, cfg: ExperimentConfig) -> str:
        return cfg.task.name

    def describe(self, ctx: RunContext, graph: Graph) -> list[str]:
        cfg, r = ctx.cfg, ctx.cfg.rollout
        names = ", ".join(spec.name for spec in graph.workers)
        lines = [
            f"workers: {names}; {r.prompts_per_batch} prompts x {r.group_size} completions "
            f"per batch; max_policy_lag={cfg.max_policy_lag}; interrupt={r.interrupt}; "
            f"loss {cfg.grpo.loss}"
        ]
        _, segments = _episode_shape(ctx.env)
        c = cfg.context
        if segments > 1 or c != type(c)():  # a multi-turn task's settings
            lines.append(
                f"multi-turn: context {c.mode}, window {c.window} tokens"
                + (f", summaries <= {c.max_summaries}" if c.mode == "summarize" else "")
                + f"; <= {r.max_tool_calls} tool calls, {r.max_turns} turns per episode"
            )
        return lines

    def evaluate(self, run_dir: Path, options: list[str], video: bool) -> str:
        """Held-out greedy accuracy (and pass@k) of the run's newest checkpoint."""
        from surge.config.load import load_config
        from surge.evaluation.checkpoint import parse_options
        from surge.llm.evaluate import evaluate_run
        from surge.llm.setup import model_directory
        from surge.tracking.checkpoint import require_checkpoint

        given = parse_options(options, {"pass_k": int, "problems": int})
        overrides = [f"task.heldout={given['problems']}"] if "problems" in given else []
        cfg, _ = load_config(str(run_dir / "config.yaml"), overrides)
        checkpoint = require_checkpoint(run_dir, "evaluate")
        pass_k = given.get("pass_k", 0)
        assert isinstance(pass_k, int)
        model_dir = model_directory(cfg, run_dir, resuming=True)  # a LoRA run's base
        result = evaluate_run(run_dir, cfg, checkpoint, model_dir, pass_k)
        extra = "".join(
            f", {k} {v:.3f}" for k, v in result.items() if k.startswith(("pass@", "accuracy@"))
        )
        return (
            f"{result['problems']} held-out problems with policy version "
            f"{result['policy_version']} ({result['env_steps']:,} completions trained): greedy "
            f"accuracy {result['accuracy']:.3f}{extra}"
        )


GRPO = GRPOFamily()


def _resume_point(checkpoint: Path | None) -> tuple[int, int]:
    if checkpoint is None:
        return 0, 0
    from surge.tracking.checkpoint import load_checkpoint

    state = load_checkpoint(checkpoint)
    if state.get("kind") != "llm":
        raise UserError(
            f"{checkpoint} was not written by an LLM run (algo: grpo)",
            "resume it with the config it was trained with",
        )
    return int(state["version"]), int(state["resumes"]) + 1


def _check_llm(cfg: ExperimentConfig) -> None:
    r = cfg.rollout
    if r.slots and r.slots < r.group_size:
        raise ConfigError(
            f"rollout.slots={r.slots}: a generation worker needs room for one group "
            f"(rollout.group_size={r.group_size})",
            f"set rollout.slots to at least {r.group_size}, or 0 for the default",
        )
    if r.group_size < 2 and cfg.grpo.advantage != "dr_grpo":
        raise ConfigError(
            f"rollout.group_size=1: grpo.advantage={cfg.grpo.advantage} compares completions "
            "of one prompt, so it needs at least 2",
            "raise rollout.group_size (8 is common)",
        )
    if importlib.util.find_spec("transformers") is None:
        raise ConfigError(
            "algo: grpo needs the transformers and tokenizers packages, which are not installed",
            "install the extra (pip install 'surge-rl[llm]', or .venv/bin/pip install "
            "transformers tokenizers in a clone)",
        )
    if cfg.model.lora.r and importlib.util.find_spec("peft") is None:
        raise ConfigError(
            f"model.lora.r={cfg.model.lora.r}: LoRA adapters come from the peft package, which "
            "is not installed",
            "install the extra (pip install 'surge-rl[llm]', or .venv/bin/pip install peft in a "
            "clone), or set model.lora.r=0 to train every weight",
        )
