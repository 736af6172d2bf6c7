"""Shutdown signals: SIGTERM and SIGINT drain what is in flight and stop (micro-batch and continuous contexts with
stopGracefullyOnShutdown, a Pipeline runtime in an async host), and a hung listener does not hold that stop."""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from streaming._shutdown import SignalShutdown
from tests.anyio_support import HANG_GUARD_S
from tests.crash import child_env, spawn

CHILD = Path(__file__).with_name("shutdown_child.py")
ALL = os.environ.get("AIODSTREAM_SHUTDOWN_TESTS") == "all"
"""Each child starts its own Spark (seconds): the rarer runtimes' cases and a second signal's (SIGINT) run only with
AIODSTREAM_SHUTDOWN_TESTS=all."""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_first_signal_stops_once_and_puts_the_previous_handlers_back(signum: signal.Signals) -> None:
    """On SIGTERM or SIGINT the stop runs once, on a thread of its own (the handler may have interrupted the main thread
    inside a call the stop needs to make itself); the handlers in place before are restored first."""
    stops: list[str] = []
    previous = signal.getsignal(signal.SIGTERM)
    previous_int = signal.getsignal(signal.SIGINT)
    hook = SignalShutdown(lambda: stops.append(threading.current_thread().name), "test")
    assert hook.install() and hook.installed
    try:
        os.kill(os.getpid(), signum)
        deadline = time.monotonic() + 10
        while hook.stopper is None and time.monotonic() < deadline:  # the handler runs at the next bytecode boundary
            time.sleep(0.001)
        assert hook.stopper is not None
        hook.stopper.join(10)
    finally:
        hook.uninstall()
    assert stops == ["aiodstream-shutdown-stop"]
    assert not hook.installed
    assert signal.getsignal(signal.SIGTERM) == previous
    assert signal.getsignal(signal.SIGINT) is previous_int


def test_a_second_signal_while_the_stop_runs_hurries_it_then_does_what_it_did_before() -> None:
    """The first signal starts the (graceful) stop; a second one while it runs calls ``hurry`` on a thread of its own
    (the immediate stop), puts the handler found before back and calls it; a third one only reaches that handler."""
    heard: list[int] = []
    hurried: list[str] = []
    release = threading.Event()

    def hurry() -> None:
        hurried.append(threading.current_thread().name)
        release.set()

    original = signal.signal(signal.SIGUSR1, lambda signum, frame: heard.append(signum))
    hook = SignalShutdown(lambda: release.wait(HANG_GUARD_S), "test", signals=(signal.SIGUSR1,), hurry=hurry)
    try:
        assert hook.install()
        signal.raise_signal(signal.SIGUSR1)  # its handler runs before this returns
        assert hook.stopper is not None and hook.stopper.is_alive() and heard == []
        signal.raise_signal(signal.SIGUSR1)
        hook.stopper.join(HANG_GUARD_S)
        assert not hook.stopper.is_alive()  # the hurry released it
        assert hurried == ["aiodstream-shutdown-hurry"] and heard == [signal.SIGUSR1]
        signal.raise_signal(signal.SIGUSR1)
        assert hurried == ["aiodstream-shutdown-hurry"] and heard == [signal.SIGUSR1, signal.SIGUSR1]
    finally:
        release.set()
        hook.uninstall()
        signal.signal(signal.SIGUSR1, original)


def test_a_signal_after_the_first_ones_stop_ended_is_passed_on_and_an_install_takes_the_second_handler_out() -> None:
    """Once the stop the first signal began has ended, the handler it left hurries nothing: the next signal goes to
    the handler found before; a context started meanwhile takes it out and installs over the handler found before."""
    heard: list[int] = []
    hurried: list[int] = []

    def previous(signum: int, frame: object) -> None:
        heard.append(signum)

    original = signal.signal(signal.SIGUSR1, previous)
    try:
        for next_install in (False, True):
            hook = SignalShutdown(lambda: None, "test", signals=(signal.SIGUSR1,), hurry=lambda: hurried.append(1))
            assert hook.install()
            signal.raise_signal(signal.SIGUSR1)
            assert hook.stopper is not None
            hook.stopper.join(HANG_GUARD_S)
            assert signal.getsignal(signal.SIGUSR1) is not previous  # the second-signal handler, until taken out
            if next_install:
                later = SignalShutdown(lambda: None, "later", signals=(signal.SIGUSR1,))
                assert later.install()
                later.uninstall()
                assert signal.getsignal(signal.SIGUSR1) is previous
            else:
                signal.raise_signal(signal.SIGUSR1)
                assert heard == [signal.SIGUSR1] and signal.getsignal(signal.SIGUSR1) is previous
        assert hurried == []
    finally:
        signal.signal(signal.SIGUSR1, original)


