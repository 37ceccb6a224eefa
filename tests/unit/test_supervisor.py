"""The run's life cycle (surge/runtime/supervisor.py), driven by a scripted fake runtime: no
processes, no streams, no waiting. Each test plays rounds of the watch loop (exits,
heartbeat silences, Ctrl+C, time passing) and checks what the supervisor asked the runtime
to do, what it returned or raised, and what it wrote to workers.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from surge.config.load import load_config
from surge.config.schema import ExperimentConfig
from surge.errors import EnvSpecError, WorkerFailure, WorkerUserError, failure_text
from surge.runtime import supervisor as supervisor_module
from surge.runtime.supervisor import CHECKPOINT_TIMEOUT_S, TICK_S, Exit, Supervisor
from surge.workers.graph import Graph, worker
from tests.conftest import workers_by_name

TRAINER = "surge.learners.ppo:build"  # never imported: the supervisor reads specs only
KILLED = "process 4242 was killed by signal SIGKILL"
NOTE = "\n(the trainer saved a checkpoint: `surge resume` continues)"


def config(*overrides: str) -> ExperimentConfig:
    cfg, _ = load_config("cartpole-ppo", list(overrides))
    return cfg


def tiny_graph(leaders: int = 1, actors: int = 1, **actor_options: Any) -> Graph:
    """Trainers (leaders, never restarted) then actors; nothing else: the supervisor reads
    only the specs."""
    trainers = [
        worker(
            "trainer",
            k,
            factory=TRAINER,
            restartable=False,
            ends_run=True,
            policy=f"p{k}" if leaders > 1 else "",
        )
        for k in range(leaders)
    ]
    return Graph(trainers + [worker("actor", a, **actor_options) for a in range(actors)], {})


def traceback_of(error: Exception) -> str:
    """The text a worker reports when it raised (`failure_text`): a real traceback."""
    try:
        raise error
    except Exception as raised:
        return failure_text(raised)


class Clock:
    """The supervisor's `time.monotonic`, moved only by the script."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(supervisor_module, "time", SimpleNamespace(monotonic=clock.monotonic))
    return clock


@dataclass
class Round:
    """One round of the watch loop as the fake runtime plays it: the clock moves by
    `advance_s`, then Ctrl+C arrives (`interrupt`) or these lives end (`exits`); `silent`
    is what `silences` says after them."""

    exits: list[Exit] = field(default_factory=list)
    silent: dict[str, float | None] = field(default_factory=dict)
    advance_s: float = 0.0
    interrupt: bool = False


class FakeRuntime:
    """A `Runtime` that plays `rounds` and records what the supervisor asks of it."""

    def __init__(
        self, sup: Supervisor, clock: Clock, rounds: list[Round], finish_in_time: bool = True
    ) -> None:
        self.sup, self.clock, self.rounds = sup, clock, list(rounds)
        self.finish_in_time = finish_in_time
        self.starting: set[str] = set()  # workers whose lives start as "starting" (Ray)
        self.silent: dict[str, float | None] = {}
        self.calls: list[tuple[str, Any]] = []  # start, retire, reset, ask_to_checkpoint...
        self.lives: dict[str, list[int]] = {}  # the `life` each start of a worker saw
        self.row_at_retire: list[dict[str, Any]] = []  # its workers.json row when retired
        self.ticks: list[bool] = []

    def start(self, names: list[str]) -> None:
        self.calls.append(("start", list(names)))
        for name in names:
            self.lives.setdefault(name, []).append(self.sup.restarts[name])
            state = "starting" if name in self.starting else "running"
            self.sup.started_life(name, state, pid=100 + self.sup.slot[name], host="testhost")

    def exits(self, timeout: float) -> list[Exit]:
        assert timeout == TICK_S
        if not self.rounds:
            raise AssertionError("the script is over but the supervisor still watches")
        now = self.rounds.pop(0)
        self.clock.now += now.advance_s
        self.silent = now.silent
        if now.interrupt:
            raise KeyboardInterrupt
        return list(now.exits)

    def silences(self) -> dict[str, float | None]:
        return self.silent

    def retire(self, name: str) -> None:
        self.calls.append(("retire", name))
        self.row_at_retire.append(workers_by_name(self.sup.run_dir)[name])

    def where(self, name: str) -> str:
        return " on node 1a2b3c4d"

    def reset(self, name: str, restarts: int) -> None:
        self.calls.append(("reset", (name, restarts)))

    def ask_to_checkpoint(self, names: list[str]) -> None:
        self.calls.append(("ask_to_checkpoint", list(names)))

    def await_finish(self, names: list[str], timeout: float) -> bool:
        self.calls.append(("await_finish", (list(names), timeout)))
        return self.finish_in_time

    def tick(self, final: bool = False) -> None:
        self.ticks.append(final)


