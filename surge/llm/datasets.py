"""A task from a local dataset file: one problem per row (`prompt`, `answer`, any other columns
become the problem's metadata, passed to `task.reward_fn`).

Loaded with Hugging Face `datasets` from the file (nothing downloads). The held-out split is
chosen by a hash of the prompt, as for the built-in tasks, so it never depends on the seed;
problems are drawn with replacement from each split.
"""

from __future__ import annotations

import random
from pathlib import Path

from surge.llm.problems import Problem, Split, split_of


class FileTask:
    def __init__(self, path: str, prompt_column: str = "prompt", answer_column: str = "answer"):
        import datasets

        file = Path(path).expanduser()
        if not file.is_file():
            raise ValueError(f"task.name={path!r}: no such file")
        kind = "parquet" if file.suffix == ".parquet" else "json"
        table = datasets.load_dataset(kind, data_files=str(file), split="train")
        for column in (prompt_column, answer_column):
            if column not in table.column_names:
                raise ValueError(
                    f"task.name={path!r}: no column {column!r} (columns: {table.column_names})"
                )
        self.splits: dict[str, list[Problem]] = {"train": [], "heldout": []}
        for row in table:
            prompt, answer = str(row[prompt_column]), str(row[answer_column])
            meta = {k: v for k, v in row.items() if k not in (prompt_column, answer_column)}
            self.splits[split_of(prompt)].append(Problem(prompt, answer, meta))
        if not self.splits["train"]:
            raise ValueError(f"task.name={path!r}: no rows")
        if not self.splits["heldout"]:  # a tiny file: evaluate on training rows rather than none
            self.splits["heldout"] = self.splits["train"]

    def problems(self) -> list[Problem]:
        """Every row, training rows first (the built-in model's text sample)."""
        train, heldout = self.splits["train"], self.splits["heldout"]
        return train if heldout is train else train + heldout

    def sample(self, split: Split, n: int, rng: random.Random) -> list[Problem]:
        rows = self.splits[split]
        return [rows[rng.randrange(len(rows))] for _ in range(n)]

    @staticmethod
    def reward(problem: Problem, completion: str) -> float:
        """Exact match of the stripped completion (a run with a file sets task.reward_fn)."""
        return float(completion.strip() == problem.answer.strip())
