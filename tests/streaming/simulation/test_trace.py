"""Trace record and replay: events survive JSON lines, and a trace replays under a new configuration."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from listeners import ReceiverInfo, ReceiverStarted, StreamingStarted
from scheduler import Seconds, Time
from streaming.simulation import (
    Constant,
    ConstantRate,
    Exponential,
    Linear,
    ModelError,
    OutputModel,
    Replay,
    ReplayRate,
    SimulationModel,
    StepRate,
    TraceRecorder,
    event_from_dict,
    event_to_dict,
    model_from_trace,
    read_trace,
    simulate,
)

MODEL = SimulationModel(
    Seconds(1),
    [OutputModel("parse", Linear(50, 2.0, Exponential(40))), OutputModel("store", Exponential(250))],
    input=ConstantRate(150.5),
    batches=80,
    seed=9,
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[object, ...]]:
    """A simulated run recorded with TraceRecorder, and the events the run kept itself."""
    path = tmp_path_factory.mktemp("trace") / "run.jsonl"
    with TraceRecorder(path, batch_interval=MODEL.batch_interval, concurrent_jobs=1, meta={"who": "test"}) as recorder:
        result = simulate(MODEL, listeners=[recorder], record_events=True)
    assert result.events is not None
    return path, result.events


def test_recorded_events_read_back_equal(recorded: tuple[Path, tuple[object, ...]]) -> None:
    """Every event written by the recorder reads back equal, in order, with the header's configuration."""
    path, events = recorded
    trace = read_trace(path)
    assert trace.events == events
    assert (trace.batch_interval, trace.concurrent_jobs, dict(trace.meta)) == (Seconds(1), 1, {"who": "test"})
    header = json.loads(path.read_text().splitlines()[0])
    assert header["format"] == "aiodstream-trace" and header["version"] == 1


def test_replay_under_the_same_configuration_reproduces_every_batch(recorded: tuple[Path, tuple[object, ...]]) -> None:
    """A trace replayed unchanged gives the recorded BatchInfos exactly."""
    path, _ = recorded
    trace = read_trace(path)
    assert simulate(model_from_trace(trace)).batches == trace.completed_batches


def test_replay_takes_input_and_durations_from_the_trace(recorded: tuple[Path, tuple[object, ...]]) -> None:
    """The replay model holds the traced records per batch and each operation's traced durations."""
    path, _ = recorded
    trace = read_trace(path)
    model = model_from_trace(trace)
    done = trace.completed_batches
    assert model.input == ReplayRate(1000, [b.num_records for b in done])
    store = model.outputs[1]
    assert store.name == "store" and isinstance(store.processing, Replay)
    assert list(store.processing.durations_ms) == [b.output_operation_infos[1].duration.milliseconds for b in done]  # type: ignore[union-attr]
    assert model.num_batches == 80


def test_replay_under_a_longer_interval_and_more_input_scales_the_work(recorded: tuple[Path, tuple[object, ...]]) -> None:
    """With a 2 s interval and 30 % more input each batch holds about 2.6 times the records, and the per-record work grows."""
    path, _ = recorded
    trace = read_trace(path)
    changed = model_from_trace(trace, batch_interval=Seconds(2), rate_factor=1.3, concurrent_jobs=2)
    assert (changed.batch_interval, changed.concurrent_jobs, changed.num_batches) == (Seconds(2), 2, 40)
    result = simulate(changed)
    assert sum(b.num_records for b in result.batches) == pytest.approx(1.3 * 150.5 * 80, rel=0.01)
    # The traced input was constant, so all of the mean duration counts as per-record cost.
    parse = changed.outputs[0].processing
    done = trace.completed_batches
    mean_parse = sum(b.output_operation_infos[0].duration.milliseconds for b in done) / len(done)  # type: ignore[union-attr]
    assert isinstance(parse, Replay) and parse.per_record_ms == pytest.approx(mean_parse / (sum(b.num_records for b in done) / len(done)))


def test_replay_fits_the_per_record_cost_when_batch_sizes_vary() -> None:
    """From a trace whose input varies, the fitted per-record cost is within 10 % of the model's 2 ms (the base is not counted)."""
    varying = SimulationModel(
        Seconds(1), [OutputModel("parse", Linear(50, 2.0, Exponential(40)))],
        input=StepRate([(0, 50), (20_000, 200), (40_000, 100)]), batches=60, seed=4,
    )
    buffer = io.StringIO()
    simulate(varying, listeners=[TraceRecorder(buffer, batch_interval=Seconds(1))])
    parse = model_from_trace(read_trace(io.StringIO(buffer.getvalue()))).outputs[0].processing
    assert isinstance(parse, Replay) and parse.per_record_ms == pytest.approx(2.0, rel=0.1)


