"""No training row longer than the model's positions, and no working context past the window,
whatever a text env's lengths (surge/llm/textenv.py, surge/llm/lean.py).

A property test (hypothesis) draws text envs with random prompt, observation and action
lengths, windows and context settings, in each mode, and checks every path that runs an
episode: generation (the engine's continuous batch, then the rollout rows and the trainer's
forward over them), the warm start (the expert's transcripts as rows) and evaluation. Then
episodes that end exactly at the window, one token past it and far past it, in each mode,
get the reward and end the docs give them."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from surge.config.llm_schema import RolloutConfig  # noqa: E402
from surge.learners.grpo import grouped_batch  # noqa: E402
from surge.llm.context import ContextRule  # noqa: E402
from surge.llm.engine import Decoding, Engine  # noqa: E402
from surge.llm.env_checks import TextEnvError  # noqa: E402
from surge.llm.episodes import EpisodeEngine, EpisodeRunner, Trajectory  # noqa: E402
from surge.llm.evaluate import score  # noqa: E402
from surge.llm.lean import LeanLlama  # noqa: E402
from surge.llm.model import stop_sequences  # noqa: E402
from surge.llm.sft import transcript_batch  # noqa: E402
from surge.llm.textenv import TextEnvTask, run_now  # noqa: E402
from surge.llm.tiny import char_tokenizer, tiny_llama  # noqa: E402
from surge.llm.turn_loop import EpisodeLimits, Written, text_episode  # noqa: E402
from surge.streams.rollouts import RolloutRows, rollout_layout  # noqa: E402
from surge.streams.transport import InlineTransport  # noqa: E402

ALPHABET = "opxs\nS:"
TOKENIZER = char_tokenizer(ALPHABET)


class LengthsEnv:
    """A text env whose prompt, observations and expert turns have the given lengths in
    tokens: `observations` cycle until step `turns` ends the episode (reward 1) with an
    observation of `final` tokens."""

    alphabet = ALPHABET

    def __init__(
        self,
        prompt: int = 4,
        observations: tuple[int, ...] = (3,),
        final: int = 2,
        turns: int = 3,
        action: int = 4,
        summary: int = 3,
    ) -> None:
        self.prompt, self.observations, self.final = prompt, tuple(observations), final
        self.turns, self.action, self.summary = turns, action, summary
        self.t = 0

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.t = 0
        return _text("p", self.prompt - 1), {"key": f"lengths/{seed}"}  # <bos> is one more

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.t += 1
        done = self.t >= self.turns
        n = self.final if done else self.observations[(self.t - 1) % len(self.observations)]
        return _text("o", n), float(done), done, False, {"tool_call": True}

    def expert(self, rng: np.random.Generator, summarize: bool = False) -> str:
        return _text("s", self.summary) if summarize else _text("x", self.action)


def _text(letter: str, n: int) -> str:
    """`n` tokens: letters ending with a newline (none for 0)."""
    return letter * (n - 1) + "\n" if n > 0 else ""


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, Any], EpisodeLimits]:
    """An env's lengths and the run's limits, the prompt and observations within the window
    (longer ones are an error: tested below)."""
    mode = draw(st.sampled_from(["none", "truncate", "summarize"]))
    window = draw(st.integers(8, 72))
    max_new = draw(st.integers(1, 8))
    env = {
        "prompt": draw(st.integers(1, window - 2)),
        "observations": tuple(draw(st.lists(st.integers(0, window), min_size=1, max_size=4))),
        "final": draw(st.integers(0, 2 * window)),
        "turns": draw(st.integers(1, 14)),
        "action": draw(st.integers(1, 10)),
        "summary": draw(st.integers(1, 12)),
    }
    threshold = draw(st.sampled_from([0.5, 0.8, 0.95, 1.0]))
    reserve = draw(st.integers(3, max(3, window // 2))) if mode == "summarize" else 0
    segments = draw(st.integers(1, 6)) if mode != "none" else 1
    rule = ContextRule(mode, window, threshold, reserve, segments)
    return env, EpisodeLimits(rule, max_new, max_tool_calls=20, max_turns=20, instruction="S:")


def _task(env: dict[str, Any], limits: EpisodeLimits) -> TextEnvTask:
    task = TextEnvTask(LengthsEnv, env, "lengths")
    task.configure(limits)
    return task


def _check_rows(t: Trajectory, window: int) -> None:
    for s in [*t.segments(), *t.dropped]:
        assert len(t.prompt) + len(s.tokens) <= window, "a row past the model's positions"


def _episode(task: TextEnvTask, write: Any) -> Trajectory:
    """An episode of problem 0 with `write` as the policy, or the error of a too-long text."""
    env = task.make_env()
    prompt, _ = env.reset(0)
    return run_now(text_episode(env, EpisodeEngine(TOKENIZER), prompt, task.limits, write))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(case=cases(), data=st.data())
def test_random_writers_keep_every_context_and_row_within_the_window(
    case: tuple[dict[str, Any], EpisodeLimits], data: st.DataObject
) -> None:
    """The episode loop against a policy of drawn lengths and finishes (the generation
    path's writer), and against the env's expert (the warm start's)."""
    env, limits = case
    window = limits.rule.window
    task = _task(env, limits)
    contexts: list[int] = []

    async def policy(context: list[int], max_new: int, summarize: bool) -> Written:
        contexts.append(len(context) + max_new)
        n = data.draw(st.integers(1, max_new))
        finish = data.draw(st.sampled_from(["stop", "length", "eos"]))
        tokens = [4 + data.draw(st.integers(0, len(ALPHABET) - 1)) for _ in range(n)]
        return tokens, [-1.0] * n, [0] * n, finish

    _check_rows(_episode(task, policy), window)
    assert max(contexts, default=0) <= window, "the policy was shown a context past the window"
    expert = task.expert_episode(EpisodeEngine(TOKENIZER), 0, np.random.default_rng(0))
    _check_rows(expert, window)
    assert expert.info["context_max"] <= window


@pytest.fixture(scope="module")
def models() -> dict[int, Any]:
    return {}


def _model(models: dict[int, Any], window: int) -> Any:
    """A random built-in model with exactly `window` positions (one per window)."""
    if window not in models:
        models[window] = tiny_llama(len(TOKENIZER), 32, 1, 1, max_length=window, seed=window)
        models[window].eval()
    return models[window]


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=cases())
def test_the_engine_the_rows_and_the_trainers_forward_stay_within_the_positions(
    models: dict[int, Any], case: tuple[dict[str, Any], EpisodeLimits]
) -> None:
    """A random model with W positions generates G episodes of several problems in one
    continuous batch (its engine refuses any request past W), their rows go through the
    rollout stream and the trainer's forward (one batch, prompts of different lengths),
    the warm start's rows are built, and evaluation scores them."""
    env, limits = case
    window, G = limits.rule.window, 3
    model = _model(models, window)
    problems = []
    for n in range(3):  # prompts of different lengths in one batch
        lengths = {**env, "prompt": max(1, env["prompt"] - 3 * n)}
        problems.append((_task(lengths, limits), n))
    stop = stop_sequences(TOKENIZER, ["\n"])
    decoding = Decoding(window, limits.longest_turn, eos_id=2, stop=stop, max_length=window)
    engine = Engine(model, G * len(problems), decoding)
    trajectories: dict[int, Trajectory] = {}
    for task, n in problems:
        runner = EpisodeRunner(engine, TOKENIZER, task.run_episode)
        (problem,) = task.sample("train", 1, random.Random(n))
        for m in range(G):
            runner.start(n * G + m, problem, np.random.default_rng(m))
        while not runner.idle():
            for key, t in runner.step():
                assert t is not None
                _check_rows(t, window)
                trajectories[key] = t
    segments = limits.rule.max_segments if limits.rule.mode != "none" else 1
    layout = rollout_layout(len(problems), G, window, window, segments)
    rows = RolloutRows(InlineTransport({"rollouts": layout}, []), "rollouts", len(problems))
    for k in range(len(problems)):
        r = rows.begin(k, life=0)
        for m in range(G):
            rows.put(r, m, trajectories[k * G + m])
    data = grouped_batch({key: v.copy() for key, v in rows.a.items()})
    logits = LeanLlama(model).forward_groups(
        data["prompts"], data["prompt_lens"], data["completions"]
    )
    assert logits.shape[:2] == data["completions"].shape
    task = problems[0][0]
    warm, _ = transcript_batch(TOKENIZER, task, task.sample("train", 4, random.Random(5)), 0)
    assert warm.shape[1] <= window
    heldout = task.sample("heldout", 3, random.Random(0))
    scored = score(model, TOKENIZER, task, heldout, RolloutConfig(max_new_tokens=4), 0.0)
    assert scored.rewards.shape == (3, 1)


def test_a_prompt_or_observation_longer_than_the_window_is_an_error_naming_it() -> None:
    limits = EpisodeLimits(ContextRule("none", 20), 4)
    with pytest.raises(TextEnvError, match=r"lengths.*prompt is 20 tokens.*context.window=20"):
        _episode(_task({"prompt": 20}, limits), _fixed_writer())
    with pytest.raises(TextEnvError, match=r"an observation is 21 tokens.*context.window=20"):
        _episode(_task({"observations": (21,)}, limits), _fixed_writer())
    # the last observation is never read: a long one is cut, not an error
    t = _episode(_task({"turns": 1, "final": 50}, limits), _fixed_writer())
    assert t.reward == 1.0 and len(t.prompt) + len(t.tokens) == 20


def _fixed_writer(action: int = 4, summary: int = 3) -> Any:
    """A policy that writes `action` tokens (a summary: `summary`), cut where its room ends
    and then finishing `length`, as the engine does."""

    async def write(context: list[int], max_new: int, summarize: bool) -> Written:
        n = summary if summarize else action
        text = TOKENIZER.encode(_text("s" if summarize else "x", n), add_special_tokens=False)
        finish = "length" if len(text) > max_new else "stop"
        text = text[:max_new]
        return text, [0.0] * len(text), [0] * len(text), finish

    return write


# Prompt 8 tokens, actions 4, observations 4, the episode ends at the 5th action: its last
# action ends at 8 + 4 x 8 + 4 = 44, the 4th exchange at 40.
EXACT = {"prompt": 8, "observations": (4,), "final": 3, "turns": 5, "action": 4}


@pytest.mark.parametrize(
    "mode, window, reward, end, segments",
    [
        ("none", 44, 1.0, "done", 1),  # the last action ends exactly at the window
        ("none", 43, 0.0, "window", 1),  # one token past: reward 0
        ("none", 30, 0.0, "window", 1),  # far past
        ("truncate", 44, 1.0, "done", 1),
        ("truncate", 43, 1.0, "done", 2),  # the context restarts with the recent exchanges
        ("truncate", 30, 1.0, "done", 3),  # twice
        ("truncate", 12, 0.0, "overlong", 1),  # no context holds prompt and one exchange
        ("summarize", 48, 1.0, "done", 1),  # 4th exchange ends exactly at the trigger (40)
        ("summarize", 47, 1.0, "done", 2),  # one token past: one summary
        ("summarize", 30, 0.0, "overlong", 2),  # far past: out of summaries (max 1)
    ],
)
def test_an_episode_at_one_past_and_far_past_the_window(
    mode: str, window: int, reward: float, end: str, segments: int
) -> None:
    reserve = 8 if mode == "summarize" else 0  # the trigger: W - 8
    segments_at_most = 21 if mode == "truncate" else 2  # max_turns + 1; one summary
    rule = ContextRule(mode, window, 1.0, reserve, segments_at_most)  # type: ignore[arg-type]
    limits = EpisodeLimits(rule, 4, max_turns=20, instruction="S:")
    t = _episode(_task(EXACT, limits), _fixed_writer())
    assert (t.reward, t.info["end"], len(t.segments())) == (reward, end, segments)
    assert t.overlong == (end == "overlong")
    _check_rows(t, window)
    # the expert's transcript (the warm start's) keeps to the same limits
    expert = _task(EXACT, limits).expert_episode(
        EpisodeEngine(TOKENIZER), 0, np.random.default_rng(0)
    )
    assert (expert.reward, expert.info["end"]) == (reward, end)
    _check_rows(expert, window)


def test_limits_keep_the_expert_episode_unbounded_for_the_report() -> None:
    """`expert_episode(limits=...)`: the run's limits replaced (the setup's report of the
    longest episode the expert needs)."""
    limits = EpisodeLimits(ContextRule("none", 30), 4)
    task = _task(EXACT, limits)
    wide = dataclasses.replace(limits, rule=ContextRule("none", 1000))
    t = task.expert_episode(EpisodeEngine(TOKENIZER), 0, np.random.default_rng(0), wide)
    assert t.reward == 1.0 and len(t.prompt) + len(t.tokens) == 8 + 4 * 8 + 4 + 3
