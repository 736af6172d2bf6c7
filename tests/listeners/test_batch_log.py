"""The bus's batch and progress logs (read by views when asked) and a plain listener's linger before a thread trip."""

from __future__ import annotations

import threading

import pytest

from listeners import (
    LINGER,
    LINGER_EVENTS,
    BatchLog,
    BatchRecord,
    StreamingListener,
    StreamingListenerBus,
    StreamingStarted,
    completed_batch,
)
from scheduler import Job, JobSet, ManualClock, Milliseconds, StreamingStateError, StreamInputInfo, Time
from tests.anyio_support import BACKENDS, run, settle
from tests.listeners.test_bus import running
from tests.support import wait_until


def completed(n: int, *, fail: bool = False) -> JobSet:
    """Batch ``n`` (at n s) with one job, completed; its job failed if ``fail``."""
    job = Job(Time(n * 1000), lambda: None, name="out")
    job_set = JobSet(Time(n * 1000), [job], Time(n * 1000), {0: StreamInputInfo(0, n)})
    job_set.handle_job_start(job, Time(n * 1000 + 1))
    if fail:
        job.failure = RuntimeError("output failed")
    job_set.handle_job_completion(job, Time(n * 1000 + 3))
    return job_set


def test_a_reader_folds_every_batch_once_however_far_the_ring_wrapped_between_reads() -> None:
    """Entries that would leave the ring are folded first; a read folds the rest; nothing twice, nothing missed."""
    log = BatchLog()
    log.retain(4)
    folded: list[int] = []
    reader = log.reader(lambda entries: folded.extend(seq for seq, _ in entries))
    for n in range(1, 301):
        log.append(completed_batch(completed(n)))
    assert folded == list(range(1, len(folded) + 1)) and len(folded) < 300  # folded in runs, before leaving
    log.catch_up(reader)
    log.catch_up(reader)
    assert folded == list(range(1, 301))
    kept = [seq for seq, _ in log.entries()]
    assert kept == list(range(301 - len(kept), 301)) and len(kept) >= 4


def test_a_reader_sees_only_batches_appended_after_it_came() -> None:
    """A view attached later folds from then on, as a listener added later would see."""
    log = BatchLog()
    log.append(completed_batch(completed(1)))
    folded: list[int] = []
    reader = log.reader(lambda entries: folded.extend(seq for seq, _ in entries))
    log.append(completed_batch(completed(2)))
    log.catch_up(reader)
    assert folded == [2]


def test_a_kept_batch_lets_go_of_its_jobs_functions_and_a_failed_one_is_kept_as_its_record() -> None:
    """A succeeded JobSet is kept itself, its job's function refusing to run again; a failed one becomes its BatchRecord."""
    ok = completed(1)
    assert completed_batch(ok) is ok
    with pytest.raises(StreamingStateError, match=r"^this job already ran: its batch completed$"):
        ok.jobs[0].func()
    failed = completed(2, fail=True)
    record = completed_batch(failed)
    assert isinstance(record, BatchRecord) and record.failures == 1
    assert record.operations[0][4] is not None and "RuntimeError: output failed" in record.operations[0][4]
    assert failed.jobs[0].func() is None  # not kept: left as it was