def test_a_trace_of_sequential_batches_replays_them_one_after_another(tmp_path: Path) -> None:
    """The header records that the program ran its batches one after another (a watermark or a state-store operator);
    the replay does too: with two concurrent jobs and work of 1.5 intervals, batch k waits k * 500 ms. A trace without
    the key (older recorders) replays as before."""
    model = SimulationModel(Seconds(1), [OutputModel("state", Constant(1500))], batches=10, concurrent_jobs=2,
                            sequential_batches=True)
    path = tmp_path / "run.jsonl"
    with TraceRecorder(path, batch_interval=Seconds(1), concurrent_jobs=2, sequential_batches=True) as recorder:
        simulate(model, listeners=[recorder])
    trace = read_trace(path)
    assert trace.sequential_batches and json.loads(path.read_text().splitlines()[0])["sequential_batches"] is True
    replay = model_from_trace(trace)
    assert replay.sequential_batches
    assert [b.scheduling_delay.milliseconds for b in simulate(replay).batches] == [k * 500 for k in range(10)]
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    del header["sequential_batches"]
    (tmp_path / "old.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    assert not read_trace(tmp_path / "old.jsonl").sequential_batches


def test_trace_without_header_infers_the_interval() -> None:
    """A trace with no header takes the interval from the gaps between batch times."""
    buffer = io.StringIO()
    recorder = TraceRecorder(buffer)
    simulate(SimulationModel(Seconds(3), [OutputModel("a", Constant(100))], batches=4), listeners=[recorder])
    lines = buffer.getvalue().splitlines()[1:]  # drop the header
    trace = read_trace(io.StringIO("\n".join(lines)))
    assert trace.batch_interval is None
    assert model_from_trace(trace).batch_interval == Seconds(3)


def test_other_event_types_round_trip() -> None:
    """StreamingStarted and receiver events survive the JSON form too."""
    for event in (StreamingStarted(Time(5)), ReceiverStarted(ReceiverInfo(0, "r", True, "host", "exec-1", last_error_time=Time(3)))):
        assert event_from_dict(json.loads(json.dumps(event_to_dict(event)))) == event


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "line 2: not JSON: Expecting value"),
        ("[1, 2]", "line 2: must be a JSON object, got list"),
        ('{"event": "Nope"}', "line 2.event: unknown event type 'Nope'"),
        ('{"event": "StreamingStarted"}', "line 2.time: is missing"),
        ('{"event": "BatchCompleted", "batch_info": {"batch_time": 1000}}', "line 2.batch_info.submission_time: is missing"),
        # An id or a count is a JSON integer: 1.5 was truncated to 1 and merged two operations.
        ('{"event": "BatchCompleted", "batch_info": {"batch_time": 1000, "submission_time": 1000, "output_operations": '
         '[{"batch_time": 1000, "id": 1.5}]}}', "line 2.batch_info.output_operations[0].id: must be a whole number, got 1.5"),
        ('{"event": "OutputOperationStarted", "output_operation_info": {"batch_time": 1000, "id": "0"}}',
         "line 2.output_operation_info.id: must be a whole number, got '0'"),
        ('{"event": "BatchCompleted", "batch_info": {"batch_time": 1000, "submission_time": 1000, "inputs": '
         '[{"stream_id": 0, "num_records": 2.5}]}}', "line 2.batch_info.inputs[0].num_records: must be a whole number, got 2.5"),
        ('{"event": "BatchCompleted", "batch_info": {"batch_time": 1000, "submission_time": 1000, "output_operations": '
         '[{"batch_time": 1000, "id": 0}, {"batch_time": 1000, "id": 0}]}}',
         "line 2.batch_info.output_operations[1].id: repeats output operation 0"),
        # A recorded duration below zero is named with its line, not later by the replay.
        ('{"event": "BatchCompleted", "batch_info": {"batch_time": 1000, "submission_time": 1000, "output_operations": '
         '[{"batch_time": 1000, "id": 0, "start_time": 1500, "end_time": 1400}]}}',
         "line 2.batch_info.output_operations[0].end_time: is 1400 ms, before the start time 1500 ms"),
        ('{"event": "BatchStarted", "batch_info": {"batch_time": 1000, "submission_time": 1000, "processing_start_time": 9, '
         '"processing_end_time": 8}}', "line 2.batch_info.processing_end_time: is 8 ms, before the start time 9 ms"),
        ('{"event": "SparkJobs", "batch_time": 1000.0, "output_op_id": 0, "jobs": []}',
         "line 2.batch_time: must be a whole number, got 1000.0"),
    ],
)
def test_bad_trace_lines_name_the_line(line: str, message: str) -> None:
    """A malformed line is reported with its number and the missing or bad field."""
    with pytest.raises(ModelError) as info:
        read_trace(io.StringIO('{"format": "aiodstream-trace", "version": 1}\n' + line + "\n"))
    assert str(info.value) == message


