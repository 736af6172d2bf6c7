"""StreamingListenerBus: per-listener ordering, listener kinds, failures, overflow policies, draining."""

from __future__ import annotations

import functools
import gc
import threading
import types
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import pytest

from listeners import (
    BatchCompleted,
    BatchInfo,
    BatchRecord,
    BatchStarted,
    BatchSubmitted,
    ListenerBusStatistics,
    ListenerStatistics,
    OutputOperationCompleted,
    OutputOperationInfo,
    OutputOperationStarted,
    OverflowPolicy,
    ReceiverError,
    ReceiverInfo,
    ReceiverStarted,
    ReceiverStopped,
    StreamingEvent,
    StreamingListener,
    StreamingListenerBus,
    StreamingStarted,
    current_listener,
)
from listeners._events import SUCCEEDED_WIDTH
from listeners._hand_off import HAND_OFF_EVENTS
from scheduler import Handover, Job, JobSet, StreamingStateError, StreamInputInfo, Time
from tests.anyio_support import BACKENDS, HANG_GUARD_S, no_forced_gil_switch, raises_exactly, run, settle
from tests.support import capture_events, wait_until


def ev(n: int) -> StreamingStarted:
    """A cheap, numbered event."""
    return StreamingStarted(Time(n))


def numbers(events: list[StreamingEvent]) -> list[int]:
    return [e.time.milliseconds for e in events]  # type: ignore[union-attr]


@asynccontextmanager
async def running(bus: StreamingListenerBus) -> AsyncIterator[anyio.abc.TaskGroup]:
    """Run ``bus`` in a task group; close it on the way out, so leaving waits for every queue to drain."""
    async with anyio.create_task_group() as tg:
        await tg.start(bus.run)
        await settle()  # dispatchers parked on their queues
        try:
            yield tg
        finally:
            bus.close()


class Recorder:
    """A plain callable listener, run on the loop so that settle() covers its work (threads: see the tests at the end)."""

    run_on_loop = True

    def __init__(self) -> None:
        self.events: list[StreamingEvent] = []

    def __call__(self, event: StreamingEvent) -> None:
        self.events.append(event)


class Gated:
    """An async callable listener that holds each event until its gate opens."""

    def __init__(self) -> None:
        self.gate = anyio.Event()
        self.entered: list[StreamingEvent] = []
        self.events: list[StreamingEvent] = []

    async def __call__(self, event: StreamingEvent) -> None:
        self.entered.append(event)
        await self.gate.wait()
        self.events.append(event)


class Flaky(StreamingListener):
    """Raises on the event numbered 1."""

    def __init__(self) -> None:
        self.got: list[int] = []

    def on_streaming_started(self, event: StreamingStarted) -> None:
        self.got.append(event.time.milliseconds)
        if event.time.milliseconds == 1:
            raise RuntimeError("listener bug")


def one_of_each_event() -> list[StreamingEvent]:
    """One event of every kind, in Spark's per-batch order after start."""
    job = Job(Time(1000), lambda: None, name="op")
    info = BatchInfo.from_job_set(JobSet(Time(1000), [job], Time(1000)))
    op = OutputOperationInfo.from_job(job)
    receiver = ReceiverInfo(0, "r", True, "host", "exec-1")
    return [
        StreamingStarted(Time(0)),
        ReceiverStarted(receiver),
        BatchSubmitted(info),
        BatchStarted(info),
        OutputOperationStarted(op),
        OutputOperationCompleted(op),
        BatchCompleted(info),
        ReceiverError(receiver),
        ReceiverStopped(receiver),
    ]


# -- construction --


@pytest.mark.parametrize(
    ("capacity", "message"),
    [
        (0, "listener bus capacity must be a positive int, got 0"),
        (-3, "listener bus capacity must be a positive int, got -3"),
        (1.5, "listener bus capacity must be a positive int, got 1.5"),
        (True, "listener bus capacity must be a positive int, got True"),
    ],
)
def test_capacity_must_be_a_positive_int(capacity: Any, message: str) -> None:
    """A capacity that is not a positive int is refused, exactly worded."""
    with raises_exactly(ValueError, message):
        StreamingListenerBus(capacity)


def test_overflow_must_be_an_overflow_policy() -> None:
    """A string overflow policy is refused with a TypeError naming it."""
    with raises_exactly(TypeError, "overflow must be an OverflowPolicy, got 'drop'"):
        StreamingListenerBus(overflow="drop")  # type: ignore[arg-type]


def test_something_that_is_not_a_listener_is_refused() -> None:
    """add_listener refuses objects with no on_* callbacks that are not callable."""
    with raises_exactly(
        TypeError,
        "a listener must be a StreamingListener, an object with on_* callbacks, or a callable taking an event; got 42",
    ):
        StreamingListenerBus().add_listener(42)


def test_a_listener_with_pyspark_s_callback_names_only_is_refused_naming_the_bus_s() -> None:
    """A bus calls on_batch_completed, never pyspark's onBatchCompleted: a listener with only the latter (a subclass of
    listeners.StreamingListener or a plain object) would hear nothing, so it is refused with both names."""
    from listeners import StreamingListener

    class Subclass(StreamingListener):
        def onBatchCompleted(self, event: object) -> None:
            pass

    class Plain:
        def onQueryProgress(self, event: object) -> None:
            pass

        def onBatchStarted(self, event: object) -> None:
            pass

    tail = ("which a listener bus never calls: name them {}, or register it with "
            "streaming.StreamingContext.addStreamingListener, which speaks pyspark's names")
    with raises_exactly(TypeError, "Subclass has pyspark's callback names (onBatchCompleted), " + tail.format("on_batch_completed")):
        StreamingListenerBus().add_listener(Subclass())
    with raises_exactly(TypeError, "Plain has pyspark's callback names (onBatchStarted, onQueryProgress), "
                        + tail.format("on_batch_started, on_query_progress")):
        StreamingListenerBus().add_listener(Plain())

    class Both(Subclass):  # the bus's names too: it hears those
        def on_batch_completed(self, event: object) -> None:
            pass

    bus, both = StreamingListenerBus(), Both()
    bus.add_listener(both)
    assert bus.listeners == [both]

    class Mixed(StreamingListener):  # one callback of each kind: the camelCase one would never be called
        def on_batch_completed(self, event: object) -> None:
            pass

        def onBatchStarted(self, event: object) -> None:
            pass

    with raises_exactly(TypeError, "Mixed has pyspark's callback names (onBatchStarted), " + tail.format("on_batch_started")):
        StreamingListenerBus().add_listener(Mixed())

    from pyspark.streaming import StreamingListener as PysparkListener

    class Theirs(PysparkListener):  # type: ignore[misc]  # only its own callback is named, not the nine it inherits
        def onBatchCompleted(self, event: object) -> None:
            pass

    with raises_exactly(TypeError, "Theirs has pyspark's callback names (onBatchCompleted), " + tail.format("on_batch_completed")):
        StreamingListenerBus().add_listener(Theirs())

    class CallableToo:  # a function-style listener (it has __call__) hears every event, as before
        def __call__(self, event: object) -> None:
            pass

        def onBatchCompleted(self, event: object) -> None:
            pass

    callable_too, function_style = CallableToo(), StreamingListenerBus()
    function_style.add_listener(callable_too)
    assert function_style.listeners == [callable_too]


def test_listener_names_default_to_the_qualified_name() -> None:
    """A function is named by its qualname, an object by its class's; name= overrides both."""

    def on_event(event: StreamingEvent) -> None:
        """Record nothing."""

    bus = StreamingListenerBus()
    bus.add_listener(on_event)
    bus.add_listener(Recorder())
    bus.add_listener(Recorder(), name="audit")
    assert [s.name for s in bus.statistics().listeners] == [
        "test_listener_names_default_to_the_qualified_name.<locals>.on_event",
        "Recorder",
        "audit",
    ]
    assert len(bus.listeners) == 3


def test_a_repeated_listener_name_gets_a_suffix_in_registration_order_never_reused() -> None:
    """Two listeners of one class, and a name= already taken, get -2, -3; a removed one's name is not given again."""
    bus = StreamingListenerBus()
    first, second = Recorder(), Recorder()
    bus.add_listener(first)
    bus.add_listener(second)
    bus.add_listener(Recorder(), name="Recorder")
    bus.remove_listener(second)
    bus.add_listener(Recorder())
    assert sorted(s.name for s in bus.statistics().listeners) == ["Recorder", "Recorder-2", "Recorder-3", "Recorder-4"]


