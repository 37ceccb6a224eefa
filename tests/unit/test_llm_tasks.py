"""Built-in LLM tasks (surge/llm/tasks.py): seeded problems, disjoint held-out splits, and
verifiers that score exactly what they should."""

from __future__ import annotations

import random

import pytest

from surge.llm.tasks import Arithmetic, Countdown, Problem


def test_arithmetic_problems_are_seeded_and_correct() -> None:
    task = Arithmetic(digits=2)
    first = task.sample("train", 50, random.Random(3))
    assert first == task.sample("train", 50, random.Random(3))
    for p in first:
        a, b = p.meta["a"], p.meta["b"]
        assert 10 <= a <= 99 and 10 <= b <= 99
        assert p.prompt == f"{a}+{b}=" and p.answer == str(a + b)


def test_heldout_problems_never_appear_in_training() -> None:
    task = Arithmetic(digits=2)
    train = {p.prompt for p in task.sample("train", 3000, random.Random(1))}
    heldout = {p.prompt for p in task.sample("heldout", 300, random.Random(2))}
    assert train and heldout and not train & heldout
    # About one problem in ten is held out, whatever the seed.
    from surge.llm.problems import split_of

    everything = [f"{a}+{b}=" for a in range(10, 100) for b in range(10, 100)]
    share = sum(split_of(p) == "heldout" for p in everything) / len(everything)
    assert 0.08 < share < 0.12, share


def test_arithmetic_reward_reads_the_number_up_to_the_first_non_digit() -> None:
    p = Problem("12+34=", "46")
    assert Arithmetic.reward(p, "46") == 1.0
    assert Arithmetic.reward(p, " 46\n12+") == 1.0
    assert Arithmetic.reward(p, "46.") == 1.0
    assert Arithmetic.reward(p, "460") == 0.0
    assert Arithmetic.reward(p, "4 6") == 0.0
    assert Arithmetic.reward(p, "") == 0.0


def test_countdown_problems_have_the_reference_solution_rewarded() -> None:
    task = Countdown(numbers=4, max_value=20)
    for p in task.sample("train", 30, random.Random(0)):
        assert Countdown.reward(p, p.answer) == 1.0, p


@pytest.mark.parametrize(
    ("completion", "reward"),
    [
        ("(50+25)+(7-3)*1", 0.0),  # 1 is not among the numbers
        ("50+25+7-3", 0.0),  # 79, not 81
        ("50+25+3+3", 0.0),  # 3 used twice
        ("50+25+(3*7)-15", 0.0),  # 15 is not among them
        ("(7-3)/(50-50)", 0.0),  # 50 twice, and a division by zero
        ("__import__('os')", 0.0),  # parsed, never executed
        ("50+25+(7-3/3)", 0.0),
        ("50+(25+(3*7))", 0.0),  # 96
        ("50+25+7-3+2", 1.0),  # every number once: 81
        ("3*(25+2)", 1.0),  # not every number has to be used
        ("(50+25)+(7-3)/2*3", 0.0),  # 81, but 3 twice
        ("(50*3+7+5)/2", 0.0),  # 81 exactly through a division, but 5 is not there
        ("(50*3+7+2)/2", 0.0),  # 79.5: fractions are exact, never rounded
        ("50+25+3*(7-5)", 0.0),
        ("not an expression", 0.0),
    ],
)
def test_countdown_verifier(completion: str, reward: float) -> None:
    p = Problem("3 7 25 50 2 -> 81:", "", {"numbers": [3, 7, 25, 50, 2], "target": 81})
    assert Countdown.reward(p, completion) == reward


class Greetings:
    """A `module:function` task for the built-in model's text sample: names to greet."""

    def __init__(self, longest: int = 5) -> None:
        self.longest = longest

    def sample(self, split: str, n: int, rng: random.Random) -> list[Problem]:
        out = []
        for _ in range(n):
            name = "".join(rng.choice("xyzw") for _ in range(rng.randint(2, self.longest)))
            out.append(Problem(f"hi {name}!", name.upper()))
        return out

    @staticmethod
    def reward(problem: Problem, completion: str) -> float:
        return float(completion == problem.answer)


def test_any_task_gets_the_built_in_tokenizers_text_sample() -> None:
    """A `module:function` task (no model.path) gets an alphabet, lengths and a digest from
    fixed samples of its problems, the same in every process; other kwargs, other text."""
    from surge.llm.text_sample import _text_sample, alphabet_of, text_sample

    name = f"{__name__}:Greetings"
    sample = text_sample(name, {})
    assert set(sample.alphabet) == set("hi !xyzwXYZW")
    assert sample.longest_prompt == len("hi wwwww!") and sample.longest_answer == 5
    assert sample.all_answered and alphabet_of(name, {}) == sample.alphabet
    _text_sample.cache_clear()
    assert text_sample(name, {}) == sample  # drawn with a fixed seed, not remembered
    assert alphabet_of("arithmetic", {}) == "0123456789+="  # built-in tasks keep theirs
    shorter = text_sample(name, {"longest": 3})
    assert shorter.longest_answer == 3 and shorter.digest != sample.digest