def test_a_program_handler_that_forwards_to_ours_makes_the_second_signal_hurry_and_pass_on() -> None:
    """A handler the program put over ours after the start forwards every signal to it: the second one no longer
    starts a second stop; it hurries the running one and reaches the handler found before ours."""
    heard: list[str] = []
    hurried: list[str] = []
    stops: list[str] = []
    release = threading.Event()

    def stop() -> None:
        stops.append("stop")
        release.wait(HANG_GUARD_S)

    original = signal.signal(signal.SIGUSR1, lambda signum, frame: heard.append("host"))
    hook = SignalShutdown(stop, "test", signals=(signal.SIGUSR1,), hurry=lambda: (hurried.append("hurry"), release.set()))
    try:
        assert hook.install()
        ours = signal.getsignal(signal.SIGUSR1)
        signal.signal(signal.SIGUSR1, lambda signum, frame: ours(signum, frame))  # type: ignore[operator]
        signal.raise_signal(signal.SIGUSR1)
        assert hook.stopper is not None and heard == []
        signal.raise_signal(signal.SIGUSR1)
        hook.stopper.join(HANG_GUARD_S)
        assert not hook.stopper.is_alive() and stops == ["stop"]
        assert heard == ["host"] and hurried and set(hurried) == {"hurry"}
    finally:
        release.set()
        hook.uninstall()
        signal.signal(signal.SIGUSR1, original)


def test_a_second_signal_handler_the_program_puts_back_later_still_passes_signals_on() -> None:
    """The program saves the handler a first signal left, swaps in its own for a while (a later context starts and stops
    meanwhile, taking the saved one out), then puts back what it saved: the next signal reaches the handler found
    under it, once (it recursed into itself before)."""
    heard: list[str] = []
    original = signal.signal(signal.SIGUSR1, lambda signum, frame: heard.append("host"))
    try:
        first = SignalShutdown(lambda: None, "first", signals=(signal.SIGUSR1,), hurry=lambda: None)
        assert first.install()
        signal.raise_signal(signal.SIGUSR1)
        assert first.stopper is not None
        first.stopper.join(HANG_GUARD_S)
        saved = signal.signal(signal.SIGUSR1, lambda signum, frame: heard.append("temporary"))
        later = SignalShutdown(lambda: None, "later", signals=(signal.SIGUSR1,))
        assert later.install()
        later.uninstall()
        signal.signal(signal.SIGUSR1, saved)
        signal.raise_signal(signal.SIGUSR1)
        assert heard == ["host"]
    finally:
        signal.signal(signal.SIGUSR1, original)


def test_the_contexts_hurry_holds_its_runtime_weakly() -> None:
    """What a second signal would call holds the context's bridge and runtime weakly: the handler left in place until
    a later context starts keeps no stopped context alive (and calls nothing once they are gone)."""
    import gc
    import weakref

    from streaming import StreamingContextState
    from streaming._context import _stop_now

    stops: list[bool] = []

    class Runtime:
        state = StreamingContextState.ACTIVE

        def stop(self, graceful: bool) -> None:
            stops.append(graceful)

    class Bridge:
        def call(self, fn: Callable[[], object]) -> None:
            fn()

    bridge, runtime = Bridge(), Runtime()
    refs = weakref.ref(bridge), weakref.ref(runtime)
    hurry = functools.partial(_stop_now, *refs)  # type: ignore[arg-type]
    hurry()
    assert stops == [False]  # alive: the stop made immediate
    del bridge, runtime
    gc.collect()
    assert refs[0]() is None and refs[1]() is None
    hurry()
    assert stops == [False]