# -- delivery --


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_listener_receives_every_event_in_posting_order(backend: str) -> None:
    """Sync, async and StreamingListener listeners each get all 600 events, in the order posted."""

    async def body() -> None:
        sync_listener = Recorder()
        async_seen: list[StreamingEvent] = []

        async def async_listener(event: StreamingEvent) -> None:
            await anyio.lowlevel.checkpoint()
            async_seen.append(event)

        class Subclass(StreamingListener):
            def __init__(self) -> None:
                self.events: list[StreamingEvent] = []

            def on_streaming_started(self, event: StreamingStarted) -> None:
                self.events.append(event)

        subclass = Subclass()
        bus = StreamingListenerBus()
        for listener in (sync_listener, async_listener, subclass):
            bus.add_listener(listener)
        async with running(bus):
            for n in range(300):
                await bus.post(ev(n))
            await settle()
            for n in range(300, 600):
                await bus.post(ev(n))
        expected = list(range(600))
        assert numbers(sync_listener.events) == expected
        assert numbers(async_seen) == expected
        assert numbers(subclass.events) == expected

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_streaming_listener_receives_only_the_callbacks_it_overrides(backend: str) -> None:
    """Overridden callbacks (sync or async) get their events; the others are skipped without failing."""

    class Partial(StreamingListener):
        def __init__(self) -> None:
            self.got: list[str] = []

        def on_batch_completed(self, event: BatchCompleted) -> None:
            self.got.append("batch completed")

        async def on_receiver_error(self, event: ReceiverError) -> None:
            await anyio.lowlevel.checkpoint()
            self.got.append("receiver error")

    async def body() -> None:
        listener = Partial()
        bus = StreamingListenerBus()
        bus.add_listener(listener)
        async with running(bus):
            for event in one_of_each_event():
                await bus.post(event)
        assert listener.got == ["batch completed", "receiver error"]
        stats = bus.statistics()
        assert (stats.posted, stats.failed, stats.queued, stats.dropped) == (9, 0, 0, 0)

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_callback_of_a_streaming_listener_is_routed_by_event_type(backend: str) -> None:
    """Each event type reaches its own on_* callback of a listener that overrides them all."""
    calls: list[tuple[str, type]] = []

    def recorder(name: str) -> Callable[[Any, StreamingEvent], None]:
        def callback(self: Any, event: StreamingEvent) -> None:
            calls.append((name, type(event)))

        return callback

    names = [
        "on_streaming_started", "on_receiver_started", "on_batch_submitted", "on_batch_started",
        "on_output_operation_started", "on_output_operation_completed", "on_batch_completed",
        "on_receiver_error", "on_receiver_stopped",
    ]
    listener_class = type("All", (StreamingListener,), {name: recorder(name) for name in names})

    async def body() -> None:
        bus = StreamingListenerBus()
        bus.add_listener(listener_class())
        async with running(bus):
            for event in one_of_each_event():
                await bus.post(event)

    run(backend, body)
    assert calls == list(zip(names, [type(e) for e in one_of_each_event()], strict=True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_object_with_on_callbacks_is_a_listener_without_subclassing(backend: str) -> None:
    """A duck-typed object gets the events it has on_* methods for and nothing else."""

    class Duck:
        def __init__(self) -> None:
            self.got: list[type] = []

        async def on_batch_started(self, event: BatchStarted) -> None:
            self.got.append(type(event))

        def on_streaming_started(self, event: StreamingStarted) -> None:
            self.got.append(type(event))

    async def body() -> None:
        duck = Duck()
        bus = StreamingListenerBus()
        bus.add_listener(duck)
        async with running(bus):
            for event in one_of_each_event():
                await bus.post(event)
        assert duck.got == [StreamingStarted, BatchStarted]

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_callable_listeners_of_every_shape_receive_every_event(backend: str) -> None:
    """Functions, async functions, async __call__ objects and partials of async functions all get every event."""
    seen: dict[str, list[int]] = {"func": [], "async func": [], "async object": [], "partial": []}

    def func(event: StreamingStarted) -> None:
        seen["func"].append(event.time.milliseconds)

    async def async_func(event: StreamingStarted) -> None:
        await anyio.lowlevel.checkpoint()
        seen["async func"].append(event.time.milliseconds)

    class AsyncObject:
        async def __call__(self, event: StreamingStarted) -> None:
            seen["async object"].append(event.time.milliseconds)

    async def tagged(tag: str, event: StreamingStarted) -> None:
        await anyio.lowlevel.checkpoint()
        seen[tag].append(event.time.milliseconds)

    async def body() -> None:
        bus = StreamingListenerBus()
        for listener in (func, async_func, AsyncObject(), functools.partial(tagged, "partial")):
            bus.add_listener(listener)
        async with running(bus):
            for n in range(5):
                await bus.post(ev(n))

    run(backend, body)
    assert seen == {key: [0, 1, 2, 3, 4] for key in seen}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_slow_listener_does_not_delay_the_others(backend: str) -> None:
    """Each listener has its own queue: a blocked listener does not hold back a fast one."""

    async def body() -> None:
        slow, fast = Gated(), Recorder()
        bus = StreamingListenerBus()
        bus.add_listener(slow)
        bus.add_listener(fast)
        async with running(bus):
            for n in range(5):
                await bus.post(ev(n))
            await settle()
            assert numbers(fast.events) == [0, 1, 2, 3, 4]
            assert numbers(slow.entered) == [0] and slow.events == []
            slow.gate.set()
        assert numbers(slow.events) == [0, 1, 2, 3, 4]

    run(backend, body)


# -- failing listeners --


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_raising_listener_is_logged_with_its_name_and_stays_registered(backend: str) -> None:
    """A listener that raises is logged (error, with traceback) under its name; it keeps getting events and so do the others."""

    async def failing_async(event: StreamingStarted) -> None:
        await anyio.lowlevel.checkpoint()
        raise KeyError("async listener bug")

    async def body() -> None:
        flaky, after = Flaky(), Recorder()
        bus = StreamingListenerBus()
        bus.add_listener(flaky)
        bus.add_listener(failing_async, name="async-one")
        bus.add_listener(after)
        async with running(bus):
            for n in range(3):
                await bus.post(ev(n))
        assert flaky.got == [0, 1, 2]
        assert numbers(after.events) == [0, 1, 2]
        assert bus.listeners == [flaky, failing_async, after]
        stats = bus.statistics()
        assert stats.listeners == (
            ListenerStatistics("Flaky", queued=0, delivered=2, failed=1, dropped=0),
            ListenerStatistics("async-one", queued=0, delivered=0, failed=3, dropped=0),
            ListenerStatistics("Recorder", queued=0, delivered=3, failed=0, dropped=0),
        )
        assert (stats.posted, stats.delivered, stats.failed) == (3, 5, 4)

    with capture_events() as logs:
        run(backend, body)
    failures = [e for e in logs if e["event"] == "listener raised; it stays registered"]
    # Flaky's plain callback runs on its own thread, so the listeners' lines interleave freely.
    assert [e for e in failures if e["listener"] == "Flaky"] == [{
        "event": "listener raised; it stays registered",
        "log_level": "error",
        "exc_info": True,
        "component": "StreamingListenerBus",
        "listener": "Flaky",
        "event_type": "StreamingStarted",
    }]
    assert sorted(e["listener"] for e in failures) == ["Flaky", "async-one", "async-one", "async-one"]


# -- overflow: DROP --


@pytest.mark.parametrize("backend", BACKENDS)
def test_drop_policy_counts_drops_and_warns_once_naming_the_slow_listener(backend: str) -> None:
    """With a full queue, DROP never waits: it drops for that listener only, counts it, and warns once with its name."""

    async def body() -> None:
        slow, fast = Gated(), Recorder()
        bus = StreamingListenerBus(capacity=2, overflow=OverflowPolicy.DROP)
        bus.add_listener(slow, name="slow-dashboard")
        bus.add_listener(fast)
        async with running(bus):
            for n in range(10):
                await bus.post(ev(n))  # never waits: slow's gate is still shut
                await settle()  # let the fast listener keep up
            stats = bus.statistics()
            assert stats.posted == 10 and stats.dropped == 7
            assert stats.listeners[0] == ListenerStatistics("slow-dashboard", queued=3, delivered=0, failed=0, dropped=7)
            assert stats.listeners[1] == ListenerStatistics("Recorder", queued=0, delivered=10, failed=0, dropped=0)
            slow.gate.set()
        assert numbers(slow.events) == [0, 1, 2]  # the one in hand and the two queued
        assert numbers(fast.events) == list(range(10))
        assert bus.statistics().delivered == 13

    with capture_events() as logs:
        run(backend, body)
    assert logs == [
        {
            "event": "dropping events for a slow listener: its queue is full",
            "log_level": "warning",
            "component": "StreamingListenerBus",
            "listener": "slow-dashboard",
            "capacity": 2,
            "event_type": "StreamingStarted",
        },
        {
            "event": "listener bus closed after dropping events",
            "log_level": "warning",
            "component": "StreamingListenerBus",
            "dropped": 7,
            "by_listener": {"slow-dashboard": 7},
        },
    ]


# -- overflow: BLOCK --


@pytest.mark.parametrize("backend", BACKENDS)
def test_block_policy_makes_post_wait_for_room_and_never_drops(backend: str) -> None:
    """With a full queue, BLOCK makes post wait until the listener takes an event; everything arrives in order."""

    async def body() -> None:
        slow = Gated()
        bus = StreamingListenerBus(capacity=1, overflow=OverflowPolicy.BLOCK)
        bus.add_listener(slow)
        posted: list[int] = []

        async def producer() -> None:
            for n in range(4):
                await bus.post(ev(n))
                posted.append(n)

        async with running(bus) as tg:
            tg.start_soon(producer)
            await settle()
            # 0 is in the listener's hands, 1 fills the queue, post(2) waits.
            assert posted == [0, 1]
            assert numbers(slow.entered) == [0]
            slow.gate.set()
            await bus.wait_delivered()
        assert posted == [0, 1, 2, 3]
        assert numbers(slow.events) == [0, 1, 2, 3]
        assert bus.statistics() == ListenerBusStatistics(
            posted=4, delivered=4, failed=0, dropped=0, queued=0,
            listeners=(ListenerStatistics("Gated", queued=0, delivered=4, failed=0, dropped=0),),
        )

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_event_a_blocked_post_hands_over_counts_as_queued_until_delivered(backend: str) -> None:
    """Under BLOCK, an event taken from a waiting post is counted as queued at once, so queued never undercounts."""

    async def body() -> None:
        gate = anyio.Event()
        queued_at_entry: list[int] = []
        bus = StreamingListenerBus(capacity=1, overflow=OverflowPolicy.BLOCK)

        async def listener(event: StreamingStarted) -> None:
            queued_at_entry.append(bus.statistics().queued)
            if event.time.milliseconds == 0:
                await gate.wait()

        bus.add_listener(listener)
        async with running(bus) as tg:
            await bus.post(ev(0))  # handed to the waiting dispatcher
            await bus.post(ev(1))  # fills the queue
            tg.start_soon(bus.post, ev(2))  # waits for room
            await settle()
            gate.set()
            await bus.wait_delivered()
            assert bus.statistics().queued == 0
        # The dispatcher lets the producer run once before handling 0, so at 0's entry all three
        # count (2 is still in the waiting post); at 1's entry 1 and 2 (2 was taken from the post);
        # at 2's entry only 2.
        assert queued_at_entry == [3, 2, 1]

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_removing_a_listener_while_a_post_waits_for_it_lets_the_post_finish_for_the_others(backend: str) -> None:
    """Under BLOCK, removing the listener a post waits for ends the wait; the remaining listeners still get the event."""

    async def body() -> None:
        slow, other = Gated(), Recorder()
        bus = StreamingListenerBus(capacity=1, overflow=OverflowPolicy.BLOCK)
        bus.add_listener(slow)
        bus.add_listener(other)
        done: list[int] = []

        async def post(n: int) -> None:
            await bus.post(ev(n))
            done.append(n)

        async with running(bus) as tg:
            await bus.post(ev(0))
            await bus.post(ev(1))
            tg.start_soon(post, 2)
            await settle()
            assert done == []
            bus.remove_listener(slow)
            await settle()
            assert done == [2]
            assert numbers(other.events) == [0, 1, 2]
            slow.gate.set()
        assert numbers(slow.events) == [0, 1]
        assert bus.statistics().listeners[-1] == ListenerStatistics("Gated", queued=0, delivered=2, failed=0, dropped=0)

    run(backend, body)


# -- waiting and closing --


@pytest.mark.parametrize("backend", BACKENDS)
def test_wait_delivered_waits_until_every_posted_event_reached_every_listener(backend: str) -> None:
    """wait_delivered returns only after each listener has handled what was posted before the call."""

    async def body() -> None:
        slow, fast = Gated(), Recorder()
        bus = StreamingListenerBus()
        bus.add_listener(slow)
        bus.add_listener(fast)
        returned = anyio.Event()

        async def waiter() -> None:
            await bus.wait_delivered()
            returned.set()

        async with running(bus) as tg:
            await bus.wait_delivered()  # nothing posted: returns at once
            for n in range(3):
                await bus.post(ev(n))
            tg.start_soon(waiter)
            await settle()
            assert not returned.is_set() and numbers(fast.events) == [0, 1, 2]
            slow.gate.set()
            await returned.wait()
            assert numbers(slow.events) == [0, 1, 2]

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_wait_delivered_does_not_wait_for_dropped_events(backend: str) -> None:
    """Events dropped under DROP are not waited for (they are counted instead)."""

    async def body() -> None:
        slow = Gated()
        bus = StreamingListenerBus(capacity=1)
        bus.add_listener(slow)
        async with running(bus):
            for n in range(5):
                await bus.post(ev(n))
            slow.gate.set()
            await bus.wait_delivered()
            assert numbers(slow.events) == [0, 1]
            assert bus.statistics().dropped == 3

    with capture_events():
        run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_delivers_everything_already_queued(backend: str) -> None:
    """close() stops intake but run() returns only after every queued event is delivered: nothing is lost."""

    async def body() -> None:
        seen: list[StreamingEvent] = []

        async def slow(event: StreamingEvent) -> None:
            await anyio.lowlevel.checkpoint()
            seen.append(event)

        bus = StreamingListenerBus()
        bus.add_listener(slow)
        async with anyio.create_task_group() as tg:
            await tg.start(bus.run)
            for n in range(1000):
                await bus.post(ev(n))
            bus.close()
            assert len(seen) < 1000
        assert numbers(seen) == list(range(1000))
        assert bus.statistics().queued == 0

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_events_posted_after_close_are_ignored_with_a_warning(backend: str) -> None:
    """After close, post delivers nothing, does not count the event, and logs a warning; close is idempotent."""

    async def body() -> None:
        listener = Recorder()
        bus = StreamingListenerBus()
        bus.add_listener(listener)
        async with running(bus):
            await bus.post(ev(0))
            bus.close()
            bus.close()
            await bus.post(ev(1))
        assert numbers(listener.events) == [0]
        assert bus.statistics().posted == 1

    with capture_events() as logs:
        run(backend, body)
    assert logs == [
        {
            "event": "event posted after the bus was closed; ignored",
            "log_level": "warning",
            "component": "StreamingListenerBus",
            "event_type": "StreamingStarted",
        }
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batch_completed_after_close_is_ignored_with_a_warning(backend: str) -> None:
    """The scheduler's on_batch_completed after close posts nothing, counts nothing, and logs the warning post logs."""

    async def body() -> None:
        listener = Recorder()
        bus = StreamingListenerBus()
        bus.add_listener(listener)
        job = Job(Time(1000), lambda: None)
        job_set = JobSet(Time(1000), [job], Time(1000))
        job_set.handle_job_start(job, Time(1000))
        job_set.handle_job_completion(job, Time(1005))
        async with running(bus):
            bus.close()
            await bus.on_batch_completed(job_set)
        assert listener.events == []
        assert bus.statistics().posted == 0

    with capture_events() as logs:
        run(backend, body)
    assert logs == [
        {
            "event": "event posted after the bus was closed; ignored",
            "log_level": "warning",
            "component": "StreamingListenerBus",
            "event_type": "BatchCompleted",
        }
    ]


def test_a_closed_bus_takes_no_new_listener() -> None:
    """add_listener after close is a state error."""
    bus = StreamingListenerBus()
    bus.close()
    with raises_exactly(StreamingStateError, "cannot add a listener to a closed listener bus"):
        bus.add_listener(Recorder())


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bus_runs_once_at_a_time(backend: str) -> None:
    """A second concurrent run is refused."""

    async def body() -> None:
        bus = StreamingListenerBus()
        async with running(bus):
            with raises_exactly(StreamingStateError, "the listener bus is already running"):
                await bus.run()

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_listener_added_while_running_gets_events_posted_after_it_joined(backend: str) -> None:
    """A bus started with no listener keeps running; a listener added later gets every event posted from then on."""

    async def body() -> None:
        early, late = Recorder(), Recorder()
        bus = StreamingListenerBus()
        async with running(bus):
            await bus.post(ev(0))
            bus.add_listener(early)
            await bus.post(ev(1))
            bus.add_listener(late)
            await bus.post(ev(2))
            with anyio.fail_after(HANG_GUARD_S):  # real-time guard: delivery needs no clock
                await bus.wait_delivered()
            assert numbers(early.events) == [1, 2]
            assert numbers(late.events) == [2]

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_events_queued_before_run_are_delivered_once_it_starts(backend: str) -> None:
    """Posting before run queues events; run delivers them."""

    async def body() -> None:
        listener = Recorder()
        bus = StreamingListenerBus()
        bus.add_listener(listener)
        await bus.post(ev(0))
        async with running(bus):
            await bus.wait_delivered()
            assert numbers(listener.events) == [0]

    run(backend, body)


# -- removing listeners --


@pytest.mark.parametrize("backend", BACKENDS)
def test_remove_listener_stops_new_events_but_delivers_what_was_queued(backend: str) -> None:
    """A removed listener gets no new events; events already queued still reach it, and wait_delivered waits for them."""

    async def body() -> None:
        slow, stays = Gated(), Recorder()
        bus = StreamingListenerBus()
        bus.add_listener(slow)
        bus.add_listener(stays)
        delivered = anyio.Event()

        async def waiter() -> None:
            await bus.wait_delivered()
            delivered.set()

        async with running(bus) as tg:
            for n in range(3):
                await bus.post(ev(n))
            bus.remove_listener(slow)
            assert bus.listeners == [stays]
            await bus.post(ev(3))
            tg.start_soon(waiter)
            await settle()
            assert not delivered.is_set()
            assert bus.statistics().listeners[-1] == ListenerStatistics("Gated", queued=3, delivered=0, failed=0, dropped=0)
            slow.gate.set()
            await delivered.wait()
            assert numbers(slow.events) == [0, 1, 2]
            assert numbers(stays.events) == [0, 1, 2, 3]
            stats = bus.statistics()
            assert stats.listeners[-1] == ListenerStatistics("Gated", queued=0, delivered=3, failed=0, dropped=0)
            assert (stats.posted, stats.delivered, stats.queued) == (4, 7, 0)

    run(backend, body)


def test_removing_an_unknown_listener_is_an_error() -> None:
    """remove_listener of something never added raises ValueError naming it."""
    bus = StreamingListenerBus()
    listener = Recorder()
    bus.add_listener(listener)
    bus.remove_listener(listener)
    with raises_exactly(ValueError, f"listener {listener!r} is not registered"):
        bus.remove_listener(listener)


# -- current_listener --


@pytest.mark.parametrize("backend", BACKENDS)
def test_current_listener_names_the_listener_whose_callback_is_running(backend: str) -> None:
    """current_listener() is the running listener's name inside sync and async callbacks, None elsewhere."""

    async def body() -> None:
        seen: list[str | None] = []

        def sync_listener(event: StreamingEvent) -> None:
            seen.append(current_listener())

        async def async_listener(event: StreamingEvent) -> None:
            await anyio.lowlevel.checkpoint()
            seen.append(current_listener())

        bus = StreamingListenerBus()
        bus.add_listener(sync_listener, name="sync")
        bus.add_listener(async_listener, name="async")
        async with running(bus):
            await bus.post(ev(0))
            await bus.wait_delivered()
            assert current_listener() is None
        assert sorted(seen, key=str) == ["async", "sync"]

    assert current_listener() is None
    run(backend, body)


# -- the scheduler-facing side --


@pytest.mark.parametrize("backend", BACKENDS)
def test_scheduler_notifications_become_snapshot_events(backend: str) -> None:
    """The JobSchedulerListener methods post Spark's events, each carrying a snapshot taken when posted."""

    async def body() -> None:
        listener = Recorder()
        bus = StreamingListenerBus()
        bus.add_listener(listener)
        job = Job(Time(1000), lambda: None, name="out")
        job_set = JobSet(Time(1000), [job], Time(1010))
        async with running(bus):
            await bus.on_batch_submitted(job_set)
            await bus.on_batch_started(job_set)
            job_set.handle_job_start(job, Time(1020))
            await bus.on_job_started(job, job_set)
            job_set.handle_job_completion(job, Time(1050))
            await bus.on_job_completed(job, job_set)
            await bus.on_batch_completed(job_set)
        kinds = [type(e) for e in listener.events]
        assert kinds == [BatchSubmitted, BatchStarted, OutputOperationStarted, OutputOperationCompleted, BatchCompleted]
        submitted, started, op_started, op_completed, completed = listener.events
        assert submitted.batch_info.processing_start_time is None  # type: ignore[union-attr]
        assert started.batch_info.processing_start_time is None  # type: ignore[union-attr]
        assert op_started.output_operation_info.start_time == Time(1020)  # type: ignore[union-attr]
        assert op_started.output_operation_info.end_time is None  # type: ignore[union-attr]
        assert op_completed.output_operation_info.end_time == Time(1050)  # type: ignore[union-attr]
        info = completed.batch_info  # type: ignore[union-attr]
        assert (info.scheduling_delay.milliseconds, info.processing_delay.milliseconds, info.total_delay.milliseconds) == (10, 30, 40)

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scheduler_notifications_nobody_listens_for_are_not_posted(backend: str) -> None:
    """With only a BatchCompleted listener, the other notifications post nothing (no snapshot is built)."""

    class OnlyCompleted(StreamingListener):
        def __init__(self) -> None:
            self.count = 0

        def on_batch_completed(self, event: BatchCompleted) -> None:
            self.count += 1

    async def body() -> None:
        listener = OnlyCompleted()
        bus = StreamingListenerBus()
        bus.add_listener(listener)
        job = Job(Time(1000), lambda: None)
        job_set = JobSet(Time(1000), [job], Time(1000))
        async with running(bus):
            await bus.on_batch_submitted(job_set)
            await bus.on_batch_started(job_set)
            await bus.on_job_started(job, job_set)
            await bus.on_job_completed(job, job_set)
            await bus.on_batch_completed(job_set)
            bus.remove_listener(listener)
            await bus.on_batch_completed(job_set)
        assert bus.statistics().posted == 1
        assert listener.count == 1

    run(backend, body)


def _reachable(root: object) -> list[object]:
    """The objects reachable from ``root`` through ``gc.get_referents``, classes and functions excluded."""
    seen: dict[int, object] = {}
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, types.FunctionType, types.ModuleType)):
            continue
        seen[id(obj)] = obj
        stack.extend(gc.get_referents(obj))
    return list(seen.values())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("inputs", "tracked"), [
    ({4: StreamInputInfo(4, 7)}, 1),
    ({4: StreamInputInfo(4, 7, {"Description": "a file"})}, 4),
    ({4: StreamInputInfo(4, 7), 5: StreamInputInfo(5, 2)}, 5),
    ({}, 1),
], ids=["one-input", "metadata", "two-inputs", "no-input"])
def test_a_succeeded_batch_event_keeps_its_values_not_its_job_set(backend: str, inputs: dict[int, StreamInputInfo],
                                                                  tracked: int) -> None:
    """A succeeded one-job batch's BatchCompleted holds neither its JobSet nor its job and reads as the JobSet; with one
    input without metadata, or none, once a collection has seen it it is the one object the collector tracks."""

    async def body() -> None:
        listener = Recorder()
        bus = StreamingListenerBus()
        bus.add_listener(listener)
        job = Job(Time(1000), lambda: None, name="out", description="out at x.py:3")
        job_set = JobSet(Time(1000), [job], Time(1010), inputs)
        job_set.handle_job_start(job, Time(1020))
        job.release()
        job_set.handle_job_completion(job, Time(1050))
        async with running(bus):
            await bus.on_batch_completed(job_set)
        (event,) = listener.events
        gc.collect()  # a collection untracks a tuple of plain values
        reachable = _reachable(event)
        assert not any(obj is job_set or obj is job for obj in reachable)
        # No JobSet, no Times: the event, and unless the inputs are one without metadata (then two ints) or none,
        # its values' tuple, the input infos and each StreamInputInfo.
        assert sum(1 for obj in reachable if gc.is_tracked(obj)) == tracked
        assert event.batch_info == BatchInfo.from_job_set(job_set)  # type: ignore[union-attr]
        record = event.record  # type: ignore[union-attr]
        expected = BatchRecord(job_set)
        assert [getattr(record, name) for name in BatchRecord.__slots__] == [getattr(expected, name) for name in BatchRecord.__slots__]

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_snapshot_per_notification_is_shared_by_every_listener(backend: str) -> None:
    """Two inline listeners and a queued one receive the very same BatchCompleted, built once."""

    class Inline(Recorder):
        run_inline = True

    async def body() -> None:
        listeners = [Inline(), Inline(), Recorder()]
        bus = StreamingListenerBus()
        for listener in listeners:
            bus.add_listener(listener)
        job = Job(Time(1000), lambda: None)
        job_set = JobSet(Time(1000), [job], Time(1000))
        job_set.handle_job_completion(job, Time(1005))
        async with running(bus):
            await bus.on_batch_completed(job_set)
        first, second, queued = (listener.events for listener in listeners)
        assert len(first) == len(second) == len(queued) == 1
        assert first[0] is second[0] is queued[0]
        assert bus.statistics().posted == 1

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_followed_batches_are_snapshotted_when_asked_without_any_event(backend: str) -> None:
    """After follow_batches, active_batches gives the submitted, uncompleted batches as they are now; nothing is posted."""

    async def body() -> None:
        bus = StreamingListenerBus()
        first, second = Job(Time(1000), lambda: None, name="a"), Job(Time(2000), lambda: None, name="b")
        sets = JobSet(Time(1000), [first], Time(1000)), JobSet(Time(2000), [second], Time(2000))
        async with running(bus):
            await bus.on_batch_submitted(sets[0])
            assert bus.active_batches() == []  # not followed yet
            bus.follow_batches()
            await bus.on_batch_submitted(sets[0])
            await bus.on_batch_submitted(sets[1])
            sets[0].handle_job_start(first, Time(1010))
            running_now = bus.active_batches()
            sets[0].handle_job_completion(first, Time(1030))
            await bus.on_batch_completed(sets[0])
            left = bus.active_batches()
        assert [(b.batch_time, b.processing_start_time, b.output_operation_infos[0].start_time) for b in running_now] == [
            (Time(1000), Time(1010), Time(1010)), (Time(2000), None, None)]
        assert left == [BatchInfo.from_job_set(sets[1])]
        assert bus.statistics().posted == 0

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_statistics_and_repr_summarise_the_bus(backend: str) -> None:
    """statistics() is a frozen record of counts; repr summarises listeners and events."""

    async def body() -> None:
        bus = StreamingListenerBus(capacity=1)
        slow = Gated()
        bus.add_listener(slow)
        assert repr(bus) == "<StreamingListenerBus [listeners: 1 | events: 0 posted, 0 queued, 0 dropped]>"
        async with running(bus):
            for n in range(4):
                await bus.post(ev(n))
            assert repr(bus) == "<StreamingListenerBus [listeners: 1 | events: 4 posted, 2 queued, 2 dropped]>"
            stats = bus.statistics()
            with pytest.raises(AttributeError):
                stats.posted = 0  # type: ignore[misc]
            slow.gate.set()

    with capture_events():
        run(backend, body)


