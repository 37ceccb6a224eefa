"""Procedural tasks from reasoning-gym by name: `task.name: reasoning-gym:<dataset>`.

reasoning-gym (the optional extra: `pip install -e '.[reasoning-gym]'`) generates problems
procedurally: entry i of a dataset is a dict with a `question`, a reference `answer` and
`metadata`, made from `random.Random(seed + i)`, and the dataset scores an answer with its own
`score_answer(answer, entry)`, a float in [0, 1]. Here:

- a Problem's prompt is the entry's question, its answer the reference answer ("" for the few
  datasets that have none: any valid solution scores), its meta the entry itself (what
  `score_answer` reads);
- the problem space is entries 0 .. size-1 of the dataset made with `task.kwargs`, whose
  `seed` and `size` default to DATASET_SEED and DATASET_SIZE, not to the run's seed: the space,
  and so the held-out split, is the same in every run, and a run's seed only picks which
  entries it draws, in which order;
- an entry is held out when the hash of its question says so (tasks.py `split_of`), so no run
  trains on a held-out question whatever its seed, even when two entries share a question;
- the built-in model's character tokenizer gets the characters of a fixed sample of entries
  (`sample_problems`, surge/llm/text_sample.py). A character outside them (a word or
  symbol the sample never showed) becomes the unknown token <unk>, not an error: a
  generator's character set is open-ended, and a problem with a new character found hours
  into a run should cost that problem (the model
  cannot write the character), not stop the run.
"""

from __future__ import annotations

import dataclasses
import difflib
import random
from typing import Any

from surge.errors import UserError
from surge.llm.problems import REASONING_GYM, Problem, Split, split_of

DATASET_SEED = 0
"""The dataset's seed unless task.kwargs sets one: fixed, so every run has the same problems."""
DATASET_SIZE = 20_000
"""Entries in the problem space unless task.kwargs sets `size`: the largest word_ladder
accepts, and small enough for datasets that build something per entry up front (acre)."""
DRAWS_PER_PROBLEM = 100
"""Draws allowed per problem asked for before giving up (1 in 10 questions is held out)."""
INSTALL = "pip install -e '.[reasoning-gym]' in a clone of surge (or 'surge-rl[reasoning-gym]')"


def import_reasoning_gym(name: str) -> Any:
    """The reasoning_gym package, or a UserError naming the extra that brings it."""
    try:
        import reasoning_gym
    except ImportError as e:
        raise UserError(
            f"task.name={name!r} needs the reasoning-gym package, which is not installed ({e})",
            f"install surge's reasoning-gym extra: {INSTALL}",
        ) from None
    return reasoning_gym


class ReasoningGymTask:
    """reasoning-gym's dataset `dataset` made with `kwargs`, as a task (tasks.py `Task`)."""

    def __init__(self, dataset: str, **kwargs: Any) -> None:
        name = REASONING_GYM + dataset
        rg = import_reasoning_gym(name)
        from reasoning_gym.factory import DATASETS

        if dataset not in DATASETS:
            close = difflib.get_close_matches(dataset, list(DATASETS), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ValueError(
                f"task.name={name!r}: reasoning-gym has no dataset {dataset!r}{hint}; "
                f"its datasets: {', '.join(sorted(DATASETS))}"
            )
        _, config_class = DATASETS[dataset]
        fields = {f.name for f in dataclasses.fields(config_class)}
        unknown = sorted(set(kwargs) - fields)
        if unknown:  # a TypeError: tasks.task_of reports it as a task.kwargs mistake
            raise TypeError(
                f"reasoning-gym's {dataset} takes no {', '.join(unknown)} "
                f"(it takes {', '.join(sorted(fields))})"
            )
        if "seed" not in fields:  # reasoning-gym would pick a random seed per process
            raise ValueError(f"task.name={name!r}: the dataset has no seed setting")
        defaults = {"seed": DATASET_SEED, "size": DATASET_SIZE}
        settings = {k: v for k, v in defaults.items() if k in fields} | kwargs
        try:
            self.dataset = rg.create_dataset(dataset, **settings)
        except (AssertionError, ValueError) as e:  # its configs validate with assert
            raise ValueError(
                f"task.name={name!r}: reasoning-gym rejects the settings {settings} ({e})"
            ) from None
        self.name = name
        self.size = len(self.dataset)

    def entry(self, index: int) -> Problem:
        entry = self.dataset[index]
        answer = entry.get("answer")
        return Problem(str(entry["question"]), "" if answer is None else str(answer), entry)

    def sample(self, split: Split, n: int, rng: random.Random) -> list[Problem]:
        out: list[Problem] = []
        draws = 0
        while len(out) < n:
            if draws == DRAWS_PER_PROBLEM * n + 1000:
                raise ValueError(
                    f"task.name={self.name!r}: {len(out)} of {n} {split} problems in {draws} "
                    "draws: too few distinct questions for a held-out split (raise task.kwargs "
                    "size or widen the dataset's ranges)"
                )
            draws += 1
            problem = self.entry(rng.randrange(self.size))
            if split_of(problem.prompt) == split:
                out.append(problem)
        return out

    def reward(self, problem: Problem, completion: str) -> float:
        try:
            score = float(self.dataset.score_answer(completion.strip(), problem.meta))
        except Exception:  # a scorer that chokes on gibberish: a wrong answer, not a dead worker
            return 0.0
        return min(max(score, 0.0), 1.0)


def sample_problems(name: str, kwargs: dict[str, Any], n: int) -> list[Problem]:
    """Entries 0 .. n-1 of the reasoning-gym task `name` made with `kwargs` (fewer if its
    space is smaller): the fixed sample whose text the built-in model is sized and spelled
    from (surge/llm/text_sample.py)."""
    task = ReasoningGymTask(name.removeprefix(REASONING_GYM), **kwargs)
    return [task.entry(i) for i in range(min(n, task.size))]