class Held(StreamingListener):
    """A plain listener (its thread) that records event times and holds its first callback until ``gate`` opens."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.got: list[int] = []

    def on_streaming_started(self, event: StreamingStarted) -> None:
        self.got.append(event.time.milliseconds)
        if len(self.got) == 1:
            self.gate.wait(5)  # a hang guard only: the test opens it


async def lingering(bus: StreamingListenerBus, clock: ManualClock, listener: Held) -> None:
    """Post event 0 (a trip starts and is held), events 1-5 during it, open the gate: the dispatcher lingers."""
    await bus.post(StreamingStarted(Time(0)))
    await wait_until(lambda: listener.got == [0])  # the first trip is on the listener's thread
    for n in range(1, 6):
        await bus.post(StreamingStarted(Time(n)))
    listener.gate.set()
    await clock.wait_for_sleepers(1)  # events arrived during the trip: it waits on the clock
    await settle()
    assert listener.got == [0]
    assert bus.statistics().queued == 5


@pytest.mark.parametrize("backend", BACKENDS)
def test_after_a_trip_that_saw_events_arrive_the_next_waits_for_the_clock(backend: str) -> None:
    """Events queued during a thread trip wait until the linger's 1 ms passes on the bus's clock, then go in one trip."""

    async def body() -> None:
        clock = ManualClock(0)
        bus = StreamingListenerBus(clock=clock, linger_clock=clock)
        listener = Held()
        bus.add_listener(listener)
        async with running(bus):
            await lingering(bus, clock, listener)
            clock.advance(LINGER)
            await wait_until(lambda: bus.statistics().delivered == 6)  # the trip is back on the loop
            assert listener.got == list(range(6))
            assert clock.sleepers == 0  # nothing arrived during that trip: no linger
            await bus.post(StreamingStarted(Time(6)))
            await wait_until(lambda: bus.statistics().delivered == 7)  # a lone event goes at once
            assert listener.got == list(range(7))

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_on_a_manual_clock_a_bus_lingers_on_real_time(backend: str) -> None:
    """By default the linger is measured in real time: on a manual clock nobody advances, the events queued during a
    trip still go (in one trip, in order), and the linger is no sleeper of that clock."""

    async def body() -> None:
        clock = ManualClock(0)
        bus = StreamingListenerBus(clock=clock)
        listener = Held()
        bus.add_listener(listener)
        async with running(bus):
            await bus.post(StreamingStarted(Time(0)))
            await wait_until(lambda: listener.got == [0])
            for n in range(1, 6):
                await bus.post(StreamingStarted(Time(n)))
            listener.gate.set()
            slot = bus._slots[0]
            await wait_until(lambda: slot.lingers == 1)  # it lingers (events arrived during the trip) ...
            assert clock.sleepers == 0  # ... on its own clock, not the manual one
            await wait_until(lambda: bus.statistics().delivered == 6)  # and real time ends it
            assert listener.got == list(range(6)) and clock.now() == Time(0)
            assert (slot.trips, slot.tripped) == (2, 6)

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bus_asked_not_to_linger_makes_its_trip_at_once(backend: str) -> None:
    """linger=False: the events queued during a trip go in the next trip at once, without lingering."""

    async def body() -> None:
        clock = ManualClock(0)
        bus = StreamingListenerBus(clock=clock, linger=False)
        listener = Held()
        bus.add_listener(listener)
        async with running(bus):
            await bus.post(StreamingStarted(Time(0)))
            await wait_until(lambda: listener.got == [0])
            for n in range(1, 6):
                await bus.post(StreamingStarted(Time(n)))
            listener.gate.set()
            await wait_until(lambda: bus.statistics().delivered == 6)
            assert listener.got == list(range(6)) and bus._slots[0].lingers == 0

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_linger_ends_once_a_full_run_is_queued(backend: str) -> None:
    """With LINGER_EVENTS queued the trip starts without the clock moving; the bus then closes at once, its linger's guard
    still asleep on a clock nobody advances."""

    async def body() -> None:
        clock = ManualClock(0)
        bus = StreamingListenerBus(clock=clock, linger_clock=clock)
        listener = Held()
        bus.add_listener(listener)
        async with running(bus):
            await lingering(bus, clock, listener)
            for n in range(6, LINGER_EVENTS + 1):
                await bus.post(StreamingStarted(Time(n)))
            await wait_until(lambda: len(listener.got) == LINGER_EVENTS + 1)
            assert listener.got == list(range(LINGER_EVENTS + 1)) and clock.now() == Time(0)

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_linger_waits_for_a_run_of_over_a_hundred_events(backend: str) -> None:
    """A lingering dispatcher with 100 events queued still waits (no trip starts until LINGER_EVENTS or LINGER on the clock),
    then takes them all in one trip: in a sustained stream a trip carries over a hundred events."""

    async def body() -> None:
        clock = ManualClock(0)
        bus = StreamingListenerBus(clock=clock, linger_clock=clock)
        listener = Held()
        bus.add_listener(listener)
        slot = bus._slots[0]
        async with running(bus):
            await lingering(bus, clock, listener)
            for n in range(6, 101):
                await bus.post(StreamingStarted(Time(n)))
            await settle()
            assert slot.trips == 1 and slot.lingers == 1 and bus.statistics().queued == 100
            clock.advance(LINGER - Milliseconds(1))  # a millisecond short of the linger's time
            await clock.wait_for_sleepers(1)
            await settle()
            assert slot.trips == 1 and bus.statistics().queued == 100
            clock.advance(Milliseconds(1))
            await wait_until(lambda: bus.statistics().delivered == 101)
            assert listener.got == list(range(101)) and (slot.trips, slot.tripped) == (2, 101)

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_waiting_for_delivery_ends_a_linger(backend: str) -> None:
    """wait_delivered() does not wait for the clock: the lingering events go at once."""

    async def body() -> None:
        clock = ManualClock(0)
        bus = StreamingListenerBus(clock=clock, linger_clock=clock)
        listener = Held()
        bus.add_listener(listener)
        async with running(bus):
            await lingering(bus, clock, listener)
            await bus.wait_delivered()
            assert listener.got == list(range(6)) and clock.now() == Time(0)

    run(backend, body)


class HeldAt(StreamingListener):
    """A plain listener that records event times and holds the callbacks of the times in ``gates`` until each opens."""

    def __init__(self, *times: int) -> None:
        self.gates = {t: threading.Event() for t in times}
        self.got: list[int] = []

    def on_streaming_started(self, event: StreamingStarted) -> None:
        self.got.append(event.time.milliseconds)
        gate = self.gates.get(event.time.milliseconds)
        if gate is not None:
            gate.wait(5)  # a hang guard only: the test opens it


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_linger_begun_while_the_guard_sleeps_ends_within_twice_the_linger(backend: str) -> None:
    """One guard measures every linger: a second linger begun before the first one's time is up gets a full LINGER of its
    own once the guard wakes (so it lasts at most twice LINGER)."""

    async def body() -> None:
        clock = ManualClock(0)
        bus = StreamingListenerBus(clock=ManualClock(0), linger_clock=clock)
        listener = HeldAt(0, LINGER_EVENTS + 10)
        bus.add_listener(listener)
        async with running(bus):
            await bus.post(StreamingStarted(Time(0)))
            await wait_until(lambda: listener.got == [0])
            for n in range(1, 6):
                await bus.post(StreamingStarted(Time(n)))
            listener.gates[0].set()
            await clock.wait_for_sleepers(1)  # the first linger: the guard sleeps until 1 ms
            for n in range(6, LINGER_EVENTS + 1):
                await bus.post(StreamingStarted(Time(n)))  # a full run ends it without the clock
            await wait_until(lambda: bus.statistics().delivered == LINGER_EVENTS + 1)  # that trip is back: nothing queued
            await bus.post(StreamingStarted(Time(LINGER_EVENTS + 10)))
            await wait_until(lambda: listener.got[-1] == LINGER_EVENTS + 10)
            await bus.post(StreamingStarted(Time(LINGER_EVENTS + 11)))
            await bus.post(StreamingStarted(Time(LINGER_EVENTS + 12)))
            listener.gates[LINGER_EVENTS + 10].set()
            slot = bus._slots[0]
            await wait_until(lambda: slot.lingers == 2)  # the second linger, the guard still asleep for the first
            clock.advance(LINGER)  # the first one's time: not the second's
            await clock.wait_for_sleepers(1)
            await settle()
            assert listener.got[-1] == LINGER_EVENTS + 10 and bus.statistics().queued == 2
            clock.advance(LINGER)  # a full LINGER since the guard took the second
            await wait_until(lambda: listener.got[-2:] == [LINGER_EVENTS + 11, LINGER_EVENTS + 12])
            assert listener.got == [*range(LINGER_EVENTS + 1), *range(LINGER_EVENTS + 10, LINGER_EVENTS + 13)]

    run(backend, body)