# -- where plain callbacks run: a thread per listener, unless on_loop --


class OnThread:
    """A plain callable listener (the default: off the loop); records each event with the thread it ran on."""

    def __init__(self, block_on: threading.Event | None = None) -> None:
        self.calls: list[tuple[int, int, str | None]] = []
        self.block_on = block_on
        self.entered = threading.Event()

    def __call__(self, event: StreamingStarted) -> None:
        self.calls.append((event.time.milliseconds, threading.get_ident(), current_listener()))
        self.entered.set()
        if self.block_on is not None:
            assert self.block_on.wait(HANG_GUARD_S), "never released"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_plain_callback_runs_on_a_worker_thread_in_posting_order(backend: str) -> None:
    """Plain callbacks run off the loop's thread, one at a time in posting order, and see current_listener()."""
    loop_thread: list[int] = []

    async def body() -> None:
        listener = OnThread()
        bus = StreamingListenerBus()
        bus.add_listener(listener, name="threaded")
        loop_thread.append(threading.get_ident())
        async with running(bus):
            for n in range(600):  # more than one trip's worth
                await bus.post(ev(n))
        assert [n for n, _, _ in listener.calls] == list(range(600))
        assert {thread for _, thread, _ in listener.calls}.isdisjoint(loop_thread)
        assert {name for _, _, name in listener.calls} == {"threaded"}
        assert bus.statistics().listeners == (ListenerStatistics("threaded", 0, 600, 0, 0),)

    run(backend, body)


