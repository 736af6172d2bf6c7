"""The same DStream programs on pyspark.streaming and on aiodstream, on one local Spark, in one run.

Prints one JSON object with each measure for both engines, the ratio ours / pyspark, and the
machine's load average beside each result. Every ratio divides the same quantity, measured the
same way, with the same settings on both sides:

* ``noop``: engine cost per batch with a no-op ``foreachRDD``, as both engines' BatchInfo
  reports it: the mean processing delay (whole milliseconds per batch, averaged over
  ``--noop-batches``) at a 100 ms interval on the wall clock. Target ratio <= 0.25. Beside it,
  not in a ratio: ``ours_engine_ms_per_batch``, our no-op program driven flat out on a manual
  clock through the real Spark-backed graph (wall time per batch, median of
  ``--engine-repeats`` runs, each after 50 warm-up batches; target <= 0.5 ms), and
  ``platform_thread_hops_ms``, what this machine charges for two thread round trips (a batch
  generated on its thread makes two: generation and the job each leave the event loop for a
  thread and wake it when done; this no-op batch is generated on the loop and makes one).
* ``word_count``: one output (flatMap, map, reduceByKey, collect) over 5000 queued lines;
  ``--delay-rounds`` alternating rounds (default 9; the engine going first alternates too). Per
  round: each engine's median processing delay, its CPU per batch (the driver's, this Python
  process; and the total, with the JVM and its Python workers, from ``/proc``) and the load; the
  ratio ours / pyspark. Reported: the median of the per-round ratios with its quartiles, min and
  max (``resolved``: the quartiles lie closer together than the median lies to 1), and the same
  for both CPU ratios and for each part of the process tree's CPU (``cpu_parts_ms_per_batch``:
  driver, JVM, the JVM's JIT compiler threads, Python workers). ``--warmup-rounds`` (default 1)
  unmeasured rounds of each runner go first: the JIT compiles for hundreds of batches after the
  JVM starts. ``spark_work_per_batch`` gives, per engine, Spark's jobs, stages and tasks, the bytes
  its shuffles wrote and read and its results sent, and ``times_ms``: where a batch's processing
  delay went (the Spark jobs' span, the engine's time outside it, the stages' spans, the tasks' run
  and CPU time); ``py4j_calls_per_batch`` and ``pickled_commands_per_batch`` (and their bytes: the
  Python functions each task of a stage unpickles) count the driver's side. Every round also runs
  ``spark_alone``, the floor: the same batches' Spark jobs made by the same pyspark RDD calls with no
  streaming engine, at the same interval. ``floor`` gives the share of each engine's processing
  delay that is this Spark work, each engine's milliseconds above it, and ``ratio_at_floor`` (the
  floor over pyspark's delay): the lowest ratio ours can reach without doing less Spark work than
  the program asks for, with ``target_reachable``. Target: median ratio <= 0.9, resolved.
* ``three_outputs``: three independent output operations per batch (word count, line count,
  distinct words) with ``concurrentJobs=3`` on **both** engines (pyspark reads
  ``spark.streaming.concurrentJobs``), at 1000 and 5000 lines per batch; measured as
  ``word_count`` is. Target as there, with ours completing batches in order (pyspark does not
  promise it: ``completed_in_batch_order`` is reported for both). ``--three-outputs-masters`` also runs
  the measure in a child process on a Spark with spare task slots (default ``local[6]``).
  Beside each result, ``spark_alone_three_threads_vs_sequential``: the same three Spark jobs
  without a streaming engine, from three threads at once vs one after another, i.e. the most
  concurrency can win on that machine and master.
* ``socket_rate``: socket word count at a 1 s interval; the highest rate (lines/s, doubling
  from ``--rate-start``; the engines alternate at each rate) at which the batches carry >= 90%
  of the lines sent, the mean processing delay stays under the interval (so the scheduling
  delay cannot grow) and the last scheduling delay is under two intervals. Target ratio >= 1.0.

Not part of the test suite; takes several minutes. Run: ``python bench/bench_vs_pyspark.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from operator import add
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
VOCABULARY = [f"w{i}" for i in range(1000)]


# -- the programs (pyspark's API only, so both engines run the very same code) --
#
# Output functions return None: pyspark's foreachRDD treats a truthy return value as an RDD
# (its TransformFunction reads ``r._jrdd``) and fails the job otherwise.


def collect(rdd: Any) -> None:
    rdd.collect()


def count(rdd: Any) -> None:
    rdd.count()


def noop(ssc: Any, sc: Any, batches: int) -> None:
    ssc.queueStream([], default=sc.parallelize([1], 1)).foreachRDD(lambda rdd: None)


def make_lines(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(VOCABULARY, k=8)) for _ in range(count)]


def word_count(ssc: Any, sc: Any, batches: int, lines_per_batch: int = 5000) -> None:
    rdds = [sc.parallelize(make_lines(i, lines_per_batch), 2) for i in range(batches + 5)]
    counts = ssc.queueStream(rdds).flatMap(lambda line: line.split(" ")).map(lambda w: (w, 1)).transform(
        lambda rdd: rdd.reduceByKey(add))
    counts.foreachRDD(collect)


def three_outputs(ssc: Any, sc: Any, batches: int, lines_per_batch: int = 5000) -> None:
    rdds = [sc.parallelize(make_lines(i, lines_per_batch), 2) for i in range(batches + 5)]
    lines = ssc.queueStream(rdds)
    words = lines.flatMap(lambda line: line.split(" "))
    words.map(lambda w: (w, 1)).transform(lambda rdd: rdd.reduceByKey(add)).foreachRDD(collect)
    lines.foreachRDD(count)
    words.transform(lambda rdd: rdd.distinct()).foreachRDD(count)


def spark_alone_three_jobs(sc: Any, lines_per_batch: int, batches: int) -> dict[str, float]:
    """The three outputs' Spark jobs without any streaming engine: from three threads at once vs one after another.

    Batches alternate between the two ways (the first two of each are warm-up). The ratio is the
    most running the jobs concurrently can win on this machine and master.
    """
    from concurrent.futures import ThreadPoolExecutor

    def jobs(rdd: Any) -> list[Callable[[], Any]]:
        words = rdd.flatMap(lambda line: line.split(" "))
        return [lambda: words.map(lambda w: (w, 1)).reduceByKey(add).collect(), rdd.count, words.distinct().count]

    timings: dict[str, list[float]] = {"sequential": [], "parallel": []}
    with ThreadPoolExecutor(3) as pool:
        for i in range(2 * batches):
            rdd = sc.parallelize(make_lines(i, lines_per_batch), 2)
            began = time.perf_counter()
            if i % 2:
                for future in [pool.submit(job) for job in jobs(rdd)]:
                    future.result()
            else:
                for job in jobs(rdd):
                    job()
            timings["parallel" if i % 2 else "sequential"].append((time.perf_counter() - began) * 1000)
    seq, par = (statistics.median(timings[k][2:]) for k in ("sequential", "parallel"))
    return {"sequential_ms_median": round(seq, 1), "parallel_ms_median": round(par, 1), "ratio": round(par / seq, 3)}


def socket_word_count(ssc: Any, port: int, **receiver: Any) -> None:
    counts = ssc.socketTextStream("127.0.0.1", port, **receiver).flatMap(lambda line: line.split(" ")).map(lambda w: (w, 1)).transform(
        lambda rdd: rdd.reduceByKey(add))
    counts.foreachRDD(collect)


# -- Spark work: py4j calls, jobs, stages, tasks --


PY4J_CALLS = [0, 0, 0]
"""Since :func:`count_py4j_calls`: py4j calls this process has made (every thread), and the Python functions it pickled
for Spark (each ``PythonRDD``'s command: count and bytes, which every task of the RDD's stages unpickles)."""


def count_py4j_calls(sc: Any) -> None:
    """Count every py4j call and pickled command from now on in ``PY4J_CALLS`` (wraps the process's py4j client and
    pyspark's ``_prepare_for_python_RDD``; once per process)."""
    import pyspark.core.rdd as core_rdd

    client = sc._gateway._gateway_client
    send = client.send_command
    prepare = core_rdd._prepare_for_python_RDD
    calls = PY4J_CALLS

    def send_command(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1  # a lost increment between threads costs a count, not a crash: a bench
        return send(*args, **kwargs)

    def prepare_for_python_rdd(context: Any, command: Any) -> Any:
        prepared = prepare(context, command)
        calls[1] += 1
        calls[2] += len(prepared[0])
        return prepared

    client.send_command = send_command
    core_rdd._prepare_for_python_RDD = prepare_for_python_rdd  # PipelinedRDD._jrdd looks it up in its module


def scala_seq(seq: Any) -> list[Any]:
    """A Scala ``Seq`` over py4j as a list (one call per element)."""
    return [seq.apply(i) for i in range(seq.size())]


def last_job_id(sc: Any) -> int:
    """The highest Spark job id so far (-1 before the first): the status store lists the newest job first."""
    jobs = sc._jsc.sc().statusStore().jobsList(None)
    return int(jobs.apply(0).jobId()) if jobs.size() else -1


def spark_jobs_since(sc: Any, after: int) -> list[dict[str, Any]]:
    """Spark's record of the jobs with ids above ``after``, each with its batch time, its submission and completion
    (ms, the JVM's clock) and per stage its completed tasks, PythonRDDs, span and its tasks' run and CPU time
    (:func:`bench._rounds.spark_work_per_batch` reads them). py4j calls: run it after a run.

    The batch time comes from the job's group (ours: ``aiodstream-<context>-<batch ms>-<output>``) or description
    (pyspark.streaming's links to ``batch/?id=<batch ms>``); jobs with neither are left out.
    """
    store, tracker, gateway = sc._jsc.sc().statusStore(), sc.statusTracker(), sc._gateway
    seq = scala_seq
    no_statuses, no_quantiles = gateway.jvm.java.util.ArrayList(), gateway.new_array(gateway.jvm.double, 0)

    def names(cluster: Any) -> list[str]:
        found = [node.name() for node in seq(cluster.childNodes())]
        for child in seq(cluster.childClusters()):
            found += names(child)
        return found

    def millis(option: Any) -> int | None:  # a Scala Option[Date]
        return int(option.get().getTime()) if option.isDefined() else None

    jobs = []
    listed = store.jobsList(None)  # newest first
    for data in (listed.apply(i) for i in range(listed.size())):
        if data.jobId() <= after:
            break
        text = " ".join(str(o.get()) for o in (data.jobGroup(), data.description()) if o.isDefined())
        match = re.search(r"\d{13}", text)
        if match is None:
            continue
        stages = []
        for stage_id in seq(data.stageIds()):
            info = tracker.getStageInfo(stage_id)
            rdds = names(store.operationGraphForStage(stage_id).rootCluster())
            stage: dict[str, Any] = {"tasks": info.numCompletedTasks if info is not None else 0,
                                     "python_rdds": sum(1 for name in rdds if name == "PythonRDD")}
            if stage["tasks"]:  # run (a skipped stage has no times): its last attempt's span, task times and bytes
                attempt = store.stageData(stage_id, False, no_statuses, False, no_quantiles).apply(0)
                began, ended = millis(attempt.submissionTime()), millis(attempt.completionTime())
                stage.update(span_ms=None if began is None or ended is None else ended - began,
                             task_run_ms=int(attempt.executorRunTime()), task_cpu_ms=attempt.executorCpuTime() / 1e6,
                             shuffle_write_bytes=int(attempt.shuffleWriteBytes()),
                             shuffle_read_bytes=int(attempt.shuffleReadBytes()), result_bytes=int(attempt.resultSize()))
            stages.append(stage)
        jobs.append({"batch": int(match.group()), "submitted": millis(data.submissionTime()),
                     "completed": millis(data.completionTime()), "stages": stages})
    return jobs


# -- engines --


def batch_recorder(wanted: int, cpu_after: int | None = None) -> Any:
    """A pyspark-style listener (pyspark's own class, which both engines accept) recording each batch:
    its time, delays, records, failed operations (and the first failure) and each operation's duration.

    With ``cpu_after``, it also reads the CPU spent so far (the driver's, and the process tree's by part:
    :func:`bench._rounds.cpu_parts`) when that many batches and when ``wanted`` batches have completed
    (``cpu``: the two readings).
    """
    from pyspark.streaming.listener import StreamingListener

    from bench._rounds import cpu_parts

    class Recorder(StreamingListener):
        def __init__(self) -> None:
            super().__init__()
            self.batches: list[dict[str, int]] = []
            self.cpu: list[tuple[float, dict[str, float] | None]] = []
            self.py4j: list[list[int]] = []
            self.done = threading.Event()

        def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803
            info = batchCompleted.batchInfo()
            ops = sorted(info.outputOperationInfos().items())
            self.batches.append({
                "time": info.batchTime().milliseconds(), "scheduling": info.schedulingDelay(),
                "processing": info.processingDelay(), "records": info.numRecords(),
                "failed": sum(1 for _, op in ops if op.failureReason()),
                "failure": next((op.failureReason()[:400] for _, op in ops if op.failureReason()), None),
                "ops_ms": [op.endTime() - op.startTime() for _, op in ops]})
            if cpu_after is not None and len(self.batches) in (cpu_after, wanted) and len(self.cpu) < 2:
                self.cpu.append((time.process_time(), cpu_parts()))
                self.py4j.append(list(PY4J_CALLS))
            if len(self.batches) >= wanted:
                self.done.set()

    return Recorder()


def run_program(engine: str, sc: Any, interval: float, batches: int, build: Callable[[Any], None],
                concurrent_jobs: int | None = None, timeout: float = 300) -> list[dict[str, int]]:
    """Run ``build(ssc)`` on ``engine`` until ``batches`` batches completed; return their records."""
    return run_measured(engine, sc, interval, batches, build, concurrent_jobs, timeout)["batches"]  # type: ignore[no-any-return]


def run_measured(engine: str, sc: Any, interval: float, batches: int, build: Callable[[Any], None],
                 concurrent_jobs: int | None = None, timeout: float = 300, skip: int = 0,
                 spark_work: bool = False) -> dict[str, Any]:
    """Run ``build(ssc)`` on ``engine`` until ``batches`` batches completed.

    Returns the batches after the first ``skip``, the driver's and the total CPU milliseconds per
    batch over those batches (with ``skip`` > 0; total is None off Linux), and the 1-minute load;
    with ``skip`` > 0, the py4j calls per batch (once :func:`count_py4j_calls` is installed), and
    with ``spark_work``, the Spark work of those batches (:func:`spark_jobs_since`, read after the run).
    """
    if engine == "pyspark":
        from pyspark.streaming import StreamingContext as PySparkContext

        # The JVM JobScheduler reads spark.streaming.concurrentJobs from the SparkContext's conf
        # (the very object sc._conf wraps) when the StreamingContext is created.
        sc._conf.set("spark.streaming.concurrentJobs", str(concurrent_jobs or 1))
        ssc: Any = PySparkContext(sc, interval)  # type: ignore[arg-type]  # pyspark's stub says int; it takes seconds
    else:
        from streaming import StreamingContext

        ssc = StreamingContext(sc, interval, concurrentJobs=concurrent_jobs)
    recorder = batch_recorder(batches, skip or None)
    ssc.addStreamingListener(recorder)
    first_job = last_job_id(sc) if spark_work else None
    build(ssc)
    ssc.start()
    try:
        if not recorder.done.wait(timeout):
            raise RuntimeError(f"{engine}: only {len(recorder.batches)} of {batches} batches in {timeout}s")
    finally:
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
    run: dict[str, Any] = {"batches": list(recorder.batches[skip:batches]), "load_1m": load()[0],
                           "driver_cpu_ms_per_batch": None, "total_cpu_ms_per_batch": None, "cpu_parts_ms_per_batch": None}
    if len(recorder.cpu) == 2:
        from bench._rounds import cpu_spent

        (d0, p0), (d1, p1) = recorder.cpu
        n = batches - skip
        run["driver_cpu_ms_per_batch"] = round((d1 - d0) / n * 1000, 2)
        parts = run["cpu_parts_ms_per_batch"] = cpu_spent(p0, p1, n)
        if parts is not None:
            run["total_cpu_ms_per_batch"] = round(sum(parts.values()), 1)
        run.update(calls_per_batch(recorder.py4j[0], recorder.py4j[1], n))
    if first_job is not None:
        from bench._rounds import spark_work_per_batch

        measured = {b["time"] for b in run["batches"]}
        run["spark_work"] = spark_work_per_batch([j for j in spark_jobs_since(sc, first_job) if j["batch"] in measured],
                                                 {b["time"]: b["processing"] for b in run["batches"]})
    return run


def calls_per_batch(before: list[int], after: list[int], batches: int) -> dict[str, float]:
    """py4j calls and pickled commands (count, bytes) per batch between two readings of :data:`PY4J_CALLS`."""
    calls, commands, command_bytes = ((b - a) / batches for a, b in zip(before, after, strict=True))
    return {"py4j_calls_per_batch": round(calls, 1), "pickled_commands_per_batch": round(commands, 2),
            "pickled_command_bytes_per_batch": round(command_bytes)}


def completed_in_order(batches: list[dict[str, int]]) -> bool:
    """Whether one run's batches completed in batch-time order (the recorder lists them as they complete)."""
    times = [b["time"] for b in batches]
    return times == sorted(times)


def failed_batches(batches: list[dict[str, int]]) -> int:
    return sum(1 for b in batches if b["failed"])


def median_of(batches: list[dict[str, int]], key: str, skip: int) -> float:
    return float(statistics.median(b[key] for b in batches[skip:]))


def platform_thread_hops_ms(rounds: int = 3000) -> dict[str, float]:
    """Wall and CPU ms for two loop -> thread -> loop round trips (each woken by the thread's future), median of 3 runs."""
    from bench.bench_noop_floor import floor

    runs = [floor(rounds) for _ in range(3)]
    return {"wall_ms": round(statistics.median(r["wall_us"] for r in runs) / 1000, 4),
            "cpu_ms": round(statistics.median(r["cpu_us"] for r in runs) / 1000, 4)}


def ours_engine_ms_per_batch(sc: Any, batches: int) -> dict[str, float]:
    """Our no-op program driven flat out on a manual clock: wall and CPU milliseconds per batch (``bench_noop_floor``'s run)."""
    from bench.bench_noop_floor import engine

    run = engine(sc, batches)
    return {"wall_ms_per_batch": round(run["wall_us"] / 1000, 4), "cpu_ms_per_batch": round(run["cpu_us"] / 1000, 4)}


# -- the socket rate ladder --


def serve_lines(rate: int) -> None:
    """Subprocess mode: accept one connection and send ``rate`` lines/s in 20 ms ticks until killed."""
    tick = 0.02
    per_tick = max(1, round(rate * tick))
    chunk = ("\n".join(make_lines(1, per_tick)) + "\n").encode()
    server = socket.create_server(("127.0.0.1", 0))
    print(server.getsockname()[1], flush=True)
    while True:
        conn, _ = server.accept()
        start = time.monotonic()
        k = 0
        try:
            while True:
                conn.sendall(chunk)
                k += 1
                delay = start + k * tick - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        except OSError:
            conn.close()


def sustained(batches: list[dict[str, int]], rate: int, interval_ms: int, skip: int) -> dict[str, Any]:
    """Whether ``rate`` was sustained: the lines arrived, and batches took less than an interval on average.

    A queue of batches stays bounded exactly when the mean processing time is below the interval;
    the last scheduling delay must also show no backlog (under two intervals).
    """
    measured = batches[skip:]
    received = sum(b["records"] for b in measured) / (len(measured) * interval_ms / 1000)
    sched = [b["scheduling"] for b in measured]
    mean_processing = statistics.mean(b["processing"] for b in measured)
    ok = (received >= 0.9 * rate and mean_processing < interval_ms and sched[-1] < 2 * interval_ms
          and not failed_batches(measured))
    return {"rate": rate, "received_per_s": round(received), "scheduling_ms": sched,
            "processing_ms_mean": round(mean_processing), "sustained": ok}


def socket_run(engine: str, sc: Any, rate: int, batches: int) -> dict[str, Any]:
    """One step of the ladder. ``ours_executor``: our receiver as a Spark task, its blocks in a checkpoint's WAL."""
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(rate)], stdout=subprocess.PIPE, text=True)
    scratch = tempfile.mkdtemp(prefix="aiodstream-bench-ck-")
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        if engine == "ours_executor":
            def build(ssc: Any) -> None:
                ssc.checkpoint(scratch)
                socket_word_count(ssc, port, placement="executor")
            result = run_program("ours", sc, 1.0, batches, build)
        else:
            result = run_program(engine, sc, 1.0, batches, lambda ssc: socket_word_count(ssc, port))
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    step = sustained(result, rate, 1000, skip=3)
    print(f"  {engine} socket {rate} lines/s: {step}", file=sys.stderr, flush=True)
    return step


