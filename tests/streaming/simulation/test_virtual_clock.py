"""VirtualClock: time jumps to the next deadline exactly when no task can run, on asyncio and trio."""

from __future__ import annotations

import asyncio
import functools
import socket
import threading
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from scheduler import Clock, ManualClock, Milliseconds, Time, VirtualClock
from streaming.simulation import probed_event_loop, running_loop_probe, virtual_time_event_loop
from streaming.simulation._loop import _POLL_EVERY

BACKENDS = ["asyncio", "trio"]


def run(main: Callable[[], Awaitable[object]], backend: str) -> None:
    # On asyncio a loop with a ReadyProbe, so VirtualClock.run jumps exactly (the simulator's setup).
    options = {"loop_factory": probed_event_loop} if backend == "asyncio" else {}
    anyio.run(main, backend=backend, backend_options=options)


@pytest.mark.parametrize("backend", BACKENDS)
def test_jumps_to_each_deadline_in_order(backend: str) -> None:
    """Sleepers wake at their own deadlines, earliest first, one jump per distinct deadline."""
    woke: list[tuple[str, int]] = []

    async def main() -> None:
        clock = VirtualClock()

        async def sleeper(name: str, ms: int) -> None:
            await clock.sleep_until(Time(ms))
            woke.append((name, clock.now().milliseconds))

        async with anyio.create_task_group() as tg:
            await tg.start(clock.run)
            async with anyio.create_task_group() as sleepers:
                sleepers.start_soon(sleeper, "late", 1000)
                sleepers.start_soon(sleeper, "early", 300)
                sleepers.start_soon(sleeper, "early-too", 300)
            tg.cancel_scope.cancel()
        assert clock.jumps == 2

    run(main, backend)
    assert sorted(woke[:2]) == [("early", 300), ("early-too", 300)]
    assert woke[2] == ("late", 1000)


