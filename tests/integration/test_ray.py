"""The Ray runtime on a real multi-node Ray cluster: a head and two worker nodes, each its own
raylet, all on 127.0.0.1 and started by these tests; plus a Ray instance surge starts itself.

The tests run `surge train` as a separate process (Ray's driver), as a user would.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from surge.streams.transport import shm_root
from tests.conftest import QUICK, SURGE, metrics_so_far, wait_for, workers_by_name

# Ray's traffic stays on 127.0.0.1; these are read when `ray` is imported, and inherited by
# every process of the cluster and of the runs.
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}
os.environ.update(RAY_ENV)

pytestmark = pytest.mark.integration

CRASHING = "env.id=surge.envs.testing:surge/Crashing-v0"
# Two pods (a policy worker and its actor) of 0.5 + 0.5 CPUs, one per 1-CPU worker node; the
# trainer (1 CPU) fits only on the head. 4 envs in all, as in the default preset.
TWO_PODS = [
    "runtime=ray",
    "workers.actors=2",
    "workers.policy_workers=2",
    "workers.ring_size=2",
    "workers.envs_per_group=1",
]


def loopback_cluster(head_cpus: int, labelled: bool = False) -> Iterator[str]:
    """A `ray.cluster_utils.Cluster` of a head with `head_cpus` CPUs and two 1-CPU worker
    nodes (with `labelled`, resources `node1` / `node2`), each its own raylet, all on
    127.0.0.1 (RAY_ENV); yields its address. Wrap it in a module-scoped fixture."""
    from ray.cluster_utils import Cluster

    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": head_cpus, "include_dashboard": False},
        shutdown_at_exit=True,
    )
    try:
        for i in (1, 2):
            c.add_node(num_cpus=1, resources={f"node{i}": 1} if labelled else {})
        c.wait_for_nodes()
        yield str(c.address)
    finally:
        c.shutdown()


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    yield from loopback_cluster(head_cpus=1, labelled=True)


def _start(run_dir: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, **RAY_ENV, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [*SURGE, "train", "cartpole-ppo", f"run_dir={run_dir}", "log.progress=false", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def _is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped  # ::ffff:127.0.0.1
    return addr.is_loopback


class ConnectionSampler(threading.Thread):
    """Every internet socket of this process and its descendants (the cluster, the run's
    driver, its Ray workers), sampled every second while the run lasts: one scan of the
    system's socket table per sample, kept to those pids."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.done = threading.Event()
        self.sockets: set[tuple[int, str, str]] = set()  # (pid, local ip, remote ip)
        self.pids: set[int] = set()
        self.samples = 0

    def run(self) -> None:
        me = psutil.Process()
        while not self.done.is_set():
            pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
            self.pids |= pids
            for c in psutil.net_connections(kind="inet"):
                if c.pid in pids:
                    self.sockets.add((c.pid, c.laddr.ip, c.raddr.ip if c.raddr else ""))
            self.samples += 1
            self.done.wait(1.0)

    def outside_loopback(self) -> list[tuple[int, str, str]]:
        return [s for s in self.sockets if not all(_is_loopback(ip) for ip in s[1:] if ip)]


@pytest.mark.learning
def test_cartpole_solves_on_a_three_node_cluster(cluster: str, run_dir: Path) -> None:
    sampler = ConnectionSampler()
    sampler.start()
    started = time.monotonic()
    proc = _start(run_dir, f"ray.address={cluster}", *TWO_PODS)
    try:
        _, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
        sampler.done.set()
        sampler.join()
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, err
    assert "surge: solved" in err, err
    records = [r for r in metrics_so_far(run_dir) if "steps_per_s" in r]  # training rows
    assert records[-1]["episode_return_mean"] >= 475
    assert all(r["policy_lag_max"] == 0 for r in records)  # synchronous PPO across nodes

    # Placement: the trainer, and each pod on a node of its own, printed at start.
    workers = workers_by_name(run_dir)
    nodes = {name: w["node_id"] for name, w in workers.items()}
    assert len(set(nodes.values())) == 3, nodes
    assert nodes["actor-0"] == nodes["policy-0"] != nodes["trainer-0"]
    assert nodes["actor-1"] == nodes["policy-1"] != nodes["trainer-0"]
    assert nodes["actor-0"] != nodes["actor-1"]
    assert all(isinstance(w["pid"], int) for w in workers.values())
    assert workers["trainer-0"]["state"] == "finished"
    assert "placement:" in err and str(nodes["actor-1"])[:8] in err

    # Every socket of the run and the cluster stayed on 127.0.0.0/8.
    assert sampler.samples >= 3 and sampler.sockets
    assert sampler.outside_loopback() == []
    # Each node's shared memory was removed at the end (named after its agent's pid).
    left = [p for p in shm_root().glob("surge-*-*") if int(p.name.split("-")[1]) in sampler.pids]
    assert left == []
    print(f"three-node CartPole: {records[-1]['env_steps']} steps, {elapsed:.0f} s")