def socket_ladders(sc: Any, start: int, top: int, batches: int,
                   engines: Sequence[str] = ("pyspark", "ours")) -> dict[str, Any]:
    """Double the rate until each engine fails to sustain it; the engines alternate at each rate."""
    ladders: dict[str, dict[str, Any]] = {e: {"max_sustained_lines_per_s": 0, "steps": [], "done": False}
                                          for e in engines}
    rate = start
    while rate <= top and not all(ladder["done"] for ladder in ladders.values()):
        for engine, ladder in ladders.items():
            if ladder["done"]:
                continue
            step = socket_run(engine, sc, rate, batches)
            ladder["steps"].append(step)
            if step["sustained"]:
                ladder["max_sustained_lines_per_s"] = rate
            else:
                ladder["done"] = True
        rate *= 2
    for ladder in ladders.values():
        del ladder["done"]
    return ladders


def paired(rounds: int, theirs: Callable[[], list[dict[str, int]]], ours: Callable[[], list[dict[str, int]]],
           skip: int) -> list[tuple[list[dict[str, int]], list[dict[str, int]]]]:
    """Run both engines ``rounds`` times, alternating which goes first (the machine's load drifts); each round's batches."""
    results = []
    for r in range(rounds):
        order = [("t", theirs), ("o", ours)] if r % 2 == 0 else [("o", ours), ("t", theirs)]
        got: dict[str, list[dict[str, int]]] = {}
        for who, run in order:
            got[who] = run()[skip:]
        results.append((got["t"], got["o"]))
    return results


