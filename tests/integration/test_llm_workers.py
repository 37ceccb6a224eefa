"""LLM RL's workers on the rollout stream: a generation worker that dies mid-group leaves
nothing partial for the trainer, in process (every row inspected); the generation and the reward
worker, SIGKILLed one after the other during a local run, are restarted and the run completes;
and the same preset runs on serial, local and Ray."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

import psutil  # noqa: E402

from surge.config.load import load_config  # noqa: E402
from surge.llm.run import LLMRun, model_dir_of
from surge.runtime.launch import start_worker
from surge.streams.control import Control  # noqa: E402
from surge.streams.rollouts import GENERATED, REFERENCED, SCORED  # noqa: E402
from surge.streams.transport import InlineTransport  # noqa: E402
from surge.workers.base import RunContext  # noqa: E402
from tests.conftest import SURGE, metrics_so_far, run_surge, wait_for, workers_by_name  # noqa: E402

pytestmark = pytest.mark.integration

SMALL = [
    "sft.steps=0", "rollout.prompts_per_batch=4", "rollout.group_size=4",
    "log.interval_s=0", "log.progress=false", "eval.every_versions=5", "task.heldout=50",
]  # fmt: skip
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}


# A multi-turn preset, short: random weights fetch, summarise and answer at random, so the
# turn limit ends most episodes (overlong).
MULTI_TURN = ["rollout.max_turns=12"]


def _graph_in_process(
    run_dir: Path, *extra: str, preset: str = "arith-grpo"
) -> tuple[RunContext, object, InlineTransport]:
    from surge.llm import setup
    from surge.recipes.grpo import grpo_graph

    # 6 slots for groups of 4: a group's members run at different times, so a group can be
    # half written when the worker dies.
    overrides = [*SMALL, "eval.workers=0", "max_policy_lag=1", "rollout.slots=6", *extra]
    cfg, _ = load_config(preset, overrides)
    model_dir = setup.model_directory(cfg, run_dir, resuming=False)
    env, n_params = setup.shapes_and_size(cfg, model_dir)
    ctx = RunContext(cfg, env, run_dir, n_params, family=LLMRun(str(model_dir)))
    graph = grpo_graph(ctx)
    transport = InlineTransport(graph.all_layouts(), graph.channels)
    Control(transport).reset()
    return ctx, graph, transport


@pytest.mark.parametrize("preset", ["arith-grpo", "recall-supo"])
def test_a_generation_worker_killed_mid_group_leaves_nothing_partial(
    tmp_path: Path, preset: str
) -> None:
    """Also for multi-turn episodes (recall-supo): killed mid-episode, mid-segment."""
    extra = MULTI_TURN if preset != "arith-grpo" else []
    ctx, graph, transport = _graph_in_process(tmp_path, *extra, preset=preset)
    names = [w.name for w in graph.workers]  # type: ignore[attr-defined]
    slot = {n: i for i, n in enumerate(names)}
    _, _, trainer = start_worker(ctx, graph, slot["trainer-0"], transport)  # type: ignore[arg-type]
    _, _, generator = start_worker(ctx, graph, slot["generator-0"], transport)  # type: ignore[arg-type]
    _, _, rewarder = start_worker(ctx, graph, slot["rewarder-0"], transport)  # type: ignore[arg-type]
    rows = transport.block("rollouts")
    # Life 0 decodes until some groups are complete and one is half done, then "dies".
    for _ in range(2000):
        generator.poll(0)
        half = [k for k, (_, n, _) in generator.open.items() if n > 0]  # type: ignore[attr-defined]
        if half and (rows["state"] == GENERATED).sum() >= 2 and generator.runner.running:  # type: ignore[attr-defined]
            break
    else:
        pytest.fail("no half-written group to kill the worker on")
    victim_group = half[0]
    done_by_first_life = {
        int(g) for g, s in zip(rows["group"], rows["state"], strict=True) if s == GENERATED
    }
    rewarder.poll(0)
    assert not any(int(rows["group"][r]) == victim_group for r in range(len(rows["state"]))
                   if rows["state"][r] >= GENERATED)  # fmt: skip
    # Life 1 takes over: it regenerates the half-written group and skips the finished ones.
    _, _, second = start_worker(ctx, graph, slot["generator-0"], transport, life=1)  # type: ignore[arg-type]
    while trainer.version < 3:  # type: ignore[attr-defined]
        second.poll(0)
        rewarder.poll(0)
        trainer.poll(0)
    # Every row that was trained or is ready holds complete groups; lives say who wrote them.
    for r in range(len(rows["state"])):
        if rows["state"][r] < SCORED:
            continue
        group = int(rows["group"][r])
        mask = rows["mask"][r]
        G = rows["reward"].shape[1]
        episodes = mask.reshape(G, -1).any(axis=1)  # any segment of each member trains
        assert (episodes | rows["overlong"][r]).all(), f"group {group} has an empty episode"
        assert (rows["versions"][r][mask] >= 0).all()
        if group in done_by_first_life:
            assert rows["life"][r] == 0, "a finished group was generated again"
        if group == victim_group:
            assert rows["life"][r] == 1, "the half-written group was not regenerated"


def completion_length(prompt: str, completion: str, **meta: object) -> float:
    return float(len(completion))


def constant_reward(prompt: str, completion: str, **meta: object) -> float:
    return 0.5


def test_the_reference_worker_gives_the_starting_models_log_probs(tmp_path: Path) -> None:
    """With a KL term the graph has a reference stage between rewards and the trainer; its
    log-probs are the starting model's (plain transformers forward), also after the trainer
    moved on, and the trainer's KL grows from 0."""
    import torch
    from transformers import AutoModelForCausalLM

    # A reward random weights earn (the length of the completion), so the policy moves.
    reward = "task.reward_fn=tests.integration.test_llm_workers:completion_length"
    ctx, graph, transport = _graph_in_process(tmp_path, "grpo.kl_coef=0.1", "grpo.lr=0.01", reward)
    names = [w.name for w in graph.workers]  # type: ignore[attr-defined]
    assert "reference-0" in names
    workers = [start_worker(ctx, graph, names.index(n), transport)[2] for n in names]  # type: ignore[arg-type]
    trainer = workers[0]
    while trainer.version < 6:  # type: ignore[attr-defined]
        for w in workers:
            w.poll(0)
    kls = [r["kl"] for r in metrics_so_far(tmp_path) if "kl" in r]  # one row per update
    assert kls[0] == pytest.approx(0.0, abs=1e-5) and kls[-1] > 1e-4
    rows = transport.block("rollouts")
    start = AutoModelForCausalLM.from_pretrained(model_dir_of(ctx)).eval()
    checked = 0
    for r in range(len(rows["state"])):
        if rows["state"][r] != REFERENCED:
            continue
        p = int(rows["prompt_len"][r])
        for m in range(rows["tokens"].shape[1]):
            n = int(rows["mask"][r, m].sum())  # single-turn: the policy's tokens come first
            assert rows["mask"][r, m, :n].all()
            seq = np.concatenate([rows["prompt"][r, :p], rows["tokens"][r, m, :n]])
            with torch.no_grad():
                logits = start(torch.from_numpy(seq[None].astype(np.int64))).logits[0]
            expected = torch.log_softmax(logits, -1)[p - 1 : p - 1 + n]
            expected = expected.gather(1, torch.from_numpy(seq[p:, None].astype(np.int64)))
            np.testing.assert_allclose(rows["ref_logprobs"][r, m, :n], expected[:, 0], atol=1e-4)
            assert not rows["ref_logprobs"][r, m, n:].any()
            checked += 1
    assert checked >= 4


