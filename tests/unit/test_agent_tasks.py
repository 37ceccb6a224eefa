"""The built-in text envs (surge/llm/agent_tasks.py): their formats, their experts, and the
token budgets their defaults are sized for (characters are tokens; a prompt has <bos>)."""

from __future__ import annotations

import numpy as np
import pytest

from surge.llm.agent_tasks import Guess, Recall
from surge.llm.context import ContextRule, check_fits, crosses, kept_exchanges

INSTRUCTION = "S:"
SUPO = ContextRule(mode="summarize", window=96, threshold=0.95, summary_tokens=28, max_segments=7)


def expert_rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed + 1_000_000)


def expert_transcript(env: Recall | Guess, seed: int) -> tuple[str, float]:
    """The expert's whole episode with no context management."""
    text, _ = env.reset(seed)
    rng = expert_rng(seed)
    while True:
        action = env.expert(rng)
        observation, reward, terminated, truncated, _ = env.step(action)
        text += action + observation
        if terminated or truncated:
            return text, reward


def summarized(env: Recall, seed: int, rule: ContextRule) -> dict[str, float]:
    """The expert's episode under SUPO, as the episode runner plays it: the exchange that
    crosses the trigger is dropped and the context restarts as prompt + summary."""
    prompt, _ = env.reset(seed)
    rng = expert_rng(seed)
    context = len(prompt) + 1
    summaries, longest, longest_summary = 0, context, 0
    while True:
        action = env.expert(rng)
        observation, reward, terminated, _, _ = env.step(action)
        exchange = len(action) + len(observation)
        if not crosses(rule, context, exchange):
            context += exchange
            longest = max(longest, context)
            if terminated:
                return {
                    "reward": reward,
                    "summaries": summaries,
                    "longest": longest,
                    "longest_summary": longest_summary,
                }
            continue
        assert not terminated, "the answer's exchange crossed the trigger"
        summary = env.expert(rng, summarize=True)
        assert summary.endswith("\n") and set(summary) <= set(env.alphabet)
        longest = max(longest, context + len(INSTRUCTION) + len(summary))
        longest_summary = max(longest_summary, len(summary))
        context = len(prompt) + 1 + len(summary)
        summaries += 1


def test_recall_formats() -> None:
    env = Recall()
    prompt, info = env.reset(3)
    assert prompt == "recall 12\n" and info == {"key": "recall/3"}
    observation, reward, terminated, _, info = env.step("g2\n")
    assert observation == f"={env.digits[2]}{env.fillers[2]}\n"
    assert len(observation) == 9 and (reward, terminated, info["tool_call"]) == (0, False, True)
    assert env.step("g2\n")[0] == observation  # idempotent, and not a new fact
    assert env.step("hello\n") == ("?\n", 0.0, False, False, {"tool_call": False})
    assert env.step("=3\n")[:3] == ("?\n", 0.0, False)  # no question yet
    for i in range(12):
        observation, *_ = env.step(f"g{i}\n")
    question = f"?{env.asked}\n"
    assert observation.endswith(question) and env.asked < 4
    asked_fact = f"g{env.asked}\n"
    assert env.step(asked_fact)[0] == question  # a fetch asks again, showing no fact
    answer = f"{env.asked}={env.digits[env.asked]}\n"  # "2=7": the fact's number and digit
    assert env.step(answer)[1:3] == (1.0, True)


def test_recall_wrong_or_other_action_after_the_question_ends_with_zero() -> None:
    env = Recall()
    wrong = f"{env.asked}={(int(env.digits[env.asked]) + 1) % 10}\n"
    other = f"{(env.asked + 1) % 4}={env.digits[env.asked]}\n"  # another fact's number
    for action in (wrong, other, f"={env.digits[env.asked]}\n", "g\n", "?\n"):
        env.reset(0)
        for i in range(12):
            env.step(f"g{i}\n")
        assert env.step(action)[1:3] == (0.0, True)


def test_recall_expert_transcript_is_about_180_tokens_and_the_fact_is_far_back() -> None:
    env = Recall()
    for seed in range(200):
        text, reward = expert_transcript(env, seed)
        assert reward == 1.0  # no summaries: nothing forgotten
        assert len(text) + 1 == 165
        assert len(text) + 1 <= ContextRule(mode="none", window=384).limit
        fact = f"g{env.asked}\n={env.digits[env.asked]}{env.fillers[env.asked]}\n"
        end_of_fact = text.index(fact) + len(fact)
        question = text.index(f"\n?{env.asked}\n") + 1
        assert question - end_of_fact > 96


