"""Config sections of LLM RL (`algo: grpo`): the task, generation, the loss, the warm start.

Part of the experiment config (surge/config/schema.py imports these); documented the same way,
by the string under each field (docs/configuration.md). The staleness bound is the top-level
`max_policy_lag`, shared with every other algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from surge.config.rules import (
    AT_LEAST_ONE,
    DEVICE,
    NON_NEGATIVE,
    POSITIVE,
    UNIT,
    Rule,
    between,
    ruled,
    ruled_factory,
)

AdvantageName = Literal["grpo", "dr_grpo", "rloo"]
LossName = Literal["decoupled", "aipo"]
Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
ContextModeName = Literal["none", "truncate", "summarize"]
EngineName = Literal["builtin", "vllm"]
NON_EMPTY_NAMES = Rule(lambda v: len(v) > 0, "a non-empty list of module names")


@dataclass
class TaskConfig:
    """Section `task` (LLM runs): the task whose prompts the model answers and whose rewards score
    it."""

    name: str = "arithmetic"
    """`arithmetic` or `countdown` (built in, procedural, with a held-out split), or
    `reasoning-gym:<dataset>` (a procedural dataset of reasoning-gym, the optional
    `reasoning-gym` extra: docs/llm.md), or `module:function` returning a task object
    (surge/llm/tasks.py `Task`), or a local `.jsonl` / `.parquet` file with `prompt` and
    `answer` columns (then set `reward_fn`)."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the task (`arithmetic`: digits; `countdown`: numbers, max_value;
    `reasoning-gym:<dataset>`: the fields of the dataset's config, e.g. min_terms, max_digits)."""

    reward_fn: str | None = None
    """`module:function` scoring a completion, `f(prompt, completion, **meta) -> float`; None:
    the task's own verifier."""

    heldout: int = ruled(500, AT_LEAST_ONE)
    """Held-out problems in each evaluation (greedy accuracy, `eval/accuracy`)."""

    pass_k: int = ruled(0, NON_NEGATIVE)
    """Also sample this many completions per held-out problem (at `rollout.temperature`) and
    log the share solved by at least one as `eval/pass@k`; 0: greedy accuracy only."""


@dataclass
class RolloutConfig:
    """Section `rollout` (LLM runs): how completions are generated: group size, prompts per batch,
    lengths, sampling and generation workers."""

    group_size: int = ruled(8, AT_LEAST_ONE)
    """Completions sampled per prompt (GRPO's G): the advantage compares them."""

    prompts_per_batch: int = ruled(16, AT_LEAST_ONE)
    """Prompts (groups) in one training batch."""

    max_new_tokens: int = ruled(8, AT_LEAST_ONE)
    """Longest completion; a completion that reaches it ends with finish reason `length`."""

    temperature: float = ruled(1.0, NON_NEGATIVE)
    """Sampling temperature (0: greedy)."""

    top_p: float = ruled(1.0, between(0, 1, "(]"))
    """Nucleus sampling: sample from the smallest set of tokens holding this probability."""

    stop: list[str] = field(default_factory=list)
    """Strings that end a completion (besides the end-of-sequence token)."""

    device: str = ruled("auto", DEVICE)
    """Where generation workers decode: `auto` (CUDA when the worker's process sees a GPU),
    `cpu`, `cuda` or `cuda:N` (surge/devices.py); the KV cache, sampling and log-probs live
    there. The learner (and the reference model beside it) follow
    `workers.trainer_device`."""

    engine: EngineName = "builtin"
    """The generation workers' engine (surge/llm/engine_protocol.py): `builtin`
    (surge/llm/engine.py, on any device) or `vllm` (a `model.path` model on CUDA, with the
    vllm package installed; its adapter has not been run on any machine yet, docs/llm.md).
    Evaluation workers decode with the built-in engine."""

    slots: int = ruled(0, NON_NEGATIVE)
    """Sequences a generation worker decodes at once (continuous batching: a finished one
    frees its slot for the next prompt at once). 0: two batches' worth."""

    interrupt: bool = True
    """When a new version is published: true, in-flight sequences continue under the new
    weights (their cache is recomputed; each token keeps the version that produced it, as in
    AReaL); false, they finish under the old weights first, and new prompts wait."""

    keep_cache: bool = False
    """With `interrupt`: in-flight sequences keep the keys and values the old weights computed
    instead of recomputing them (PipelineRL's in-flight weight update). Later tokens are drawn
    by the new weights attending to that slightly stale cache; their behaviour log-probs are
    those of the distribution actually sampled, so the loss's behaviour weight corrects for it.
    Saves a prefill of every in-flight prompt and completion at each new version, which on a
    CPU costs about as much as decoding them."""

    max_tool_calls: int = 100
    """Multi-turn tasks (text envs): tool calls in one episode (SUPO's H); an episode that
    reaches them without finishing is overlong: its reward counts in its group's
    statistics, its tokens get loss weight 0."""

    max_turns: int = 100
    """Multi-turn tasks: policy turns in one episode (summaries included); past them an
    episode is overlong, as for `max_tool_calls`."""

    workers: int = ruled(1, AT_LEAST_ONE)
    """Generation workers (each its own process and engine)."""

    threads: int = ruled(1, AT_LEAST_ONE)
    """torch threads of each generation worker."""


