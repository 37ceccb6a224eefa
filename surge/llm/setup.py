"""What the controller prepares before an LLM run's graph starts.

- The starting model directory every worker loads: the user's `model.path`, or the built-in
  tiny model after its supervised warm start (cached, surge/llm/sft.py), or, with
  `sft.steps: 0`, its random initial weights saved in the run directory. A resumed run uses
  run_dir/model, written with each checkpoint (its weights come from the checkpoint anyway);
  a LoRA run's holds only its adapters, so it starts from its base again.
- The task's shapes, as the `EnvInfo` of a one-step environment: the observation is the
  prompt's tokens, the action the completion's. The rollout stream is laid out from them.
- The size of the flat parameter vector the trainer publishes (a LoRA run's adapters alone).
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing as mp
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from surge.config.llm_schema import LoraConfig
from surge.config.schema import ExperimentConfig
from surge.envs.spaces import EnvInfo
from surge.errors import ConfigError
from surge.llm.context import ContextRule
from surge.llm.engines import check_engine
from surge.llm.tasks import ALPHABETS, Task, heldout_set, task_of
from surge.llm.text_sample import TextSample, check_warm_start, text_sample, tiny_model_positions
from surge.llm.textenv import TextEnvTask
from surge.llm.turn_loop import limits_record

MAX_LENGTH = 64
"""Positions of the built-in model: prompt and completion together (more for other tasks'
longer prompts: `tiny_positions`)."""
PROMPT_SAMPLE = 2000
"""Problems sampled to size the prompt rows; longer prompts found later are an error."""


def prepare(cfg: ExperimentConfig, run_dir: Path, resuming: bool) -> tuple[Path, EnvInfo, int]:
    """The run's starting model directory, task shapes and flat parameter count, worked out
    in a short-lived process: they need torch and transformers (and the warm start trains a
    model), and the controller, which only watches the workers for the rest of the run,
    should not hold their 250-300 MB all along. Errors (ConfigError) come back as raised;
    a stop (Ctrl+C, or SIGTERM to the controller alone) ends the process too, so a warm
    start of minutes never goes on training for nobody."""
    check_engine(cfg)  # before a warm start of minutes for an engine that cannot run
    spawn = mp.get_context("spawn")
    receive, send = spawn.Pipe(duplex=False)
    child = spawn.Process(
        target=_answer, args=(send, cfg, run_dir, resuming), name="surge-prepare", daemon=True
    )
    child.start()
    send.close()
    try:
        ok, value = receive.recv()
    except EOFError:
        child.join()
        raise RuntimeError(
            f"the process preparing the model died (exit code {child.exitcode})"
        ) from None
    except BaseException:
        child.terminate()
        child.join()
        raise
    child.join()
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _answer(send: Any, cfg: ExperimentConfig, run_dir: Path, resuming: bool) -> None:
    """The prepare process: `_prepare`'s result, or the exception it raised, sent back."""
    try:
        send.send((True, _prepare(cfg, run_dir, resuming)))
    except Exception as e:  # the caller raises it
        send.send((False, e))


def _prepare(cfg: ExperimentConfig, run_dir: Path, resuming: bool) -> tuple[Path, EnvInfo, int]:
    if cfg.model.path is None:
        shapes_and_size(cfg, None)  # the settings' errors before minutes of warm start
    task = task_of(cfg)
    if isinstance(task, TextEnvTask) and task.has_expert and not resuming:
        tokenizer, _ = tokenizer_and_config(
            cfg, None if cfg.model.path is None else Path(cfg.model.path)
        )
        print(f"  {expert_fit(task, tokenizer)}", file=sys.stderr)
    model_dir = model_directory(cfg, run_dir, resuming)
    env, n_params = shapes_and_size(cfg, model_dir)
    return model_dir, env, n_params


