"""`workers.trainer_threads_alone`: the trainer's thread count follows the actors' progress."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from surge.config.load import load_config
from surge.learners.ppo import PPOLearner


class _Consumer:
    def __init__(self, published: int) -> None:
        self.published = published  # batches 0 .. published-1 are complete

    def ready(self, batch: int) -> bool:
        return batch < self.published


@pytest.mark.parametrize(
    ("lag", "published", "threads"),
    [
        (0, 4, 2),  # synchronous: the actors always wait for the update of batch 3
        (1, 4, 1),  # the actor is still filling batch 4 while batch 3 trains
        (1, 5, 2),  # batch 4 is done: the actor waits for version 4
        (2, 5, 1),
        (2, 6, 2),
    ],
)
def test_alone_threads_once_every_actor_waits(lag: int, published: int, threads: int) -> None:
    cfg, _ = load_config(
        "pong-appo",
        [f"max_policy_lag={lag}", "workers.trainer_threads=1", "workers.trainer_threads_alone=2"],
    )
    learner = SimpleNamespace(cfg=cfg, consumer=_Consumer(published), _version=3)
    assert PPOLearner._threads(learner) == threads  # type: ignore[arg-type]