def test_a_batch_completed_twice_is_refused_naming_both_lines() -> None:
    """Two runs' traces put in one file replayed a batch twice; the second BatchCompleted of a batch is an error."""
    done = ('{"event": "BatchCompleted", "batch_info": {"batch_time": 1000, "submission_time": 1000, "processing_start_time": '
            '1000, "processing_end_time": 1100, "output_operations": [{"batch_time": 1000, "id": 0, "start_time": 1000, '
            '"end_time": 1100}]}}\n')
    text = '{"format": "aiodstream-trace", "version": 1}\n' + done
    assert len(read_trace(io.StringIO(text)).completed_batches) == 1
    with pytest.raises(ModelError) as info:
        read_trace(io.StringIO(text + done))
    assert str(info.value) == ("line 3.event: a second BatchCompleted of batch 1000 (the first is on line 2): a trace "
                               "records one run; record each run to a file of its own")


HEADER = b'{"format": "aiodstream-trace", "version": 1'

# Files that crashed the reader with a raw RecursionError, ValueError, UnicodeDecodeError or TypeError, and its message now.
MALFORMED_TRACES = [
    pytest.param(b"[" * 100_000 + b"\n", "line 1: JSON nested too deeply to read", id="deep"),
    pytest.param(HEADER + b', "batch_interval_ms": "abc"}\n',
                 "line 1.batch_interval_ms: must be a positive whole number of milliseconds, got 'abc'", id="header"),
    pytest.param(HEADER + b', "concurrent_jobs": 0}\n', "line 1.concurrent_jobs: must be a positive whole number of jobs, got 0",
                 id="concurrency"),
    pytest.param(HEADER + b'}\n{"event": "StreamingStarted", "time": 5}\n\xff\xfe\x00garbage\n',
                 "line 3: not UTF-8 text: invalid start byte at byte 1", id="binary"),
    pytest.param(HEADER + b', "meta": [1, 2]}\n', "line 1.meta: must be a JSON object, got list", id="meta"),
    pytest.param(b'{"event": "x", "n": ' + b"9" * 5000 + b"}\n",
                 "line 1: JSON that cannot be read: Exceeds the limit (4300 digits) for integer string conversion: value "
                 "has 5000 digits", id="bigint"),
    pytest.param(b'{"event": "BatchCompleted", "batch_info": 5}\n',
                 "line 1.event: malformed BatchCompleted event: 'int' object has no attribute 'get'", id="not-a-table"),
]


@pytest.mark.parametrize(("content", "message"), MALFORMED_TRACES)
def test_a_malformed_trace_file_is_a_model_error_naming_the_line(tmp_path: Path, content: bytes, message: str) -> None:
    """read_trace and StreamingUI.add_trace raise ModelError with the line number, never the parser's own crash."""
    from streaming.ui import StreamingUI

    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(ModelError) as info:
        read_trace(path)
    assert str(info.value) == message
    with pytest.raises(ModelError) as info:
        StreamingUI(metrics=False).add_trace(path)
    assert str(info.value) == message


def test_a_trace_without_batches_cannot_be_replayed() -> None:
    """Replay needs at least one completed batch."""
    with pytest.raises(ModelError, match=r"^events: the trace holds no BatchCompleted event to replay$"):
        model_from_trace(read_trace(io.StringIO('{"event": "StreamingStarted", "time": 0}\n')))


def test_a_trace_of_a_checkpointed_run_skips_query_events() -> None:
    """Query events carry nothing a replay uses: the recorder counts them and writes only streaming events."""
    import uuid

    from listeners import QueryStarted

    buffer = io.StringIO()
    recorder = TraceRecorder(buffer)
    recorder(StreamingStarted(Time(5)))
    recorder(QueryStarted(uuid.uuid4(), uuid.uuid4(), "q", "2026-11-22T00:00:00.000Z"))
    lines = buffer.getvalue().splitlines()
    assert (recorder.events_written, recorder.events_skipped) == (1, 1)
    assert [json.loads(line).get("event") for line in lines[1:]] == ["StreamingStarted"]
