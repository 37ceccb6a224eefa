"""Recurrent policies on the real worker graph: short runs of PPO and APPO with GRU and LSTM
cores on the serial and local runtimes (remote and inline inference), evaluation workers and
`surge eval`, and a restarted actor. The Ray runtime's run is in test_ray.py (it shares that
module's loopback cluster).

The strongest check is APPO at `max_policy_lag=0`: the trainer recomputes every step's
log-prob by unrolling the model over the segment from the stored state (`core0`) with the
episode resets, and V-trace logs the mean ratio pi/mu of the batch. It is 1 (to float
rounding) only if the learner saw exactly the state every step's request carried: any slip
in the actor's carry, the stored state, the resets or the policy engine moves it.
"""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from surge.api import Run
from surge.config.load import load_config
from surge.models.recurrent_state import CORE0, CORE_IN
from surge.runtime.controller import train
from surge.runtime.launch import start_worker
from surge.tracking.metrics import read_metrics
from tests.conftest import SURGE, in_process_streams, interrupt, metrics_so_far, wait_for

pytestmark = pytest.mark.integration

MEMORY = [
    "env.wrappers=[surge.envs.wrappers:HideVelocity]",
    "model.core_size=32",
    "ppo.rollout_len=16",
    "ppo.minibatches=2",
    "log.interval_s=0",
    "log.progress=false",
]


def _train(run_dir: Path, *overrides: str):  # type: ignore[no-untyped-def]
    cfg, name = load_config("cartpole-ppo", [*MEMORY, f"run_dir={run_dir}", *overrides])
    return train(cfg, name)


def assert_on_policy(records: list[dict[str, float]]) -> None:
    """Every update's V-trace ratio is 1: the learner reproduced the acting policy."""
    updates = [r for r in records if "vtrace_rho_mean" in r]
    assert updates
    for r in updates:
        assert abs(r["vtrace_rho_mean"] - 1.0) < 1e-4, r["vtrace_rho_mean"]
        assert r["vtrace_clipped_frac"] == 0.0


@pytest.mark.parametrize(
    ("runtime", "overrides"),
    [
        ("serial", ["model.core=gru"]),  # a policy worker serves the requests
        ("serial", ["model.core=lstm", "workers.inference=inline", "ppo.burn_in=4"]),
        ("local", ["model.core=lstm"]),
        ("local", ["model.core=gru", "workers.inference=inline"]),
        # Feed-forward on the torch learner, whose trainer starts last: the policy worker
        # must not serve batch 0 from the fresh (all-zero) parameter block as "version 0"
        ("local", ["model.core=none", "model.backend=torch"]),
    ],
)
def test_appo_learner_reproduces_the_acting_policy(
    run_dir: Path, runtime: str, overrides: list[str]
) -> None:
    result = _train(
        run_dir, f"runtime={runtime}", "algo=appo", "max_policy_lag=0", "total_env_steps=2048",
        *overrides,
    )  # fmt: skip
    assert result.reason == "budget" and result.env_steps == 2048  # 32 updates of 16 x 4
    records = read_metrics(run_dir)
    assert records[-1]["policy_version"] == 32 and records[-1]["episodes"] > 0
    assert_on_policy(records)


@pytest.mark.parametrize("runtime", ["serial", "local"])
@pytest.mark.parametrize("core", ["gru", "lstm"])
def test_ppo_trains_a_recurrent_policy(run_dir: Path, runtime: str, core: str) -> None:
    result = _train(
        run_dir, f"runtime={runtime}", f"model.core={core}", "max_policy_lag=1",
        "total_env_steps=3072", "ppo.burn_in=2",
    )  # fmt: skip
    assert result.reason == "budget" and result.env_steps == 3072
    records = read_metrics(run_dir)
    assert max(r["policy_lag_max"] for r in records) <= 1
    last = records[-1]
    for key in ("policy_loss", "value_loss", "entropy", "grad_norm", "approx_kl"):
        assert math.isfinite(last[key]), key
    assert last["approx_kl"] > 0  # the policy moved