def test_recall_supo_budget_fits_two_exchanges_after_the_longest_summary() -> None:
    env = Recall()
    prompt = len(env.reset(0)[0]) + 1
    assert SUPO.limit == 63
    longest_summary = 3 * env.asked_from + len(" g11\n")  # "0=71=02=53=9 g11\n"
    assert longest_summary == 17 <= SUPO.summary_tokens - len(INSTRUCTION)
    longest_exchange = len("g11\n") + 10 + len("?2\n")
    assert prompt + longest_summary + 2 * longest_exchange <= SUPO.limit
    assert check_fits(SUPO, prompt, len(INSTRUCTION), longest_exchange) is None


def test_recall_expert_under_supo_makes_three_summaries_and_wins_about_046() -> None:
    env = Recall()
    runs = [summarized(env, seed, SUPO) for seed in range(300)]
    assert {r["summaries"] for r in runs} == {3}
    assert max(r["longest"] for r in runs) <= SUPO.window
    assert max(r["longest_summary"] for r in runs) <= SUPO.summary_tokens - len(INSTRUCTION)
    success = np.mean([r["reward"] for r in runs])
    assert 0.36 <= success <= 0.56  # 0.4 + 0.1 * 0.6 = 0.46: RL's room to gain
    full = [summarized(Recall(lazy=0.0), seed, SUPO) for seed in range(50)]
    assert {r["summaries"] for r in full} == {3} and all(r["reward"] == 1 for r in full)
    lazy = [summarized(Recall(lazy=1.0), seed, SUPO) for seed in range(50)]
    assert {r["summaries"] for r in lazy} == {3} and np.mean([r["reward"] for r in lazy]) < 0.3


def test_recall_expert_first_summary_picks_the_style_and_later_ones_keep_it() -> None:
    """A lazy first summary lists no facts, and neither does any later one; a full one lists
    every askable fact, and later ones copy them. Lazy 6 times in 10."""
    env = Recall()
    styles = []
    for seed in range(300):
        env.reset(seed)
        rng = expert_rng(seed)
        summaries = []
        for _ in range(5):
            env.step(env.expert(rng))
        summaries.append(env.expert(rng, summarize=True))
        for _ in range(3):  # two fetches, then a summary, as under SUPO
            env.step(env.expert(rng))
            env.step(env.expert(rng))
            summaries.append(env.expert(rng, summarize=True))
        facts = "".join(f"{i}={d}" for i, d in enumerate(env.digits[:4]))
        heads = {s.split(" ")[0] if " " in s else "" for s in summaries}
        assert heads in ({""}, {facts}), summaries
        styles.append(heads == {""})
    assert 0.53 <= np.mean(styles) <= 0.67


def test_recall_expert_summary_drops_the_crossing_exchange_and_refetches_it() -> None:
    env = Recall(lazy=0.0)
    env.reset(1)
    rng = expert_rng(1)
    for i in range(5):
        assert env.expert(rng) == f"g{i}\n"
        env.step(f"g{i}\n")
    # g4's exchange crossed the trigger and left the context: the summary cannot know it.
    facts = "".join(f"{i}={d}" for i, d in enumerate(env.digits[:4]))  # "0=81=02=53=7"
    assert env.expert(rng, summarize=True) == f"{facts} g4\n"
    assert env.summary_recall(f"{facts} g4\n") == 1.0
    wrong = "".join(f"{i}={(int(d) + 1) % 10}" for i, d in enumerate(env.digits[1:4], 1))
    assert env.summary_recall(f"0={env.digits[0]}{wrong} g4\n") == 0.25
    assert env.summary_recall(f"0={env.digits[0]} g4\n") == 0.25
    assert env.summary_recall("g4\n") == 0.0
    assert env.expert(rng) == "g4\n"  # fetched again: not a new fact
    for i in range(4, 12):
        assert env.expert(rng) == f"g{i}\n"
        env.step(f"g{i}\n")
    assert (
        env.fetched == set(range(12))
        and env.expert(rng) == f"{env.asked}={env.digits[env.asked]}\n"
    )


def test_recall_summary_after_the_question_carries_it() -> None:
    env = Recall(lazy=0.0)
    env.reset(2)
    rng = expert_rng(2)
    for i in range(11):
        env.step(f"g{i}\n")
    env.step("g11\n")  # asks; say this exchange crossed the trigger and was dropped
    assert env.expert(rng, summarize=True).endswith(" g11\n")
    observation, *_ = env.step(env.expert(rng))
    assert observation.endswith(f"?{env.asked}\n")
    # Had the question's exchange stayed (and a later fetch crossed), the summary carries it.
    env.step("g5\n")
    assert env.expert(rng, summarize=True).endswith(f" ?{env.asked}\n")
    assert env.step(env.expert(rng))[1] == 1.0


