"""Credentials in checkpoint URIs never show: errors, log events, listener events and the command line redact them.

The checkpoint lives on a real FTP server (``ftp://spark:<password>@127.0.0.1:<port>/ck``, read
through fsspec), so every message below was composed by the code that reached it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from listeners import OutputOperationCompleted, QueryTerminated, StreamingListener
from scheduler import (
    LOGGER_ROOT,
    CheckpointError,
    CorruptCheckpointError,
    InvalidPipelineError,
    ManualClock,
    Seconds,
    event_fields,
    redact_uri,
    task_checkpoint_path,
)
from streaming import Batch, DirectorySource, ListSource, Pipeline, StreamingRuntime
from streaming._cli import main
from tests.support import advance

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("s3a://KEY:SECRET@bucket/x", "s3a://KEY:***@bucket/x"),
        ("ftp://user:pass@host/x", "ftp://user:***@host/x"),
        ("ftp://user:p@ss@host/x/a@b", "ftp://user:***@host/x/a@b"),
        ("cannot read 'hdfs://u:pw@nn:8020/ck/offsets/1': gone", "cannot read 'hdfs://u:***@nn:8020/ck/offsets/1': gone"),
        ("https://h/x?X-Amz-Security-Token=t&part=1&X-Amz-Signature=s", "https://h/x?X-Amz-Security-Token=***&part=1&X-Amz-Signature=***"),
        ("abfss://c@acct.dfs.core.windows.net/x?sv=1&sig=abc", "abfss://c@acct.dfs.core.windows.net/x?sv=1&sig=***"),
        ("gs://b/x?password=p;access.key=k#f", "gs://b/x?password=***;access.key=***#f"),
        ("ftp://user@host/x", "ftp://user@host/x"),
        ("hdfs://nn:8020/ck", "hdfs://nn:8020/ck"),
        ("/tmp/ck/a=b", "/tmp/ck/a=b"),
        ("write to user@example.com", "write to user@example.com"),
    ],
)
def test_redact_uri_hides_passwords_and_secret_parameters_only(text: str, shown: str) -> None:
    """The userinfo's password and parameters named like secrets (Spark's redaction pattern, signatures, keys) become ***."""
    assert redact_uri(text) == shown


def test_every_streaming_error_redacts_its_message_and_path() -> None:
    """A StreamingError composed with a credential shows it redacted, in its message and in CheckpointError.path."""
    error = CorruptCheckpointError("cannot read s3a://AK:SK@bucket/ck/offsets/3: damaged", path="s3a://AK:SK@bucket/ck/offsets/3")
    assert (str(error), error.path) == ("cannot read s3a://AK:***@bucket/ck/offsets/3: damaged", "s3a://AK:***@bucket/ck/offsets/3")
    assert str(InvalidPipelineError("cannot keep state in ftp://u:pw@h/ck")) == "cannot keep state in ftp://u:***@h/ck"


def secret(ftp_server: Any) -> str:
    """The credential as it would appear unredacted."""
    return f"{ftp_server.user}:{ftp_server.password}@"


def redacted_uri(ftp_server: Any, path: str) -> str:
    return f"ftp://{ftp_server.user}:***@127.0.0.1:{ftp_server.port}/{path}"


async def test_a_checkpoint_error_on_a_uri_with_credentials_shows_none(ftp_server: Any, tmp_path: Path, clock: ManualClock) -> None:
    """A source swapped under an FTP checkpoint is refused with the checkpoint's URI, its password redacted."""
    ck = task_checkpoint_path(ftp_server.uri("ck"))
    p = Pipeline()
    p.add_source(ListSource(["a", "b"]), name="in")
    p.add_output(lambda batch: None, name="out")
    async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=ck) as rt:
        await rt.start()
        await advance(rt, clock)
        await rt.stop()
    p = Pipeline()
    p.add_source(DirectorySource(tmp_path), name="in")
    p.add_output(lambda batch: None, name="out")
    async with StreamingRuntime(p, Seconds(1), clock=ManualClock(0), checkpoint_location=ck) as rt:
        with pytest.raises(CheckpointError) as info:
            await rt.start()
    assert str(info.value).startswith(f"cannot resume from {redacted_uri(ftp_server, 'ck')}: source 'in'")
    assert info.value.path == redacted_uri(ftp_server, "ck/sources/0/stream.json")
    assert secret(ftp_server) not in str(info.value) + repr(ck)


