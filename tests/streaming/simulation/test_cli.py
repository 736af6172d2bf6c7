"""``aiodstream simulate``: a smoke test of each mode, and errors that name the field."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from streaming._cli import main

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup
from streaming.simulation import read_trace

MODEL = """\
interval = "1s"
batches = 120
seed = 3

[input]
rate = 200

[[outputs]]
name = "parse"
kind = "linear"
base = "100ms"
per_record = "1ms"

[[outputs]]
name = "store"
kind = "exponential"
mean = "300ms"
"""


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.toml"
    path.write_text(MODEL)
    return path


def test_simulate_prints_a_report_and_writes_plot_and_events(model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A model file gives the text report; --plot and --events write a PNG and a replayable trace."""
    status = main(["simulate", str(model_file), "--plot", str(tmp_path / "run.png"), "--events", str(tmp_path / "ev.jsonl")])
    out = capsys.readouterr().out
    assert status == 0
    assert out.splitlines()[0] == "120 batches of 1 s (2 min simulated), concurrent jobs: 1"
    assert "STABLE: the delay stays bounded." in out
    assert (tmp_path / "run.png").read_bytes()[:4] == b"\x89PNG"
    assert len(read_trace(tmp_path / "ev.jsonl").completed_batches) == 120


def test_flags_override_the_file_and_json_is_machine_readable(model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--interval, --concurrency, --rate-factor and --batches change the model; --json prints the summary."""
    status = main(["simulate", str(model_file), "--interval", "500ms", "--concurrency", "2", "--rate-factor", "1.5",
                   "--batches", "40", "--json"])
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert status == 0
    assert (summary["batches"], summary["batch_interval_ms"], summary["concurrent_jobs"]) == (40, 500, 2)


def test_a_model_from_flags_alone_and_fail_unstable(capsys: pytest.CaptureFixture[str]) -> None:
    """--interval and --op describe a model without a file; --fail-unstable exits 3 for an overload."""
    status = main(["simulate", "--interval", "1s", "--op", "kind=constant,value=1500ms", "--batches", "10", "--fail-unstable"])
    assert status == 3
    assert "UNSTABLE" in capsys.readouterr().out


def test_sweep_mode_prints_the_stable_region(model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--sweep-intervals and --sweep-concurrency print the grid and write the sweep plot."""
    status = main(["simulate", str(model_file), "--duration", "1m", "--sweep-intervals", "500ms,1s",
                   "--sweep-concurrency", "1,2", "--plot", str(tmp_path / "sweep.png")])
    out = capsys.readouterr().out
    assert status == 0
    assert out.startswith("Stable region over 1 min simulated per point")
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_replaying_a_trace_under_a_new_interval(model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--trace replays recorded events; flags change the configuration."""
    assert main(["simulate", str(model_file), "--events", str(tmp_path / "ev.jsonl")]) == 0
    capsys.readouterr()
    assert main(["simulate", "--trace", str(tmp_path / "ev.jsonl"), "--interval", "2s"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "60 batches of 2 s (2 min simulated), concurrent jobs: 1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", "{model}", "--concurrency", "0"], "aiodstream simulate: error: {model}: concurrent_jobs: must be at least 1, got 0"),
        (["simulate", "--interval", "1s", "--op", "kind=exponential,mean=soon"],
         "aiodstream simulate: error: outputs[0].mean: must be a duration such as "
         '"500ms", "2s", "5m" or "1h", or an unquoted number of milliseconds, got \'soon\''),
        (["simulate", "--interval", "1000", "--op", "kind=constant,value=100"],
         'aiodstream simulate: error: --interval: needs a unit on the command line, such as "1000ms" or "1000s", got \'1000\''),
        (["simulate", "{model}", "--sweep-intervals", "1s,2.5"],
         'aiodstream simulate: error: {model}: --sweep-intervals[1]: needs a unit on the command line, such as "2.5ms" or '
         '"2.5s", got \'2.5\''),
        (["simulate", "{model}", "--sweep-intervals", "1s,0s"],
         "aiodstream simulate: error: {model}: --sweep-intervals[1]: must be positive, got '0s'"),
        (["simulate", "{model}", "--sweep-intervals", "1s,500ms,1000ms"],
         "aiodstream simulate: error: {model}: --sweep-intervals[2]: repeats '1s' (each value is one row of the sweep)"),
        (["simulate", "{model}", "--sweep-concurrency", "1,2,2"],
         "aiodstream simulate: error: {model}: --sweep-concurrency[2]: repeats '2' (each value is one row of the sweep)"),
        (["simulate"], "aiodstream simulate: error: no model: give a TOML model file, --trace FILE, or --interval with --op (see --help)"),
    ],
)
def test_bad_input_exits_2_naming_the_field(model_file: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A wrong value is reported on stderr with its field, and the exit status is 2."""
    assert main([a.format(model=model_file) for a in args]) == 2
    assert capsys.readouterr().err.strip() == message.format(model=model_file)


def test_the_console_script_runs(model_file: Path) -> None:
    """``python -m streaming._cli simulate`` (what the aiodstream script calls) exits 0 and prints the report."""
    result = subprocess.run([sys.executable, "-m", "streaming._cli", "simulate", str(model_file), "--batches", "5"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("5 batches of 1 s")


def test_no_subcommand_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a subcommand the parser's help goes to stderr."""
    assert main([]) == 2
    assert "simulate" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "target", "message"),
    [
        ("--plot", "{tmp}/missing/run.png", "--plot: cannot write {tmp}/missing/run.png: the folder {tmp}/missing does not exist"),
        ("--plot", "{tmp}", "--plot: {tmp} is a directory; give a file name"),
        ("--plot", "{tmp}/model.toml/run.png", "--plot: cannot write {tmp}/model.toml/run.png: {tmp}/model.toml is a file, not a folder"),
        ("--events", "{tmp}/missing/ev.jsonl", "--events: cannot write {tmp}/missing/ev.jsonl: No such file or directory"),
        ("--events", "{tmp}", "--events: cannot write {tmp}: Is a directory"),
    ],
)
def test_a_plot_or_events_file_that_cannot_be_written_is_refused_before_simulating(
        model_file: Path, tmp_path: Path, option: str, target: str, message: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A --plot or --events path in a missing folder, or a directory, is one line and exit 2 before any batch is simulated."""
    import streaming.simulation

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulated although the output cannot be written")

    monkeypatch.setattr(streaming.simulation, "simulate", never)
    assert main(["simulate", str(model_file), option, target.format(tmp=tmp_path)]) == 2
    assert capsys.readouterr().err == f"aiodstream simulate: error: {message.format(tmp=tmp_path)}\n"


def test_a_plot_in_a_folder_the_user_may_not_write_is_refused_before_simulating(
        model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A --plot in a folder without write permission is refused before the run (the permission check is the OS's)."""
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path)
    assert main(["simulate", str(model_file), "--plot", str(tmp_path / "run.png")]) == 2
    assert capsys.readouterr().err == (f"aiodstream simulate: error: --plot: cannot write {tmp_path}/run.png: the folder "
                                       f"{tmp_path} is not writable\n")


def test_ctrl_c_during_a_simulation_is_one_line_and_status_130(model_file: Path, tmp_path: Path) -> None:
    """SIGINT while simulating ends the command with "interrupted" on stderr and 130, the events written so far kept."""
    events = tmp_path / "ev.jsonl"
    child = subprocess.Popen([sys.executable, "-m", "streaming._cli", "simulate", str(model_file), "--batches", "1000000",
                              "--progress", "--events", str(events)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stderr is not None and child.stderr.read(1)  # the progress bar: the simulation is under way
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 130, err
    assert err.decode().endswith("aiodstream simulate: interrupted\n") and "Traceback" not in err.decode()
    assert out == b"" and read_trace(events).completed_batches


def test_ctrl_c_during_a_sweep_is_one_line_and_status_130(model_file: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt out of any subcommand is one line and status 130, not a traceback."""
    import streaming.simulation

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(streaming.simulation, "sweep", interrupted)
    try:
        status = main(["simulate", str(model_file), "--sweep-intervals", "1s,2s"])
    except KeyboardInterrupt:
        pytest.fail("the KeyboardInterrupt left main(): the console script prints its traceback")
    assert status == 130
    assert capsys.readouterr().err == "aiodstream simulate: interrupted\n"


def test_ctrl_c_inside_an_exception_group_is_one_line_and_status_130_too(
        model_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """On trio (``--backend trio``) Ctrl-C leaves the run inside an exception group: still one line and 130 (lane M2: a
    traceback of the group and status 1); a group without a KeyboardInterrupt is not taken for one."""
    import streaming.simulation

    raised: list[BaseException] = [BaseExceptionGroup("run", [KeyboardInterrupt()]), ExceptionGroup("run", [ValueError("x")])]

    def fails(*args: object, **kwargs: object) -> None:
        raise raised.pop(0)

    monkeypatch.setattr(streaming.simulation, "simulate", fails)
    assert main(["simulate", str(model_file), "--backend", "trio"]) == 130
    assert capsys.readouterr().err == "aiodstream simulate: interrupted\n"
    with pytest.raises(ExceptionGroup):
        main(["simulate", str(model_file), "--backend", "trio"])


def test_a_model_drawing_a_duration_beyond_sparks_range_is_one_line_and_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A log-normal of sigma 10 draws, some hours in, a sample beyond a Java long of milliseconds: the command says so in
    one line with the batch, status 2 (lane M3: a JobFailedError traceback and status 1, hours into a run)."""
    status = main(["simulate", "--no-progress", "--interval", "1s", "--op", "kind=normal,mean=0,stddev=1e308",
                   "--batches", "5"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err == ("aiodstream simulate: error: duration: a sample of -inf ms is beyond Spark's range of durations "
                   "(9223372036854775807 ms): the distribution's parameters draw durations no run can take (at the batch "
                   "of 1000 ms)\n")
    status = main(["simulate", "--no-progress", "--interval", "1s", "--op", "kind=lognormal,median=100ms,sigma=60",
                   "--sweep-intervals", "1s,2s", "--batches", "50"])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("aiodstream simulate: error: duration: a sample of ") and err.count("\n") == 1, err