def model_directory(cfg: ExperimentConfig, run_dir: Path, resuming: bool) -> Path:
    """The directory of the weights the run starts from (see the module docstring)."""
    if resuming and (run_dir / "model" / "config.json").is_file():
        return run_dir / "model"
    if cfg.model.path is not None:
        path = Path(cfg.model.path).expanduser()
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"model.path={cfg.model.path!r}: no Hugging Face model there (no config.json)",
                "point model.path at a directory written by save_pretrained (weights, "
                "config.json and the tokenizer files)",
            )
        return path
    if cfg.sft.steps > 0:
        from surge.llm.sft import WarmStartSettings, warm_start

        task = task_of(cfg)
        if isinstance(task, TextEnvTask):
            if not task.has_expert:
                raise ConfigError(
                    f"task.name={cfg.task.name!r} has no expert(rng, summarize) to imitate, so "
                    "the supervised warm start has no transcripts",
                    "give the env an expert method (docs/agents.md), or set sft.steps=0",
                )
        elif cfg.task.name not in ALPHABETS:
            check_warm_start(_sample(cfg), cfg.task.name)

        t = cfg.tiny_model
        settings = WarmStartSettings(
            task=cfg.task.name,
            task_kwargs=dict(cfg.task.kwargs),
            reward_fn=cfg.task.reward_fn,
            hidden=t.hidden,
            layers=t.layers,
            heads=t.heads,
            max_length=tiny_positions(cfg),
            steps=cfg.sft.steps,
            batch_size=cfg.sft.batch_size,
            lr=cfg.sft.lr,
            target_accuracy=cfg.sft.target_accuracy,
            aggregation=cfg.sft.aggregation,
            seed=cfg.seed,
            threads=cfg.sft.threads,
            limits=limits_record(task.limits) if isinstance(task, TextEnvTask) else {},
        )
        return warm_start(settings, log=lambda text: print(f"  {text}", file=sys.stderr))
    initial = run_dir / "model-init"
    if (initial / "config.json").is_file():
        return initial  # written by an earlier call (the reference worker asks again)
    return _initial_model(cfg, initial)


def _initial_model(cfg: ExperimentConfig, directory: Path) -> Path:
    from transformers.utils import logging

    from surge.llm.model import save_model_dir
    from surge.llm.tiny import char_tokenizer, tiny_llama

    logging.disable_progress_bar()
    tokenizer = char_tokenizer(_alphabet(cfg))
    t = cfg.tiny_model
    positions = tiny_positions(cfg)
    model = tiny_llama(len(tokenizer), t.hidden, t.layers, t.heads, positions, seed=cfg.seed)
    save_model_dir(model, tokenizer, directory, cfg.rollout)
    return directory