def supervise(
    tmp_path: Path,
    clock: Clock,
    rounds: list[Round],
    cfg: ExperimentConfig | None = None,
    graph: Graph | None = None,
    finish_in_time: bool = True,
) -> tuple[Supervisor, FakeRuntime]:
    """A supervisor of `graph` (default: trainer-0, actor-0) and a runtime that will play
    `rounds`; the test calls `sup.run(runtime)`."""
    sup = Supervisor(cfg or config(), graph or tiny_graph(), tmp_path)
    return sup, FakeRuntime(sup, clock, rounds, finish_in_time)


def finished(reason: str, name: str = "trainer-0") -> Exit:
    return Exit(name, "finished", reason)


def died(name: str = "actor-0", detail: str = KILLED) -> Exit:
    return Exit(name, "died", detail)


def after_start(runtime: FakeRuntime) -> list[tuple[str, Any]]:
    """The calls after the first `start` of every worker."""
    assert runtime.calls[0][0] == "start", runtime.calls
    return runtime.calls[1:]


# ---------------------------------------------------------------------- leaders finishing


def test_the_run_ends_with_the_leaders_finish_reason(tmp_path: Path, clock: Clock) -> None:
    sup, rt = supervise(tmp_path, clock, [Round(), Round(exits=[finished("budget")])])
    assert sup.run(rt) == "budget"
    assert rt.calls == [("start", ["trainer-0", "actor-0"])], "nothing to restart or ask"
    assert rt.ticks == [False, True], "one tick per round, then the final one"
    table = workers_by_name(tmp_path)
    assert table["trainer-0"]["state"] == "finished"
    assert table["actor-0"] == {
        "name": "actor-0",
        "pid": 101,
        "host": "testhost",
        "state": "running",
        "restarts": 0,
    }


def test_with_two_leaders_the_other_is_asked_to_checkpoint_and_the_first_reason_wins(
    tmp_path: Path, clock: Clock
) -> None:
    rounds = [
        Round(exits=[finished("solved", "trainer-1")]),
        Round(exits=[finished("interrupted", "trainer-0")]),
    ]
    sup, rt = supervise(tmp_path, clock, rounds, graph=tiny_graph(leaders=2))
    assert sup.run(rt) == "solved", "the run's reason is the first leader's to finish"
    assert after_start(rt) == [("ask_to_checkpoint", ["trainer-0"])]
    table = workers_by_name(tmp_path)
    assert table["trainer-0"]["state"] == table["trainer-1"]["state"] == "finished"


def test_a_finished_leader_that_falls_silent_is_not_hung(tmp_path: Path, clock: Clock) -> None:
    rounds = [
        Round(exits=[finished("solved", "trainer-1")], silent={"trainer-1": 1e6}),
        Round(exits=[finished("interrupted", "trainer-0")]),
    ]
    sup, rt = supervise(tmp_path, clock, rounds, graph=tiny_graph(leaders=2))
    assert sup.run(rt) == "solved"
    assert "retire" not in [call for call, _ in rt.calls]


