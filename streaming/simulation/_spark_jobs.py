"""The Spark jobs behind each output operation of a real run: stages and task times, from Spark's REST API.

A trace of listener events says how long each output operation took, under whatever contention
the run had. What the cluster model replays is the work underneath: each Spark job's stages and
the time each task held its slot. Spark keeps those in its status store and serves them on its
UI's REST API (``/api/v1/applications/<app>/jobs`` and ``/stages/<id>``); a job of an output
operation is found by its job group (``streaming.spark.streaming_job_group``). This module reads
them over HTTP with the standard library, off any event loop, so it needs no PySpark import.
"""

from __future__ import annotations

import datetime as _dt
import json
import time as _time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterable, Mapping, Sequence

import attrs

from ._model_checks import ModelError

__all__ = ["SparkJob", "SparkStage", "SparkTask", "fetch_spark_jobs", "spark_job_from_dict", "spark_job_to_dict"]


def _int_tuple(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(values)


@attrs.frozen
class SparkTask:
    """One successful task attempt: when it was launched and how long it held its slot.

    Attributes:
        launch_ms: launch time (epoch milliseconds).
        duration_ms: launch to finish (Spark's task ``duration``: its slot time, including the
            scheduler delay and (de)serialisation).
        run_ms: ``executorRunTime``: the task's own work (with PySpark, the Python worker's time).
    """

    launch_ms: int
    duration_ms: int
    run_ms: int


@attrs.frozen
class SparkStage:
    """One stage attempt of a job, with its successful tasks in launch order."""

    stage_id: int
    submitted_ms: int | None
    completed_ms: int | None
    tasks: tuple[SparkTask, ...] = attrs.field(converter=_int_tuple)

    @property
    def first_launch_ms(self) -> int | None:
        """When its first task was launched."""
        return min((t.launch_ms for t in self.tasks), default=None)

    @property
    def last_end_ms(self) -> int | None:
        """When its last task finished."""
        return max((t.launch_ms + t.duration_ms for t in self.tasks), default=None)


@attrs.frozen
class SparkJob:
    """One Spark job of an output operation: its stages in the order they ran (skipped stages left out)."""

    job_id: int
    submitted_ms: int | None
    completed_ms: int | None
    stages: tuple[SparkStage, ...] = attrs.field(converter=_int_tuple)


def spark_job_to_dict(job: SparkJob) -> dict[str, Any]:
    """A JSON-ready dict of ``job`` (what a trace stores)."""
    return {
        "job_id": job.job_id,
        "submitted": job.submitted_ms,
        "completed": job.completed_ms,
        "stages": [
            {"stage_id": s.stage_id, "submitted": s.submitted_ms, "completed": s.completed_ms,
             "tasks": [[t.launch_ms, t.duration_ms, t.run_ms] for t in s.tasks]}
            for s in job.stages
        ],
    }


def spark_job_from_dict(d: Mapping[str, Any]) -> SparkJob:
    """The job :func:`spark_job_to_dict` made ``d`` from.

    Raises:
        ModelError: a field is missing or malformed (named).
    """
    try:
        stages = []
        for s in d["stages"]:
            tasks = [SparkTask(int(t[0]), int(t[1]), int(t[2])) for t in s["tasks"]]
            stages.append(SparkStage(int(s["stage_id"]), _opt_int(s.get("submitted")), _opt_int(s.get("completed")), tasks))
        return SparkJob(int(d["job_id"]), _opt_int(d.get("submitted")), _opt_int(d.get("completed")), stages)
    except KeyError as exc:
        raise ModelError(f"jobs.{exc.args[0]}", "is missing") from None
    except (TypeError, ValueError, IndexError) as exc:
        raise ModelError("jobs", f"malformed Spark job: {exc}") from None


def _opt_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _epoch_ms(stamp: str | None) -> int | None:
    # Spark's REST timestamps: "2026-11-25T06:55:28.056GMT" (UTC, millisecond resolution).
    if not stamp:
        return None
    text = stamp[:-3] if stamp.endswith("GMT") else stamp
    moment = _dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=_dt.timezone.utc)
    return round(moment.timestamp() * 1000)


def _get(url: str, timeout: float) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def fetch_spark_jobs(
    ui_url: str,
    app_id: str,
    groups: Mapping[str, Any],
    *,
    timeout: float = 30.0,
    poll_seconds: float = 0.01,
) -> dict[Any, tuple[SparkJob, ...]]:
    """The Spark jobs of each job group in ``groups`` (group name to any key), read from Spark's UI.

    A job Spark has not marked finished yet is waited for (its status lags the action's return
    by a few milliseconds), up to ``timeout`` seconds. Failed task attempts are left out; a stage
    that ran several attempts gives its last. Groups with no job map to an empty tuple.

    Args:
        ui_url: ``SparkContext.uiWebUrl``.
        app_id: ``SparkContext.applicationId``.
        groups: the job groups to look up, each with the key to file its jobs under.
        timeout: how long to wait for unfinished jobs, in seconds.
        poll_seconds: the pause between two looks at unfinished jobs.

    Raises:
        ModelError: Spark's UI cannot be reached (``spark.ui.enabled`` false?), or a job stays
            unfinished past ``timeout``.
    """
    base = f"{ui_url.rstrip('/')}/api/v1/applications/{urllib.parse.quote(app_id)}"
    deadline = _time.monotonic() + timeout
    try:
        while True:
            jobs = [j for j in _get(f"{base}/jobs", timeout) if j.get("jobGroup") in groups]
            running = [j["jobId"] for j in jobs if j.get("status") == "RUNNING" or not j.get("completionTime")]
            if not running:
                break
            if _time.monotonic() > deadline:
                raise ModelError("jobs", f"Spark jobs {running} did not finish within {timeout:g} s")
            _time.sleep(poll_seconds)
        found: dict[Any, list[SparkJob]] = {key: [] for key in groups.values()}
        for j in sorted(jobs, key=lambda j: int(j["jobId"])):
            stages = [stage for sid in sorted(j.get("stageIds", ())) if (stage := _stage(base, int(sid), timeout)) is not None]
            job = SparkJob(int(j["jobId"]), _epoch_ms(j.get("submissionTime")), _epoch_ms(j.get("completionTime")), stages)
            found[groups[j["jobGroup"]]].append(job)
    except urllib.error.URLError as exc:
        raise ModelError("spark_ui", f"cannot read Spark's REST API at {ui_url} ({exc.reason}); recording Spark jobs "
                                     "needs Spark's UI (spark.ui.enabled=true)") from None
    return {key: tuple(value) for key, value in found.items()}


def _stage(base: str, stage_id: int, timeout: float) -> SparkStage | None:
    attempts: Sequence[Mapping[str, Any]] = _get(f"{base}/stages/{stage_id}?details=true", timeout)
    done = [a for a in attempts if a.get("status") != "SKIPPED"]
    if not done:
        return None
    last = max(done, key=lambda a: int(a.get("attemptId", 0)))
    tasks = last.get("tasks") or {}
    succeeded = []
    for t in tasks.values():
        if t.get("status") != "SUCCESS":
            continue
        launch = _epoch_ms(t.get("launchTime"))
        if launch is None:
            continue
        metrics = t.get("taskMetrics") or {}
        succeeded.append(SparkTask(launch, int(t.get("duration", 0)), int(metrics.get("executorRunTime", 0))))
    succeeded.sort(key=lambda t: t.launch_ms)
    return SparkStage(stage_id, _epoch_ms(last.get("submissionTime")), _epoch_ms(last.get("completionTime")), succeeded)
