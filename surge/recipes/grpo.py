"""The LLM RL graph (asynchronous GRPO family; LlamaRL / AReaL / verl's dataflow):

    generator-i --(rollouts: finished groups)--> rewarder-0 --(scored)--> trainer-0
        (with grpo.kl_coef > 0: rewarder-0 --(scored)--> reference-0 --(referenced)--> trainer-0)
    trainer-0 --(params.default: versions)--> generator-* (and the evaluators)
    evaluator-j --(evaluations: held-out accuracy)--> trainer-0

Generation is SRL's policy worker and actor in one (the prompt is the observation, the verifier
the environment), the reward worker is its own stage so a slow verifier never stalls
generation, and the rollout stream's version bound is AReaL's staleness rule
(streams/rollouts.py).
"""

from __future__ import annotations

from surge.config.schema import ExperimentConfig
from surge.envs.spaces import EnvInfo
from surge.recipes.evaluation import EVALUATIONS
from surge.recipes.ppo import POLICY
from surge.streams.flow import VersionBound
from surge.streams.params import params_block, params_layout
from surge.streams.results import results_layout
from surge.streams.rollouts import rollout_layout
from surge.workers.graph import Edge, Graph, StreamSpec, WorkerSpec, worker

LLM_EVAL_FIELDS = ("version", "problems", "accuracy", "pass_at_k", "length_mean")


def grpo_graph(cfg: ExperimentConfig, env: EnvInfo, n_params: int) -> Graph:
    r, g, ray = cfg.rollout, cfg.grpo, cfg.ray
    # Placement on a Ray cluster (runtime/placement.py): the stages that read every group
    # (reward, reference) and the evaluators share the trainer's pod; each generation worker
    # is a pod of its own, so generators spread over the nodes as PPO's policy pods do. The
    # rollout stream and the parameter versions cross nodes by surge/streams/ray_bridge.py.
    pod = "trainer"
    trainer = worker(
        "llm-trainer",
        0,
        threads=g.threads,
        restartable=False,
        ends_run=True,
        cpus=ray.trainer_cpus,
        gpus=ray.trainer_gpus,
        pod=pod,
    )
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
    B = r.prompts_per_batch
    rows = flow.depth * B
    params = params_block(POLICY)
    streams = [
        StreamSpec(
            "rollouts",
            "groups",
            "rollouts",
            tuple(Edge(gen.name, rewarder.name) for gen in generators),
            flow,
            f"{rows} rows of {r.group_size} completions (a prompt each); group k is trained by "
            f"version k // {B}, and starts {flow.describe()}",
        ),
        StreamSpec(
            "scored",
            "groups",
            "rollouts",
            (Edge(rewarder.name, (references or [trainer])[0].name),),
            flow,
            "the same rows, scored"
            + ("" if references else ": the trainer takes batch v's groups in order"),
        ),
        StreamSpec(
            params,
            "versions",
            params,
            tuple(Edge(trainer.name, gen.name) for gen in generators)
            + tuple(Edge(trainer.name, ev.name, wake=False) for ev in evaluators),
            note=f"the latest version, {n_params:,} float32 values, announced on each publish",
        ),
    ]
    if references:
        streams.insert(
            2,
            StreamSpec(
                "referenced",
                "groups",
                "rollouts",
                (Edge(references[0].name, trainer.name),),
                flow,
                "the same rows with the reference model's log-probs (grpo.kl_coef "
                f"{g.kl_coef}): the trainer takes batch v's groups in order",
            ),
        )
    layouts = {
        "rollouts": rollout_layout(rows, r.group_size, _width(env), r.max_new_tokens),
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
            )
        )
        layouts[EVALUATIONS] = results_layout(len(evaluators), LLM_EVAL_FIELDS)
    workers = [trainer, *generators, rewarder, *references, *evaluators]
    return Graph(workers, layouts, streams, shared_imports=shared_imports(workers))


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