def paired_runs(rounds: int, theirs: Callable[[], dict[str, Any]], ours: Callable[[], dict[str, Any]],
                label: str, alone: Callable[[], dict[str, Any]] | None = None, warmup: int = 0) -> list[dict[str, Any]]:
    """Like :func:`paired`, for :func:`run_measured` runs: per round, ``{"pyspark": run, "ours": run}``; progress on stderr.

    With ``alone`` (:func:`run_alone`), each round also has ``"spark_alone"``; the three rotate which goes first.
    ``warmup`` rounds of every runner go first and are not returned: the JVM's JIT compiles the program's Spark
    code paths for hundreds of batches (``jvm_jit`` CPU), and would otherwise favour whoever runs later.
    """
    runners = [("pyspark", theirs), ("ours", ours)] + ([("spark_alone", alone)] if alone is not None else [])
    for r in range(warmup):
        for who, run in runners:
            parts = run()["cpu_parts_ms_per_batch"]
            print(f"  {label} warm-up {r + 1}/{warmup}: {who} cpu {parts} ms/batch, load {load()[0]}", file=sys.stderr, flush=True)
    results = []
    for r in range(rounds):
        if alone is None:
            order = runners if r % 2 == 0 else runners[::-1]
        else:
            order = runners[r % 3:] + runners[:r % 3]
        got = {who: run() for who, run in order}
        results.append(got)
        delays = {who: median_of(got[who]["batches"], "processing", 0) for who, _ in runners}
        floor = "" if alone is None else ", the floor (spark_alone) is " + " and ".join(
            f"{delays['spark_alone'] / delays[who]:.2f} of {who}'s" for who in ("pyspark", "ours") if delays[who])
        print(f"  {label} round {r + 1}/{rounds}: " + ", ".join(
            f"{who} {delays[who]} ms (driver cpu {got[who]['driver_cpu_ms_per_batch']}, "
            f"total cpu {got[who]['total_cpu_ms_per_batch']} ms/batch {got[who]['cpu_parts_ms_per_batch']}, "
            f"load {got[who]['load_1m']})" for who, _ in runners)
            + (f"; ours / pyspark {delays['ours'] / delays['pyspark']:.3f}" if delays["pyspark"] else "") + floor,
            file=sys.stderr, flush=True)
    return results