def test_a_signal_after_a_stop_elsewhere_goes_to_the_previous_handler() -> None:
    """A context stopped from another thread cannot put the handlers back (Python allows that in the main thread only):
    the next Ctrl-C must still raise KeyboardInterrupt, not start a stop of a stopped context and vanish."""
    stops: list[str] = []
    active = [True]
    hook = SignalShutdown(lambda: stops.append("stop"), "test", active=lambda: active[0])
    assert hook.install()
    try:
        active[0] = False  # stopped by another thread
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # the handler runs at the next bytecode boundary
                time.sleep(0.001)
    finally:
        hook.uninstall()
    assert stops == [] and not hook.installed


def test_a_signal_after_a_stop_reaches_the_handler_found_at_install_with_two_contexts() -> None:
    """Context one installs its handler, context two installs its own over it, one stops (its uninstall leaves two's
    handler in place). Ctrl-C stops two and puts one's handler back; the next Ctrl-C finds one stopped and goes to
    the handler one found at install: KeyboardInterrupt (it went round between the two handlers until RecursionError)."""
    stopped: list[str] = []
    one = SignalShutdown(lambda: stopped.append("one"), "one", signals=[signal.SIGINT], active=lambda: False)
    two = SignalShutdown(lambda: stopped.append("two"), "two", signals=[signal.SIGINT])
    assert one.install() and two.install()
    try:
        one.uninstall()  # context one stopped: the handler in place is two's, left alone
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 10
        while two.stopper is None and time.monotonic() < deadline:
            time.sleep(0.001)
        assert two.stopper is not None
        two.stopper.join(10)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                time.sleep(0.001)
    finally:
        two.uninstall()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert stopped == ["two"]


def test_one_signal_stops_every_running_context_whose_handler_is_below() -> None:
    """Three contexts installed their handlers over one another, the middle one stopped since: one SIGTERM stops the
    two running ones (it stopped only the newest; a container's grace period then ended the older in SIGKILL), passes
    over the stopped one without its default action, and puts the handler found before them all back."""
    original = signal.getsignal(signal.SIGTERM)
    stops: list[str] = []
    hooks = [SignalShutdown(lambda name=name: stops.append(name), name, signals=[signal.SIGTERM], active=lambda a=a: a)
             for name, a in (("one", True), ("middle", False), ("two", True))]
    assert all(hook.install() for hook in hooks)
    try:
        installed = signal.getsignal(signal.SIGTERM)
        assert callable(installed)
        installed(signal.SIGTERM, None)  # the handler in place (two's), called as the signal would
        for hook in (hooks[0], hooks[2]):
            assert hook.stopper is not None
            hook.stopper.join(10)
    finally:
        for hook in reversed(hooks):
            hook.uninstall()
        signal.signal(signal.SIGTERM, original)
    assert sorted(stops) == ["one", "two"] and hooks[1].stopper is None


def test_a_signal_inside_a_call_into_the_context_stops_it_without_a_deadlock() -> None:
    """The handler interrupts the main thread inside SyncBridge.call, which holds the bridge's lock: the stop, on its own
    thread, waits for that call to let go of it instead of deadlocking on it in the main thread."""
    import anyio

    from streaming._sync_bridge import SyncBridge

    class Runtime:
        def __init__(self) -> None:
            self.stopped = threading.Event()
            self.on_loop: anyio.Event | None = None

        async def __aenter__(self) -> Runtime:
            self.on_loop = anyio.Event()
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

        async def start(self) -> None:
            return None

        async def stop(self, graceful: bool = False) -> None:
            self.stopped.set()
            assert self.on_loop is not None
            self.on_loop.set()

        async def wait_stopped(self) -> None:
            assert self.on_loop is not None
            await self.on_loop.wait()

    bridge = SyncBridge()
    runtime = Runtime()
    bridge.start(runtime)  # type: ignore[arg-type]
    hook = SignalShutdown(lambda: bridge.stop(runtime, graceful=True), "test")  # type: ignore[arg-type]
    assert hook.install()
    real = bridge._portal.start_task_soon  # type: ignore[union-attr]
    sent: list[bool] = []

    def signalled(*args: object) -> object:  # the signal lands while call() holds the lock (the first call only)
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs here, at a bytecode boundary of this thread (not a wait for it)
        return real(*args)  # type: ignore[arg-type]

    bridge._portal.start_task_soon = signalled  # type: ignore[union-attr, method-assign]
    try:
        bridge.call(runtime.wait_stopped)  # returns once the stop, on its thread, stopped the runtime
    except Exception:
        pass  # the bridge may close under the call once the runtime stopped
    finally:
        hook.uninstall()
    assert hook.stopper is not None
    hook.stopper.join(10)
    assert not hook.stopper.is_alive() and runtime.stopped.is_set()