def test_dynamic_sampling_drops_uninformative_groups_from_the_trained_tokens(
    tmp_path: Path,
) -> None:
    """A reward equal for every completion: with dynamic sampling tokens are generated and
    delivered but none is trained on."""
    reward = "task.reward_fn=tests.integration.test_llm_workers:constant_reward"
    ctx, graph, transport = _graph_in_process(tmp_path, "grpo.dynamic_sampling=true", reward)
    names = [w.name for w in graph.workers]  # type: ignore[attr-defined]
    workers = [start_worker(ctx, graph, names.index(n), transport)[2] for n in names]  # type: ignore[arg-type]
    while workers[0].version < 3:  # type: ignore[attr-defined]
        for w in workers:
            w.poll(0)
    rows = [r for r in metrics_so_far(tmp_path) if "trained_tokens_per_s" in r]
    assert rows and all(r["tokens_per_s"] > 0 for r in rows)
    assert all(r["trained_tokens_per_s"] == 0 and r["informative_groups"] == 0 for r in rows)


class SometimesDroppedArithmetic:
    """Arithmetic with its own episode: a third of the episodes end without a trajectory
    (by their env seed), the others score themselves."""

    def __init__(self, **kwargs: object) -> None:
        from surge.llm.tasks import Arithmetic

        self.inner = Arithmetic(**kwargs)  # type: ignore[arg-type]
        self.sample = self.inner.sample
        self.reward = self.inner.reward

    async def run_episode(self, engine: Any, problem: Any, rng: np.random.Generator) -> Any:
        from surge.llm.episodes import single_turn

        trajectory = await single_turn(engine, problem, rng)
        if rng.random() < 1 / 3:
            return None
        assert trajectory is not None
        trajectory.reward = 2.0 + self.reward(problem, engine.decode(trajectory.tokens))
        return trajectory