@dataclass
class ContextConfig:
    """The working context of multi-turn tasks (text envs, docs/agents.md): what happens when
    an episode's history outgrows `window` tokens (surge/llm/context.py)."""

    mode: ContextModeName = "none"
    """`none`: an episode that needs more than `window` tokens ends with reward 0;
    `truncate`: the oldest exchanges leave the context; `summarize`: SUPO, the policy
    summarises its history and the context restarts as prompt + summary."""

    window: int = 256
    """The working context W in tokens (prompt included): the policy never sees more."""

    threshold: float = 0.95
    """The context is full at threshold x window (minus `summary_tokens` when summarising)."""

    summary_tokens: int = 0
    """`summarize`: room kept for the instruction and the summary; the trigger fires at
    threshold x window minus it, so the context never exceeds the window."""

    max_summaries: int = 0
    """`summarize`: summaries an episode may make in training (SUPO's S); past them it is
    overlong (zero loss weight, its reward still in its group's statistics). Truncation
    restarts without a budget: `rollout.max_turns` and `rollout.max_tool_calls` end it."""

    eval_max_summaries: int | None = None
    """Summaries allowed in evaluation (SUPO found more at test time than in training helps);
    None: `max_summaries`."""

    instruction: str = "S:"
    """Appended to the context to ask the policy for its summary."""


@dataclass
class GRPOConfig:
    """Section `grpo` (LLM runs): the advantage, the loss and its clipping, and the optional KL
    penalty."""

    advantage: AdvantageName = "grpo"
    """`grpo`: (r - group mean) / group std; `dr_grpo`: r - group mean; `rloo`: r - mean of
    the others in the group."""

    loss: LossName = "decoupled"
    """`decoupled`: AReaL's decoupled PPO (clipped ratio to the proximal policy, the weights
    before this update, times the behaviour weight, capped at `behav_cap`); `aipo`: LlamaRL's
    REINFORCE with the truncated importance weight min(pi/mu, `aipo_rho`), no clipping."""

    aggregation: Aggregation = "token-mean"
    """How token losses become the batch loss (DAPO's token-mean, or per sequence first)."""

    lr: float = ruled(1e-4, POSITIVE)
    """AdamW learning rate (constant)."""

    weight_decay: float = ruled(0.0, NON_NEGATIVE)
    """AdamW weight decay."""

    clip_low: float = ruled(0.2, between(0, 1, "()"))
    """Lower clip of the ratio (1 - clip_low)."""

    clip_high: float = ruled(0.28, POSITIVE)
    """Upper clip of the ratio (1 + clip_high); DAPO's asymmetric clip."""

    behav_cap: float = ruled(5.0, POSITIVE)
    """Decoupled loss: tokens whose behaviour weight pi_prox/mu exceeds this are masked out."""

    aipo_rho: float = ruled(4.0, POSITIVE)
    """AIPO's truncation of the importance weight (2-10 in the paper)."""

    kl_coef: float = ruled(0.0, NON_NEGATIVE)
    """Weight of the k3 KL to the frozen starting model (0: no reference model is kept)."""

    dynamic_sampling: bool = False
    """DAPO's filter: groups whose rewards are all equal (no gradient) are left out of the
    loss."""

    max_grad_norm: float = ruled(1.0, POSITIVE)
    """Gradient clipping."""

    threads: int = ruled(1, AT_LEAST_ONE)
    """torch threads of the trainer."""