def bare_word_count(rdd: Any) -> list[Callable[[], None]]:
    """:func:`word_count`'s RDD built from a queued ``rdd`` by the same calls, and its output: no streaming engine."""
    counts = rdd.flatMap(lambda line: line.split(" ")).map(lambda w: (w, 1)).reduceByKey(add)
    counts.id()  # its JVM RDD made now, as both engines make it when they generate the batch
    return [lambda: collect(counts)]


def bare_three_outputs(rdd: Any) -> list[Callable[[], None]]:
    """:func:`three_outputs`' RDDs built from a queued ``rdd`` by the same calls, and its three outputs: no engine."""
    words = rdd.flatMap(lambda line: line.split(" "))
    counts = words.map(lambda w: (w, 1)).reduceByKey(add)
    distinct = words.distinct()
    counts.id()
    distinct.id()
    return [lambda: collect(counts), lambda: count(rdd), lambda: count(distinct)]


def run_alone(sc: Any, interval: float, batches: int, lines_per_batch: int, jobs_of: Callable[[Any], list[Callable[[], None]]],
              skip: int) -> dict[str, Any]:
    """A program's Spark jobs with no streaming engine, at the engines' interval: the floor, what the machine allows.

    Per batch (due every ``interval`` s): its RDD built from a parallelized input as the program builds it (the
    ``jobs_of(rdd)`` call, the engines' generation), then its outputs, each from a thread of its own at once (as
    ``concurrentJobs`` lets them run) in a Spark job group naming the batch (one py4j call, as ours sets its group),
    timed from the first start to the last end: the counterpart of a processing delay. A batch starts after the
    previous one ended, so this compares with the engines only while their batches end within the interval (an
    engine with ``concurrentJobs`` > 1 starts a late batch's jobs beside the next one's, which then take longer).
    Returns what :func:`run_measured` returns with ``spark_work``: the batches' Spark work is read from the status
    store by their groups, as the engines' is.
    """
    from concurrent.futures import ThreadPoolExecutor

    from bench._rounds import cpu_parts, cpu_spent, spark_work_per_batch

    def in_group(group: str, job: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            sc.setJobGroup(group, group)  # the JVM thread paired with this pool thread (pyspark's pinned threads)
            job()
        return run

    rdds = [sc.parallelize(make_lines(i, lines_per_batch), 2) for i in range(batches)]
    out: list[dict[str, int]] = []
    cpu = []
    calls = []
    first_job = last_job_id(sc)
    start = time.monotonic()
    start_ms = round(time.time() * 1000)  # the batches' times: 13 digits, as the engines' groups carry theirs
    with ThreadPoolExecutor(3) as pool:
        for k, rdd in enumerate(rdds):
            wait = start + (k + 1) * interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # a bench: the batches' timer
            batch_ms = start_ms + round((k + 1) * interval * 1000)
            jobs = [in_group(f"spark-alone-{batch_ms}-{i}", job) for i, job in enumerate(jobs_of(rdd))]
            began = time.perf_counter()
            for future in [pool.submit(job) for job in jobs]:
                future.result()
            out.append({"time": batch_ms, "processing": round((time.perf_counter() - began) * 1000)})
            if k + 1 in (skip, batches):
                cpu.append((time.process_time(), cpu_parts()))
                calls.append(list(PY4J_CALLS))
    run: dict[str, Any] = {"batches": out[skip:], "load_1m": load()[0], "driver_cpu_ms_per_batch": None,
                           "total_cpu_ms_per_batch": None, "cpu_parts_ms_per_batch": None}
    if len(cpu) == 2:
        (d0, p0), (d1, p1) = cpu
        run["driver_cpu_ms_per_batch"] = round((d1 - d0) / (batches - skip) * 1000, 2)
        parts = run["cpu_parts_ms_per_batch"] = cpu_spent(p0, p1, batches - skip)
        if parts is not None:
            run["total_cpu_ms_per_batch"] = round(sum(parts.values()), 1)
        run.update(calls_per_batch(calls[0], calls[1], batches - skip))
    measured = {b["time"] for b in run["batches"]}
    run["spark_work"] = spark_work_per_batch([j for j in spark_jobs_since(sc, first_job) if j["batch"] in measured],
                                             {b["time"]: b["processing"] for b in run["batches"]})
    return run


def flat(rounds: list[tuple[list[dict[str, int]], list[dict[str, int]]]]) -> tuple[list[dict[str, int]], list[dict[str, int]]]:
    """Every round's batches together, per engine."""
    return [b for t, _ in rounds for b in t], [b for _, o in rounds for b in o]


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages now."""
    return [round(x, 2) for x in os.getloadavg()]


# -- main --


def three_outputs_elsewhere(master: str, args: argparse.Namespace) -> Any:
    """The three-outputs measure on another Spark master: this script in a child process (one SparkContext each)."""
    command = [sys.executable, __file__, "--only", "three_outputs", "--master", master, "--three-outputs-masters",
               "--batches", str(args.batches), "--rounds", str(args.rounds), "--delay-rounds", str(args.delay_rounds),
               "--warmup-rounds", str(args.warmup_rounds),
               "--three-output-lines", *map(str, args.three_output_lines)]
    child = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(child.stdout)["three_outputs"][master]


def ratio(ours: float, theirs: float) -> float | None:
    return None if not theirs else round(ours / theirs, 3)


def spark_work_of(rounds: list[dict[str, Any]], engine: str) -> dict[str, Any] | None:
    """One engine's Spark work per batch over the rounds: the medians of each round's medians, one round's shape."""
    works = [r[engine]["spark_work"] for r in rounds if r[engine].get("spark_work", {}).get("batches")]
    if not works:
        return None
    from bench._rounds import BYTES

    out: dict[str, Any] = {key: statistics.median(w[key] for w in works)
                           for key in ("jobs", "stages", "skipped_stages", "tasks", "python_worker_tasks", *BYTES)
                           if all(key in w for w in works)}
    out["shape_of_one_batch"] = works[0]["shape_of_one_batch"]
    timed = [w["times_ms"] for w in works if "times_ms" in w]
    if timed:  # where a batch's processing time went: medians over the rounds of each round's medians
        out["times_ms"] = {key: statistics.median(t[key] for t in timed) for key in timed[0]}
    return out


def cpu_parts_of(rounds: list[dict[str, Any]], who: str) -> dict[str, float] | None:
    """The median over the rounds of a runner's CPU per batch in each part of the process tree (driver, JVM, workers)."""
    parts = [r[who]["cpu_parts_ms_per_batch"] for r in rounds if r.get(who, {}).get("cpu_parts_ms_per_batch")]
    return {part: statistics.median(p[part] for p in parts) for part in parts[0]} if parts else None


def delay_measure(args: argparse.Namespace, run: Callable[[str], dict[str, Any]], label: str,
                  alone: Callable[[], dict[str, Any]] | None = None) -> dict[str, Any]:
    """``--delay-rounds`` alternating rounds of ``run(engine)``: per-round and pooled medians, the ratios' spread, CPU per batch.

    ``ratio`` is the median of the per-round ratios of median processing delays (ours / pyspark)
    with its quartiles, min and max; ``resolved`` says the quartiles lie closer together than the
    median lies to 1. ``driver_cpu_ratio`` and ``total_cpu_ratio`` do the same for CPU per batch.
    With ``alone`` (the same Spark jobs without an engine, :func:`run_alone`) in each round too,
    ``floor`` (:func:`bench._rounds.floor_summary`) says how much of each engine's delay that Spark work is, and
    the lowest ratio ours could reach without doing less Spark work than the program asks for.
    """
    from bench._rounds import floor_summary, summarize_rounds

    rounds = paired_runs(args.delay_rounds, lambda: run("pyspark"), lambda: run("ours"), label, alone, args.warmup_rounds)
    summary = summarize_rounds(rounds, lambda batches: median_of(batches, "processing", 0))
    runners = ("pyspark", "ours") + (("spark_alone",) if alone is not None else ())
    theirs = [b for r in rounds for b in r["pyspark"]["batches"]]
    ours = [b for r in rounds for b in r["ours"]["batches"]]
    p, o = median_of(theirs, "processing", 0), median_of(ours, "processing", 0)
    return {"pyspark_processing_ms_median": p, "ours_processing_ms_median": o, "ratio_of_all_batches": ratio(o, p),
            **summary, "target_ratio": 0.9,
            "met": summary["ratio"]["median"] <= 0.9 and summary["ratio"]["resolved"],
            "completed_in_batch_order": {e: all(completed_in_order(r[e]["batches"]) for r in rounds) for e in ("pyspark", "ours")},
            "floor": None if alone is None else floor_summary(rounds, lambda batches: median_of(batches, "processing", 0), 0.9),
            "spark_work_per_batch": {e: spark_work_of(rounds, e) for e in runners},
            **{key: {e: statistics.median(r[e].get(key, 0) for r in rounds) for e in runners}
               for key in ("py4j_calls_per_batch", "pickled_commands_per_batch", "pickled_command_bytes_per_batch")},
            "cpu_parts_ms_per_batch": {e: cpu_parts_of(rounds, e) for e in ("pyspark", "ours", "spark_alone")},
            "samples": len(ours), "failed_batches": {"pyspark": failed_batches(theirs), "ours": failed_batches(ours)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=int, default=12, help="batches per word-count run (the first 2 are warm-up)")
    parser.add_argument("--noop-batches", type=int, default=60)
    parser.add_argument("--engine-batches", type=int, default=2000, help="batches of the flat-out manual-clock run")
    parser.add_argument("--engine-repeats", type=int, default=3, help="flat-out runs (the median counts)")
    parser.add_argument("--rate-start", type=int, default=2500)
    parser.add_argument("--rate-top", type=int, default=640_000)
    parser.add_argument("--socket-batches", type=int, default=10)
    parser.add_argument("--socket-engines", default="pyspark,ours",
                        help="engines of the socket ladder: pyspark, ours (receiver on the driver), ours_executor")
    parser.add_argument("--three-output-lines", type=int, nargs="*", default=[1000, 5000],
                        help="input sizes for the three-outputs run (small batches are latency-bound, large ones CPU-bound)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating runs per engine for the no-op measure (>= 5)")
    parser.add_argument("--delay-rounds", type=int, default=9,
                        help="alternating runs per engine for word_count and three_outputs (each ~15 s per engine)")
    parser.add_argument("--warmup-rounds", type=int, default=1,
                        help="unmeasured rounds of every runner before each delay measure's rounds (the JVM's JIT warms up)")
    parser.add_argument("--master", default="local[2]", help="the Spark master of this run")
    parser.add_argument("--spark-conf", nargs="*", default=[], metavar="KEY=VALUE",
                        help="further Spark settings of this run (e.g. for a cluster master)")
    parser.add_argument("--three-outputs-masters", nargs="*", default=["local[6]"],
                        help="further masters for the three-outputs measure, each run in a child process")
    parser.add_argument("--only", nargs="*", default=["noop", "word_count", "three_outputs", "socket_rate"])
    args = parser.parse_args()
    if args.serve:
        serve_lines(args.serve)
        return

    sys.path.insert(0, str(ROOT))
    # The Python workers run this interpreter, whose environment has aiodstream (an executor receiver's
    # task and its batches' block readers run aiodstream's code); PySpark reads only the variable.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext

    conf = (SparkConf().setMaster(args.master).setAppName("bench_vs_pyspark").set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false").set("spark.default.parallelism", "2"))
    for setting in args.spark_conf:
        key, _, value = setting.partition("=")
        conf.set(key, value)
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("ERROR")
    sc.parallelize(make_lines(0, 1000), 2).flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(add).collect()  # warm up workers
    count_py4j_calls(sc)

    out: dict[str, Any] = {"load_average_before": load(), "cpus": os.cpu_count()}
    began = time.monotonic()
    if "noop" in args.only:
        n = args.noop_batches
        rounds = paired(args.rounds, lambda: run_program("pyspark", sc, 0.1, n, lambda ssc: noop(ssc, sc, n)),
                        lambda: run_program("ours", sc, 0.1, n, lambda ssc: noop(ssc, sc, n)), skip=5)
        theirs, ours = flat(rounds)
        p_mean = statistics.mean(b["processing"] for b in theirs)
        o_mean = statistics.mean(b["processing"] for b in ours)
        runs = [ours_engine_ms_per_batch(sc, args.engine_batches) for _ in range(args.engine_repeats)]
        engine = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        out["noop"] = {
            "quantity": "mean processing delay per batch from BatchInfo, 100 ms interval, wall clock",
            "pyspark_processing_ms_mean": round(p_mean, 3),
            "ours_processing_ms_mean": round(o_mean, 3),
            "pyspark_processing_ms_median": median_of(theirs, "processing", 0),
            "ours_processing_ms_median": median_of(ours, "processing", 0),
            "ratio": ratio(o_mean, p_mean),
            "target_ratio": 0.25,
            "samples": len(ours),
            "ours_engine_ms_per_batch": engine["wall_ms_per_batch"],
            "ours_engine_cpu_ms_per_batch": engine["cpu_ms_per_batch"],
            "ours_engine_runs_wall_ms": [run["wall_ms_per_batch"] for run in runs],
            "ours_engine_target_ms": 0.5,
            "platform_thread_hops_ms": platform_thread_hops_ms(),
            "load_average": load(),
        }
        print(f"noop: {out['noop']}", file=sys.stderr, flush=True)
    if "word_count" in args.only:
        n = args.batches
        out["word_count"] = {
            "quantity": "median processing delay per batch from BatchInfo, 5000 lines, 1 s interval", "lines_per_batch": 5000,
            **delay_measure(args, lambda engine: run_measured(engine, sc, 1.0, n, lambda ssc: word_count(ssc, sc, n), skip=2,
                                                               spark_work=True),
                            "word_count", lambda: run_alone(sc, 1.0, n, 5000, bare_word_count, skip=2)),
            "load_average": load()}
        print(f"word_count: {out['word_count']}", file=sys.stderr, flush=True)
    if "three_outputs" in args.only:
        n = args.batches
        out["three_outputs"] = {args.master: {}}
        for size in args.three_output_lines:
            def three(engine: str, k: int = size) -> dict[str, Any]:
                return run_measured(engine, sc, 1.0, n, lambda ssc: three_outputs(ssc, sc, n, k), concurrent_jobs=3, skip=2,
                                    spark_work=True)

            measure = delay_measure(args, three, f"three_outputs {size}",
                                    lambda k=size: run_alone(sc, 1.0, n, k, bare_three_outputs, skip=2))
            out["three_outputs"][args.master][f"{size}_lines_per_batch"] = {
                "quantity": "median processing delay per batch from BatchInfo, concurrentJobs=3 on both", **measure,
                "spark_alone_three_threads_vs_sequential": spark_alone_three_jobs(sc, size, n),
                "load_average": load()}
            print(f"three_outputs {args.master} {size}: {out['three_outputs'][args.master][f'{size}_lines_per_batch']}",
                  file=sys.stderr, flush=True)
        for master in args.three_outputs_masters:
            if master != args.master:
                out["three_outputs"][master] = three_outputs_elsewhere(master, args)
    if "socket_rate" in args.only:
        ladders = socket_ladders(sc, args.rate_start, args.rate_top, args.socket_batches, args.socket_engines.split(","))
        tops = {engine: ladder["max_sustained_lines_per_s"] for engine, ladder in ladders.items()}
        out["socket_rate"] = {**ladders, "ratio": ratio(tops.get("ours", 0), tops.get("pyspark", 0)),
                              "ratio_executor_receiver": ratio(tops.get("ours_executor", 0), tops.get("pyspark", 0)),
                              "target_ratio": 1.0, "load_average": load()}
    out["load_average_after"] = load()
    out["seconds"] = round(time.monotonic() - began, 1)
    sc.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