@pytest.mark.parametrize("backend", BACKENDS)
def test_timers_fire_at_their_deadlines_before_the_sleepers_woken_with_them(backend: str) -> None:
    """call_at: callbacks run in the jump that reaches them, in registration order; cancelled ones never run."""
    fired: list[tuple[str, int]] = []

    async def main() -> None:
        clock = VirtualClock()

        def note(name: str) -> None:
            fired.append((name, clock.now().milliseconds))
            if name == "first":  # a callback may register another timer, even for a later instant
                clock.call_at(Time(700), lambda: note("chained"))

        async def sleeper() -> None:
            await clock.sleep_until(Time(500))
            fired.append(("sleeper", clock.now().milliseconds))

        async with anyio.create_task_group() as tg:
            await tg.start(clock.run)
            clock.call_at(Time(500), lambda: note("first"))
            clock.call_at(Time(500), lambda: note("second"))
            cancelled = clock.call_at(600, lambda: note("cancelled"))
            assert clock.sleepers == 3 and clock.next_deadline == Time(500)
            cancelled.cancel()
            assert cancelled.cancelled() and clock.sleepers == 2
            async with anyio.create_task_group() as sleepers:
                sleepers.start_soon(sleeper)
            await clock.sleep_until(Time(800))
            tg.cancel_scope.cancel()
        assert clock.sleepers == 0

    run(main, backend)
    assert fired == [("first", 500), ("second", 500), ("sleeper", 500), ("chained", 700)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_does_not_jump_while_any_task_can_run(backend: str) -> None:
    """A task that keeps running (checkpoints only) holds virtual time still until it blocks."""
    seen: list[int] = []

    async def main() -> None:
        clock = VirtualClock()
        async with anyio.create_task_group() as tg:
            await tg.start(clock.run)

            async def sleeper() -> None:
                await clock.sleep(Milliseconds(10))
                seen.append(clock.now().milliseconds)

            tg.start_soon(sleeper)
            for _ in range(500):
                await anyio.lowlevel.checkpoint()
            seen.append(clock.now().milliseconds)  # still 0: this task never blocked
            await clock.sleep(Milliseconds(20))
            seen.append(clock.now().milliseconds)
            tg.cancel_scope.cancel()

    run(main, backend)
    assert seen == [0, 10, 20]


@pytest.mark.parametrize("backend", BACKENDS)
def test_work_triggered_by_a_wakeup_finishes_before_the_next_jump(backend: str) -> None:
    """A chain of hand-offs started by one wake-up runs at that instant; its sleep starts from it."""
    times: list[int] = []

    async def main() -> None:
        clock = VirtualClock()
        send, receive = anyio.create_memory_object_stream[int](10)
        async with anyio.create_task_group() as tg:
            await tg.start(clock.run)

            async def consumer() -> None:
                async with receive:
                    async for _ in receive:
                        for _ in range(20):
                            await anyio.lowlevel.checkpoint()
                        await clock.sleep(Milliseconds(50))
                        times.append(clock.now().milliseconds)

            tg.start_soon(consumer)
            async with send:
                for _ in range(3):
                    await clock.sleep(Milliseconds(100))
                    await send.send(clock.now().milliseconds)
            await clock.sleep(Milliseconds(1000))
            tg.cancel_scope.cancel()

    run(main, backend)
    assert times == [150, 250, 350]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cancelled_sleeper_is_not_jumped_to(backend: str) -> None:
    """Cancelling a sleep removes its deadline: the clock jumps to the next live one instead."""

    async def main() -> None:
        clock = VirtualClock()
        async with anyio.create_task_group() as tg:
            await tg.start(clock.run)
            with anyio.CancelScope() as scope:
                tg.start_soon(lambda: _cancel_after(clock, scope, 10))
                await clock.sleep_until(Time(10_000))
            assert clock.now() == Time(10)
            await clock.sleep(Milliseconds(40))
            assert clock.now() == Time(50)
            assert clock.jumps == 2
            tg.cancel_scope.cancel()

    run(main, backend)


async def _cancel_after(clock: Clock, scope: anyio.CancelScope, ms: int) -> None:
    await clock.sleep(Milliseconds(ms))
    scope.cancel()


@pytest.mark.parametrize("backend", BACKENDS)
def test_waits_for_a_sleeper_without_spinning(backend: str) -> None:
    """With everything blocked and nobody on the clock, the driver waits and time stays put."""

    async def main() -> None:
        clock = VirtualClock(500)
        gate = anyio.Event()
        async with anyio.create_task_group() as tg:
            await tg.start(clock.run)

            async def opener() -> None:
                for _ in range(50):
                    await anyio.lowlevel.checkpoint()
                gate.set()

            tg.start_soon(opener)
            await gate.wait()
            assert (clock.now(), clock.jumps) == (Time(500), 0)
            await clock.sleep(Milliseconds(7))
            assert (clock.now(), clock.jumps) == (Time(507), 1)
            tg.cancel_scope.cancel()

    run(main, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_virtual_clocks_in_one_event_loop_both_advance(backend: str) -> None:
    """Two drivers in one loop do not hold each other back."""

    async def main() -> None:
        a, b = VirtualClock(), VirtualClock(1000)
        async with anyio.create_task_group() as tg:
            await tg.start(a.run)
            await tg.start(b.run)
            async with anyio.create_task_group() as inner:
                inner.start_soon(a.sleep, Milliseconds(30))
                inner.start_soon(b.sleep, Milliseconds(70))
            assert (a.now(), b.now()) == (Time(30), Time(1070))
            tg.cancel_scope.cancel()

    run(main, backend)


def test_driving_one_clock_twice_is_refused() -> None:
    """A second concurrent run() raises instead of jumping twice."""

    async def main() -> None:
        clock = VirtualClock()
        async with anyio.create_task_group() as tg:
            await tg.start(clock.run)
            with pytest.raises(RuntimeError, match="already being driven"):
                await clock.run()
            tg.cancel_scope.cancel()

    run(main, "asyncio")


def test_is_a_manual_clock_and_a_clock() -> None:
    """A VirtualClock satisfies Clock, can be moved by hand, and summarises itself."""
    clock = VirtualClock(5)
    assert isinstance(clock, Clock) and isinstance(clock, ManualClock)
    clock.advance(Milliseconds(10))
    assert clock.now() == Time(15)
    assert repr(clock) == "<VirtualClock [15 ms | 0 sleepers | 0 jumps]>"


# -- the self-driving asyncio loop (virtual_time_event_loop) --


def run_on_own_loop(clock: VirtualClock, main: Callable[[], Awaitable[object]]) -> None:
    anyio.run(main, backend="asyncio", backend_options={"loop_factory": lambda: virtual_time_event_loop(clock)})


def test_its_own_loop_jumps_to_each_deadline_without_a_driver_task() -> None:
    """On virtual_time_event_loop() sleepers wake at their deadlines in order, one jump per distinct deadline."""
    clock = VirtualClock()
    woke: list[tuple[str, int]] = []

    async def sleeper(name: str, ms: int) -> None:
        await clock.sleep_until(Time(ms))
        woke.append((name, clock.now().milliseconds))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper, "late", 1000)
            tg.start_soon(sleeper, "early", 300)
            tg.start_soon(sleeper, "early-too", 300)

    run_on_own_loop(clock, main)
    assert woke == [("early", 300), ("early-too", 300), ("late", 1000)]
    assert clock.jumps == 2


def test_its_own_loop_does_not_jump_while_any_task_can_run() -> None:
    """A task that only checkpoints holds virtual time still on the self-driving loop too."""
    clock = VirtualClock()
    seen: list[int] = []

    async def main() -> None:
        async def sleeper() -> None:
            await clock.sleep(Milliseconds(10))
            seen.append(clock.now().milliseconds)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper)
            for _ in range(500):
                await anyio.lowlevel.checkpoint()
            seen.append(clock.now().milliseconds)
            await clock.sleep(Milliseconds(20))
            seen.append(clock.now().milliseconds)

    run_on_own_loop(clock, main)
    assert seen == [0, 10, 20]