@dataclass
class SFTConfig:
    """Section `sft` (LLM runs): the supervised warm start on the task's solutions before RL."""

    steps: int = ruled(0, NON_NEGATIVE)
    """Most supervised warm-start steps on the task's solutions before RL (built-in model only;
    cached under `$SURGE_CACHE`, reused by later runs with the same settings). 0: none (the
    built-in model starts from random weights; `model.path`'s weights are used as they are)."""

    target_accuracy: float = ruled(0.0, UNIT)
    """Stop the warm start early once greedy accuracy on training problems reaches this (RL
    learns best from a start that solves some, not all: 20-60%). A text env that marks its
    deciding action (recall's answer) is checked there, with its expert leading every other
    turn (docs/agents.md). 0: run all `steps`."""

    batch_size: int = ruled(128, AT_LEAST_ONE)
    """Examples per warm-start step."""

    lr: float = ruled(1e-3, POSITIVE)
    """Warm-start learning rate."""

    aggregation: Aggregation = "token-mean"
    """How the warm start's token losses become its loss, as `grpo.aggregation`. A multi-turn
    task whose deciding action is one token among many (recall's answer) learns it faster per
    segment first (`seq-mean-token-mean`): its last segment is short, so the action weighs more."""

    threads: int = ruled(2, AT_LEAST_ONE)
    """torch threads of the warm start. Part of its cache entry: another count sums in
    another order, and a long warm start drifts apart from it (recall's read of the answer
    did)."""


@dataclass
class TinyModelConfig:
    """The built-in model of LLM runs without `model.path`: a Llama with a character
    tokenizer of the task, trained from scratch (warm start, then RL)."""

    hidden: int = ruled(128, AT_LEAST_ONE)
    """Hidden size."""

    layers: int = ruled(4, AT_LEAST_ONE)
    """Decoder layers."""

    heads: int = ruled(4, AT_LEAST_ONE)
    """Attention heads (head size = hidden / heads, at least 32)."""


@dataclass
class LoraConfig:
    """Section `model.lora` (LLM runs): train low-rank adapters (LoRA, through PEFT) on the
    model's linear layers instead of every weight (docs/llm.md#lora). Only the adapters train
    and only they move from the trainer to the generation workers; the run saves them as PEFT
    does (run_dir/model: adapter_config.json, adapter_model.safetensors)."""

    r: int = ruled(0, NON_NEGATIVE)
    """Rank of each adapter (PEFT's `r`); 0: no adapters, every weight trains."""

    alpha: int = ruled(16, POSITIVE)
    """Scale of the adapters' update: alpha / r times B A (PEFT's `lora_alpha`)."""

    dropout: float = ruled(0.0, between(0, 1, "[)"))
    """Dropout on the adapters' input while training (PEFT's `lora_dropout`). Above 0 the
    trainer runs each adapted layer's own forward instead of one merged weight: slower."""

    target_modules: list[str] = ruled_factory(lambda: ["q_proj", "v_proj"], NON_EMPTY_NAMES)
    """Names of the linear layers that get adapters (each matches a module whose name is it
    or ends with `.` and it, as in PEFT): Llama's `q_proj`, `k_proj`, `v_proj`, `o_proj`,
    `gate_proj`, `up_proj`, `down_proj`, `lm_head`."""
