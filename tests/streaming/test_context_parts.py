"""The parts a StreamingContext delegates to, without Spark: its settings record and its blocking bridge (on a real runtime)."""

from __future__ import annotations

import threading
from types import TracebackType

import pytest

from listeners import BatchCompleted, OverflowPolicy, StreamingListener
from scheduler import InvalidPipelineError, ManualClock, Milliseconds, Seconds, StreamingStateError
from streaming import Batch, Pipeline, StreamingContextState, StreamingRuntime
from streaming._settings import ContextArguments, ContextSettings
from streaming._sync_bridge import BridgeClosedError, SyncBridge
from streaming.spark import SparkSettings
from tests.anyio_support import HANG_GUARD_S, raises_exactly


def read(conf: dict[str, str], *, continuous: bool = False, **arguments: object) -> ContextSettings:
    """The settings a context with ``arguments`` reads from a SparkConf holding ``conf``."""
    return ContextSettings.read(SparkSettings(2, conf), ContextArguments(**arguments), continuous=continuous)  # type: ignore[arg-type]


def test_settings_are_read_into_one_record_with_the_arguments_overriding_them() -> None:
    """Timeouts, concurrency, stop-on-failure, backpressure and the trace come from the SparkConf; arguments win."""
    settings = read({"spark.streaming.gracefulStopTimeout": "3s", "spark.streaming.concurrentJobs": "3",
                     "spark.streaming.stopOnFailure": "TRUE", "spark.streaming.backpressure.enabled": "true",
                     "spark.aiodstream.trace.path": " run.jsonl ", "spark.aiodstream.trace.batches": "5"})
    assert settings.graceful_stop_timeout == Milliseconds(3000)
    assert (settings.concurrent_jobs, settings.stop_on_failure) == (3, True)
    assert settings.backpressure == (1.0, 0.2, 0.0, 100.0)
    assert settings.trace == ("run.jsonl", 5)
    overridden = read({"spark.streaming.concurrentJobs": "3", "spark.streaming.stopOnFailure": "true"},
                      concurrent_jobs=2, stop_on_failure=False)
    assert (overridden.concurrent_jobs, overridden.stop_on_failure) == (2, False)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"clock": "x"}, "clock must be a Clock (SystemClock, ManualClock...), got str 'x'"),
        ({"listener_overflow": "block"},
         "listenerOverflow must be an OverflowPolicy (OverflowPolicy.DROP or OverflowPolicy.BLOCK), got 'block'"),
        ({"listener_overflow": None},
         "listenerOverflow must be an OverflowPolicy (OverflowPolicy.DROP or OverflowPolicy.BLOCK), got None"),
        ({"exclusive": "false"}, "exclusive must be a bool, got 'false'"),  # it was taken as true
        ({"stop_on_failure": 1}, "stopOnFailure must be a bool, got 1"),
    ],
)
def test_a_context_argument_of_the_wrong_kind_is_refused_when_the_context_is_made(arguments: dict[str, object],
                                                                                  message: str) -> None:
    """A clock, an overflow policy or a flag of the wrong kind is refused with the context's arguments, naming it: it
    failed only at start, or was taken as something else."""
    with raises_exactly(TypeError, message):
        ContextArguments(**arguments)  # type: ignore[arg-type]
    assert ContextArguments(clock=ManualClock(), listener_overflow=OverflowPolicy.BLOCK, exclusive=False).exclusive is False


def test_a_negative_graceful_stop_timeout_is_taken_as_none_left() -> None:
    """Spark reads spark.streaming.gracefulStopTimeout=-1s and its graceful stop times out at once; so does ours."""
    assert read({"spark.streaming.gracefulStopTimeout": "-1s"}).graceful_stop_timeout == Milliseconds(0)


def test_malformed_settings_are_refused_with_the_setting_named() -> None:
    """A bad PID parameter or trace batch count names its setting; a continuous context reads no backpressure."""
    conf = {"spark.streaming.backpressure.enabled": "true", "spark.streaming.backpressure.pid.integral": "lots"}
    with pytest.raises(InvalidPipelineError, match=r"^spark.streaming.backpressure.pid.integral must be a number, got 'lots'$"):
        read(conf)
    assert read(conf, continuous=True).backpressure is None
    for raw in ("inf", "nan", "-Infinity"):
        with pytest.raises(InvalidPipelineError, match=rf"^spark.streaming.backpressure.pid.integral must be a number, got '{raw}'$"):
            read({**conf, "spark.streaming.backpressure.pid.integral": raw})
    with pytest.raises(ValueError, match=r"^spark.aiodstream.trace.batches must be a positive number of batches, got '0'$"):
        read({"spark.aiodstream.trace.path": "t.jsonl", "spark.aiodstream.trace.batches": "0"})
    for key, raw in (("spark.streaming.stopOnFailure", "yes"), ("spark.streaming.backpressure.enabled", "1"),
                     ("spark.streaming.stopGracefullyOnShutdown", "on"),  # Spark's getBoolean refuses them too
                     ("spark.aiodstream.stateStore.fsync", "no")):  # it meant fsync on, unsaid
        with pytest.raises(InvalidPipelineError, match=rf'^For input string: "{raw}" \({key} must be true or false\)$'):
            read({key: raw})