def test_no_handlers_outside_the_main_thread() -> None:
    """Python accepts signal handlers only in the main thread: install() there does nothing and says so."""
    results: list[bool] = []
    hook = SignalShutdown(lambda: None, "test")
    thread = threading.Thread(target=lambda: results.append(hook.install()))
    thread.start()
    thread.join()
    assert results == [False] and not hook.installed


def test_a_handler_installed_after_ours_is_left_in_place() -> None:
    """uninstall() restores only handlers that are still ours."""
    hook = SignalShutdown(lambda: None, "test", signals=[signal.SIGUSR1])
    hook.install()

    def theirs(signum: int, frame: object) -> None:
        return None

    signal.signal(signal.SIGUSR1, theirs)
    hook.uninstall()
    try:
        assert signal.getsignal(signal.SIGUSR1) is theirs
    finally:
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)


class _Owner:
    """Stands for a context: what a hook must let go of once it stopped."""

    def stop(self) -> None:
        return None

    def active(self) -> bool:
        return True


def _uninstall_on_a_thread(hook: SignalShutdown) -> None:
    thread = threading.Thread(target=hook.uninstall, name="aiodstream-stop-from-job")
    thread.start()
    thread.join()


def test_a_stop_from_another_thread_lets_go_of_the_context_and_the_next_install_takes_its_handler_out() -> None:
    """uninstall() off the main thread cannot set handlers: the hook drops its context (each stopped context stayed alive
    behind the next one's handler), and the next install on the main thread puts back the handler found before it."""
    import gc
    import weakref

    original = signal.getsignal(signal.SIGUSR1)
    owner = _Owner()
    alive = weakref.ref(owner)
    first = SignalShutdown(owner.stop, "first", signals=[signal.SIGUSR1], active=owner.active)
    second = SignalShutdown(lambda: None, "second", signals=[signal.SIGUSR1])
    assert first.install()
    try:
        _uninstall_on_a_thread(first)
        del owner
        gc.collect()
        assert alive() is None
        assert second.install()
        assert second._found[signal.SIGUSR1] == original
        second.uninstall()
        assert signal.getsignal(signal.SIGUSR1) == original and not first.installed
    finally:
        signal.signal(signal.SIGUSR1, original)


def test_a_handler_under_a_newer_one_is_taken_out_when_the_newer_one_is_uninstalled() -> None:
    """One installs, two installs over it, one stops on another thread, two stops on the main thread: the handler found
    before one is back (two's uninstall put back one's handler, and it stayed, holding context one)."""
    original = signal.getsignal(signal.SIGUSR1)
    one = SignalShutdown(lambda: None, "one", signals=[signal.SIGUSR1])
    two = SignalShutdown(lambda: None, "two", signals=[signal.SIGUSR1])
    assert one.install() and two.install()
    try:
        _uninstall_on_a_thread(one)
        assert signal.getsignal(signal.SIGUSR1) == two._handle
        two.uninstall()
        assert signal.getsignal(signal.SIGUSR1) == original and not one.installed and not two.installed
    finally:
        signal.signal(signal.SIGUSR1, original)


def run_child(tmp_path: Path, graceful: str, signum: signal.Signals, mode: str = "batch",
              before_signal: Callable[[Path], None] | None = None) -> tuple[int, str]:
    """Start the child, signal it while its batch is in flight, and return its exit code and stdout.

    A child that never ends after the signal (a stop that hangs) fails the test after 120 s.
    """
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    child = spawn([str(CHILD), str(markers), graceful, mode], tmp_path, child_env({"PYSPARK_PYTHON": sys.executable}))
    try:
        deadline = time.monotonic() + 120
        while not (markers / "started").exists():
            assert child.poll() is None, f"the child exited early with {child.returncode}"
            assert time.monotonic() < deadline, "the batch never started"
            time.sleep(0.05)
        if before_signal is not None:
            before_signal(markers)
        child.send_signal(signum)
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    return child.returncode, out


@pytest.mark.spark
@pytest.mark.parametrize("signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.skipif(
    not ALL, reason="a child with its own Spark: set AIODSTREAM_SHUTDOWN_TESTS=all (the default run sends SIGINT to "
    "the same handler in test_the_first_signal_stops_once_and_puts_the_previous_handlers_back)"))])