# ---------------------------------------------------------------------- restarts


def test_a_dead_restartable_worker_is_restarted_in_place(
    tmp_path: Path, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    rounds = [Round(exits=[died()]), Round(exits=[finished("budget")])]
    sup, rt = supervise(tmp_path, clock, rounds)
    assert sup.run(rt) == "budget"
    assert after_start(rt) == [
        ("retire", "actor-0"),
        ("reset", ("actor-0", 1)),
        ("start", ["actor-0"]),
    ], "the old life is retired before the slot is reset and a new life started"
    assert sup.restarts == {"trainer-0": 0, "actor-0": 1}
    assert rt.lives["actor-0"] == [0, 1], "the new life starts with the restart counted"
    assert rt.row_at_retire[0]["state"] == "failed"
    row = workers_by_name(tmp_path)["actor-0"]
    assert (row["state"], row["restarts"]) == ("running", 1)
    assert (
        f"surge: actor-0 failed ({KILLED}); restarting it on node 1a2b3c4d (1/3)"
        in capsys.readouterr().err
    )


def test_a_worker_that_stops_before_the_run_ends_is_restarted(
    tmp_path: Path, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    rounds = [Round(exits=[Exit("actor-0", "finished", "")]), Round(exits=[finished("time")])]
    sup, rt = supervise(tmp_path, clock, rounds)
    assert sup.run(rt) == "time", "only leaders end the run"
    assert sup.restarts["actor-0"] == 1
    assert "stopped before the run ended (no reason given)" in capsys.readouterr().err


def test_a_worker_that_raised_is_not_restarted_by_default(tmp_path: Path, clock: Clock) -> None:
    trace = traceback_of(RuntimeError("env exploded"))
    rounds = [Round(exits=[Exit("actor-0", "raised", trace)])]
    sup, rt = supervise(tmp_path, clock, rounds)
    with pytest.raises(WorkerFailure) as failure:
        sup.run(rt)
    assert failure.value.worker == "actor-0"
    assert failure.value.detail.startswith(trace)
    assert "retire" not in [call for call, _ in rt.calls]
    row = workers_by_name(tmp_path)["actor-0"]
    assert (row["state"], row["restarts"]) == ("failed", 0)


def test_restart_on_error_restarts_a_worker_that_raised(
    tmp_path: Path, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = traceback_of(RuntimeError("env exploded"))
    rounds = [Round(exits=[Exit("actor-0", "raised", trace)]), Round(exits=[finished("budget")])]
    cfg = config("workers.restart_on_error=true")
    sup, rt = supervise(tmp_path, clock, rounds, cfg=cfg)
    assert sup.run(rt) == "budget"
    assert sup.restarts["actor-0"] == 1
    assert "actor-0 failed (RuntimeError: env exploded); restarting" in capsys.readouterr().err


def test_restarts_stop_at_max_restarts_and_the_run_fails(
    tmp_path: Path, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    rounds = [Round(exits=[died(detail=f"death {k}")]) for k in range(3)]
    sup, rt = supervise(tmp_path, clock, rounds, cfg=config("workers.max_restarts=2"))
    with pytest.raises(WorkerFailure) as failure:
        sup.run(rt)
    assert (failure.value.worker, failure.value.detail) == ("actor-0", "death 2" + NOTE)
    assert [call for call, _ in rt.calls].count("retire") == 2
    err = capsys.readouterr().err
    assert "(1/2)" in err and "(2/2)" in err and "(3/2)" not in err
    row = workers_by_name(tmp_path)["actor-0"]
    assert (row["state"], row["restarts"]) == ("failed", 2)


def test_max_restarts_is_per_worker_and_reset_gets_the_runs_total(
    tmp_path: Path, clock: Clock
) -> None:
    rounds = [
        Round(exits=[died("actor-0")]),
        Round(exits=[died("actor-1")]),
        Round(exits=[died("actor-1")]),
        Round(exits=[finished("budget")]),
    ]
    cfg = config("workers.max_restarts=2")
    sup, rt = supervise(tmp_path, clock, rounds, cfg=cfg, graph=tiny_graph(actors=2))
    assert sup.run(rt) == "budget", "actor-1's second restart is within its own budget"
    resets = [args for call, args in rt.calls if call == "reset"]
    assert resets == [("actor-0", 1), ("actor-1", 2), ("actor-1", 3)]
    assert sup.restarts == {"trainer-0": 0, "actor-0": 1, "actor-1": 2}


def test_max_restarts_zero_fails_at_the_first_death(tmp_path: Path, clock: Clock) -> None:
    sup, rt = supervise(
        tmp_path, clock, [Round(exits=[died()])], cfg=config("workers.max_restarts=0")
    )
    with pytest.raises(WorkerFailure, match="actor-0"):
        sup.run(rt)
    assert sup.restarts["actor-0"] == 0


def test_a_worker_whose_spec_forbids_restarts_fails_the_run(tmp_path: Path, clock: Clock) -> None:
    graph = tiny_graph(restartable=False)
    sup, rt = supervise(tmp_path, clock, [Round(exits=[died()])], graph=graph)
    with pytest.raises(WorkerFailure, match="actor-0"):
        sup.run(rt)
    assert "retire" not in [call for call, _ in rt.calls]


# ---------------------------------------------------------------------- failures and checkpoints


def test_a_failed_leader_stops_the_run_without_a_checkpoint_request(
    tmp_path: Path, clock: Clock
) -> None:
    trace = traceback_of(ValueError("nan loss"))
    sup, rt = supervise(tmp_path, clock, [Round(exits=[Exit("trainer-0", "raised", trace)])])
    with pytest.raises(WorkerFailure) as failure:
        sup.run(rt)
    assert (failure.value.worker, failure.value.detail) == ("trainer-0", trace)
    assert after_start(rt) == [], "a leader is never restarted nor asked to checkpoint"


def test_a_non_leader_failure_saves_a_checkpoint_and_says_surge_resume(
    tmp_path: Path, clock: Clock
) -> None:
    sup, rt = supervise(
        tmp_path, clock, [Round(exits=[died()])], graph=tiny_graph(restartable=False)
    )
    with pytest.raises(WorkerFailure) as failure:
        sup.run(rt)
    assert failure.value.detail == KILLED + NOTE
    assert after_start(rt) == [
        ("ask_to_checkpoint", ["trainer-0"]),
        ("await_finish", (["trainer-0"], CHECKPOINT_TIMEOUT_S)),
    ]
    table = workers_by_name(tmp_path)
    assert (table["trainer-0"]["state"], table["actor-0"]["state"]) == ("stopped", "failed")


def test_no_surge_resume_note_when_the_leaders_do_not_finish_in_time(
    tmp_path: Path, clock: Clock
) -> None:
    graph = tiny_graph(restartable=False)
    sup, rt = supervise(tmp_path, clock, [Round(exits=[died()])], graph=graph, finish_in_time=False)
    with pytest.raises(WorkerFailure) as failure:
        sup.run(rt)
    assert failure.value.detail == KILLED, "no checkpoint was saved: no note"
    assert "await_finish" in [call for call, _ in rt.calls]
    assert workers_by_name(tmp_path)["trainer-0"]["state"] == "running"


def test_only_the_leaders_still_running_are_asked_to_checkpoint(
    tmp_path: Path, clock: Clock
) -> None:
    rounds = [Round(exits=[finished("solved", "trainer-1")]), Round(exits=[died()])]
    graph = tiny_graph(leaders=2, restartable=False)
    sup, rt = supervise(tmp_path, clock, rounds, graph=graph)
    with pytest.raises(WorkerFailure) as failure:
        sup.run(rt)
    assert failure.value.detail.endswith(NOTE)
    assert after_start(rt) == [
        ("ask_to_checkpoint", ["trainer-0"]),  # trainer-1 finished: the others too
        ("ask_to_checkpoint", ["trainer-0"]),  # actor-0 failed: save before stopping
        ("await_finish", (["trainer-0"], CHECKPOINT_TIMEOUT_S)),
    ]


def test_a_leader_still_starting_is_not_asked_to_checkpoint(tmp_path: Path, clock: Clock) -> None:
    graph = tiny_graph(restartable=False)
    sup, rt = supervise(tmp_path, clock, [Round(exits=[died()])], graph=graph)
    rt.starting = {"trainer-0"}
    with pytest.raises(WorkerFailure) as failure:
        sup.run(rt)
    assert failure.value.detail == KILLED, "no checkpoint: no note"
    assert after_start(rt) == []


@pytest.mark.parametrize("fix", ["make step() return 5 values", ""])
def test_a_user_error_is_never_restarted_and_its_fix_names_surge_resume(
    tmp_path: Path, clock: Clock, fix: str
) -> None:
    text = failure_text(EnvSpecError("step() returned 3 values", fix))
    cfg = config("workers.restart_on_error=true", "workers.max_restarts=5")
    sup, rt = supervise(tmp_path, clock, [Round(exits=[Exit("actor-0", "raised", text)])], cfg=cfg)
    with pytest.raises(WorkerUserError) as error:
        sup.run(rt)
    kept = f"the trainer saved a checkpoint: `surge resume {tmp_path}` continues"
    assert error.value.worker == "actor-0"
    assert error.value.problem == "step() returned 3 values (met by actor-0)"
    assert error.value.fix == (f"{fix}; {kept}" if fix else kept)
    assert "retire" not in [call for call, _ in rt.calls], "the same input fails again"
    assert sup.restarts["actor-0"] == 0
    table = workers_by_name(tmp_path)
    assert (table["actor-0"]["state"], table["trainer-0"]["state"]) == ("failed", "stopped")


def test_a_user_error_without_a_checkpoint_keeps_its_own_fix(tmp_path: Path, clock: Clock) -> None:
    text = failure_text(EnvSpecError("bad reward", "return a float"))
    rounds = [Round(exits=[Exit("actor-0", "died", text)])]
    sup, rt = supervise(tmp_path, clock, rounds, finish_in_time=False)
    with pytest.raises(WorkerUserError) as error:
        sup.run(rt)
    assert error.value.fix == "return a float"


# ---------------------------------------------------------------------- hung workers


def test_a_worker_silent_past_the_heartbeat_timeout_is_restarted_as_hung(
    tmp_path: Path, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    rounds = [
        Round(silent={"trainer-0": 0.1, "actor-0": 4.0}),
        Round(silent={"trainer-0": 0.1, "actor-0": 6.0}),
        Round(exits=[finished("budget")]),
    ]
    cfg = config("workers.heartbeat_timeout_s=5")
    sup, rt = supervise(tmp_path, clock, rounds, cfg=cfg)
    assert sup.run(rt) == "budget"
    assert after_start(rt) == [
        ("retire", "actor-0"),
        ("reset", ("actor-0", 1)),
        ("start", ["actor-0"]),
    ], "silent 4 s is within the timeout; silent 6 s is hung"
    assert rt.row_at_retire[0]["state"] == "hung"
    assert "no heartbeat for 6 s (workers.heartbeat_timeout_s=5)" in capsys.readouterr().err


def test_a_hung_worker_that_may_not_restart_fails_the_run(tmp_path: Path, clock: Clock) -> None:
    cfg = config("workers.heartbeat_timeout_s=5", "workers.max_restarts=0")
    sup, rt = supervise(tmp_path, clock, [Round(silent={"actor-0": 7.0})], cfg=cfg)
    with pytest.raises(WorkerFailure) as failure:
        sup.run(rt)
    assert failure.value.worker == "actor-0"
    assert failure.value.detail.startswith("no heartbeat for 7 s")
    assert failure.value.detail.endswith(NOTE)
    assert workers_by_name(tmp_path)["actor-0"]["state"] == "hung"


def test_a_worker_that_never_finishes_starting_is_hung(
    tmp_path: Path,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(supervisor_module, "STARTUP_TIMEOUT_S", 10.0)
    starting: dict[str, float | None] = {"actor-0": None}
    rounds = [
        Round(silent=starting, advance_s=9.0),
        Round(silent=starting, advance_s=2.0),  # 11 s since its start
        Round(silent=starting, advance_s=9.0),  # 9 s since the new life's start
        Round(exits=[finished("budget")]),
    ]
    sup, rt = supervise(tmp_path, clock, rounds)
    assert sup.run(rt) == "budget"
    assert [call for call, _ in rt.calls].count("retire") == 1, "only the first life hung"
    assert rt.row_at_retire[0]["state"] == "hung"
    assert "did not finish starting in 10 s" in capsys.readouterr().err


# ---------------------------------------------------------------------- Ctrl+C


def test_ctrl_c_asks_the_leaders_for_a_checkpoint(tmp_path: Path, clock: Clock) -> None:
    rounds = [Round(interrupt=True), Round(exits=[finished("interrupted")])]
    sup, rt = supervise(tmp_path, clock, rounds)
    assert sup.run(rt) == "interrupted"
    assert after_start(rt) == [("ask_to_checkpoint", ["trainer-0"])]


def test_ctrl_c_asks_only_the_leaders_not_yet_finished(tmp_path: Path, clock: Clock) -> None:
    rounds = [
        Round(exits=[finished("solved", "trainer-1")]),
        Round(interrupt=True),
        Round(exits=[finished("interrupted", "trainer-0")]),
    ]
    sup, rt = supervise(tmp_path, clock, rounds, graph=tiny_graph(leaders=2))
    assert sup.run(rt) == "solved"
    assert after_start(rt) == [("ask_to_checkpoint", ["trainer-0"])] * 2


def test_a_second_ctrl_c_reraises_at_once(tmp_path: Path, clock: Clock) -> None:
    rounds = [Round(interrupt=True), Round(interrupt=True), Round(exits=[finished("budget")])]
    sup, rt = supervise(tmp_path, clock, rounds)
    with pytest.raises(KeyboardInterrupt):
        sup.run(rt)
    assert after_start(rt) == [("ask_to_checkpoint", ["trainer-0"])]
    assert len(rt.rounds) == 1, "it did not wait for the leader"


def test_ctrl_c_without_a_checkpoint_within_the_grace_time_fails_the_run(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor_module, "INTERRUPT_GRACE_S", 10.0)
    rounds = [
        Round(interrupt=True, advance_s=1.0),
        Round(advance_s=9.0),  # 9 s since Ctrl+C: still waiting
        Round(advance_s=2.0),  # 11 s
    ]
    sup, rt = supervise(tmp_path, clock, rounds)
    with pytest.raises(WorkerFailure) as failure:
        sup.run(rt)
    assert failure.value.worker == "trainer-0"
    assert failure.value.detail == "did not save a checkpoint after Ctrl+C in time"
    assert not rt.rounds, "it waited the whole grace time"
    assert after_start(rt) == [("ask_to_checkpoint", ["trainer-0"])]


def test_no_restart_after_ctrl_c(tmp_path: Path, clock: Clock) -> None:
    rounds = [Round(interrupt=True), Round(exits=[died()])]
    sup, rt = supervise(tmp_path, clock, rounds)
    with pytest.raises(WorkerFailure, match="actor-0"):
        sup.run(rt)
    assert "retire" not in [call for call, _ in rt.calls]
    assert sup.restarts["actor-0"] == 0
