"""KafkaSink as a Pipeline output on the mock broker: exactly once across a restart that re-runs batches, at least once
when idempotent; its argument errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from scheduler import ManualClock, Seconds, Time
from streaming import Batch, ListSource, Pipeline, StreamingRuntime
from streaming.kafka import KafkaSink, WriteResult, close_writers
from tests.streaming.kafka.test_sinks_writer import all_values, read_committed

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

RECORDS = list("abcdef")


class CrashingSink(KafkaSink):
    """A KafkaSink that fails chosen batches before their commit, or just after it (a crash before the checkpoint's)."""

    def __init__(self, *args: Any, before: int = -1, after: int = -1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.before, self.after = before, after

    def __call__(self, batch: Batch) -> None:
        ms = batch.time.milliseconds

        def crash() -> None:
            raise RuntimeError(f"crash before the commit of {ms}")

        self.write(batch, before_commit=crash if ms == self.before else None)
        if ms == self.after:
            raise RuntimeError(f"crash after the commit of {ms}")


def run_pipeline(sink: KafkaSink, ck: Path, clock: ManualClock) -> Callable[..., Any]:
    """An async function running a ListSource of a..f (2 a batch) into ``sink`` until ``until`` ms."""

    async def run(until: int) -> None:
        p = Pipeline()
        p.add_source(ListSource(RECORDS, max_per_batch=2), name="in")
        p.add_output(sink, name="kafka")
        async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck, stop_on_failure=False) as rt:
            await rt.start()
            await rt.wait_until_idle()
            while clock.now().milliseconds < until:
                clock.advance(1000)
                await rt.wait_until_idle()
            await rt.stop()

    return run


@pytest.fixture
def topics(kafka_cluster: Any, kafka_topic: str) -> Any:
    """A fresh output topic of 3 partitions and a fresh one-partition marker topic."""
    kafka_cluster.create_topic(kafka_topic, 3)
    kafka_cluster.create_topic(kafka_topic + "-markers", 1)
    yield kafka_topic, kafka_topic + "-markers"
    close_writers()


async def test_transactional_sink_is_exactly_once_across_a_restart(kafka_cluster: Any, topics: Any, tmp_path: Path) -> None:
    """Batch 2000 crashes before its commit, 3000 after it; the restart re-runs both: every record once, read_committed."""
    topic, markers = topics
    options = {"transactional": True, "sink_id": "pipe", "marker_topic": markers}
    # A long linger keeps the crashed transaction's records in the client, so the abort drops them (the mock broker
    # would show records of an aborted transaction that reached it).
    first = CrashingSink(topic, kafka_cluster.config(linger_ms=30_000), before=2000, after=3000, **options)
    await run_pipeline(first, tmp_path / "ck", ManualClock(0))(3000)
    assert sorted(all_values(read_committed(kafka_cluster, topic))) == [b"a", b"b", b"e", b"f"]
    assert (first.written, first.skipped) == (2, 0)

    second = KafkaSink(topic, kafka_cluster.config(), **options)
    await run_pipeline(second, tmp_path / "ck", ManualClock(3500))(3500)
    assert second.last == WriteResult(0, 3000, 0, skipped=True)
    assert (second.written, second.skipped) == (1, 1)
    assert sorted(all_values(read_committed(kafka_cluster, topic))) == [b"a", b"b", b"c", b"d", b"e", b"f"]


async def test_idempotent_sink_rewrites_exactly_the_rerun_batch(kafka_cluster: Any, topics: Any, tmp_path: Path) -> None:
    """Idempotent mode: a batch failing after its write, the last before the stop, re-runs after the restart and is
    there twice; the others once."""
    topic, _ = topics
    first = CrashingSink(topic, kafka_cluster.config(), after=2000)
    await run_pipeline(first, tmp_path / "ck", ManualClock(0))(2000)
    second = KafkaSink(topic, kafka_cluster.config())
    await run_pipeline(second, tmp_path / "ck", ManualClock(3500))(3500)
    assert second.last == WriteResult(0, 3000, 2)
    assert sorted(all_values(read_committed(kafka_cluster, topic))) == [b"a", b"b", b"c", b"c", b"d", b"d", b"e", b"f"]


async def test_a_batch_written_twice_through_the_sink_is_there_once(kafka_cluster: Any, topics: Any) -> None:
    """Calling the transactional sink twice with one batch writes it once; key and value serialisers are applied."""
    topic, markers = topics
    sink = KafkaSink(topic, kafka_cluster.config(), key=lambda r: r[0], value=lambda r: r[1], transactional=True,
                     sink_id="twice", marker_topic=markers)
    batch = Batch(Time(1000), {"in": [("k", "v1"), ("k", "v2")]})
    sink(batch)
    sink(batch)
    rows = [row for rows in read_committed(kafka_cluster, topic).values() for row in rows]
    assert rows == [(b"k", b"v1"), (b"k", b"v2")]
    assert repr(sink) == f"<KafkaSink {topic!r} transactional 'twice' [1 written, 1 skipped]>"


def test_select_must_be_callable() -> None:
    """A select that is not a function is refused with the rule and the value."""
    with pytest.raises(TypeError) as caught:
        KafkaSink("t", {"bootstrap.servers": "127.0.0.1:1"}, select=3)  # type: ignore[arg-type]
    assert str(caught.value) == "select must be a function of a Batch returning its records, got 3"
