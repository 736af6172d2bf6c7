"""Mailbox: FIFO hand-off, parking only when empty, bounded puts, closing and cancellation, on asyncio and trio."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import sniffio

from scheduler import Mailbox, ready_probe, yield_now, yield_to_ready
from scheduler._streams import on_asyncio
from streaming.simulation import probed_event_loop
from tests.anyio_support import BACKENDS, raises_exactly, run, settle


@pytest.mark.parametrize("capacity", [0, -1, 1.5, True, "3"])
def test_capacity_must_be_a_positive_int_or_none(capacity: object) -> None:
    """A capacity that is not a positive int (or None) is refused, exactly worded."""
    with raises_exactly(ValueError, f"a mailbox capacity must be a positive int or None, got {capacity!r}"):
        Mailbox(capacity)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_items_come_out_in_the_order_they_went_in() -> None:
    """One consumer gets every item in FIFO order, whether it was queued before or after the consumer parked."""
    box: Mailbox[int] = Mailbox()
    got: list[int] = []

    async def consumer() -> None:
        while True:
            try:
                got.append(await box.get())
            except anyio.EndOfStream:
                return

    for n in range(3):
        box.put_nowait(n)
    async with anyio.create_task_group() as tg:
        tg.start_soon(consumer)
        await settle()
        for n in range(3, 10):
            box.put_nowait(n)
            if n % 3 == 0:
                await settle()
        box.close()
    assert got == list(range(10))


@pytest.mark.anyio
async def test_get_is_not_a_checkpoint_when_an_item_is_queued() -> None:
    """A consumer with items queued takes them without yielding; it parks only when the mailbox is empty."""
    box: Mailbox[int] = Mailbox()
    other_ran: list[bool] = []

    async def other() -> None:
        other_ran.append(True)

    box.put_nowait(1)
    box.put_nowait(2)
    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        assert [await box.get(), await box.get()] == [1, 2]
        assert other_ran == []  # never yielded
        with pytest.raises(anyio.WouldBlock):
            box.get_nowait()


def test_poll_takes_the_next_item_or_returns_the_default() -> None:
    """poll() is get_nowait() that returns its default when nothing is queued, open or closed."""
    box: Mailbox[int | None] = Mailbox()
    empty = object()
    box.put_nowait(None)
    box.put_nowait(2)
    assert [box.poll(empty), box.poll(empty), box.poll(empty)] == [None, 2, empty]
    box.close()
    assert box.poll(empty) is empty


@pytest.mark.parametrize("backend", BACKENDS)
def test_several_consumers_share_the_items_each_taken_once(backend: str) -> None:
    """With several parked consumers, each item goes to exactly one of them, the longest parked first."""

    async def body() -> None:
        box: Mailbox[int] = Mailbox()
        got: dict[str, list[int]] = {"a": [], "b": [], "c": []}

        async def consumer(name: str) -> None:
            while True:
                try:
                    got[name].append(await box.get())
                except anyio.EndOfStream:
                    return
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            for name in got:
                tg.start_soon(consumer, name)
                await settle()  # parked in this order
            for n in range(3):
                box.put_nowait(n)
            await settle()
            if backend == "asyncio":  # FIFO wake-ups; trio may run them in any order
                assert got == {"a": [0], "b": [1], "c": [2]}
            for n in range(3, 60):
                box.put_nowait(n)
            box.close()
        assert sorted(n for items in got.values() for n in items) == list(range(60))

    run(backend, body)


@pytest.mark.anyio
async def test_close_wakes_every_parked_consumer_after_the_rest_is_drained() -> None:
    """close() refuses new items, lets consumers drain what is queued, then ends every one of them."""
    box: Mailbox[int] = Mailbox()
    ended: list[str] = []
    got: list[int] = []

    async def consumer(name: str) -> None:
        while True:
            try:
                got.append(await box.get())
            except anyio.EndOfStream:
                ended.append(name)
                return

    async with anyio.create_task_group() as tg:
        for name in ("a", "b", "c"):
            tg.start_soon(consumer, name)
        await settle()
        box.put_nowait(1)
        box.close()
        assert box.closed
        with pytest.raises(anyio.ClosedResourceError):
            box.put_nowait(2)
    assert got == [1]
    assert sorted(ended) == ["a", "b", "c"]
    with pytest.raises(anyio.EndOfStream):
        box.get_nowait()
    with pytest.raises(anyio.EndOfStream):
        await box.get()


@pytest.mark.anyio
async def test_a_consumer_cancelled_while_parked_leaves_without_taking_anything() -> None:
    """Cancelling a parked get removes the consumer; the next item goes to the one still parked."""
    box: Mailbox[int] = Mailbox()
    got: list[int] = []

    async def consumer() -> None:
        got.append(await box.get())

    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()
        tg.start_soon(_get_in_scope, box, scope)
        await settle()
        tg.start_soon(consumer)
        await settle()
        scope.cancel()
        await settle()
        assert "1 waiting" in repr(box)
        box.put_nowait(7)
    assert got == [7]
    assert len(box) == 0


async def _get_in_scope(box: Mailbox[int], scope: anyio.CancelScope) -> None:
    with scope:
        await box.get()
        raise AssertionError("the cancelled consumer got an item")


def test_an_item_for_a_consumer_cancelled_before_it_ran_is_not_lost() -> None:
    """A consumer woken for an item and then cancelled before it runs passes the item on.

    anyio never cancels a task whose wake-up is already due (the item is then delivered), but a
    plain ``Task.cancel()`` on asyncio does; the item must not vanish with the cancelled consumer.
    """

    async def body() -> None:
        box: Mailbox[int] = Mailbox()
        got: list[int] = []
        first: list[asyncio.Task[Any]] = []
        outcome: list[str] = []

        async def cancelled_consumer() -> None:
            first.append(asyncio.current_task())  # type: ignore[arg-type]
            try:
                await box.get()
            except asyncio.CancelledError:
                outcome.append("cancelled")
                raise

        async def consumer() -> None:
            got.append(await box.get())

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancelled_consumer)
            await settle()
            tg.start_soon(consumer)
            await settle()
            box.put_nowait(5)  # wakes the first consumer...
            first[0].cancel()  # ...which is cancelled before it runs
        assert outcome == ["cancelled"]
        assert got == [5]
        assert len(box) == 0

    run("asyncio", body)


# -- bounded --


@pytest.mark.anyio
async def test_a_full_mailbox_refuses_put_nowait_but_a_parked_consumer_takes_one_more() -> None:
    """An item handed to a parked consumer does not count against the capacity (as in anyio's streams)."""
    box: Mailbox[int] = Mailbox(2)
    assert box.capacity == 2 and Mailbox().capacity is None
    got: list[int] = []

    async def consumer() -> None:
        got.append(await box.get())

    async with anyio.create_task_group() as tg:
        tg.start_soon(consumer)
        await settle()
        box.put_nowait(0)  # handed over
        box.put_nowait(1)
        box.put_nowait(2)
        with pytest.raises(anyio.WouldBlock):
            box.put_nowait(3)
    assert got == [0]
    assert [box.get_nowait(), box.get_nowait()] == [1, 2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_put_waits_for_room_and_producers_get_in_in_order(backend: str) -> None:
    """put() returns at once when there is room, else waits; freed room admits waiting producers oldest first."""

    async def body() -> None:
        box: Mailbox[int] = Mailbox(1)
        done: list[int] = []

        async def producer(n: int) -> None:
            await box.put(n)
            done.append(n)

        await box.put(0)
        async with anyio.create_task_group() as tg:
            for n in (1, 2, 3):
                tg.start_soon(producer, n)
                await settle()
            assert done == []
            assert "3 putting" in repr(box)
            assert box.get_nowait() == 0
            await settle()
            assert done == [1]
            assert [await box.get(), await box.get(), await box.get()] == [1, 2, 3]
        # trio may run producers woken together in any order; their items went in in order.
        assert (done if backend == "asyncio" else sorted(done)) == [1, 2, 3]

    run(backend, body)


@pytest.mark.anyio
async def test_close_withdraws_waiting_producers() -> None:
    """Producers waiting for room when the mailbox closes get ClosedResourceError; their items are not queued."""
    box: Mailbox[int] = Mailbox(1)
    outcome: list[str] = []

    async def producer() -> None:
        try:
            await box.put(1)
        except anyio.ClosedResourceError:
            outcome.append("withdrawn")

    box.put_nowait(0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(producer)
        await settle()
        box.close()
    assert outcome == ["withdrawn"]
    assert box.get_nowait() == 0
    with pytest.raises(anyio.EndOfStream):
        box.get_nowait()
    with pytest.raises(anyio.ClosedResourceError):
        await box.put(2)


@pytest.mark.anyio
async def test_a_producer_cancelled_while_waiting_does_not_queue_its_item() -> None:
    """Cancelling a waiting put withdraws its item; the producer behind it gets the room."""
    box: Mailbox[int] = Mailbox(1)

    async def cancelled_put(scope: anyio.CancelScope) -> None:
        with scope:
            await box.put(1)

    box.put_nowait(0)
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()
        tg.start_soon(cancelled_put, scope)
        await settle()
        tg.start_soon(box.put, 2)
        await settle()
        scope.cancel()
        await settle()
        assert box.get_nowait() == 0
        await settle()
        assert box.get_nowait() == 2
    assert len(box) == 0


# -- the cheap primitives --


@pytest.mark.parametrize("backend", BACKENDS)
def test_on_asyncio_agrees_with_sniffio(backend: str) -> None:
    """on_asyncio() is sniffio's answer: True in asyncio tasks, False in trio tasks and outside any loop."""

    async def body() -> None:
        assert on_asyncio() is (sniffio.current_async_library() == "asyncio") is (backend == "asyncio")

    run(backend, body)
    assert on_asyncio() is False


@pytest.mark.parametrize("backend", BACKENDS)
def test_yield_now_is_a_checkpoint(backend: str) -> None:
    """yield_now() yields to the loop (on asyncio behind every ready task) and delivers a pending cancellation."""

    async def body() -> None:
        ran: list[str] = []

        async def other() -> None:
            ran.append("other")

        async with anyio.create_task_group() as tg:
            tg.start_soon(other)
            await yield_now()
            ran.append("after")
        if backend == "asyncio":  # FIFO; trio may run a rescheduled task first
            assert ran == ["other", "after"]
        with anyio.CancelScope() as scope:
            scope.cancel()
            await yield_now()
            raise AssertionError("not cancelled")
        assert scope.cancelled_caught

    run(backend, body)


def test_yield_to_ready_lets_ready_tasks_go_first_and_skips_an_empty_iteration() -> None:
    """With the loop's ReadyProbe, yield_to_ready() yields behind the tasks that are ready, and not at all when none is."""

    async def body() -> None:
        probe = ready_probe()
        assert probe is not None
        ran: list[str] = []

        async def other() -> None:
            ran.append("other")

        async with anyio.create_task_group() as tg:
            tg.start_soon(other)
            await yield_to_ready(probe)
            ran.append("after")
        assert ran == ["other", "after"]
        await settle()  # nothing else is ready now
        step = yield_to_ready(probe).__await__()
        with pytest.raises(StopIteration):
            step.send(None)  # done without suspending

    anyio.run(body, backend="asyncio", backend_options={"loop_factory": probed_event_loop})


def test_without_a_probe_yield_to_ready_always_yields() -> None:
    """On a stock asyncio loop (no probe: the engine's public-API path) yield_to_ready() is a checkpoint."""

    async def body() -> None:
        assert ready_probe() is None
        with anyio.CancelScope() as scope:
            scope.cancel()
            await yield_to_ready(ready_probe())
            raise AssertionError("not cancelled")
        assert scope.cancelled_caught

    run("asyncio", body)


def test_yield_to_ready_is_a_checkpoint_on_trio() -> None:
    """Where the loop cannot be asked what is ready (trio), yield_to_ready() is anyio's checkpoint."""

    async def body() -> None:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await yield_to_ready(ready_probe())
            raise AssertionError("not cancelled")
        assert scope.cancelled_caught

    run("trio", body)


def test_a_mailbox_serves_one_loop_after_another_and_both_backends() -> None:
    """A mailbox used in one run and then another (a new asyncio loop, then trio) parks correctly in each."""
    box: Mailbox[int] = Mailbox()

    async def hand_over() -> int:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_put_later, box)
            return await box.get()  # parks: nothing is queued yet

    assert anyio.run(hand_over, backend="asyncio") == 1
    assert anyio.run(hand_over, backend="asyncio") == 1  # a new loop: the first one's futures would not do
    assert anyio.run(hand_over, backend="trio") == 1


async def _put_later(box: Mailbox[int]) -> None:
    await anyio.lowlevel.checkpoint()
    box.put_nowait(1)


def test_only_a_loop_that_advertises_a_probe_has_one() -> None:
    """ready_probe() is the probed loop's own probe, and None on a stock asyncio loop, on trio and outside a loop."""

    async def probed() -> None:
        probe = ready_probe()
        assert probe is asyncio.get_running_loop().aiodstream_ready_probe  # type: ignore[attr-defined]
        assert probe is not None and probe.others_ready() is False

    async def without() -> None:
        assert ready_probe() is None

    anyio.run(probed, backend="asyncio", backend_options={"loop_factory": probed_event_loop})
    run("asyncio", without)
    run("trio", without)
    assert ready_probe() is None


def test_take_returns_up_to_the_limit_in_order_and_lets_a_waiting_producer_in() -> None:
    """Mailbox.take: what is queued now, oldest first, at most ``limit``; the room it makes admits a producer waiting in put."""

    async def body() -> None:
        box: Mailbox[int] = Mailbox(3)
        assert box.take(5) == []
        for n in range(3):
            box.put_nowait(n)
        async with anyio.create_task_group() as tg:
            tg.start_soon(box.put, 3)  # full: waits for room
            await anyio.lowlevel.checkpoint()
            assert len(box) == 3
            assert box.take(2) == [0, 1]
            assert box.take(10) == [2, 3]  # the waiting producer's item went in when room was made
        assert box.take(1) == []

    anyio.run(body)