def test_a_signal_drains_the_batch_in_flight_then_stops(tmp_path: Path, signum: signal.Signals) -> None:
    """With spark.streaming.stopGracefullyOnShutdown, the running output operation finishes, then
    awaitTermination returns with the context stopped and the program ends normally."""
    code, out = run_child(tmp_path, "true", signum)
    assert (tmp_path / "markers" / "done").exists()
    assert "awaitTermination returned STOPPED after the batch" in out
    assert code == 0


def wait_for_marker(child: subprocess.Popen[str], marker: Path) -> None:
    """Until the child wrote ``marker`` (failing if it exits first, or after 120 s)."""
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert child.poll() is None, f"the child exited early with {child.returncode}"
        assert time.monotonic() < deadline, f"the child never wrote {marker.name}"
        time.sleep(0.05)


@pytest.mark.spark
def test_a_second_ctrl_c_while_a_graceful_stop_drains_makes_it_immediate(tmp_path: Path) -> None:
    """Ten batches wait behind the first when Ctrl-C starts the graceful stop; a second Ctrl-C while it drains, with no
    Spark job running for pyspark's handler to cancel, ends the drain: none of them runs, and the program's
    awaitTermination gets the KeyboardInterrupt it had before."""
    markers = tmp_path / "markers"
    markers.mkdir()
    child = spawn([str(CHILD), str(markers), "true", "twice"], tmp_path, child_env({"PYSPARK_PYTHON": sys.executable}))
    try:
        wait_for_marker(child, markers / "started")
        child.send_signal(signal.SIGINT)
        wait_for_marker(child, markers / "draining")
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert "interrupted STOPPED later batches run: 0" in out, out
    assert child.returncode == 0