def test_evaluation_workers_and_surge_eval_carry_the_state(run_dir: Path) -> None:
    # Training never waits for evaluation: the run goes on until an evaluation row exists
    # (the evaluator imports torch for a recurrent model), then Ctrl+C (as test_eval_workers).
    proc = subprocess.Popen(
        [*SURGE, "train", "cartpole-ppo", f"run_dir={run_dir}", *MEMORY, "model.core=gru",
         "total_env_steps=10000000", "stop_return=null", "eval.workers=1", "eval.nice=0",
         "eval.every_versions=16", "eval.episodes=2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    rows = lambda: [r for r in metrics_so_far(run_dir) if "eval/return_mean" in r]  # noqa: E731
    try:
        enough = wait_for(lambda: len(rows()) >= 1, 240)
    finally:
        interrupt(proc)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert enough and proc.returncode == 130, stderr[-3000:]
    for row in rows():
        assert row["eval/episodes"] == 2
        assert row["eval/return_mean"] == row["eval/length_mean"] >= 8  # +1 per step
    played = Run(run_dir).evaluate(episodes=3)  # `surge eval`: the newest checkpoint
    assert played["episodes"] == 3 and played["return_mean"] == played["length_mean"] >= 8


def test_restarted_actor_starts_from_zero_state(tmp_path: Path) -> None:
    """An actor rebuilt in place (life 1) over the same streams zeroes the state its dead
    predecessor left in the request slots, and stores that zero state as the start of the
    segment it rewrites."""
    cfg, _ = load_config("cartpole-ppo", [*MEMORY, "model.core=gru", "runtime=serial"])
    graph, ctx, transport = in_process_streams(cfg, tmp_path)
    names = [spec.name for spec in graph.workers]
    workers = [start_worker(ctx, graph, slot, transport)[2] for slot in range(len(names))]
    actor = names.index("actor-0")
    samples = transport.block("samples")
    published = samples["published"]
    for _ in range(16):  # into the middle of the first segment (16 steps per group)
        for worker in workers:
            worker.poll(0.0)
    assert published.max() == 0
    core_in = transport.block("inference")[CORE_IN]
    assert np.abs(core_in).sum() > 0  # the dead actor's episodes had a state
    workers[actor] = start_worker(ctx, graph, actor, transport, life=1)[2]
    np.testing.assert_array_equal(core_in, 0.0)  # fresh episodes, fresh state
    samples[CORE0][:] = 7.0  # whatever the dead actor stored
    while published.min() < 1:
        for worker in workers:
            worker.poll(0.0)
    np.testing.assert_array_equal(samples[CORE0][0], 0.0)  # segment 0, rewritten from zero
    for worker in workers:
        worker.close()


ARRIVALS = "pettingzoo:surge.envs.testing_pettingzoo:arrivals_env"


@pytest.mark.parametrize(
    "overrides",
    [
        # agents that join and leave: their rows are inactive (terminated) between, so the
        # carry zeroes their state there and the learner leaves those steps out of the loss
        [
            f"env.id={ARRIVALS}",
            "env.kwargs={}",
            "env.multiagent.global_state=none",
            "model.critic_inputs=[]",
            "ppo.rollout_len=6",
        ],
        # MAPPO's centralised critic: the policy's fields go through the core, the critic's
        # global state does not
        [],
    ],
    ids=["arrivals", "spread-mappo"],
)
def test_recurrent_multiagent_rows_reproduce_the_acting_policy(
    run_dir: Path, overrides: list[str]
) -> None:
    pytest.importorskip("mpe2")
    cfg, name = load_config(
        "spread-mappo",
        [f"run_dir={run_dir}", "runtime=serial", "log.interval_s=0", "log.progress=false",
         "workers.envs_per_group=2", "model.core=gru", "model.core_size=16", "algo=appo",
         "max_policy_lag=0", "total_env_steps=1200", *overrides],
    )  # fmt: skip
    result = train(cfg, name)
    assert result.reason == "budget"
    records = read_metrics(run_dir)
    assert_on_policy(records)
    assert all(math.isfinite(r["policy_loss"]) for r in records)


def test_two_recurrent_policies_each_reproduce_their_acting_policy(run_dir: Path) -> None:
    """Two policies (a0 is one's, a1 and a2 the other's): each lane carries its own rows'
    states through its own inference stream, and each trainer unrolls its own segments."""
    pytest.importorskip("pettingzoo")
    cfg, name = load_config(
        "spread-ippo",
        [f"run_dir={run_dir}", "runtime=serial", "log.interval_s=0", "log.progress=false",
         "workers.envs_per_group=2", f"env.id={ARRIVALS}", "env.kwargs={}",
         "env.multiagent.global_state=none", "model.actor_inputs=[]", "model.critic_inputs=[]",
         "policies=[solo, pair]", "policy_mapping={a0: solo, '*': pair}", "ppo.rollout_len=6",
         "model.core=lstm", "model.core_size=8", "algo=appo", "max_policy_lag=0",
         "total_env_steps=480"],
    )  # fmt: skip
    assert train(cfg, name).reason == "budget"
    for home in (run_dir, run_dir / "policies" / "pair"):
        records = [r for r in read_metrics(home) if "steps_per_s" in r]
        assert records[-1]["policy_version"] == 10
        assert_on_policy(records)