def test_its_own_loop_finishes_a_chain_of_hand_offs_before_the_next_jump() -> None:
    """Work a wake-up starts (hand-offs through a stream, checkpoints) runs at that instant."""
    clock = VirtualClock()
    times: list[int] = []

    async def main() -> None:
        send, receive = anyio.create_memory_object_stream[int](10)

        async def consumer() -> None:
            async with receive:
                async for _ in receive:
                    for _ in range(20):
                        await anyio.lowlevel.checkpoint()
                    await clock.sleep(Milliseconds(50))
                    times.append(clock.now().milliseconds)

        async with anyio.create_task_group() as tg:
            tg.start_soon(consumer)
            async with send:
                for _ in range(3):
                    await clock.sleep(Milliseconds(100))
                    await send.send(clock.now().milliseconds)

    run_on_own_loop(clock, main)
    assert times == [150, 250, 350]


def test_its_own_loop_waits_for_a_worker_thread_when_nobody_sleeps_on_the_clock() -> None:
    """With every task blocked on a thread and nobody on the clock, the loop really waits; time stays put."""
    clock = VirtualClock(500)

    async def main() -> int:
        result = await anyio.to_thread.run_sync(sum, range(10))
        assert (clock.now(), clock.jumps) == (Time(500), 0)
        await clock.sleep(Milliseconds(7))
        assert (clock.now(), clock.jumps) == (Time(507), 1)
        return result

    assert anyio.run(main, backend="asyncio", backend_options={"loop_factory": lambda: virtual_time_event_loop(clock)}) == 45