@pytest.mark.spark
def test_an_immediate_stop_from_another_thread_makes_a_graceful_stop_under_way_immediate(spark_context: object) -> None:
    """ssc.stop(False, False) while another thread's ssc.stop(False, True) drains batches queued behind a held one makes
    that stop immediate (it waited behind it for the whole drain): no queued batch runs once the held one ends."""
    from streaming import StreamingContext

    held, release, hurried, graceful = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    ran: list[object] = []

    class Hurried(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("an immediate stop was asked for while a graceful one drains"):
                hurried.set()
            elif record.getMessage().startswith("stopping job scheduler gracefully"):
                graceful.set()

    def out(rdd: object) -> None:
        rows = rdd.collect()  # type: ignore[attr-defined]
        if not held.is_set():
            held.set()
            release.wait(HANG_GUARD_S)
        else:
            ran.append(rows)

    handler, logger = Hurried(), logging.getLogger("aiodstream")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    ssc = StreamingContext(spark_context, 0.2)  # real time: a manual clock moved from this thread would not wake its loop
    ssc.queueStream([[n] for n in range(10)]).foreachRDD(out)
    ssc.start()
    try:
        assert held.wait(HANG_GUARD_S)  # the first batch is held; the next ones queue behind it
        stops = [threading.Thread(target=ssc.stop, args=(False, True))]
        stops[0].start()  # graceful: waits for its one more tick, then would drain the queued batches
        assert graceful.wait(HANG_GUARD_S)
        stops.append(threading.Thread(target=ssc.stop, args=(False, False)))
        stops[1].start()
        assert hurried.wait(HANG_GUARD_S), "the immediate stop did not reach the graceful one"
        release.set()
        for stop in stops:
            stop.join(HANG_GUARD_S)
            assert not stop.is_alive()
    finally:
        release.set()
        logger.removeHandler(handler)
        logger.setLevel(level)
        ssc.stop(stopSparkContext=False)
    assert ran == [] and ssc.getState() == "STOPPED"


@pytest.mark.spark
def test_sigterm_behind_a_hung_listener_ends_after_the_listener_exit_timeout(tmp_path: Path) -> None:
    """A listener hangs on the batch SIGTERM drains: with spark.scheduler.listenerbus.exitTimeout=1s the graceful
    stop still ends (the listener's events are dropped), awaitTermination returns and the program ends normally."""
    code, out = run_child(tmp_path, "true", signal.SIGTERM, mode="hung-listener")
    assert (tmp_path / "markers" / "done").exists()
    assert "awaitTermination returned STOPPED after the batch" in out
    assert code == 0


@pytest.mark.spark
@pytest.mark.skipif(not ALL, reason="a continuous child starts its own Spark: set AIODSTREAM_SHUTDOWN_TESTS=all")
def test_sigterm_drains_a_continuous_context(tmp_path: Path) -> None:
    """Continuous: SIGTERM closes and commits the epoch in progress, rows appended just before included, exactly once."""
    markers = tmp_path / "markers"
    markers.mkdir()
    lines = [f"line-{i}" for i in range(150)]
    (markers / "in.txt").write_text("".join(f"{line}\n" for line in lines[:100]))

    def append(markers: Path) -> None:
        with open(markers / "in.txt", "a") as f:
            f.writelines(f"{line}\n" for line in lines[100:])

    code, out = run_child(tmp_path, "true", signal.SIGTERM, mode="continuous", before_signal=append)
    from streaming.continuous import FileSink

    assert "awaitTermination returned STOPPED" in out
    assert code == 0
    assert list(FileSink.read_committed(markers / "out")) == [line.upper() for line in lines]


@pytest.mark.spark
def test_without_the_setting_sigterm_ends_the_program_at_once(tmp_path: Path) -> None:
    """Without the setting nothing handles SIGTERM: Python's default ends the process, the batch is cut short."""
    code, out = run_child(tmp_path, "false", signal.SIGTERM)
    assert code == -signal.SIGTERM
    assert not (tmp_path / "markers" / "done").exists()
    assert "awaitTermination returned" not in out


@pytest.mark.spark
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_async_host_ties_the_context_to_its_shutdown(spark_context: object, tmp_path: Path, backend: str) -> None:
    """stop_on_signal_async in the host's task group: on SIGTERM the batch in flight finishes, then the context stops."""
    import anyio
    import anyio.to_thread

    from listeners import BatchCompleted, EventRecorder
    from streaming import StreamingContext

    in_flight, finished = threading.Event(), threading.Event()

    def slow(rdd: object) -> None:
        if in_flight.is_set():
            return
        in_flight.set()
        time.sleep(1)
        finished.set()

    async def host() -> tuple[int, str, int]:
        recorder = EventRecorder()
        stopped: list[int] = []
        async with StreamingContext(spark_context, 0.2) as ssc:  # type: ignore[arg-type]
            ssc.addStreamingListener(recorder)
            ssc.queueStream([[1], [2]]).foreachRDD(slow)
            await ssc.start_async()

            async def stop_on_signal() -> None:
                stopped.append(await ssc.stop_on_signal_async())

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:  # the host's task group: it ends when the stop is done
                    tg.start_soon(stop_on_signal)
                    assert await anyio.to_thread.run_sync(in_flight.wait, 60)  # set by the job thread
                    os.kill(os.getpid(), signal.SIGTERM)
            return stopped[0], ssc.getState(), len(recorder.of_type(BatchCompleted))

    signum, state, completed = anyio.run(host, backend=backend)
    assert (signum, state) == (signal.SIGTERM, "STOPPED")
    assert finished.is_set() and completed >= 1
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # anyio put the default back


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sigterm_drains_a_pipeline_runtime_in_an_async_host(backend: str) -> None:
    """A Pipeline runtime in an async host that stops it gracefully on SIGTERM (anyio's signal receiver): the batch
    in flight and the one behind it run to the end, then the runtime stops; no Spark, a manual clock."""
    import anyio

    from scheduler import ManualClock, Seconds
    from streaming import Batch, Pipeline, StreamingContextState, StreamingRuntime
    from tests.anyio_support import settle

    async def host() -> tuple[list[int], StreamingContextState]:
        clock = ManualClock()
        in_flight, release = anyio.Event(), anyio.Event()
        done: list[int] = []
        pipeline = Pipeline()
        pipeline.add_source(lambda t: [t.milliseconds], name="t")

        async def output(batch: Batch) -> None:
            if batch.time.milliseconds == 1000:
                in_flight.set()
                await release.wait()
            done.append(batch.time.milliseconds)

        pipeline.add_output(output)
        with anyio.fail_after(60):
            async with StreamingRuntime(pipeline, Seconds(1), clock=clock) as rt:
                await rt.start()

                listening, received_signal = anyio.Event(), anyio.Event()

                async def stop_on_sigterm() -> None:
                    with anyio.open_signal_receiver(signal.SIGTERM) as received:
                        listening.set()
                        async for _ in received:
                            received_signal.set()
                            await rt.stop(graceful=True)
                            return

                async with anyio.create_task_group() as tg:
                    tg.start_soon(stop_on_sigterm)
                    await listening.wait()
                    clock.advance(Seconds(1))
                    await in_flight.wait()
                    os.kill(os.getpid(), signal.SIGTERM)
                    await received_signal.wait()
                    await settle()  # the stop waits for the timer's one more tick
                    clock.advance(Seconds(1))  # batch 2000
                    release.set()
            return done, rt.state

    done, state = anyio.run(host, backend=backend)
    assert (done, state) == ([1000, 2000], StreamingContextState.STOPPED)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_one_signal_reaches_every_waiter_and_the_hosts_handlers_come_back(backend: str) -> None:
    """Two contexts' shutdown waits in one loop: one SIGTERM ends both (before, on asyncio the newest receiver took it
    and the other context ran on); a waiter cancelled while it read hands over; the host's handlers are back after."""
    import anyio

    from streaming._shutdown import shutdown_signal
    from tests.anyio_support import settle

    host_calls: list[int] = []

    def host_handler(signum: int, frame: object) -> None:
        host_calls.append(signum)

    async def host() -> list[int]:
        got: list[int] = []

        async def wait() -> None:
            got.append(await shutdown_signal())

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                first = anyio.CancelScope()

                async def first_waiter() -> None:
                    with first:
                        await wait()

                tg.start_soon(first_waiter)  # the first reads the shared receiver
                await settle()
                tg.start_soon(wait)
                tg.start_soon(wait)
                await settle()
                first.cancel()  # the reader leaves: another one takes over
                await settle()
                signal.raise_signal(signal.SIGTERM)
        return got

    previous = {s: signal.signal(s, host_handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert anyio.run(host, backend=backend) == [signal.SIGTERM, signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is host_handler and signal.getsignal(signal.SIGINT) is host_handler
        signal.raise_signal(signal.SIGTERM)
        assert host_calls == [signal.SIGTERM]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_waiters_for_different_signals_each_get_the_ones_they_want(backend: str) -> None:
    """One waits for SIGTERM and SIGINT, one for SIGTERM alone: one SIGTERM reaches both (before, on asyncio the newer
    receiver took it), and the SIGINT afterwards only the first."""
    import anyio

    from streaming._shutdown import shutdown_signal
    from tests.anyio_support import settle

    async def host() -> tuple[list[int], list[int]]:
        both: list[int] = []
        term: list[int] = []

        async def wait(into: list[int], *signals: int) -> None:
            into.append(await shutdown_signal(*signals))
            if len(into) == 1 and not signals:
                into.append(await shutdown_signal(*signals))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait, both)
                tg.start_soon(wait, term, signal.SIGTERM)
                await settle()
                signal.raise_signal(signal.SIGTERM)
                await settle()
                signal.raise_signal(signal.SIGINT)
        return both, term

    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert anyio.run(host, backend=backend) == ([signal.SIGTERM, signal.SIGINT], [signal.SIGTERM])
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_an_asyncio_hosts_own_loop_signal_handler_works_again_after_the_wait() -> None:
    """The host's loop.add_signal_handler(SIGTERM): a shutdown wait's receiver replaced it, and when the wait ended the
    handler left was asyncio's no-op stub with no entry behind it: SIGTERM did nothing at all. It is registered again."""
    import asyncio

    from streaming._shutdown import shutdown_signal

    async def host() -> list[str]:
        heard: list[str] = []
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, heard.append, "host")
        waiter = asyncio.ensure_future(shutdown_signal(signal.SIGTERM))
        await asyncio.sleep(0)
        signal.raise_signal(signal.SIGTERM)
        assert await asyncio.wait_for(waiter, 30) == signal.SIGTERM
        signal.raise_signal(signal.SIGTERM)  # the host's handler again
        for _ in range(100):
            if heard:
                break
            await asyncio.sleep(0)
        loop.remove_signal_handler(signal.SIGTERM)
        return heard

    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert asyncio.run(host()) == ["host"]
    finally:
        signal.signal(signal.SIGTERM, previous)