def test_killed_actor_on_another_node_is_restarted_then_named(cluster: str, run_dir: Path) -> None:
    # Inline inference: each actor runs the policy itself, so parameters are forwarded to the
    # actors' own nodes. One restart allowed: the first kill is survived, the second is not.
    proc = _start(
        run_dir, f"ray.address={cluster}", "total_env_steps=10000000", "workers.max_restarts=1",
        "workers.inference=inline", *TWO_PODS, *QUICK,
    )  # fmt: skip
    try:
        assert wait_for(lambda: len(metrics_so_far(run_dir)) > 2, timeout=90)
        first = workers_by_name(run_dir)["actor-1"]
        os.kill(int(first["pid"]), signal.SIGKILL)  # type: ignore[call-overload]

        def restarted() -> bool:
            w = workers_by_name(run_dir)["actor-1"]
            return w["restarts"] == 1 and w["state"] == "running"

        assert wait_for(restarted, timeout=60)
        second = workers_by_name(run_dir)["actor-1"]
        assert second["pid"] != first["pid"] and second["node_id"] == first["node_id"]
        # Training goes on with the new life: new updates need actor-1's segments.
        steps = len(metrics_so_far(run_dir))
        assert wait_for(lambda: len(metrics_so_far(run_dir)) > steps + 3, timeout=60)
        os.kill(int(second["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "surge: actor-1 failed" in err and "restarting it" in err
    assert proc.returncode == 1, err
    assert "worker actor-1 failed" in err
    assert "died" in err and str(second["pid"]) in err
    assert "the trainer saved a checkpoint" in err
    workers = workers_by_name(run_dir)
    assert workers["actor-1"]["state"] == "failed" and workers["actor-1"]["restarts"] == 1
    assert "policy-0" not in workers  # inline: no policy workers
    assert workers["actor-0"]["node_id"] != workers["actor-1"]["node_id"]


def _kill(run_dir: Path, name: str) -> dict[str, object]:
    worker = workers_by_name(run_dir)[name]
    os.kill(int(worker["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    return worker


def _restarted(run_dir: Path, name: str) -> bool:
    w = workers_by_name(run_dir)[name]
    return w["restarts"] == 1 and w["state"] == "running"


def _steps(run_dir: Path) -> int:
    records = metrics_so_far(run_dir)
    return int(records[-1]["env_steps"]) if records else 0  # type: ignore[call-overload]


@pytest.mark.learning
def test_killed_actor_and_policy_worker_restart_on_ray_and_the_run_still_solves(
    run_dir: Path,
) -> None:
    # The default preset with remote inference (one actor served by one policy worker) on a
    # Ray instance surge starts for the run. As tests/integration/test_restarts.py does on
    # `local`: kill the actor mid-segment, let its new life feed the trainer, then kill the
    # policy worker with requests in flight; the run goes on and solves.
    proc = _start(run_dir, "runtime=ray", "workers.inference=remote", "log.interval_s=0.5")
    try:
        assert wait_for(lambda: _steps(run_dir) > 10_000, timeout=90)
        actor = _kill(run_dir, "actor-0")
        assert wait_for(lambda: _restarted(run_dir, "actor-0"), timeout=60)
        at_kill = _steps(run_dir)
        assert wait_for(lambda: _steps(run_dir) > at_kill + 5_000, timeout=60)
        policy = _kill(run_dir, "policy-0")
        assert wait_for(lambda: _restarted(run_dir, "policy-0"), timeout=60)
        _, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "surge: solved" in err, err
    for name, old in (("actor-0", actor), ("policy-0", policy)):
        assert f"surge: {name} failed (" in err, err
        new = workers_by_name(run_dir)[name]
        assert new["restarts"] == 1 and new["pid"] != old["pid"]
        assert new["node_id"] == old["node_id"]
        assert f"restarting it on node {str(old['node_id'])[:8]} (1/3)" in err, err
    records = [r for r in metrics_so_far(run_dir) if "steps_per_s" in r]  # training rows
    assert records[-1]["episode_return_mean"] >= 475  # type: ignore[operator]
    # The trainer logs the controller's count, and trained on the actor's second life (it
    # refuses, and fails the run on, any segment that mixes two lives).
    assert records[-1]["restarts"] == 2
    assert records[-1]["actor_life_max"] == 1
    assert workers_by_name(run_dir)["trainer-0"]["state"] == "finished"


def test_crashing_worker_on_a_ray_instance_started_for_the_run(run_dir: Path) -> None:
    # No ray.address: surge starts Ray on this machine for the run, and stops it.
    proc = _start(
        run_dir, "runtime=ray", CRASHING, "env.kwargs={crash_after: 400}",
        "total_env_steps=100000", *QUICK,
    )  # fmt: skip
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "worker actor-0 failed" in err
    assert "Traceback (most recent call last)" in err
    assert "CrashingEnv: simulated failure at step 401" in err
    assert "the trainer saved a checkpoint" in err
    workers = workers_by_name(run_dir)
    assert workers["actor-0"]["state"] == "failed"
    assert len({w["node_id"] for w in workers.values()}) == 1


def test_recurrent_appo_across_nodes_reproduces_the_acting_policy(
    cluster: str, run_dir: Path
) -> None:
    """A GRU policy on the three-node cluster: each actor on its own node with its policy
    worker, the trainer on the head, so every segment and its stored state (`core0`) crosses
    nodes through the segment forwarder. APPO at lag 0 logs a V-trace ratio of 1 only if the
    trainer unrolled exactly the states the policy workers acted with
    (tests/integration/test_recurrent_runs.py has the same check on serial and local)."""
    from tests.integration.test_recurrent_runs import MEMORY, assert_on_policy

    proc = _start(
        run_dir, f"ray.address={cluster}", *TWO_PODS, *MEMORY, "model.core=gru", "algo=appo",
        "max_policy_lag=0", "total_env_steps=2048",
    )  # fmt: skip
    try:
        _, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    records = metrics_so_far(run_dir)
    assert records[-1]["env_steps"] == 2048
    assert_on_policy(records)  # type: ignore[arg-type]
    nodes = {name: w["node_id"] for name, w in workers_by_name(run_dir).items()}
    assert nodes["actor-0"] != nodes["trainer-0"] and nodes["actor-1"] != nodes["trainer-0"]