def tiny_positions(cfg: ExperimentConfig) -> int:
    """Positions of the built-in model: MAX_LENGTH for a built-in task, or what a sample of
    the task's prompts and answers needs (a ConfigError when they do not fit the built-in
    model: surge/llm/text_sample.py)."""
    if cfg.task.name in ALPHABETS:
        return MAX_LENGTH
    if isinstance(task_of(cfg), TextEnvTask):  # a context never exceeds the window
        return max(MAX_LENGTH, -(-cfg.context.window // 64) * 64)
    return tiny_model_positions(_sample(cfg), cfg.task.name, cfg.rollout.max_new_tokens, MAX_LENGTH)


def _sample(cfg: ExperimentConfig) -> TextSample:
    """The task's text sample; a ConfigError naming the task when it cannot be made."""
    try:
        return text_sample(cfg.task.name, cfg.task.kwargs, cfg.task.reward_fn)
    except (TypeError, ValueError):
        task_of(cfg)  # raises the ConfigError that names the setting
        raise


def _alphabet(cfg: ExperimentConfig) -> str:
    if cfg.task.name in ALPHABETS:
        return ALPHABETS[cfg.task.name]
    task = task_of(cfg)
    if isinstance(task, TextEnvTask):
        return task.alphabet
    return _sample(cfg).alphabet


def check_context(cfg: ExperimentConfig, task: Task) -> None:
    """`context.*` belongs to multi-turn tasks, and its summary settings to
    `context.mode=summarize`: a ConfigError naming the setting used elsewhere."""
    from surge.config.llm_schema import ContextConfig

    default = ContextConfig()
    if isinstance(task, TextEnvTask):
        c = cfg.context
        summary_only = ("max_summaries", "eval_max_summaries", "summary_tokens")
        changed = [k for k in summary_only if getattr(default, k) != getattr(c, k)]
        if c.mode != "summarize" and changed:
            raise ConfigError(
                f"context.{changed[0]}={getattr(c, changed[0])!r}: summaries belong to "
                f"context.mode=summarize, not {c.mode!r}"
                + (
                    " (truncation restarts until rollout.max_turns)" if c.mode == "truncate" else ""
                ),
                f"remove context.{changed[0]}, or set context.mode=summarize",
            )
        return
    changed = [k for k, v in vars(cfg.context).items() if getattr(default, k) != v]
    if changed:
        raise ConfigError(
            f"context.{changed[0]}={getattr(cfg.context, changed[0])!r}: task.name="
            f"{cfg.task.name!r} is single-turn, and context.* sets the working context of "
            "multi-turn tasks (text envs)",
            "remove the context settings, or choose a text env task (docs/agents.md)",
        )


def task_shapes(cfg: ExperimentConfig, task: Task, tokenizer: Any, positions: int) -> EnvInfo:
    """The prompt rows' width (the longest of `PROMPT_SAMPLE` train problems and the held-out
    set, plus a quarter for luck) and the completion's, as a one-step env's spaces."""
    from surge.llm.model import encode_prompt

    problems = task.sample("train", PROMPT_SAMPLE, random.Random(cfg.seed))
    problems += heldout_set(task, cfg.task.heldout)
    longest = max(len(encode_prompt(tokenizer, p.prompt)) for p in problems)
    vocab = len(tokenizer)
    if isinstance(task, TextEnvTask):
        return text_env_shapes(cfg, task, tokenizer, positions, longest)
    new = cfg.rollout.max_new_tokens
    if longest + new > positions:
        raise ConfigError(
            f"prompts of up to {longest} tokens plus rollout.max_new_tokens={new} exceed the "
            f"model's {positions} positions",
            "lower rollout.max_new_tokens",
        )
    width = min(math.ceil(longest * 1.25), positions - new)
    observation = spaces.Box(0, vocab - 1, (width,), np.int32)
    action = spaces.MultiDiscrete([vocab] * new)
    return EnvInfo(observation, action)


def text_env_shapes(
    cfg: ExperimentConfig, task: TextEnvTask, tokenizer: Any, positions: int, longest: int
) -> EnvInfo:
    """A multi-turn task's shapes: prompts as sampled; per episode, its segments (a context
    each: `context.max_summaries` + 1 when it summarises, `rollout.max_turns` + 1 when it
    truncates) of up to `context.window` tokens, as a [segments, window] action space.
    ConfigErrors for a window the model cannot hold, and for a prompt and one exchange that
    do not fit under the context rule."""
    from surge.llm.context import check_fits
    from surge.llm.episodes import EpisodeEngine

    c, limits = cfg.context, task.limits
    if c.window > positions:
        raise ConfigError(
            f"context.window={c.window}: the model has {positions} positions",
            "lower context.window"
            + ("" if cfg.model.path else " (the built-in model is sized to the window)"),
        )
    instruction = len(tokenizer.encode(c.instruction, add_special_tokens=False))
    exchange = limits.max_new_tokens + longest_observation(task, EpisodeEngine(tokenizer))
    why = check_fits(limits.rule, longest, instruction, exchange)
    if why:
        raise ConfigError(
            f"{why} (task.name={cfg.task.name!r})",
            "raise context.window, or lower context.summary_tokens or rollout.max_new_tokens",
        )
    segments = limits.rule.max_segments if c.mode != "none" else 1
    vocab = len(tokenizer)
    # A prompt may be as long as the window allows (one longer than the sampled ones must
    # not fail to fit its row); the trainer reads a batch's longest, not the row's width.
    observation = spaces.Box(0, vocab - 1, (c.window,), np.int32)
    return EnvInfo(observation, spaces.MultiDiscrete(np.full((segments, c.window), vocab)))


OBSERVATION_PROBES = 16
"""Expert episodes (or random resets) run to find a text env's longest observation."""


def longest_observation(task: TextEnvTask, engine: Any) -> int:
    """The longest observation (in tokens) of a few expert episodes of the task; without an
    expert, of the env's answer to an empty action after each reset."""
    problems = task.sample("train", OBSERVATION_PROBES, random.Random(0))
    longest = 0
    for n, problem in enumerate(problems):
        env = task.make_env()
        env.reset(int(problem.meta["seed"]))
        rng = np.random.default_rng(n)
        for _ in range(task.limits.max_turns if task.has_expert else 1):
            action = env.expert(rng) if task.has_expert else ""
            observation, _, terminated, truncated, _ = env.step(action)
            longest = max(longest, len(engine.encode(observation)))
            if terminated or truncated:
                break
    return longest


EXPERT_PROBES = 64
"""Expert episodes run to report the longest one beside the window."""


def expert_fit(task: TextEnvTask, tokenizer: Any) -> str:
    """The longest of `EXPERT_PROBES` expert episodes (prompt and every token, with no window
    to bound it) beside `context.window`, as a line for the terminal: a warning when, with
    `context.mode=none`, it does not fit (those episodes end with reward 0)."""
    from surge.llm.episodes import EpisodeEngine

    engine, limits = EpisodeEngine(tokenizer), task.limits
    unbounded = dataclasses.replace(limits, rule=ContextRule("none", 1 << 30))
    problems = task.sample("train", EXPERT_PROBES, random.Random(1))
    needed, overlong = 0, 0
    for n, problem in enumerate(problems):
        rng = np.random.default_rng(n)
        t = task.expert_episode(engine, int(problem.meta["seed"]), rng, unbounded)
        needed = max(needed, len(t.prompt) + len(t.tokens))
        overlong += t.overlong
    window, mode = limits.rule.window, limits.rule.mode
    line = (
        f"the expert's longest episode needs {needed} tokens (of {len(problems)} run); "
        f"context.window={window}, context.mode={mode}"
    )
    if overlong:
        return (
            f"warning: {line}; {overlong} of them ran past rollout.max_turns="
            f"{limits.max_turns} or rollout.max_tool_calls={limits.max_tool_calls} unfinished, "
            "and the warm start imitates them: raise those limits"
        )
    if needed <= window:
        return line
    if mode == "none":
        return (
            f"warning: {line}: the policy's episodes as long end at the window with reward 0; "
            f"raise context.window to at least {needed} (docs/agents.md, 'When your episodes "
            "are longer than the window')"
        )
    then = "summarises" if mode == "summarize" else "drops its oldest exchanges"
    return f"{line}: past the trigger the context {then}"


def tokenizer_and_config(cfg: ExperimentConfig, model_dir: Path | None) -> tuple[Any, Any]:
    """The tokenizer and model config of `model_dir`, or of the built-in model (None): what
    the graph's layout needs, without loading (or training) any weights."""
    from transformers import AutoConfig, AutoTokenizer

    if model_dir is not None:
        return (
            AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True),
            AutoConfig.from_pretrained(str(model_dir), local_files_only=True),
        )
    from surge.llm.tiny import char_tokenizer, tiny_config

    tokenizer = char_tokenizer(_alphabet(cfg))
    t = cfg.tiny_model
    config = tiny_config(len(tokenizer), t.hidden, t.layers, t.heads, tiny_positions(cfg))
    return tokenizer, config


def shapes_and_size(cfg: ExperimentConfig, model_dir: Path | None) -> tuple[EnvInfo, int]:
    """The task's `EnvInfo` and the flat parameter count (`tokenizer_and_config`)."""
    tokenizer, config = tokenizer_and_config(cfg, model_dir)
    env = task_shapes(cfg, task_of(cfg), tokenizer, int(config.max_position_embeddings))
    return env, count_parameters(config, cfg.model.lora)


def count_parameters(config: Any, lora: LoraConfig | None = None) -> int:
    """Parameters in the flat vector (`model.parameters()`, tied weights once; with `lora`,
    rank above 0, its adapters: a ConfigError for targets the model lacks), counted on the
    meta device: nothing is allocated."""
    import torch
    from transformers import AutoModelForCausalLM

    from surge.llm.lora import add_adapters, trained_parameters

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
        if lora is not None and lora.r > 0:
            add_adapters(model, lora, seed=0)
    return sum(p.numel() for p in trained_parameters(model))
