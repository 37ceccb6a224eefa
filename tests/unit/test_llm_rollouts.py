"""The rollout stream of LLM RL (surge/streams/rollouts.py): the staleness admission rule,
row hand-over, and the trainer's view of a batch (surge/learners/grpo.py `grouped_batch`)."""

from __future__ import annotations

import pytest

from surge.algos.llm_losses import rollout_capacity
from surge.llm.episodes import Trajectory
from surge.streams.flow import VersionBound
from surge.streams.rollouts import (
    GENERATED,
    GENERATING,
    SCORED,
    RolloutRows,
    may_start,
    rollout_layout,
)
from surge.streams.transport import InlineTransport


@pytest.mark.parametrize("eta", [0, 1, 2, 4])
def test_admission_is_areals_capacity_rule(eta: int) -> None:
    B, flow = 4, VersionBound(eta)
    for version in range(6):
        admitted = [k for k in range(200) if may_start(k, version, B, flow)]
        # A prefix of the groups, as many as AReaL's rule allows from an empty start.
        assert admitted == list(range(len(admitted)))
        assert len(admitted) == rollout_capacity(version, eta, B, 0, 0, 10**9)
        # No group starts more than eta versions before the version that trains it.
        assert all(k // B - version <= eta for k in admitted)
    # eta = 0 is synchronous: exactly batch v may be generated at version v.
    assert [k for k in range(20) if may_start(k, 2, B, VersionBound(0))] == list(range(12))


def _episode(prompt: list[int], tokens: list[int], logprobs: list[float], versions: list[int],
             finish: str = "eos", mask: list[bool] | None = None,
             reward: float | None = None) -> Trajectory:  # fmt: skip
    mask = [True] * len(tokens) if mask is None else mask
    return Trajectory(prompt, tokens, mask, logprobs, versions, reward, finish)


def _rows(eta: int = 1, B: int = 2, G: int = 3) -> RolloutRows:
    layout = rollout_layout((eta + 1) * B, G, prompt_len=5, new_tokens=4)
    return RolloutRows(InlineTransport({"rollouts": layout}, []), "rollouts", B)


def test_a_batch_is_ready_only_when_each_of_its_groups_is_scored_in_its_row() -> None:
    rows = _rows()  # 4 rows, batches of 2 groups
    for k in (0, 1):
        r = rows.begin(k, life=0)
        assert not rows.holds(k, GENERATED)
        for m in range(3):
            rows.put(r, m, _episode([1, 5, 6], [7, 8, 2], [-0.1, -0.2, -0.3], [0, 0, 0]))
        rows.set_state(r, GENERATED)
        assert not rows.batch_ready(0)
        rows.set_state(r, SCORED)
    assert rows.batch_ready(0) and not rows.batch_ready(1)
    # Group 4 takes group 0's row: batch 0 is no longer there, and a half-written group 4
    # (its generation worker killed) is never ready.
    r = rows.begin(4, life=1)
    assert r == 0 and int(rows.a["state"][r]) == GENERATING
    assert not rows.batch_ready(0) and not rows.holds(4, GENERATED)
    rows.put(r, 0, _episode([1, 9], [3], [-0.1], [1]))
    assert rows.a["prompt"][r].tolist() == [1, 9, 0, 0, 0]
    # every episode of a group starts from its prompt; one that does not fit is refused
    with pytest.raises(ValueError, match="same prompt"):
        rows.put(r, 1, _episode([1, 8], [3], [-0.1], [1]))
    with pytest.raises(ValueError, match="max_new_tokens"):
        rows.put(r, 1, _episode([1, 9], [3] * 5, [-0.1] * 5, [1] * 5))


def test_a_batch_becomes_prompts_and_completions_for_the_grouped_forward() -> None:
    from surge.learners.grpo import grouped_batch

    rows = _rows(eta=0, B=1, G=2)
    r = rows.begin(0, life=0)
    rows.put(r, 0, _episode([1, 5, 6], [7, 2], [-0.5, -0.25], [3, 3]))
    logprobs = [-1.0, -2.0, -3.0, -4.0]
    rows.put(r, 1, _episode([1, 5, 6], [8, 9, 10, 11], logprobs, [3, 4, 4, 4], "length"))
    rows.a["reward"][r] = [1.0, 0.0]
    rows.set_state(r, SCORED)
    data = grouped_batch(rows.batch(0))
    assert data["prompts"].tolist() == [[1, 5, 6]] and data["prompt_lens"].tolist() == [3]
    assert data["completions"].tolist() == [[7, 2, 0, 0], [8, 9, 10, 11]]
    assert data["mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert data["behav"][0].tolist() == [-0.5, -0.25, 0, 0]
    assert data["versions"][1].tolist() == [3, 4, 4, 4]
    assert data["reward"].tolist() == [1.0, 0.0]
    assert not rows.batch(0)["rewarded"].any()  # the reward worker scores both


def test_env_tokens_stay_in_context_untrained_and_the_forward_ends_at_the_last_policy_token() -> (
    None
):
    from surge.learners.grpo import grouped_batch

    rows = _rows(eta=0, B=1, G=2)
    r = rows.begin(0, life=0)
    # member 0: policy 7, env 20 21, policy 8; then an env token that nothing after trains
    rows.put(r, 0, _episode([1, 5], [7, 20, 21, 8], [-0.5, 0, 0, -0.25], [2, -1, -1, 2],
                            mask=[True, False, False, True], reward=1.0))  # fmt: skip
    rows.put(r, 1, _episode([1, 5], [9, 30], [-1.0, 0.0], [2, -1], mask=[True, False], reward=0.0))
    data = grouped_batch(rows.batch(0))
    assert data["completions"].tolist() == [[7, 20, 21, 8], [9, 30, 0, 0]]
    assert data["mask"].tolist() == [[1, 0, 0, 1], [1, 0, 0, 0]]
    assert data["reward"].tolist() == [1.0, 0.0] and rows.a["rewarded"][r].all()
    rows.put(r, 0, _episode([1, 5], [7, 20, 8, 40], [-0.5, 0, -0.2, 0], [2, -1, 2, -1],
                            mask=[True, False, True, False], reward=1.0))  # fmt: skip
    assert grouped_batch(rows.batch(0))["completions"].shape == (2, 3)
