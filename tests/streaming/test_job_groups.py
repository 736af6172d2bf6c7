"""The py4j job-group hook: installed while a context's job threads hold it, removed after (no Spark needed)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from streaming.spark import JobGroupHook, SparkJobThreads


class FakeClient:
    """A py4j client stand-in: records each command with the thread's pending job group as the JVM would see it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str | None]] = []
        self.group: dict[int, str | None] = {}

    def send_command(self, command: str) -> str:
        self.sent.append((command, self.group.get(threading.get_ident())))
        return f"ok {command}"


class FakeSparkContext:
    """Just what the hook touches: the gateway's client and setJobGroup (which itself goes through the client)."""

    def __init__(self, client: FakeClient | None) -> None:
        self._gateway = None if client is None else type("Gateway", (), {"_gateway_client": client})()
        self.client = client

    def setJobGroup(self, group: str, description: str, interrupt: bool) -> None:
        assert self.client is not None
        self.client.send_command(f"setJobGroup {group}")
        self.client.group[threading.get_ident()] = group


def test_the_hook_is_installed_by_the_first_user_and_removed_by_the_last() -> None:
    """acquire() wraps send_command once however many users hold it; the last release() puts the class's method back."""
    client, hook = FakeClient(), JobGroupHook()
    sc: Any = FakeSparkContext(client)
    assert "send_command" not in vars(client)
    hook.acquire(sc)
    wrapper = vars(client)["send_command"]
    hook.acquire(sc)
    assert vars(client)["send_command"] is wrapper and hook.installed
    hook.release()
    assert vars(client)["send_command"] is wrapper
    hook.release()
    assert "send_command" not in vars(client) and not hook.installed
    hook.release()  # more releases than acquires: nothing to undo
    assert "send_command" not in vars(client)


def test_a_pending_group_is_set_before_the_first_command_only() -> None:
    """A job's group is set right before its first py4j call (and that call already carries it), never before the next."""
    client, hook = FakeClient(), JobGroupHook()
    sc: Any = FakeSparkContext(client)
    hook.acquire(sc)
    try:
        def job() -> None:
            client.send_command("first")
            client.send_command("second")

        hook.run_in_group(sc, "g-1", "batch 1", job, ())
        client.send_command("outside a job")
    finally:
        hook.release()
    assert client.sent == [("setJobGroup g-1", None), ("first", "g-1"), ("second", "g-1"), ("outside a job", "g-1")]


def test_label_functions_are_called_only_by_a_job_that_calls_spark() -> None:
    """A group or description given as a function is made once, at the job's first py4j call; a job without one never makes it."""
    client, hook = FakeClient(), JobGroupHook()
    sc: Any = FakeSparkContext(client)
    made: list[str] = []

    def label(text: str) -> Any:
        return lambda: made.append(text) or text

    hook.acquire(sc)
    try:
        hook.run_in_group(sc, label("g-quiet"), label("quiet"), lambda: None, ())
        hook.run_in_group(sc, label("g-2"), label("batch 2"), lambda: (client.send_command("a"), client.send_command("b")), ())
    finally:
        hook.release()
    assert made == ["g-2", "batch 2"]
    assert client.sent == [("setJobGroup g-2", None), ("a", "g-2"), ("b", "g-2")]


def test_a_wrapper_someone_installed_after_us_is_left_in_place() -> None:
    """release() does not remove a send_command that another library wrapped around ours."""
    client, hook = FakeClient(), JobGroupHook()
    hook.acquire(FakeSparkContext(client))  # type: ignore[arg-type]
    theirs = vars(client)["send_command"]

    def outer(*args: Any) -> Any:
        return theirs(*args)

    client.send_command = outer  # type: ignore[method-assign]
    hook.release()
    assert vars(client)["send_command"] is outer


def test_job_threads_hold_the_hook_from_their_first_job_to_shutdown() -> None:
    """SparkJobThreads acquires the hook on its first job and releases it at shutdown, so none is left behind."""
    client, hook = FakeClient(), JobGroupHook()
    sc: Any = FakeSparkContext(client)
    threads = SparkJobThreads(1, name="hook-lifetime", hook=hook)
    assert not hook.installed
    assert threads.submit(sc, "g-a", "batch a", lambda: client.send_command("work")).result() == "ok work"
    assert hook.installed
    threads.submit(sc, "g-b", "batch b", lambda: None).result()
    threads.shutdown()
    assert not hook.installed and "send_command" not in vars(client)
    assert client.sent == [("setJobGroup g-a", None), ("work", "g-a")]


def test_a_stopped_spark_context_is_refused() -> None:
    """A SparkContext without a py4j gateway (stopped) gets a clear error instead of a hook on nothing."""
    with pytest.raises(RuntimeError, match="PySpark has no py4j gateway: is the SparkContext stopped"):
        JobGroupHook().acquire(FakeSparkContext(None))  # type: ignore[arg-type]


class FakeProperties:
    """A SavedProperties stand-in: records when the job's copy is applied and the thread's own restored."""

    def __init__(self, client: FakeClient) -> None:
        self.client = client
        self.calls: list[str] = []

    def apply(self) -> str:
        self.client.send_command("setLocalProperties copy")
        self.calls.append("apply")
        return "own"

    def restore(self, own: str) -> None:
        self.calls.append(f"restore {own}")


def test_saved_properties_are_applied_at_the_first_command_and_restored_after_the_job_even_when_it_raises() -> None:
    """A job's fresh copy of the saved properties goes before its group; the thread's own are back after it, also after a
    failure (whose error is the one raised); a job that never calls Spark touches neither."""
    client, hook = FakeClient(), JobGroupHook()
    sc: Any = FakeSparkContext(client)
    properties = FakeProperties(client)

    def failing() -> None:
        client.send_command("work")
        raise ValueError("the job's own error")

    hook.acquire(sc)
    try:
        hook.run_in_group(sc, "g-quiet", "quiet", lambda: None, (), properties)  # type: ignore[arg-type]
        assert properties.calls == []
        with pytest.raises(ValueError, match=r"^the job's own error$"):
            hook.run_in_group(sc, "g-1", "batch 1", failing, (), properties)  # type: ignore[arg-type]
    finally:
        hook.release()
    assert properties.calls == ["apply", "restore own"]
    assert [command for command, _ in client.sent] == ["setLocalProperties copy", "setJobGroup g-1", "work"]


def test_a_job_failing_after_its_spark_context_stopped_says_so() -> None:
    """pyspark's AttributeError of a stopped SparkContext becomes a StreamingStateError naming it (the original as cause)."""
    from scheduler import StreamingStateError

    client, hook = FakeClient(), JobGroupHook()
    sc: Any = FakeSparkContext(client)

    def uses_spark() -> None:
        sc._jsc = None  # what pyspark's sc.stop() leaves (another context stopped the shared SparkContext)
        raise AttributeError("'NoneType' object has no attribute 'setCallSite'")

    with pytest.raises(StreamingStateError) as failed:
        hook.run_in_group(sc, "g-1", "batch 1", uses_spark, ())
    assert str(failed.value) == (
        "the SparkContext this context's jobs run on has been stopped (by sc.stop(), or by another context's "
        "stop(stopSparkContext=True)): no job can use Spark any more; stop this context, and stop a shared SparkContext "
        "only once every context on it has stopped")
    assert isinstance(failed.value.__cause__, AttributeError)