class CompletedOnThread(StreamingListener):
    """A plain listener of BatchCompleted alone (runs on its thread): records each event and its batch time, read there."""

    def __init__(self, read: bool) -> None:
        self.read = read
        self.events: list[BatchCompleted] = []
        self.times: list[int] = []

    def on_batch_completed(self, event: BatchCompleted) -> None:
        self.events.append(event)
        if self.read:
            self.times.append(event.batch_info.batch_time.milliseconds)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_plain_listener_gets_every_event_it_handles_in_order_and_is_not_queued_the_others(backend: str) -> None:
    """Mixed events: a BatchCompleted-only plain listener gets all 300 of them in order; the 300 others count as delivered, never queued."""

    async def body() -> None:
        listener = CompletedOnThread(read=True)
        bus = StreamingListenerBus()
        bus.add_listener(listener, name="completed")
        job_sets = []
        for n in range(300):
            job = Job(Time(n), lambda: None)
            job_sets.append(JobSet(Time(n), [job], Time(n)))
            job_sets[-1].handle_job_completion(job, Time(n + 1))
        for n in range(3):  # before run: what is queued is what the listener handles
            await bus.post(ev(n))
            await bus.on_batch_completed(job_sets[n])
        assert bus.statistics().listeners == (ListenerStatistics("completed", 3, 3, 0, 0),)
        async with running(bus):
            for n in range(3, 300):
                await bus.post(ev(n))
                await bus.on_batch_completed(job_sets[n])
            await bus.wait_delivered()
            assert listener.times == list(range(300))
        assert bus.statistics().listeners == (ListenerStatistics("completed", 0, 600, 0, 0),)
        assert bus.statistics().posted == 600

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batch_info_no_listener_reads_is_never_built(backend: str, built_batch_infos: list[BatchInfo]) -> None:
    """Inline, on-loop and threaded listeners keeping BatchCompleted unread build no BatchInfo; one read builds one per event
    (the inline and on-loop listeners share theirs; a plain listener's thread built its own, equal one)."""
    built = built_batch_infos

    class Inline(Recorder):
        run_inline = True

    async def body() -> None:
        inline, on_loop, threaded = Inline(), Recorder(), CompletedOnThread(read=False)
        bus = StreamingListenerBus()
        for listener in (inline, on_loop, threaded):
            bus.add_listener(listener)
        job = Job(Time(1000), lambda: None, name="out")
        job_set = JobSet(Time(1000), [job], Time(1000))
        job_set.handle_job_start(job, Time(1001))
        job_set.handle_job_completion(job, Time(1005))
        eager = BatchInfo.from_job_set(job_set)
        async with running(bus):
            await bus.on_batch_completed(job_set)
            await bus.wait_delivered()
            assert built == []
        event = threaded.events[0]
        assert len(inline.events) == len(on_loop.events) == 1 and inline.events[0] is on_loop.events[0]
        assert event is not inline.events[0]
        assert event.batch_info == eager and len(built) == 1
        assert inline.events[0].batch_info == eager and len(built) == 2  # type: ignore[union-attr]
        assert inline.events[0].batch_info is on_loop.events[0].batch_info is built[1]  # type: ignore[union-attr]
        assert event == inline.events[0] and len(built) == 2

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_on_loop_runs_a_plain_callback_on_the_loops_thread(backend: str) -> None:
    """add_listener(on_loop=True) (or a run_on_loop attribute) keeps a quick plain callback on the loop."""

    async def body() -> None:
        by_keyword, by_attribute = OnThread(), OnThread()
        by_attribute.run_on_loop = True  # type: ignore[attr-defined]
        bus = StreamingListenerBus()
        bus.add_listener(by_keyword, on_loop=True)
        bus.add_listener(by_attribute)
        async with running(bus):
            await bus.post(ev(1))
        here = threading.get_ident()
        assert [thread for _, thread, _ in by_keyword.calls] == [here]
        assert [thread for _, thread, _ in by_attribute.calls] == [here]

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_inline_listener_is_called_inside_post(backend: str) -> None:
    """inline=True (or run_inline) delivers during post itself: in order, before post returns, counted, named."""

    async def body() -> None:
        by_keyword, by_attribute = OnThread(), OnThread()
        by_attribute.run_inline = True  # type: ignore[attr-defined]
        flaky = Flaky()
        bus = StreamingListenerBus(capacity=1)  # inline listeners have no queue to fill
        bus.add_listener(by_keyword, inline=True, name="kw")
        bus.add_listener(by_attribute, name="attr")
        bus.add_listener(flaky, inline=True, name="flaky")
        async with running(bus):
            for n in range(5):
                await bus.post(ev(n))
                assert [m for m, _, _ in by_keyword.calls] == list(range(n + 1))  # no task switch needed
            assert bus.statistics().queued == 0
        here = threading.get_ident()
        assert by_keyword.calls == [(n, here, "kw") for n in range(5)]
        assert [(m, t) for m, t, _ in by_attribute.calls] == [(n, here) for n in range(5)]
        assert flaky.got == [0, 1, 2, 3, 4]  # it raised on 1 and stayed registered
        stats = {s.name: s for s in bus.statistics().listeners}
        assert stats["kw"] == ListenerStatistics("kw", 0, 5, 0, 0)
        assert stats["flaky"] == ListenerStatistics("flaky", 0, 4, 1, 0)
        bus2 = StreamingListenerBus()
        bus2.add_listener(by_keyword, inline=True, name="kw")
        async with running(bus2):
            await bus2.post(ev(9))
            bus2.remove_listener(by_keyword)
            await bus2.post(ev(10))
        assert [m for m, _, _ in by_keyword.calls][-1] == 9
        assert bus2.statistics().listeners == (ListenerStatistics("kw", 0, 1, 0, 0),)

    run(backend, body)