class Events(StreamingListener):
    """Keeps the failure texts listeners receive."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def on_output_operation_completed(self, event: OutputOperationCompleted) -> None:
        self.texts.append(event.output_operation_info.failure_reason or "")

    def on_query_terminated(self, event: QueryTerminated) -> None:
        self.texts.append(event.exception or "")


async def test_log_and_listener_events_of_a_failure_naming_the_uri_show_no_secret(
    ftp_server: Any, caplog: pytest.LogCaptureFixture, clock: ManualClock,
) -> None:
    """A batch failing with the checkpoint URI in its error: the log records and listener events carry it redacted."""
    uri = ftp_server.uri("ck")

    def out(batch: Batch) -> None:
        raise OSError(f"cannot reach {uri}")

    p = Pipeline()
    p.add_source(ListSource(["a"]), name="in")
    p.add_output(out, name="out")
    events = Events()
    with caplog.at_level(logging.INFO, logger=LOGGER_ROOT):
        async with StreamingRuntime(p, Seconds(1), clock=clock, checkpoint_location=task_checkpoint_path(uri)) as rt:
            rt.add_listener(events)
            await rt.start()
            await advance(rt, clock)
            await rt.stop()
    fields = [event_fields(r) for r in caplog.records if r.name.startswith(LOGGER_ROOT)]
    failed = [f for f in fields if f is not None and "traceback" in f]
    assert failed and all(f"cannot reach {redacted_uri(ftp_server, 'ck')}" in f["traceback"] for f in failed)
    assert all(r.exc_info is None or secret(ftp_server) not in repr(r.exc_info[1]) for r in caplog.records)
    shown = "\n".join([*(r.getMessage() for r in caplog.records), *(repr(f) for f in fields)])
    assert redacted_uri(ftp_server, "ck") in shown and secret(ftp_server) not in shown
    assert events.texts and all(f"cannot reach {redacted_uri(ftp_server, 'ck')}" in t for t in events.texts if t)
    assert secret(ftp_server) not in "\n".join(events.texts)


def test_the_command_line_shows_the_uri_and_its_errors_redacted(
    ftp_server: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """aiodstream checkpoint on a URI with credentials: the summary and the damaged entry's line show no password."""
    import streaming.spark

    # The command reaches a URI through Hadoop (a JVM); fsspec reaches the same server without one.
    monkeypatch.setattr(streaming.spark, "resolve_checkpoint_path", lambda text, **_: task_checkpoint_path(text))
    (ftp_server.root / "ck" / "offsets").mkdir(parents=True)
    (ftp_server.root / "ck" / "metadata").write_text('{"id":"6a5f0f4e-1b7c-4c1e-9a53-0d7f8d1f2e3a"}')
    (ftp_server.root / "ck" / "offsets" / "0").write_text("v1\n[")
    assert main(["checkpoint", ftp_server.uri("ck")]) == 4
    captured = capsys.readouterr()
    assert captured.out.startswith(f"checkpoint  {redacted_uri(ftp_server, 'ck')}\n")
    assert captured.err.startswith(f"aiodstream checkpoint: error: cannot read {redacted_uri(ftp_server, 'ck/offsets/0')}: ")
    assert secret(ftp_server) not in captured.out + captured.err
    assert main(["checkpoint", ftp_server.uri("ck"), "--json"]) == 4
    captured = capsys.readouterr()
    assert redacted_uri(ftp_server, "ck") in captured.out and secret(ftp_server) not in captured.out + captured.err


def test_spark_settings_show_the_uis_secrets_redacted() -> None:
    """SparkSettings (what env.spark.settings() returns, and what a logged traceback's locals show) printed the UI's
    token and password; their values are redacted in its repr, the settings themselves keep them."""
    from streaming.spark import SparkSettings

    conf = {"spark.aiodstream.ui.token": "S3CRET-TOKEN", "spark.aiodstream.ui.password": "S3CRET-PASSWORD",
            "spark.aiodstream.ui.user": "admin", "spark.aiodstream.ui.port": "4041"}
    settings = SparkSettings(2, conf)
    shown = repr(settings)
    assert "S3CRET" not in shown and "'spark.aiodstream.ui.token': '***'" in shown
    assert "'spark.aiodstream.ui.user': 'admin'" in shown and "'spark.aiodstream.ui.port': '4041'" in shown
    assert settings.conf["spark.aiodstream.ui.token"] == "S3CRET-TOKEN"
