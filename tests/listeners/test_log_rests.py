"""The bus's logs as rings of items: a reader of items folds each once, views number copies of the ring from any thread."""

from __future__ import annotations

import logging
import threading
from typing import Any, Sequence

import pytest

from listeners import BatchLog, ProgressLog
from listeners._batch_log import READER_BATCH
from scheduler import JobSet, StreamingQueryProgress
from tests.listeners.test_batch_log import completed
from tests.support import capture_events


def batch_seqs(entries: Sequence[tuple[int, Any]]) -> list[tuple[int, int]]:
    """Each entry's seq and its batch's number (batch n is at n s)."""
    return [(seq, batch.time.milliseconds // 1000) for seq, batch in entries]


def test_a_reader_of_items_folds_every_batch_once_in_order_across_rests_and_reads() -> None:
    """A reader made with numbered=False is given the batches themselves, each once and in order, whether the log rests or
    a view reads; an entries() copy numbers each batch with its seq."""
    log = BatchLog()
    folded: list[JobSet] = []
    reader = log.reader(folded.extend, numbered=False)
    batches = [completed(n) for n in range(1, 3 * READER_BATCH + 40)]
    for n, batch in enumerate(batches, start=1):
        log.append(batch)
        if n % 97 == 0:
            log.catch_up(reader)
    assert len(folded) < len(batches)  # the last rest came before the end: a read folds the rest
    log.catch_up(reader)
    log.catch_up(reader)
    assert len(folded) == len(batches) and all(a is b for a, b in zip(folded, batches, strict=True))
    kept = batch_seqs(log.entries())
    assert kept == [(n, n) for n in range(len(batches) - len(kept) + 1, len(batches) + 1)]
    assert READER_BATCH - 1 <= len(kept) <= READER_BATCH and log.appended == len(batches)


def test_a_ring_numbers_equal_items_by_where_they_are() -> None:
    """Progress reports that are equal tuples (the same builder, rows and durations) are still numbered by their place."""
    log = ProgressLog()

    def build() -> StreamingQueryProgress:
        raise AssertionError("never built here")

    durations = {"commitOffsets": 0}
    folded: list[tuple[Any, ...]] = []
    reader = log.reader(folded.extend, numbered=False)
    for _ in range(2 * READER_BATCH + 5):
        log.append(build, 0, durations)
    entries = log.entries()
    assert [seq for seq, *_ in entries] == list(range(2 * READER_BATCH + 6 - len(entries), 2 * READER_BATCH + 6))
    assert all(entry[1:] == (build, 0, durations) for entry in entries)
    log.catch_up(reader)
    assert len(folded) == 2 * READER_BATCH + 5 and folded[0] == (build, 0, durations)


def test_a_numbered_reader_and_a_reader_of_items_see_the_same_batches() -> None:
    """On one log, a reader of entries gets (seq, batch) tuples and a reader of items the batches, the same ones."""
    log = BatchLog()
    log.append(completed(1))  # before the readers: seen by neither
    numbered: list[tuple[int, Any]] = []
    items: list[Any] = []
    first, second = log.reader(numbered.extend), log.reader(items.extend, numbered=False)
    for n in range(2, 2 * READER_BATCH + 10):
        log.append(completed(n))
    log.catch_up(first)
    log.catch_up(second)
    assert batch_seqs(numbered) == [(n, n) for n in range(2, 2 * READER_BATCH + 10)]
    assert [seq_batch[1] for seq_batch in numbered] == items


def test_retaining_more_keeps_what_was_appended_and_folds_nothing_twice() -> None:
    """retain() growing the ring while a reader has entries to fold keeps the newest, numbered, and folds each once."""
    log = BatchLog()
    folded: list[int] = []
    reader = log.reader(lambda entries: folded.extend(seq for seq, _ in entries))
    for n in range(1, 200):
        log.append(completed(n))
    log.retain(1000)
    for n in range(200, 1500):
        log.append(completed(n))
    log.catch_up(reader)
    assert folded == list(range(1, 1500))
    kept = batch_seqs(log.entries())
    assert kept[-1] == (1499, 1499) and len(kept) >= 1000 and kept == [(n, n) for n in range(kept[0][0], 1500)]


def test_views_on_another_thread_number_and_fold_the_batches_as_the_loop_appends() -> None:
    """A thread copying entries() and folding as the log rests never sees a batch under another seq, nor folds one twice
    or misses one."""
    log = BatchLog()
    folded: list[int] = []
    reader = log.reader(lambda batches: folded.extend(b.time.milliseconds // 1000 for b in batches), numbered=False)
    total = 20 * READER_BATCH
    done = threading.Event()
    wrong: list[tuple[int, int]] = []

    def view() -> None:
        while not done.is_set():
            wrong.extend(pair for pair in batch_seqs(log.entries()) if pair[0] != pair[1])
            log.catch_up(reader)

    viewer = threading.Thread(target=view)
    viewer.start()
    try:
        for n in range(1, total + 1):
            log.append(completed(n))
    finally:
        done.set()
        viewer.join(10)
    log.catch_up(reader)
    assert wrong == [] and folded == list(range(1, total + 1))


def test_a_reader_of_items_given_entries_folds_their_items() -> None:
    """LogReader.catch_up with a copy of entries gives a reader of items the batches and reports, without their seqs."""
    batches, reports = BatchLog(), ProgressLog()
    got_batches: list[Any] = []
    got_reports: list[Any] = []
    batch_reader = batches.reader(got_batches.extend, numbered=False)
    report_reader = reports.reader(got_reports.extend, numbered=False)
    kept = [completed(n) for n in range(1, 4)]
    for batch in kept:
        batches.append(batch)
        reports.append(batch.jobs[0].func, batch.time.milliseconds, {"commitOffsets": 0})
    batch_reader.catch_up(batches.entries())
    report_reader.catch_up(reports.entries())
    assert got_batches == kept
    assert [(build, rows) for build, rows, _ in got_reports] == [(b.jobs[0].func, b.time.milliseconds) for b in kept]


def test_a_fold_that_raises_at_a_rest_is_logged_and_leaves_the_appender_and_the_other_readers_going() -> None:
    """A reader's fold that raises at a rest never reaches the appender: it is logged, that reader misses the run, the
    other readers fold every entry, and the log still numbers its entries and rests on time."""
    log = BatchLog()
    calls: list[int] = []
    got: list[int] = []
    others: list[int] = []

    def failing(batches: Sequence[Any]) -> None:
        calls.append(len(batches))
        if len(calls) == 1:
            raise RuntimeError("fold failed")
        got.extend(b.time.milliseconds // 1000 for b in batches)

    log.reader(failing, numbered=False)
    other = log.reader(lambda batches: others.extend(b.time.milliseconds // 1000 for b in batches), numbered=False)
    total = 3 * READER_BATCH
    with capture_events(logging.ERROR) as events:
        for n in range(1, total + 1):
            log.append(completed(n))  # never raises
    log.catch_up(other)
    assert others == list(range(1, total + 1))
    assert len(calls) == 3 and got == list(range(READER_BATCH, 3 * READER_BATCH - 2))  # the first run missed, once
    assert log.failed_folds == 1
    assert [(e["event"], e["entries"], e["exc_info"]) for e in events] == [
        ("a view of the log failed to fold a run of entries: that view misses them", READER_BATCH - 1, True)]
    kept = batch_seqs(log.entries())
    assert kept == [(n, n) for n in range(total + 1 - len(kept), total + 1)]


def test_a_fold_that_raises_part_way_on_a_views_thread_is_not_folded_again() -> None:
    """A view that catches up and whose fold raises after taking part of the run gets the error; the run counts as seen,
    so the next catch-up does not fold it a second time (no entry counted twice)."""
    log = BatchLog()
    folded: list[int] = []
    fail = [True]

    def fold(batches: Sequence[Any]) -> None:
        for batch in batches:
            folded.append(batch.time.milliseconds // 1000)
            if fail[0] and len(folded) == 3:
                fail[0] = False
                raise MemoryError("part-way")

    reader = log.reader(fold, numbered=False)
    for n in range(1, 11):
        log.append(completed(n))
    with pytest.raises(MemoryError):
        log.catch_up(reader)
    for n in range(11, 16):
        log.append(completed(n))
    log.catch_up(reader)
    assert folded == [1, 2, 3, *range(11, 16)]


def test_a_view_whose_fold_raises_on_the_loop_costs_no_batch_event_and_no_batch() -> None:
    """On the bus: a reader of its batch log that raises at a rest does not reach the scheduler's per-batch path; that
    batch's BatchCompleted is still posted, and the runtime goes on running batches."""
    import anyio

    from listeners import StreamingListenerBus

    bus = StreamingListenerBus()
    log = bus.batch_log()
    calls: list[int] = []

    def flaky(batches: Sequence[Any]) -> None:
        calls.append(len(batches))
        if len(calls) == 1:
            raise RuntimeError("transient fold failure")

    log.reader(flaky, numbered=False)

    class Inline:
        run_inline = True
        got = 0

        def on_batch_completed(self, event: Any) -> None:
            Inline.got += 1

    bus.add_listener(Inline())
    total = 3 * READER_BATCH

    async def post() -> None:
        for n in range(1, total + 1):
            await bus.on_batch_completed(completed(n))

    with capture_events(logging.ERROR) as events:
        anyio.run(post)
    assert Inline.got == total and len(calls) == 3 and log.failed_folds == 1
    assert len(events) == 1


def test_the_bus_appends_each_completed_batch_to_its_log_and_rests_it_in_time() -> None:
    """The bus's own append (BatchLog.append inline, on its per-batch path): every batch in the log in order, the log
    resting every READER_BATCH - 1 batches, so a reader folds each batch once before the log lets go of it."""
    import anyio

    from listeners import StreamingListenerBus

    bus = StreamingListenerBus()
    log = bus.batch_log()
    runs: list[int] = []
    folded: list[JobSet] = []

    def fold(batches: Sequence[JobSet]) -> None:
        runs.append(len(batches))
        folded.extend(batches)

    reader = log.reader(fold, numbered=False)
    batches = [completed(n) for n in range(1, 3 * READER_BATCH + 40)]

    async def post() -> None:
        for batch in batches:
            await bus.on_batch_completed(batch)

    anyio.run(post)
    assert runs == [READER_BATCH - 1] * 3  # the rests, each before an unseen batch would leave
    log.catch_up(reader)
    assert len(folded) == len(batches) and all(a is b for a, b in zip(folded, batches, strict=True))
    assert log.appended == len(batches)
    assert batch_seqs(log.entries())[-1] == (len(batches), len(batches))
