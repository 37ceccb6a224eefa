"""The stream primitives: block layouts, channels, the parameter service, batch readiness."""

from __future__ import annotations

import os
import time

import numpy as np

from surge.streams import params, sample
from surge.streams.flow import VersionBound
from surge.streams.ports import Port
from surge.streams.transport import (
    ALIGN,
    BlockLayout,
    Field,
    InlineTransport,
    ShmTransport,
    create_shm,
    destroy_shm,
    shm_root,
    sweep_stale_shm,
)


def test_layout_fields_are_aligned_and_do_not_overlap() -> None:
    layout = BlockLayout(
        {"a": Field((3,), "<f4"), "b": Field((2, 5), "<i8"), "c": Field((1,), "|b1")}
    )
    offsets, size = layout.offsets()
    assert all(o % ALIGN == 0 for o in offsets.values())
    assert offsets == {"a": 0, "b": 64, "c": 192}
    assert size == 256
    views = layout.views(bytearray(size))
    views["b"][:] = 7
    assert views["a"].sum() == 0 and views["c"].sum() == 0
    assert views["b"].shape == (2, 5) and views["b"].dtype == np.int64


def test_shared_blocks_are_shared_between_attachments_and_removed_on_destroy() -> None:
    layout = BlockLayout({"x": Field((4,), "<f8")})
    spec = create_shm({"blk": layout}, ["ch"])
    try:
        writer, reader = ShmTransport(spec), ShmTransport(spec)
        writer.block("blk")["x"][:] = [1, 2, 3, 4]
        assert reader.block("blk")["x"].tolist() == [1, 2, 3, 4]
        writer.channel("ch").send(5, -1, 7)
        assert reader.channel("ch").recv(1.0) == [5, -1, 7]
        started = time.monotonic()
        assert reader.channel("ch").recv(0.2) == []  # waits, then gives up
        assert 0.15 < time.monotonic() - started < 2.0
    finally:
        destroy_shm(spec)
    assert not os.path.exists(spec.directory)


def test_sweep_removes_directories_of_dead_controllers() -> None:
    dead_pid = 2**22 + 12345  # above the default pid_max: never a live process
    stale = shm_root() / f"surge-{dead_pid}-test"
    stale.mkdir()
    (stale / "inference.block").write_bytes(b"\0" * 64)
    sweep_stale_shm()
    assert not stale.exists()


def test_parameter_service_versions_and_double_buffering() -> None:
    t = InlineTransport({"params.default": params.params_layout(3)}, ["policy-0"])
    service = params.ParameterService(t, "params.default", [t.channel("policy-0")])
    service.reset()
    out = np.zeros(3, np.float32)
    assert service.latest_version() == -1 and service.read(out) == -1
    for version in range(4):
        service.publish(version, np.full(3, version, np.float32))
        assert service.read(out) == version and out.tolist() == [version] * 3
    # Announcements only wake: unread ones collapse into one, so a publisher never waits.
    assert t.channel("policy-0").recv(0) == [-1]
    service.publish(4, np.full(3, 4, np.float32))
    assert t.channel("policy-0").recv(0) == [-1]


def test_batch_is_ready_only_when_every_group_published_its_segment() -> None:
    layout = sample.sample_layout({}, _spec(), {"logp": "<f4"}, depth=1, steps=2, envs=4, groups=2)
    t = InlineTransport({"samples": layout}, ["trainer-0"])
    port = Port("samples", "segments", "samples", sends_to=("trainer-0",), flow=VersionBound(0))
    consumer = sample.SampleConsumer(t, port, "trainer-0", first_batch=0)
    producer = sample.SampleProducer(t, port, depth=1, group_size=2)
    producer.publish(0)
    consumer.poll(0)
    assert not consumer.ready(0)
    producer.publish(1)
    consumer.poll(0)
    assert consumer.ready(0) and not consumer.ready(1)
    # A group's columns are its own slice of the batch: [T, G] views into [T, N].
    producer.columns(1, segment=0)["reward"][:] = 1.0
    assert consumer.batch(0)["reward"].tolist() == [[0, 0, 1, 1], [0, 0, 1, 1]]
    # Readiness is read from the published counts: a restarted actor resumes there.
    assert sample.first_unfinished_segment(t, "samples", 1, first_batch=0) == 1


def test_lives_check_finds_a_segment_written_by_two_lives() -> None:
    life = np.zeros((4, 6), np.int32)  # T=4, N=6: three groups of 2 envs
    life[:, 2:4] = 1  # group 1 entirely by life 1: fine
    assert sample.lives_are_unmixed(life, group_size=2)
    life[3, 4] = 1  # group 2: its last step by another life
    assert not sample.lives_are_unmixed(life, group_size=2)


def _spec():  # type: ignore[no-untyped-def]
    from surge.envs.spaces import ArraySpec

    return ArraySpec((), np.dtype(np.int64))


def test_notify_never_blocks_on_a_full_channel(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A publisher's wake-ups to a subscriber that stopped reading (hung, or an evaluation
    worker busy playing) are dropped once the pipe is full: the publisher never waits."""
    spec = create_shm({}, ["slow"])
    try:
        channel = ShmTransport(spec).channel("slow")
        start = time.monotonic()
        for _ in range(40_000):  # 160 KB of records: more than a pipe holds
            channel.notify(-1)
        assert time.monotonic() - start < 5.0
        assert set(channel.recv(0.0)) == {-1}
    finally:
        destroy_shm(spec)


def test_results_rows_survive_a_writer_that_died_mid_write() -> None:
    from surge.streams.results import ResultReader, ResultWriter, results_layout

    t = InlineTransport({"evaluations": results_layout(2, ("version", "score"))}, [])
    port = Port("evaluations", "results", "evaluations", slots=(1,))
    reader = ResultReader(t, Port("evaluations", "results", "evaluations", slots=(0, 1)))
    ResultWriter(t, port).write({"version": 5, "score": 1.5})
    assert reader.new() == [{"version": 5.0, "score": 1.5}] and reader.new() == []
    t.block("evaluations")["seq"][1] += 1  # a life died between its two bumps: torn row
    assert reader.new() == []  # a row being written is never read
    ResultWriter(t, port).write({"version": 6, "score": 2.0})  # the next life
    assert reader.new() == [{"version": 6.0, "score": 2.0}]