def test_dropped_episodes_are_run_again_and_counted_and_own_rewards_are_kept(
    tmp_path: Path,
) -> None:
    task = "task.name=tests.integration.test_llm_workers:SometimesDroppedArithmetic"
    ctx, graph, transport = _graph_in_process(tmp_path, task, "task.kwargs={digits: 2}")
    names = [w.name for w in graph.workers]  # type: ignore[attr-defined]
    workers = [start_worker(ctx, graph, names.index(n), transport)[2] for n in names]  # type: ignore[arg-type]
    while workers[0].version < 3:  # type: ignore[attr-defined]
        for w in workers:
            w.poll(0)
    rows = transport.block("rollouts")
    scored = rows["state"] >= SCORED
    assert scored.sum() >= 4 and rows["rewarded"][scored].all()
    assert (rows["reward"][scored] >= 2.0).all(), "the reward worker overwrote an episode's reward"
    dropped = sum(r.get("episodes_dropped", 0) for r in metrics_so_far(tmp_path))
    trained = 3 * ctx.cfg.rollout.prompts_per_batch * ctx.cfg.rollout.group_size
    assert 0.15 * trained < dropped < 1.0 * trained  # about half an episode per trained one


def test_sigkilled_generation_and_reward_workers_are_restarted_and_the_run_finishes(
    run_dir: Path,
) -> None:
    """The generation worker is SIGKILLed, then, once its new life runs, the reward worker:
    each is restarted in place and the run reaches its budget."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [*SURGE, "train", "arith-grpo", f"run_dir={run_dir}", *SMALL, "total_env_steps=8000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip

    def restarted(name: str) -> bool:
        w = workers_by_name(run_dir)[name]
        return w["restarts"] == 1 and w["state"] == "running"

    try:
        assert wait_for(lambda: len(metrics_so_far(run_dir)) > 3, 120), "training never started"
        for victim in ("generator-0", "rewarder-0"):
            assert proc.poll() is None, f"the run ended before {victim} was killed"
            psutil.Process(workers_by_name(run_dir)[victim]["pid"]).send_signal(signal.SIGKILL)
            assert wait_for(lambda v=victim: restarted(v), 60), f"{victim} was not restarted"
        proc.wait(240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 0, stderr[-3000:]
    for victim in ("generator-0", "rewarder-0"):
        assert f"{victim} failed (" in stderr, stderr[-3000:]
    assert stderr.count("restarting it (1/") == 2, stderr[-3000:]
    training = [r for r in metrics_so_far(run_dir) if "steps_per_s" in r]
    assert training[-1]["env_steps"] >= 8000 and training[-1]["restarts"] == 2


@pytest.mark.parametrize("runtime", ["serial", "local", "ray"])
def test_the_llm_preset_runs_on_every_runtime(runtime: str, run_dir: Path) -> None:
    if runtime == "ray":
        os.environ.update(RAY_ENV)
    # Serial evaluates version 0 at once; a process or Ray actor first loads transformers,
    # so those runs last long enough (several seconds) for its report to arrive.
    steps = 1600 if runtime == "serial" else 6400
    result = run_surge(
        "train", "arith-grpo", f"run_dir={run_dir}", f"runtime={runtime}", *SMALL,
        f"total_env_steps={steps}", "max_policy_lag=2", "eval.nice=0", "eval.every_versions=200",
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = metrics_so_far(run_dir)
    evals = [r for r in rows if "eval/accuracy" in r]
    assert evals and evals[0]["eval/policy_version"] == 0  # the first row: the start weights
    training = [r for r in rows if "steps_per_s" in r]
    assert training[-1]["policy_version"] == steps // 16 and training[-1]["env_steps"] == steps
    shares = [sum(v for k, v in r.items() if k.startswith("staleness/")) for r in training]
    assert all(abs(s - 1.0) < 1e-6 for s in shares)  # every token counted, none beyond eta
    assert all(k in ("staleness/0", "staleness/1", "staleness/2")
               for r in training for k in r if k.startswith("staleness/"))  # fmt: skip
    # The checkpoint's weights load with plain transformers.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(run_dir / "model")
    AutoTokenizer.from_pretrained(run_dir / "model")


@pytest.mark.parametrize("runtime", ["serial", "local", "ray"])
def test_a_multi_turn_preset_runs_on_every_runtime(runtime: str, run_dir: Path) -> None:
    """recall-supo, short (random weights): segments are trained, summaries made and logged,
    and the policy never sees more than its 96-token window."""
    if runtime == "ray":
        os.environ.update(RAY_ENV)
    result = run_surge(
        "train", "recall-supo", f"run_dir={run_dir}", f"runtime={runtime}", *SMALL,
        *MULTI_TURN, "total_env_steps=48", "eval.workers=0", timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    training = [r for r in metrics_so_far(run_dir) if "steps_per_s" in r]
    assert training[-1]["env_steps"] == 48 and training[-1]["policy_version"] == 3
    episodes = [r for r in training if "episode/turns" in r]
    assert episodes and max(r["episode/context_max_max"] for r in episodes) <= 96
    assert any(r["episode/summaries"] > 0 for r in episodes)


def test_an_llm_run_resumes_from_its_checkpoint(run_dir: Path) -> None:
    """`surge resume` of an LLM run: the trainer's state comes back (version, env steps),
    training goes on from the next version to the new budget, checkpoints there, and the
    weights written at the end load with plain transformers. (From random weights, as here,
    every reward is equal and the weights do not move: the test is of the bookkeeping.)"""
    common = [*SMALL, "runtime=serial", "eval.workers=0", "max_policy_lag=0"]
    result = run_surge(
        "train", "arith-grpo", f"run_dir={run_dir}", *common, "total_env_steps=64", timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    first = [r for r in metrics_so_far(run_dir) if "steps_per_s" in r]
    assert first[-1]["policy_version"] == 4 and first[-1]["env_steps"] == 64

    result = run_surge("resume", str(run_dir), "total_env_steps=128", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming from" in result.stderr
    rows = [r for r in metrics_so_far(run_dir) if "steps_per_s" in r]
    resumed = rows[len(first) :]
    assert resumed and resumed[0]["policy_version"] > 4 and resumed[0]["env_steps"] > 64
    assert resumed[-1]["policy_version"] == 8 and resumed[-1]["env_steps"] == 128
    versions = [r["policy_version"] for r in rows]
    assert versions == sorted(versions)  # one history, no version trained twice
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints[-1] == "ckpt-00000008.safetensors"  # the resumed run's own, at its end
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(run_dir / "model")


def test_a_stopped_run_ends_its_warm_start_too(tmp_path: Path) -> None:
    """SIGTERM to `surge train` while the warm start trains (in its own process): the run
    exits as interrupted and the warm-start process ends with it, rather than training on
    for minutes for nobody."""
    import os
    import signal
    import subprocess
    import time

    import psutil

    from tests.conftest import SURGE, wait_for

    env = {**os.environ, "SURGE_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        # a warm start far longer than the test: it cannot end before the stop
        [*SURGE, "train", "guess-grpo", f"run_dir={tmp_path / 'run'}", "log.progress=false",
         "sft.steps=100000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        parent = psutil.Process(proc.pid)

        def spawned() -> list[psutil.Process]:
            return [
                p for p in parent.children(recursive=True) if "spawn_main" in " ".join(p.cmdline())
            ]

        # the prepare process starts once the config is checked; then its warm start trains
        assert wait_for(lambda: len(spawned()) >= 2 or proc.poll() is not None, timeout=60)
        time.sleep(5)
        children = parent.children(recursive=True)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "surge: interrupted" in err
    # stopped mid-warm-start: no finished warm start was cached (else this tested nothing)
    assert not list((tmp_path / "cache").rglob("*.safetensors")), "the warm start had ended"
    assert wait_for(lambda: not any(c.is_running() for c in children), timeout=15)
