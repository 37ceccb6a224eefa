"""Polling the inference slots before sleeping (streams/spin.py): the budget rule, and an
actor's client answered while it polls by a policy-worker process."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import numpy as np
import pytest

from surge.envs.spaces import ArraySpec
from surge.streams.inference import InferenceClient, InferenceServer, inference_layout
from surge.streams.ports import Port
from surge.streams.spin import Spin, polling
from surge.streams.transport import (
    InlineTransport,
    ShmSpec,
    ShmTransport,
    create_shm,
    destroy_shm,
)
from surge.tracking.timing import Timers


class Counter:
    def __init__(self, true_after: int | None) -> None:
        self.calls, self.true_after = 0, true_after

    def __call__(self) -> list[int]:
        self.calls += 1
        return [7] if self.true_after is not None and self.calls > self.true_after else []


def test_poll_returns_the_first_truthy_result() -> None:
    spin = Spin(1.0)
    check = Counter(true_after=3)
    assert spin.poll(check) == [7]
    assert check.calls == 4 and spin.polls == 1


def test_a_wait_past_the_budget_turns_polling_off_until_a_short_sleep() -> None:
    spin = Spin(0.002)
    never = Counter(true_after=None)
    started = time.perf_counter()
    assert spin.poll(never) is None
    assert time.perf_counter() - started >= 0.002 and never.calls > 1
    calls = never.calls
    assert spin.poll(never) is None and never.calls == calls  # off: not polled at all
    spin.slept(0.010)  # the sleep was long too: still off
    assert spin.poll(never) is None and never.calls == calls
    spin.slept(0.0001)  # a short one: on again
    assert spin.poll(Counter(true_after=0)) == [7]


def test_zero_budget_never_polls_and_a_negative_one_is_refused() -> None:
    spin, check = Spin(0.0), Counter(true_after=0)
    assert spin.poll(check) is None and check.calls == 0
    spin.slept(0.0)
    assert spin.poll(check) is None and check.calls == 0
    with pytest.raises(ValueError, match="negative"):
        Spin(-1.0)


GROUPS = 2


def _layout():  # type: ignore[no-untyped-def]
    obs = {"x": ArraySpec((3,), np.dtype(np.float32))}
    return inference_layout(obs, ArraySpec((), np.dtype(np.int64)), {}, GROUPS, group_size=2)


def _ports() -> tuple[Port, Port]:
    slots = tuple(range(GROUPS))
    actor = Port("inference", "request/response", "inference", sends_to=("policy",), slots=slots)
    server = Port(
        "inference",
        "request/response",
        "inference",
        hears_from=("actor",),
        slots=slots,
        peer_slots=(("actor", slots),),
    )
    return actor, server


def _serve(spec: ShmSpec, requests: int) -> None:
    """A policy worker reduced to its protocol: answer each request 5 ms after it shows
    (after the client's first look, so it must poll or sleep)."""
    server = InferenceServer(ShmTransport(spec), _ports()[1], "policy")
    req, resp = server.arrays["request_id"], server.arrays["response_id"]
    deadline = time.monotonic() + 30.0
    while requests and time.monotonic() < deadline:
        pending = sorted(server.pending())
        if pending:
            time.sleep(0.005)
            server.arrays["action"][pending] = 1
            resp[pending] = req[pending]
            server.respond(pending)
            requests -= len(pending)


@pytest.mark.parametrize("budget_s", [0.5, 0.0])
def test_an_answer_from_another_process_is_found_by_polling(budget_s: float) -> None:
    """With a budget, the actor's client sees the answer in the slots without sleeping;
    without one it sleeps on its channel until the answer's record wakes it."""
    spec = create_shm({"inference": _layout()}, ["policy", "actor"])
    child = mp.get_context("spawn").Process(target=_serve, args=(spec, 3))
    try:
        child.start()
        client = InferenceClient(
            ShmTransport(spec), _ports()[0], "actor", Timers(), spin_s=budget_s
        )
        time.sleep(0.5)  # the server is up and polling before the first request
        for _ in range(3):
            client.post(0, min_version=0)
            assert client.ready(10.0) == [0]
        assert client.ready(0.0) == []  # answered once, returned once
        spin = client._spin
        if budget_s > 0:
            assert spin.polls == 3 and spin.sleeps == 0
        else:
            assert spin.polls == 0 and spin.sleeps == 3
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
        destroy_shm(spec)


def test_the_serial_runtime_never_polls() -> None:
    """In one thread nothing changes while the client polls: its budget is dropped."""
    transport = InlineTransport({"inference": _layout()}, ["policy", "actor"])
    client = InferenceClient(transport, _ports()[0], "actor", Timers(), spin_s=0.5)
    assert client._spin.budget_s == 0.0
    client.post(1, min_version=0)
    started = time.perf_counter()
    assert client.ready(0.01) == []
    assert time.perf_counter() - started < 0.4


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_no_polling_where_the_peer_cannot_run_meanwhile() -> None:
    assert polling(0.5, concurrent=True).budget_s == 0.5
    assert polling(0.5, concurrent=False).budget_s == 0.0  # the serial runtime
    cpus = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(cpus)})  # this process may use one CPU only
        assert polling(0.5, concurrent=True).budget_s == 0.0
    finally:
        os.sched_setaffinity(0, cpus)