def test_a_thread_does_not_hold_virtual_time_on_its_own_loop() -> None:
    """A task waiting on a worker thread counts as blocked: the clock jumps for the sleepers meanwhile."""
    clock = VirtualClock()
    release = threading.Event()
    order: list[str] = []

    async def main() -> None:
        async def in_thread() -> None:
            await anyio.to_thread.run_sync(release.wait)
            order.append(f"thread done at {clock.now().milliseconds}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(in_thread)
            await clock.sleep(Milliseconds(1000))
            order.append(f"slept until {clock.now().milliseconds}")
            release.set()

    run_on_own_loop(clock, main)
    assert order == ["slept until 1000", "thread done at 1000"]


def test_a_clock_has_one_driver_a_loop_or_a_task() -> None:
    """virtual_time_event_loop() twice, or run() on a loop-driven clock, raises instead of jumping twice."""
    clock = VirtualClock()
    assert not clock.driven
    loop = virtual_time_event_loop(clock)
    try:
        assert clock.driven
        with pytest.raises(RuntimeError, match="already being driven"):
            virtual_time_event_loop(clock)
        with pytest.raises(RuntimeError, match="already being driven"):
            loop.run_until_complete(clock.run())
    finally:
        loop.close()


def test_its_own_loop_serves_ready_io_before_jumping() -> None:
    """When every task is blocked, I/O that is ready is served at the current instant, before the clock jumps."""
    clock = VirtualClock()
    seen: list[tuple[str, int]] = []

    async def main() -> None:
        left, right = socket.socketpair()
        with left, right:
            left.setblocking(False)
            right.send(b"x")  # ready before the loop is ever idle

            async def reader() -> None:
                await anyio.wait_readable(left)
                seen.append(("read", clock.now().milliseconds))

            async def sleeper() -> None:
                await clock.sleep(Milliseconds(10_000))
                seen.append(("slept", clock.now().milliseconds))

            async with anyio.create_task_group() as tg:
                tg.start_soon(sleeper)
                tg.start_soon(reader)

    run_on_own_loop(clock, main)
    assert seen == [("read", 0), ("slept", 10_000)]
    assert clock.jumps == 1


def test_its_own_loop_polls_io_at_least_every_poll_every_busy_iterations() -> None:
    """Busy iterations skip the I/O poll, but at most _POLL_EVERY in a row: a ready socket is seen within that many."""
    clock = VirtualClock()
    spins: list[int] = []

    async def main() -> None:
        left, right = socket.socketpair()
        with left, right:
            left.setblocking(False)
            got = anyio.Event()

            async def reader() -> None:
                await anyio.wait_readable(left)
                got.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                await anyio.lowlevel.checkpoint()  # the reader waits on the socket
                right.send(b"x")
                # From here this task is always ready, so every iteration is a busy one.
                for n in range(10 * _POLL_EVERY):
                    if got.is_set():
                        spins.append(n)
                        break
                    await anyio.lowlevel.checkpoint()

    run_on_own_loop(clock, main)
    # The poll that sees the socket, the reader's step, then this task's: a couple of
    # iterations beyond the poll interval at most.
    assert spins and spins[0] <= _POLL_EVERY + 3


def test_a_clock_driven_by_its_task_refuses_a_loop() -> None:
    """virtual_time_event_loop() on a clock that run() drives raises, as run() on a loop-driven clock does."""

    async def main() -> None:
        clock = VirtualClock()
        async with anyio.create_task_group() as tg:
            await tg.start(clock.run)
            with pytest.raises(RuntimeError, match="already being driven"):
                virtual_time_event_loop(clock)
            tg.cancel_scope.cancel()
        assert not clock.driven  # and free again once run() has ended

    run(main, "asyncio")


def test_its_own_loop_reports_a_failing_callback_as_stock_asyncio_does() -> None:
    """A plain callback that raises goes to the loop's exception handler with the stock context; the loop carries on."""

    def boom() -> None:
        raise ValueError("boom")

    def contexts_on(loop: asyncio.AbstractEventLoop) -> list[dict[str, object]]:
        seen: list[dict[str, object]] = []
        loop.set_exception_handler(lambda _, context: seen.append(context))

        async def main() -> None:
            loop.call_soon(boom)
            await asyncio.sleep(0)
            await asyncio.sleep(0)

        try:
            loop.run_until_complete(main())
        finally:
            loop.close()
        return seen

    [stock] = contexts_on(asyncio.new_event_loop())
    [virtual] = contexts_on(virtual_time_event_loop(VirtualClock()))
    assert virtual["message"] == stock["message"]
    assert str(stock["message"]).startswith("Exception in callback ") and "boom" in str(stock["message"])
    assert isinstance(virtual["exception"], ValueError) and str(virtual["exception"]) == "boom"
    assert isinstance(virtual["handle"], asyncio.Handle)
    assert sorted(virtual) == sorted(stock)


def test_one_clock_serves_one_run_after_another() -> None:
    """A clock driven by run() in one event loop, then in a new one, then on trio, parks and wakes sleepers in each."""
    clock = VirtualClock()

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(clock.run)
            await clock.sleep(Milliseconds(10))
            tg.cancel_scope.cancel()

    for backend in ("asyncio", "asyncio", "trio"):
        run(main, backend)
    assert (clock.now(), clock.jumps) == (Time(30), 3)


def test_running_loop_probe_reads_a_stock_loops_ready_queue() -> None:
    """running_loop_probe() on a stock asyncio loop sees a queued callback and ignores a driver's; None on trio and outside a loop."""
    seen: list[bool] = []

    async def stock() -> None:
        probe = running_loop_probe()
        assert probe is not None
        seen.append(probe.others_ready())
        loop = asyncio.get_running_loop()
        handle = loop.call_soon(lambda: None)
        seen.append(probe.others_ready())
        handle.cancel()
        await asyncio.sleep(0)  # the cancelled handle leaves the queue
        driver = asyncio.current_task()
        seen.append(probe.others_ready())
        assert driver is not None
        loop.call_soon(driver.get_loop)  # bound to the ignored task: does not count
        seen.append(probe.others_ready([driver]))
        loop.call_soon(lambda: None)  # anything else does
        seen.append(probe.others_ready([driver]))
        await asyncio.sleep(0)

    async def without() -> None:
        assert running_loop_probe() is None

    anyio.run(stock, backend="asyncio")
    anyio.run(without, backend="trio")
    assert running_loop_probe() is None
    assert seen == [False, True, False, False, True]


def test_a_stock_loop_drives_the_clock_exactly_with_the_running_loop_probe() -> None:
    """VirtualClock.run(probe=running_loop_probe()) on a stock loop lets a chain of hand-offs finish before the jump."""
    order: list[str] = []

    async def main() -> None:
        clock = VirtualClock()
        send, receive = anyio.create_memory_object_stream[int](0)

        async def relay() -> None:
            async with receive:
                async for hop in receive:
                    order.append(f"hop {hop} at {clock.now().milliseconds}")

        async def start() -> None:
            async with send:
                await clock.sleep_until(Time(10))
                for hop in range(5):
                    await send.send(hop)
            await clock.sleep_until(Time(20))
            order.append(f"woke at {clock.now().milliseconds}")

        async with anyio.create_task_group() as tg:
            await tg.start(functools.partial(clock.run, probe=running_loop_probe()))
            tg.start_soon(relay)
            await start()
            tg.cancel_scope.cancel()

    anyio.run(main, backend="asyncio")
    assert order == [f"hop {hop} at 10" for hop in range(5)] + ["woke at 20"]


@pytest.mark.parametrize("driver", [*BACKENDS, "own loop"])
def test_a_hold_keeps_the_clock_still_while_a_thread_works(driver: str) -> None:
    """held_while: work on a thread counts as blocked, but while the hold says busy the clock waits for it."""
    clock = VirtualClock()
    working = threading.Event()
    finished = threading.Event()
    seen: list[int] = []

    def work() -> None:
        seen.append(clock.now().milliseconds)
        threading.Event().wait(0.02)  # real work of 20 ms (not a wait for anything): the clock must not move meanwhile
        seen.append(clock.now().milliseconds)
        working.clear()
        finished.set()

    async def sleeper() -> None:
        await clock.sleep(Milliseconds(10))
        seen.append(clock.now().milliseconds)

    async def body() -> None:
        with clock.held_while(working.is_set, functools.partial(anyio.to_thread.run_sync, finished.wait)):
            async with anyio.create_task_group() as tg:
                tg.start_soon(sleeper)
                working.set()
                await anyio.to_thread.run_sync(work)
        assert seen == [0, 0, 10] and not clock.held

    async def driven() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(clock.run)
            await body()
            tg.cancel_scope.cancel()

    if driver == "own loop":
        run_on_own_loop(clock, body)
    else:
        run(driven, driver)