def test_an_inline_listener_must_not_have_async_callbacks() -> None:
    """An async callback cannot run inside post: refused at registration with a message saying why."""
    bus = StreamingListenerBus()
    with pytest.raises(TypeError, match=r"runs inline .* plain 'def'"):
        bus.add_listener(Gated(), inline=True, name="gated")
    assert bus.listeners == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_blocking_plain_listener_delays_only_itself(backend: str) -> None:
    """While one listener blocks its thread, the loop runs on and the others get every event; at close it gets them all."""
    release = threading.Event()

    async def body() -> None:
        blocked, fast = OnThread(block_on=release), Recorder()
        bus = StreamingListenerBus()
        bus.add_listener(blocked, name="blocked")
        bus.add_listener(fast)
        ticks = 0
        async with running(bus):
            for n in range(5):
                await bus.post(ev(n))
                ticks += 1
                await anyio.lowlevel.checkpoint()
            await anyio.to_thread.run_sync(blocked.entered.wait)
            await settle()
            assert numbers(fast.events) == [0, 1, 2, 3, 4] and ticks == 5
            assert [n for n, _, _ in blocked.calls] == [0]  # still inside its first call
            release.set()
        assert [n for n, _, _ in blocked.calls] == [0, 1, 2, 3, 4]  # close drained it, in order

    try:
        run(backend, body)
    finally:
        release.set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_events_posted_during_a_plain_trip_gather_in_one_list_and_go_in_the_next_trip(backend: str) -> None:
    """During a plain listener's trip the bus appends its events to one list, not the queue; the next trip takes them, in order."""
    release = threading.Event()

    async def body() -> None:
        listener = OnThread(block_on=release)
        bus = StreamingListenerBus(linger=False)
        bus.add_listener(listener, name="plain")
        slot = bus._slots[0]
        async with running(bus):
            await bus.post(ev(0))
            await anyio.to_thread.run_sync(listener.entered.wait)  # the first trip is in flight
            for n in range(1, 6):
                await bus.post(ev(n))
            assert numbers(slot.pending or []) == [1, 2, 3, 4, 5] and len(slot.queue) == 0
            assert bus.statistics().queued == 6  # the one in hand and the five gathered
            release.set()
            await bus.wait_delivered()
            assert slot.pending is None and (slot.trips, slot.tripped) == (2, 6)
        assert [n for n, _, _ in listener.calls] == [0, 1, 2, 3, 4, 5]
        assert bus.statistics() == ListenerBusStatistics(posted=6, delivered=6, failed=0, dropped=0, queued=0,
                                                         listeners=(ListenerStatistics("plain", 0, 6, 0, 0),))

    try:
        run(backend, body)
    finally:
        release.set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_plain_listeners_gathered_events_are_bounded_by_its_capacity_under_drop(backend: str) -> None:
    """Gathered events count against the queue's capacity: past it DROP drops them for that listener; close delivers the rest."""
    release = threading.Event()

    async def body() -> None:
        listener = OnThread(block_on=release)
        bus = StreamingListenerBus(capacity=3, overflow=OverflowPolicy.DROP, linger=False)
        bus.add_listener(listener, name="plain")
        async with running(bus):
            await bus.post(ev(0))
            await anyio.to_thread.run_sync(listener.entered.wait)
            for n in range(1, 8):
                await bus.post(ev(n))
            assert bus.statistics().listeners == (ListenerStatistics("plain", queued=4, delivered=0, failed=0, dropped=4),)
            release.set()
        assert [n for n, _, _ in listener.calls] == [0, 1, 2, 3]  # closing delivered what was gathered

    try:
        with capture_events():
            run(backend, body)
    finally:
        release.set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_under_block_a_plain_listeners_events_wait_in_its_queue_not_gathered(backend: str) -> None:
    """Under BLOCK nothing gathers (a full run would not make post wait): the events queue, and post waits for room."""
    release = threading.Event()

    async def body() -> None:
        listener = OnThread(block_on=release)
        bus = StreamingListenerBus(capacity=2, overflow=OverflowPolicy.BLOCK, linger=False)
        bus.add_listener(listener, name="plain")
        slot = bus._slots[0]
        async with running(bus):
            await bus.post(ev(0))
            await anyio.to_thread.run_sync(listener.entered.wait)
            await bus.post(ev(1))
            await bus.post(ev(2))
            assert slot.pending is None and len(slot.queue) == 2
            posted = anyio.Event()

            async def post_one_more() -> None:
                await bus.post(ev(3))
                posted.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(post_one_more)
                await settle()
                assert not posted.is_set()  # the queue is full: post waits for room
                release.set()
        assert [n for n, _, _ in listener.calls] == [0, 1, 2, 3]

    try:
        run(backend, body)
    finally:
        release.set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_plain_listener_gets_the_events_queued_while_it_yields_after_those_gathered_before(backend: str) -> None:
    """A gathered run longer than a yield's worth is followed by the events queued while the dispatcher yielded, in order."""
    release = threading.Event()

    async def body() -> None:
        listener = OnThread(block_on=release)
        bus = StreamingListenerBus(linger=False)
        bus.add_listener(listener, name="plain")
        slot = bus._slots[0]
        async with running(bus):
            await bus.post(ev(0))
            await anyio.to_thread.run_sync(listener.entered.wait)
            total = 600
            for n in range(1, total):
                await bus.post(ev(n))
            assert len(slot.pending or []) == total - 1
            release.set()
            # Posting on while it delivers: some go in its queue while it yields, the rest gather.
            for n in range(total, 2 * total):
                await bus.post(ev(n))
                await anyio.lowlevel.checkpoint()
            await bus.wait_delivered()
        assert [n for n, _, _ in listener.calls] == list(range(2 * total))

    try:
        run(backend, body)
    finally:
        release.set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_plain_callback_that_returns_an_awaitable_is_awaited_in_order(backend: str) -> None:
    """A plain def returning a coroutine (a partial of an async function, say) has it awaited on the loop, in order."""
    seen: list[tuple[str, int]] = []

    async def later(event: StreamingStarted) -> None:
        await anyio.lowlevel.checkpoint()
        seen.append(("awaited", event.time.milliseconds))

    def plain(event: StreamingStarted) -> Any:
        seen.append(("called", event.time.milliseconds))
        return later(event)

    async def body() -> None:
        bus = StreamingListenerBus()
        bus.add_listener(plain)
        async with running(bus):
            for n in range(3):
                await bus.post(ev(n))

    run(backend, body)
    assert seen == [(kind, n) for n in range(3) for kind in ("called", "awaited")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancelling_the_bus_does_not_wait_for_a_blocked_plain_callback(backend: str) -> None:
    """The host cancels: run() returns while a plain callback still blocks on its thread (it finishes there later)."""
    release = threading.Event()

    async def body() -> None:
        blocked = OnThread(block_on=release)
        bus = StreamingListenerBus()
        bus.add_listener(blocked)
        async with anyio.create_task_group() as tg:
            await tg.start(bus.run)
            await bus.post(ev(0))
            await anyio.to_thread.run_sync(blocked.entered.wait)
            tg.cancel_scope.cancel()
        assert not release.is_set() and [n for n, _, _ in blocked.calls] == [0]

    try:
        run(backend, body)
    finally:
        release.set()


# -- stop: a deadline for draining (spark.scheduler.listenerbus.exitTimeout) --


class Hung:
    """A plain callable listener on its worker thread that blocks on its first event until the test releases it."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.received: list[int] = []
        self.entered = threading.Event()
        self.returned = threading.Event()

    def __call__(self, event: StreamingStarted) -> None:
        self.received.append(event.time.milliseconds)
        if len(self.received) == 1:
            self.entered.set()
            try:
                self.release.wait()
            finally:
                self.returned.set()


def test_the_exit_timeout_must_be_a_non_negative_duration_or_none() -> None:
    """A negative or non-Duration exit timeout is refused with the rule, the value and a fix."""
    from scheduler import InvalidDurationError, Milliseconds

    with raises_exactly(InvalidDurationError, "the listener bus exit timeout must be a non-negative Duration or None (no bound), "
                                              "got Duration(-1); pass e.g. Seconds(10)"):
        StreamingListenerBus(exit_timeout=Milliseconds(-1))
    with raises_exactly(InvalidDurationError, "the listener bus exit timeout must be a non-negative Duration or None (no bound), "
                                              "got 5; pass e.g. Seconds(10)"):
        StreamingListenerBus(exit_timeout=5)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", BACKENDS)
def test_stop_delivers_everything_queued_when_the_listeners_keep_up(backend: str) -> None:
    """stop() closes the bus, delivers what is queued to every listener and returns True once run() has ended."""

    async def body() -> None:
        from scheduler import ManualClock, Seconds

        recorder, gated = Recorder(), Gated()
        bus = StreamingListenerBus(clock=ManualClock(), exit_timeout=Seconds(1))
        bus.add_listener(recorder)
        bus.add_listener(gated)
        async with anyio.create_task_group() as tg:
            await tg.start(bus.run)
            for n in range(3):
                await bus.post(ev(n))
            gated.gate.set()
            assert await bus.stop() is True
        assert numbers(recorder.events) == numbers(gated.events) == [0, 1, 2]
        st = bus.statistics()
        assert (st.delivered, st.dropped, st.queued) == (6, 0, 0)

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stop_drops_and_counts_what_a_hung_async_listener_holds_at_the_deadline(backend: str) -> None:
    """Past the exit timeout on the bus's clock, a hung async listener's events are dropped, counted and
    reported once by name; the other listeners got everything, and stop() returns False."""

    async def body() -> None:
        from scheduler import ManualClock, Seconds

        clock = ManualClock()
        recorder, hung = Recorder(), Gated()  # the gate never opens
        bus = StreamingListenerBus(clock=clock, exit_timeout=Seconds(1))
        bus.add_listener(recorder, name="healthy")
        bus.add_listener(hung, name="hung")
        results: list[bool] = []
        with capture_events() as logs:
            async with anyio.create_task_group() as tg:
                await tg.start(bus.run)
                for n in range(3):
                    await bus.post(ev(n))

                async def stop() -> None:
                    results.append(await bus.stop())

                tg.start_soon(stop)
                await clock.wait_for_sleepers(1)  # the stop's deadline
                assert numbers(recorder.events) == [0, 1, 2] and numbers(hung.entered) == [0]
                clock.advance(Seconds(1))
        assert results == [False]
        assert clock.now() == Time(1000)
        by_name = {s.name: s for s in bus.statistics().listeners}
        assert by_name["hung"] == ListenerStatistics("hung", queued=0, delivered=0, failed=0, dropped=3)
        assert by_name["healthy"] == ListenerStatistics("healthy", queued=0, delivered=3, failed=0, dropped=0)
        assert bus.statistics().dropped == 3
        warnings = [e for e in logs if e["log_level"] == "warning"]
        assert [(e["event"], e["listener"], e["dropped"], e["exit_timeout_ms"]) for e in warnings] == [
            ("listener bus stopped before this listener received every queued event; they were dropped", "hung", 3, 1000)]

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stop_abandons_a_plain_callback_blocked_on_its_thread(backend: str) -> None:
    """A plain callback blocked on its worker thread cannot be interrupted: stop() returns at the deadline, its
    event and those queued behind it count as dropped, and once it returns the listener gets nothing more."""
    release = threading.Event()
    hung = Hung(release)

    async def body() -> None:
        from scheduler import ManualClock, Seconds

        clock = ManualClock()
        bus = StreamingListenerBus(clock=clock, exit_timeout=Seconds(2))
        bus.add_listener(hung, name="hung-thread")
        async with anyio.create_task_group() as tg:
            await tg.start(bus.run)
            await bus.post(ev(0))
            assert await anyio.to_thread.run_sync(hung.entered.wait, HANG_GUARD_S)
            await bus.post(ev(1))
            await bus.post(ev(2))
            tg.start_soon(bus.stop)
            await clock.wait_for_sleepers(1)
            clock.advance(Seconds(2))
        assert not hung.returned.is_set()  # abandoned, still blocked
        assert bus.statistics().listeners == (ListenerStatistics("hung-thread", queued=0, delivered=0, failed=0, dropped=3),)
        release.set()
        assert await anyio.to_thread.run_sync(hung.returned.wait, HANG_GUARD_S)

    try:
        run(backend, body)
    finally:
        release.set()
    # Whatever the thread still held after its hung callback was not delivered.
    assert hung.received == [0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancelling_stop_drops_what_is_undelivered_at_once(backend: str) -> None:
    """Cancelling stop() (as a move_on_after around it does) is honoured even without a deadline: the
    undelivered events are dropped and counted, run() has ended, and the cancellation is not swallowed."""

    async def body() -> None:
        from scheduler import ManualClock

        hung = Gated()
        bus = StreamingListenerBus(clock=ManualClock(), exit_timeout=None)  # Spark's default: no bound
        bus.add_listener(hung, name="hung")
        async with anyio.create_task_group() as tg:
            await tg.start(bus.run)
            await bus.post(ev(0))
            await bus.post(ev(1))
            await settle()
            with anyio.CancelScope() as scope:

                async def cancel_once_waiting() -> None:
                    await settle()  # stop() is parked waiting for the hung listener
                    scope.cancel()

                tg.start_soon(cancel_once_waiting)
                await bus.stop()
            assert scope.cancelled_caught
        assert bus.statistics().listeners == (ListenerStatistics("hung", queued=0, delivered=0, failed=0, dropped=2),)

    run(backend, body)


class HeldCompleted(StreamingListener):
    """A plain listener of BatchCompleted (on its thread) that holds its first call until released; keeps every event."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.entered = threading.Event()
        self.events: list[BatchCompleted] = []

    def on_batch_completed(self, event: BatchCompleted) -> None:
        self.events.append(event)
        self.entered.set()
        assert self.release.wait(HANG_GUARD_S), "never released"


def succeeded_batches(count: int, first: int = 0) -> list[JobSet]:
    """``count`` completed batches of one succeeded job each (times first, first+1, ... s), with one input without metadata."""
    job_sets = []
    for n in range(first, first + count):
        at = Time(n * 1000)
        job = Job(at, lambda: None, name="out", description=f"out at x.py:{n}")
        job_set = JobSet(at, [job], at, {0: StreamInputInfo(0, n)})
        job_set.handle_job_start(job, Time(n * 1000 + 1))
        job.release()
        job_set.handle_job_completion(job, Time(n * 1000 + 3))
        job_sets.append(job_set)
    return job_sets


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("overflow", [OverflowPolicy.DROP, OverflowPolicy.BLOCK])
def test_a_plain_listeners_queued_batch_events_are_no_objects_the_collector_tracks(backend: str,
                                                                                   overflow: OverflowPolicy) -> None:
    """Queued for a plain listener (gathered under DROP, in its queue under BLOCK), succeeded batches' BatchCompleted events
    add nothing to the collector's young generation and a young collection promotes none of them, however many wait (more
    than the interpreter keeps free tuples for); its thread builds each event, equal to the eager one, in order."""
    release = threading.Event()
    total = 3000

    async def body() -> None:
        listener = HeldCompleted(release)
        bus = StreamingListenerBus(overflow=overflow, linger=False)
        bus.add_listener(listener, name="plain")
        first, *queued = succeeded_batches(total + 1)
        async with running(bus):
            await bus.on_batch_completed(first)
            await anyio.to_thread.run_sync(listener.entered.wait)  # its first trip is in flight
            enabled = gc.isenabled()
            gc.disable()  # the young generation's count still grows with each tracked allocation, and no collection resets it
            try:
                gc.collect()  # everything alive now is in the oldest generation
                before = gc.get_count()[0]
                for job_set in queued:
                    await bus.on_batch_completed(job_set)
                grown = gc.get_count()[0] - before
                gc.collect(0)  # a young collection: what survives it goes to the middle generation
                promoted = len(gc.get_objects(generation=1))
            finally:
                if enabled:
                    gc.enable()
            assert bus.statistics().queued == total + 1
            # Each queued event used to be at least one tracked object alive (the event), each a step towards a collection
            # and promoted by it; a queued tuple of the values would be one too once the free tuples run out.
            assert grown < 100 and promoted < 100
            release.set()
            await bus.wait_delivered()
        assert len(listener.events) == total + 1
        assert all(type(event) is BatchCompleted for event in listener.events)
        assert [event.batch_info for event in listener.events] == [BatchInfo.from_job_set(j) for j in (first, *queued)]
        assert bus.statistics().listeners == (ListenerStatistics("plain", 0, total + 1, 0, 0),)

    try:
        run(backend, body)
    finally:
        release.set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_under_block_a_succeeded_batch_waits_for_room_in_a_plain_listeners_full_queue(backend: str) -> None:
    """A full queue under BLOCK makes the batch's post wait; its event then reaches the plain listener after the queued ones,
    as do the later listeners' (an inline one gets an equal event of its own)."""
    release = threading.Event()

    class Inline(Recorder):
        run_inline = True

    async def body() -> None:
        listener, inline = HeldCompleted(release), Inline()
        bus = StreamingListenerBus(capacity=2, overflow=OverflowPolicy.BLOCK, linger=False)
        bus.add_listener(listener, name="plain")
        bus.add_listener(inline, name="inline")
        job_sets = succeeded_batches(4)
        slot = bus._slots[0]
        async with running(bus):
            await bus.on_batch_completed(job_sets[0])
            await anyio.to_thread.run_sync(listener.entered.wait)
            await bus.on_batch_completed(job_sets[1])
            await bus.on_batch_completed(job_sets[2])
            # Two SUCCEEDED queued; the values of the trip's batch and of those two beside them (cut once the trip is back).
            assert len(slot.queue) == 2 and len(slot.values) == 3 * SUCCEEDED_WIDTH
            posted = anyio.Event()

            async def post_last() -> None:
                await bus.on_batch_completed(job_sets[3])
                posted.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(post_last)
                await settle()
                assert not posted.is_set() and len(inline.events) == 3  # waits at the plain listener, before the inline one
                release.set()
            await bus.wait_delivered()
            assert slot.values == []  # every trip's values cut off once it came back
        expected = [BatchInfo.from_job_set(j) for j in job_sets]
        assert [event.batch_info for event in listener.events] == expected
        assert [event.batch_info for event in inline.events] == expected  # type: ignore[union-attr]
        # Equal events; the plain listener's own, built on its thread, except the one whose post waited (one object then).
        assert listener.events == inline.events
        assert [a is b for a, b in zip(listener.events, inline.events, strict=True)] == [False, False, False, True]

    try:
        run(backend, body)
    finally:
        release.set()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_succeeded_batch_dropped_for_a_full_plain_listener_is_counted_and_named(backend: str) -> None:
    """Under DROP a plain listener's full queue drops a succeeded batch's event: counted, warned once as BatchCompleted."""
    release = threading.Event()

    async def body() -> None:
        listener = HeldCompleted(release)
        bus = StreamingListenerBus(capacity=2, overflow=OverflowPolicy.DROP, linger=False)
        bus.add_listener(listener, name="plain")
        job_sets = succeeded_batches(6)
        async with running(bus):
            await bus.on_batch_completed(job_sets[0])
            await anyio.to_thread.run_sync(listener.entered.wait)
            for job_set in job_sets[1:]:
                await bus.on_batch_completed(job_set)
            assert bus.statistics().listeners == (ListenerStatistics("plain", queued=3, delivered=0, failed=0, dropped=3),)
            release.set()
        assert [event.batch_info for event in listener.events] == [BatchInfo.from_job_set(j) for j in job_sets[:3]]

    try:
        with capture_events() as logs:
            run(backend, body)
    finally:
        release.set()
    dropped = [entry for entry in logs if entry["event"] == "dropping events for a slow listener: its queue is full"]
    assert [(entry["listener"], entry["event_type"]) for entry in dropped] == [("plain", "BatchCompleted")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_listener_with_an_async_callback_gets_the_batch_event_object_built_once_with_the_loops_listeners(backend: str) -> None:
    """A threaded listener that also has an async callback is not all plain: it is queued the very event the loop's listeners get."""

    class Mixed(StreamingListener):
        def __init__(self) -> None:
            self.events: list[Any] = []

        def on_batch_completed(self, event: BatchCompleted) -> None:
            self.events.append(event)

        async def on_streaming_started(self, event: StreamingStarted) -> None:
            self.events.append(event)

    async def body() -> None:
        mixed, on_loop = Mixed(), Recorder()
        bus = StreamingListenerBus()
        bus.add_listener(mixed, name="mixed")
        bus.add_listener(on_loop)
        (job_set,) = succeeded_batches(1)
        async with running(bus):
            await bus.post(ev(7))
            await bus.on_batch_completed(job_set)
            await bus.wait_delivered()
        assert len(mixed.events) == 2 and mixed.events[1] is on_loop.events[1]
        assert mixed.events[1].batch_info == BatchInfo.from_job_set(job_set)

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_plain_listeners_trip_takes_every_event_queued_for_it(backend: str) -> None:
    """However many events wait in a plain listener's queue when a trip starts (600 here), the trip takes them all, in
    order: a loop posting flat out never outruns a listener that gets the GIL once per switch interval."""
    release = threading.Event()

    async def body() -> None:
        listener = OnThread(block_on=release)
        bus = StreamingListenerBus(overflow=OverflowPolicy.BLOCK, linger=False)  # nothing gathers: the queue holds them
        bus.add_listener(listener, name="plain")
        slot = bus._slots[0]
        async with running(bus):
            await bus.post(ev(0))
            await anyio.to_thread.run_sync(listener.entered.wait)
            for n in range(1, 601):
                await bus.post(ev(n))
            assert len(slot.queue) == 600
            release.set()
            await bus.wait_delivered()
            assert (slot.trips, slot.tripped) == (2, 601)
        assert [n for n, _, _ in listener.calls] == list(range(601))

    try:
        run(backend, body)
    finally:
        release.set()


@asynccontextmanager
async def a_trip_asked_for_behind(gate: threading.Event, overflow: OverflowPolicy, handover: Handover | None = None
                                  ) -> AsyncIterator[tuple[StreamingListenerBus, Any, OnThread]]:
    """A running bus whose plain listener got ev(0), then asked for a trip with ev(1) that cannot start: its thread waits
    on ``gate`` (its trips through ``handover`` if given); yields the bus, the listener's queue and the listener."""
    listener = OnThread()
    bus = StreamingListenerBus(capacity=10 * HAND_OFF_EVENTS, overflow=overflow, linger=False)
    bus.add_listener(listener, name="plain")
    slot = bus._slots[0]
    async with running(bus):
        await bus.post(ev(0))
        await bus.wait_delivered()
        assert slot.threads is not None
        slot.threads.submit(gate.wait, HANG_GUARD_S)  # the listener's thread is busy: the next trip cannot start
        if handover is not None:
            slot.handover = handover
        await bus.post(ev(1))
        await wait_until(lambda: slot.trips == 2)  # asked for, not started
        yield bus, slot, listener


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("overflow", [OverflowPolicy.DROP, OverflowPolicy.BLOCK])
def test_a_long_queue_behind_a_trip_not_started_hands_the_gil_over_once(backend: str, overflow: OverflowPolicy) -> None:
    """With HAND_OFF_EVENTS undelivered while a trip its thread has not started waits, a post waits for the trip to run
    (GIL released), at most HAND_OFF_WAIT_S; a trip still not started is handed over again HAND_OFF_EVENTS later, not
    before; every event is then delivered in order."""
    gate = threading.Event()

    async def body() -> None:
        async with a_trip_asked_for_behind(gate, overflow) as (bus, slot, listener):
            for n in range(2, HAND_OFF_EVENTS):
                await bus.post(ev(n))
            assert slot.handed_off == 0  # one short of HAND_OFF_EVENTS undelivered (the trip's one and those queued)
            await bus.post(ev(HAND_OFF_EVENTS))
            assert (slot.handed_off, slot.settled_on_loop) == (1, 0)  # the trip could not run: the wait ended on its bound
            for n in range(HAND_OFF_EVENTS + 1, 2 * HAND_OFF_EVENTS):
                await bus.post(ev(n))
            assert slot.handed_off == 1  # not again before HAND_OFF_EVENTS more
            await bus.post(ev(2 * HAND_OFF_EVENTS))
            assert (slot.handed_off, slot.settled_on_loop) == (2, 0)  # still not started: handed over again
            gate.set()
            await bus.wait_delivered()
        assert [n for n, _, _ in listener.calls] == list(range(2 * HAND_OFF_EVENTS + 1))

    try:
        run(backend, body)
    finally:
        gate.set()


class OpensTheGateAsItWaits(Handover):
    """A trip handover that lets the listener's thread go (``gate``) right before the loop's thread waits for the trip,
    and waits up to the hang guard rather than HAND_OFF_WAIT_S (a busy machine may not run the thread within 1 ms)."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate

    def wait(self, timeout: float) -> bool:
        self.gate.set()
        return super().wait(HANG_GUARD_S)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_trip_handed_the_gil_that_runs_within_the_wait_is_settled_on_the_loop(backend: str) -> None:
    """A handed-over trip that runs while the post waits is delivered by the time the post returns, and its thread leaves
    the settling to the loop's thread; the events behind it go in the next trip, in order."""
    gate = threading.Event()

    async def body() -> None:
        async with a_trip_asked_for_behind(gate, OverflowPolicy.DROP, OpensTheGateAsItWaits(gate)) as (bus, slot, listener):
            with no_forced_gil_switch():  # the listener's thread gets the GIL only once the loop's thread waits
                for n in range(2, HAND_OFF_EVENTS + 1):
                    await bus.post(ev(n))
                assert (slot.handed_off, slot.settled_on_loop) == (1, 1)
                assert [n for n, _, _ in listener.calls] == [0, 1]  # the trip ran while the post waited
            await bus.wait_delivered()
        assert [n for n, _, _ in listener.calls] == list(range(HAND_OFF_EVENTS + 1))

    try:
        run(backend, body)
    finally:
        gate.set()


class _SpyLock:
    """A listener's callback lock that sets ``waiting`` when a trip finds it held (so a test need not sleep to see it)."""

    def __init__(self, waiting: threading.Event) -> None:
        self._lock = threading.Lock()
        self.waiting = waiting

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            self.waiting.set()
            self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class CountsInside:
    """A plain listener on two buses: its first callback holds until ``go``; records how many callbacks ran at once."""

    def __init__(self, go: threading.Event) -> None:
        self.go = go
        self.inside = self.max_inside = 0
        self.order: list[int] = []
        self.entered = threading.Event()
        self._count = threading.Lock()

    def __call__(self, event: StreamingStarted) -> None:
        with self._count:
            self.inside += 1
            self.max_inside = max(self.max_inside, self.inside)
        if event.time.milliseconds == 1:
            self.entered.set()
            assert self.go.wait(HANG_GUARD_S), "never released"
        else:
            self.go.set()  # reached while the first still runs: they overlap (it must not wait for us)
        with self._count:
            self.order.append(event.time.milliseconds)
            self.inside -= 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_listener_on_two_buses_gets_one_callback_at_a_time(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listener on two buses (streams.addListener puts it on every query's) is called one callback at a time, as on
    Spark's one listener-bus thread: bus B's trip waits while bus A's callback runs."""
    go = threading.Event()
    monkeypatch.setattr("listeners._listener_queue._new_lock", lambda: _SpyLock(go), raising=False)
    listener = CountsInside(go)

    async def body() -> None:
        a, b = StreamingListenerBus(), StreamingListenerBus()
        a.add_listener(listener, name="shared")
        b.add_listener(listener, name="shared")
        async with running(a), running(b):
            await a.post(ev(1))
            assert await anyio.to_thread.run_sync(listener.entered.wait, HANG_GUARD_S), "bus A's callback never started"
            await b.post(ev(2))  # its trip waits on the lock (go is set then), and runs once A's callback returned
            await a.wait_delivered()
            await b.wait_delivered()

    run(backend, body)
    assert listener.order == [1, 2]
    assert listener.max_inside == 1