@pytest.mark.parametrize("raw", ["abc", "2.0", "1e3", "2s", "", "2147483648"])
def test_a_concurrent_jobs_setting_that_is_not_an_int_is_refused_naming_it(raw: str) -> None:
    """spark.streaming.concurrentJobs is Spark's intConf: anything but a whole int is Spark 4.3's message, naming the key."""
    with raises_exactly(InvalidPipelineError, f"[INVALID_CONF_VALUE.TYPE_MISMATCH] The value '{raw}' in the config "
                                              "\"spark.streaming.concurrentJobs\" is invalid. It should be a/an 'int' value. "
                                              "SQLSTATE: 22022"):
        read({"spark.streaming.concurrentJobs": raw})


@pytest.mark.parametrize("raw", ["0", "-2"])
def test_a_concurrent_jobs_setting_below_one_is_refused_naming_it(raw: str) -> None:
    """A concurrentJobs setting of 0 or less is refused naming the setting (Spark's thread pool fails without a message)."""
    with raises_exactly(InvalidPipelineError, f"spark.streaming.concurrentJobs must be a positive number of jobs run at "
                                              f"once, got {raw}; set it to e.g. 1"):
        read({"spark.streaming.concurrentJobs": raw})


def test_a_concurrent_jobs_setting_is_trimmed_as_java_trims_it() -> None:
    """Spark trims a typed setting and Java's parseInt takes a leading '+': " +3 " is 3 jobs."""
    assert read({"spark.streaming.concurrentJobs": " +3\t"}).concurrent_jobs == 3


def test_given_options_override_the_settings_and_a_continuous_query_refuses_async_tracking() -> None:
    """checkpoint()'s options replace the settings' (names compared without case); async tracking is micro-batch only."""
    settings = read({"spark.sql.streaming.minBatchesToRetain": "7", "spark.streaming.asyncProgressTrackingEnabled": "false"})
    options = settings.progress_options({"asyncprogresstrackingenabled": "true"})
    assert options == {"spark.sql.streaming.minBatchesToRetain": "7", "asyncprogresstrackingenabled": "true"}
    assert settings.continuous_options({}) == {"spark.sql.streaming.minBatchesToRetain": "7"}
    with pytest.raises(InvalidPipelineError, match="async progress tracking is for micro-batch queries"):
        settings.continuous_options({"asyncProgressTrackingEnabled": "true"})


def test_the_watermark_policy_setting_reaches_the_query_options() -> None:
    """spark.sql.streaming.multipleWatermarkPolicy from the SparkConf goes to the query's tracker; checkpoint()'s wins."""
    settings = read({"spark.sql.streaming.multipleWatermarkPolicy": "max"})
    assert settings.progress_options({}) == {"spark.sql.streaming.multipleWatermarkPolicy": "max"}
    assert settings.progress_options({"spark.sql.streaming.multipleWatermarkPolicy": "min"}) == {
        "spark.sql.streaming.multipleWatermarkPolicy": "min"}


class Runtime:
    """Just enough of a runtime for the bridge: an async context manager that records its entry and exit."""

    def __init__(self) -> None:
        self.entered = self.exited = False

    async def __aenter__(self) -> Runtime:
        self.entered = True
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.exited = True


async def loop_thread() -> int:
    """The thread the bridge's loop runs in."""
    return threading.get_ident()


def test_the_bridge_accepts_calls_only_while_open() -> None:
    """Before open and after close a call raises BridgeClosedError (a state check); while open it runs on the loop's thread."""
    bridge = SyncBridge()
    with pytest.raises(BridgeClosedError):
        bridge.call(loop_thread)
    runtime = Runtime()
    bridge.open(runtime)  # type: ignore[arg-type]
    try:
        assert bridge.is_open and runtime.entered
        assert bridge.call(loop_thread) != threading.get_ident()
        assert not bridge.in_loop_thread()
    finally:
        bridge.close()
    assert runtime.exited and not bridge.is_open
    with pytest.raises(BridgeClosedError):
        bridge.call(loop_thread)
    bridge.close()  # idempotent