def test_recall_summary_recall_is_none_before_any_askable_fact() -> None:
    env = Recall()
    env.reset(0)
    assert env.summary_recall("") is None
    env.step("g0\n")
    assert env.summary_recall("") is None  # the latest exchange is the one a summary drops
    env.step("g1\n")
    assert env.summary_recall(f"0={env.digits[0]} g2\n") == 1.0


def test_recall_truncation_loses_the_asked_fact() -> None:
    """Truncating to a 96-token window keeps only the latest exchanges: when the question
    comes, the asked fact is gone from the context, so a policy can only guess."""
    rule = ContextRule(mode="truncate", window=96)
    env = Recall()
    for seed in range(200):
        prompt, _ = env.reset(seed)
        exchanges: list[str] = []
        i = 0
        while True:
            action = f"g{i}\n"
            observation, *_ = env.step(action)
            lengths = [len(e) for e in exchanges]
            if crosses(rule, len(prompt) + 1 + sum(lengths), len(action + observation)):
                keep = kept_exchanges(rule, len(prompt) + 1, lengths)
                exchanges = exchanges[len(exchanges) - keep :]
                continue  # the dropped fetch is made again
            exchanges.append(action + observation)
            if observation.endswith(f"?{env.asked}\n"):
                break
            i += 1
        fact = f"g{env.asked}\n={env.digits[env.asked]}"
        assert fact not in prompt + "".join(exchanges)


def test_guess_formats_and_bisection_always_wins() -> None:
    env = Guess()
    assert env.reset(5) == ("guess 1-16\n", {"key": "guess/5"})
    secrets = set()
    for seed in range(300):
        env.reset(seed)
        secrets.add(env.secret)
        lo, hi, reward = 1, 16, 0.0
        for _ in range(5):
            guess = (lo + hi) // 2
            observation, reward, terminated, _, info = env.step(f"{guess}\n")
            assert info == {"tool_call": False}
            if observation == "=\n":
                assert (reward, terminated) == (1.0, True)
                break
            lo, hi = (lo, guess - 1) if observation == "<\n" else (guess + 1, hi)
        assert reward == 1.0
    assert secrets == set(range(1, 17))


def test_guess_expert_wins_some_but_not_all() -> None:
    env = Guess()
    rewards = [expert_transcript(env, seed)[1] for seed in range(1000)]
    assert 0.6 <= np.mean(rewards) <= 0.9  # 0.753 measured


def test_guess_loses_after_max_guesses_and_summarizes_the_interval() -> None:
    env = Guess()
    env.reset(0)
    wrong = 1 if env.secret != 1 else 2
    for k in range(5):
        observation, reward, terminated, _, _ = env.step("x\n" if k == 2 else f"{wrong}\n")
        assert observation == ("?\n" if k == 2 else ">\n" if wrong < env.secret else "<\n")
        assert (reward, terminated) == (0.0, k == 4)
    env.reset(0)
    env.step("8\n")
    env.step("4\n")  # this exchange is dropped when the summary is asked for
    lo, hi = (1, 7) if env.secret < 8 else (9, 16)
    assert env.expert(np.random.default_rng(0), summarize=True) == f"{lo}-{hi}\n"


@pytest.mark.parametrize("make", [Guess, Recall])
def test_any_action_is_safe_and_episodes_are_seeded(make: type) -> None:
    env = make()
    rng = np.random.default_rng(0)
    chars = list(env.alphabet + "g²é\t")
    for seed in range(50):
        prompt, _ = env.reset(seed)
        assert set(prompt + INSTRUCTION) <= set(env.alphabet)
        for _ in range(40):
            if rng.random() < 0.5:
                action = "".join(rng.choice(chars, size=int(rng.integers(0, 8))))
            else:
                action = rng.choice(["g0\n", "g11\n", "g99\n", "=5\n", "99999\n", "7\n", ""])
            observation, reward, terminated, _, _ = env.step(str(action))
            assert observation.endswith("\n") and set(observation) <= set(env.alphabet)
            assert reward in (0.0, 1.0)
        summary = env.expert(rng, summarize=True)
        assert summary.endswith("\n") and set(summary) <= set(env.alphabet)
    assert expert_transcript(env, 7) == expert_transcript(env, 7)
    assert expert_transcript(env, 7) != expert_transcript(env, 8)
