"""Multi-turn episodes as segment rows (surge/streams/rollouts.py) and their loss: every
segment takes its episode's advantage, and an overlong episode trains nothing but still
moves its group's statistics (surge/algos/llm_losses.py, grpo_update.py)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch

from surge.algos import llm_losses as L
from surge.algos.grpo_update import grpo_update
from surge.config.llm_schema import GRPOConfig
from surge.learners.grpo import grouped_batch
from surge.llm.episodes import Segment, Trajectory
from surge.llm.lean import LeanLlama
from surge.llm.tiny import tiny_llama
from surge.streams.rollouts import EPISODE_STATS, RolloutRows, rollout_layout
from surge.streams.transport import InlineTransport


def _rows(segments: int, G: int = 2, width: int = 6) -> RolloutRows:
    layout = rollout_layout(2, G, prompt_len=4, new_tokens=width, segments=segments)
    return RolloutRows(InlineTransport({"rollouts": layout}, []), "rollouts", 1)


def _segment(tokens: list[int], trained: list[bool]) -> Segment:
    n = len(tokens)
    return Segment(tokens, trained, [-0.5 if m else 0.0 for m in trained], [0] * n)


def _episode(segments: list[Segment], reward: float, overlong: bool = False) -> Trajectory:
    first, *later = segments
    info = {"turns": 3, "summaries": len(later), "context_max": 9}
    return Trajectory(
        [1, 5], first.tokens, first.mask, first.logprobs, first.versions, reward, "stop",
        info, later, overlong,
    )  # fmt: skip


def test_each_segment_is_a_sequence_of_its_member() -> None:
    rows = _rows(segments=3)
    r = rows.begin(0, life=0)
    two = [_segment([7, 8, 9], [True, False, True]), _segment([8, 6], [False, True])]
    rows.put(r, 0, _episode(two, 1.0))
    rows.put(r, 1, _episode([_segment([6], [True])], 0.0, overlong=True))
    a = rows.a
    assert a["tokens"].shape == (2, 6, 6)  # 2 members x 3 segments
    assert a["tokens"][r, 0, :3].tolist() == [7, 8, 9] and a["tokens"][r, 1, :2].tolist() == [8, 6]
    assert a["mask"][r, 0, :3].tolist() == [True, False, True]
    assert not a["mask"][r, 2].any() and not a["mask"][r, 4:].any()  # unused segments
    assert a["tokens"][r, 3, 0] == 6 and a["overlong"][r].tolist() == [False, True]
    assert a["reward"][r].tolist() == [1.0, 0.0]
    stats = dict(zip(EPISODE_STATS, a["stats"][r, 0], strict=True))
    assert stats["summaries"] == 1 and stats["turns"] == 3 and np.isnan(stats["summary_kept"])
    with pytest.raises(ValueError, match="segments"):
        rows.put(r, 0, _episode([_segment([7], [True])] * 4, 1.0))


def test_segments_take_their_episodes_advantage_and_overlong_ones_weigh_nothing() -> None:
    adv = torch.tensor([1.0, -2.0])
    assert L.to_segments(adv, 3).tolist() == [1.0, 1.0, 1.0, -2.0, -2.0, -2.0]
    mask = torch.ones(4, 2)
    masked = L.overlong_mask(mask, torch.tensor([0.0, 1.0]), 2)
    assert masked.tolist() == [[1, 1], [1, 1], [0, 0], [0, 0]]


def _forward_logp(model: torch.nn.Module, data: dict[str, torch.Tensor]) -> torch.Tensor:
    lean = LeanLlama(model)
    with torch.no_grad():
        logits = lean.forward_groups(data["prompts"], data["prompt_lens"], data["completions"])
        logp = torch.log_softmax(logits.float(), -1)
        return logp.gather(2, data["completions"][..., None])[..., 0]


def _data(segments: int, rewards: list[float], overlong: list[float]) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    S, N = len(rewards) * segments, 5
    lengths = torch.randint(1, N + 1, (S,), generator=gen)
    return {
        "prompts": torch.tensor([[1, 4, 5]]),
        "prompt_lens": torch.tensor([3]),
        "completions": torch.randint(3, 16, (S, N), generator=gen),
        "mask": (torch.arange(N)[None, :] < lengths[:, None]).float(),
        "reward": torch.tensor(rewards),
        "overlong": torch.tensor(overlong),
        "ref": torch.zeros(S, N),
    }


def test_an_overlong_episode_moves_its_groups_statistics_but_trains_no_token() -> None:
    """Rewards [1, 0], the first episode overlong: the second's advantage is still
    (0 - 0.5) / std([1, 0]) = -0.7071, and at ratio 1 the token-mean loss is minus it."""
    model = tiny_llama(16, hidden=64, layers=1, heads=2, max_length=32, seed=0)
    data = _data(segments=2, rewards=[1.0, 0.0], overlong=[1.0, 0.0])
    data["behav"] = _forward_logp(model, data)  # ratio 1 everywhere
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    stats = grpo_update(LeanLlama(model), optimizer, data, GRPOConfig(), group_size=2)
    assert stats["loss"] == pytest.approx(0.70710, abs=1e-4)
    assert stats["learned_tokens"] == pytest.approx(float(data["mask"][2:].sum()))


def test_a_batch_of_overlong_episodes_forwards_one_segment_and_trains_nothing() -> None:
    """Every episode overlong (a truncating policy that never finishes): nothing trains, so
    the update runs one segment instead of all of them (a run of 64 episodes x 61 segments
    spent 100 s on that forward), and its loss, statistics and zero gradient are those of
    the whole batch."""
    model = tiny_llama(16, hidden=64, layers=1, heads=2, max_length=32, seed=0)
    data = _data(segments=4, rewards=[1.0, 0.0, 0.0, 1.0], overlong=[1.0] * 4)
    data["behav"] = _forward_logp(model, data) - 0.1
    lean = LeanLlama(model)
    seen: list[int] = []
    forward = lean.forward_groups

    def counted(prompts: Any, lens: Any, tokens: torch.Tensor, counts: Any = None) -> Any:
        seen.append(tokens.shape[0])
        return forward(prompts, lens, tokens, counts)

    lean.forward_groups = counted  # type: ignore[method-assign]
    stats = grpo_update(lean, torch.optim.SGD(model.parameters(), lr=0.1), data, GRPOConfig(), 2)
    assert seen == [1]
    assert stats["loss"] == 0.0 and stats["learned_tokens"] == 0.0 and stats["entropy"] == 0.0
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_segments_train_as_sequences_of_their_episode() -> None:
    """With Dr.GRPO's advantage (no std) a group of G two-segment episodes is the same loss
    and gradient as 2G one-segment sequences that repeat each episode's reward."""
    model = tiny_llama(16, hidden=64, layers=1, heads=2, max_length=32, seed=1)
    g = GRPOConfig(advantage="dr_grpo")
    segmented = _data(segments=2, rewards=[1.0, 0.0, 0.0], overlong=[0.0, 0.0, 0.0])
    segmented["behav"] = _forward_logp(model, segmented) - 0.1
    flat = dict(segmented)
    flat["reward"] = segmented["reward"].repeat_interleave(2)
    flat["overlong"] = torch.zeros(6)
    grads = []
    for data, group_size in ((segmented, 3), (flat, 6)):
        m = copy.deepcopy(model)
        stats = grpo_update(
            LeanLlama(m), torch.optim.SGD(m.parameters(), lr=0.0), data, g, group_size
        )
        grads.append((stats["loss"], [p.grad.clone() for p in m.parameters()]))
    (loss_a, grads_a), (loss_b, grads_b) = grads
    assert loss_a == pytest.approx(loss_b, rel=1e-5)
    for x, y in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-6)


def test_the_trainers_batch_keeps_segments_and_episode_fields_apart() -> None:
    rows = _rows(segments=2)
    r = rows.begin(0, life=0)
    rows.put(r, 0, _episode([_segment([7, 8], [True, True]), _segment([9], [True])], 1.0))
    rows.put(r, 1, _episode([_segment([6, 6, 6], [True, False, True])], 0.0, overlong=True))
    data = grouped_batch(rows.batch(0))
    assert data["completions"].shape == (4, 3)  # 2 episodes x 2 segments, trimmed to 3
    assert data["reward"].tolist() == [1.0, 0.0] and data["overlong"].tolist() == [0.0, 1.0]
    assert data["mask"].sum(1).tolist() == [2.0, 1.0, 2.0, 0.0]