def test_a_keyboard_interrupt_during_a_sync_graceful_stop_makes_it_immediate() -> None:
    """Ctrl-C in the program's own ssc.stop(stopGraceFully=True): the KeyboardInterrupt comes out of the stop at once and
    the stop becomes immediate (the bridge's close passes it to the runtime's exit), instead of after the whole drain
    (here: never, behind a hung job on a clock that does not move)."""
    import signal

    from tests.support import Gate, ScriptedGraph, held_then_recorded, hold_first_then_queue

    clock = ManualClock()
    gate = Gate()
    done: list[int] = []
    runtime = StreamingRuntime(ScriptedGraph(held_then_recorded(gate, done)), Seconds(1), clock=clock,
                               abandon_after=Milliseconds(0))
    bridge = SyncBridge()
    stopping = threading.Event()
    # The graceful stop has begun once it stops the timer with one more tick (it then drains). Seen here, not in the
    # library's INFO log: a test before this one in the same process may have reconfigured logging (the test then hung
    # in CI, its interrupt never sent).
    timer = runtime.scheduler.generator.timer
    stop_timer = timer.stop

    async def stop_noting_a_graceful_one(*, one_more_tick: bool) -> object:
        if one_more_tick:
            stopping.set()
        return await stop_timer(one_more_tick=one_more_tick)

    timer.stop = stop_noting_a_graceful_one  # type: ignore[method-assign]

    async def behind_a_hung_job() -> None:
        await hold_first_then_queue(runtime, clock, gate, 3)

    main = threading.get_ident()

    def interrupt() -> None:  # a real SIGINT to the main thread, as Ctrl-C: it ends the main thread's wait
        stopping.wait(HANG_GUARD_S)  # (without the stop seen, the interrupt still comes: the test fails, it never hangs)
        signal.pthread_kill(main, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # not pyspark's, which would cancel Spark jobs
    try:
        bridge.start(runtime)
        bridge.call(behind_a_hung_job)
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            bridge.stop(runtime, graceful=True)
    finally:
        signal.signal(signal.SIGINT, previous)
        bridge.close()
    assert stopping.is_set()  # the interrupt came during the graceful stop
    assert runtime.state is StreamingContextState.STOPPED and not bridge.is_open
    assert done == [] and [t.milliseconds for t in runtime.scheduler.pending_times()] == [1000, 2000, 3000, 4000]


def test_a_stop_refused_in_a_listener_callback_leaves_the_runtime_and_its_loop_running() -> None:
    """bridge.stop() from a plain listener callback is refused at once; it used to close the bridge anyway, stopping the
    runtime from the very callback the close waited for (until the listeners' exit timeout)."""
    clock = ManualClock()
    ran: list[int] = []
    pipeline = Pipeline()
    pipeline.add_source(lambda t: [t.milliseconds], name="t")

    async def output(batch: Batch) -> None:
        ran.append(batch.time.milliseconds)

    pipeline.add_output(output)
    runtime = StreamingRuntime(pipeline, Seconds(1), clock=clock, listener_exit_timeout=Milliseconds(0))
    bridge = SyncBridge()
    refused: list[str] = []
    attempted = threading.Event()

    class Stopper(StreamingListener):
        def on_batch_completed(self, event: BatchCompleted) -> None:  # a plain def: on the listener's own thread
            try:
                bridge.stop(runtime, graceful=False)
            except StreamingStateError as exc:
                refused.append(str(exc))
            attempted.set()

    async def tick() -> None:
        clock.advance(Seconds(1))

    async def one_batch() -> None:
        await tick()
        await runtime.wait_until_idle()

    runtime.add_listener(Stopper(), name="stopper")
    bridge.start(runtime)
    try:
        bridge.call(tick)  # not waiting for the batch's events: the old close from the callback waited for this call
        assert attempted.wait(HANG_GUARD_S), "the listener's stop never returned"
        assert refused == ["Cannot stop StreamingContext within listener bus thread. (called from listener 'stopper')"]
        assert bridge.is_open and runtime.state is StreamingContextState.ACTIVE
        bridge.call(one_batch)
        assert ran == [1000, 2000]
    finally:
        bridge.stop(runtime, graceful=False)
    assert runtime.state is StreamingContextState.STOPPED and not bridge.is_open
