"""Many pipelines in one service: what each of 1, 10, 20 and 50 StreamingContexts on one SparkContext costs.

One asyncio service holds N contexts (``async with``, started with ``start_async``: not exclusive)
on one embedded local[2] SparkContext. Each is a small pipeline at 1 s batches: a queue of
100-number lists, a ``map`` and a ``foreachRDD`` that counts the RDD (one Spark job per batch;
``--output none`` builds the RDD and runs no job: the driver's side alone). Each level runs
``--warmup`` batches per context, then two windows of ``--batches`` batches each: the first
alone, for CPU; the second beside a host ticker on the same loop (``bench_host_loop``'s: sleep
5 ms, record how late each wake-up is). Per level, the JSON holds:

* ``driver_cpu_ms_per_context_batch``: this process's CPU (``time.process_time``) over the first
  window (at least 30 batches over all contexts, so one context runs 30) divided by the batches
  the contexts completed in it (the JVM and Python workers are other processes:
  ``jvm_cpu_ms_per_context_batch`` beside it); ``driver_cpu_ms_per_context_second`` divides by
  contexts times seconds instead. The two agree while Spark keeps up; once it does not
  (``processing_delay_ms`` over the interval), batches are generated faster than they complete
  and the first counts the generating of queued batches against the few that completed;
  ``..._net_of_idle`` subtracts what the process spends with Spark and no context (``idle_process``,
  measured first: pyspark's own pollers), which N contexts share;
* what the driver's CPU is made of: ``driver_cpu_ms_per_context_batch_by_thread`` (each kind of
  thread, from ``/proc`` schedstat), ``driver_system_cpu_share``,
  ``driver_context_switches_per_context_batch`` and ``loop_iterations_per_context_batch`` (the
  event loop's ``select`` passes: a lone context's batch makes all of its own);
* with ``--callgrind`` (under ``valgrind --tool=callgrind --instr-atstart=no``, with a longer
  ``--interval-s``), ``driver_instructions_per_context_batch``: every thread's instructions in the
  CPU window, which the machine's load does not move;
* ``memory_kib_per_context``: Python memory (``tracemalloc``, traced from before the contexts
  were made to the end of warm-up, after a collection) per context; RSS growth beside it;
* ``scheduling_delay_ms`` and ``processing_delay_ms``: p50/p99/max over every batch of both
  windows, from ``BatchInfo``;
* ``host_loop_lateness_ms``: the ticker's p50/p99/max (``bench_host_loop``'s budget: p99 <= 5 ms,
  max <= 20 ms);
* ``bare_pyspark`` (unless ``--no-bare``): threads making the same Spark calls at the same rate
  without the engine (:class:`BareTenants`), the platform's own curve;
* ``threads`` (Python threads, by name) and ``jvm_threads`` alive during the run beyond those of
  the process before its first context (idle threads of a pool an earlier level grew count
  too), and ``loop_tasks`` (tasks on the loop).

An unmeasured level of one context runs first (imports and Spark's first jobs happen once per
process). The machine's load average is printed beside every level. Targets (issue 28): per-context driver
CPU and memory flat from 1 to 50 contexts (largest / smallest <= 1.3), and at 20 contexts a
scheduling delay p99 under 10% of the batch interval and the host loop within bench_host_loop's
budget. Run: ``python bench/bench_many_contexts.py [--levels 1,10,20,50 --batches 10]`` (about
3 minutes with the defaults on a quiet machine).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script: the bench package beside the project's packages

from bench.bench_host_loop import TICK_S, percentile, ticker  # noqa: E402  (bench_host_loop's ticker, tick and quantile)
from bench.bench_noop_floor import Instructions  # noqa: E402  (callgrind's counter, toggled around the CPU window)

BATCH_S = 1  # --interval-s sets it (callgrind runs the driver ~50x slower: give it a longer interval)
RECORDS = 100
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


BASE: list[Any] = [0, None]
"""Python and JVM threads of the process once Spark runs, before any context: the levels count threads beyond these."""


IDLE: dict[str, float] = {"cpu_s_per_s": 0.0, "instructions_per_s": 0.0}
"""What this process spends per second with Spark running and no context (see :func:`idle_process`)."""


def idle_process(seconds: float, callgrind: bool) -> dict[str, Any]:
    """This process with its SparkContext and no StreamingContext for ``seconds``: what pyspark's own threads spend per
    second whatever the contexts do (py4j's finalizer worker wakes every second, the accumulator server twice), which a
    level of N contexts divides by N batches a second. Kept in :data:`IDLE` for the levels' ``..._net_of_idle`` figures."""
    counter = Instructions(callgrind)
    counter.start()
    by_thread0, cpu0, wall0 = thread_cpu_ns(), time.process_time(), time.perf_counter()
    time.sleep(seconds)  # a bench: nothing runs on purpose
    by_thread1, cpu1, wall1 = thread_cpu_ns(), time.process_time(), time.perf_counter()
    counter.stop()
    wall = wall1 - wall0
    IDLE["cpu_s_per_s"] = (cpu1 - cpu0) / wall
    IDLE["instructions_per_s"] = counter.count / wall
    return {"seconds": round(wall, 2), "cpu_ms_per_s": round(IDLE["cpu_s_per_s"] * 1000, 3),
            "cpu_ms_per_s_by_thread": {k: round(v / wall, 3) for k, v in cpu_by_thread(by_thread0, by_thread1, 1).items()},
            **({"instructions_per_s": round(IDLE["instructions_per_s"])} if callgrind else {}), "load_average": load()}


def load() -> list[float]:
    """The machine's load average (1, 5, 15 minutes)."""
    return [round(x, 2) for x in os.getloadavg()]


def rss_bytes() -> int:
    """This process's resident set size."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def jvm_pid() -> int | None:
    """The pid of the JVM this process started (the embedded Spark's gateway): a child running java."""
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[1] == me and "java" in Path(f"/proc/{entry}/comm").read_text():
                return int(entry)
        except OSError:
            continue
    return None


def jvm_cpu_s(pid: int | None) -> float:
    """The JVM's CPU seconds so far (user + system), 0 when it is unknown."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def jvm_threads(pid: int | None) -> int | None:
    """How many threads the JVM has."""
    return None if pid is None else len(os.listdir(f"/proc/{pid}/task"))


def thread_cpu_ns() -> dict[int, tuple[int, str]]:
    """Each thread of this process: its CPU nanoseconds so far (``schedstat``: finer than ``stat``'s clock ticks) and name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out = {}
    for entry in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{entry}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue
        tid = int(entry)
        name = names.get(tid)
        if name is None:
            try:
                name = "native " + Path(f"/proc/self/task/{entry}/comm").read_text().strip()
            except OSError:
                name = "native"
        out[tid] = (ns, re.sub(r"\d+", "N", name))
    return out


def cpu_by_thread(before: dict[int, tuple[int, str]], after: dict[int, tuple[int, str]], batches: int) -> dict[str, float]:
    """CPU ms per context-batch spent by each kind of thread (names with their numbers as N) between two samples."""
    spent: collections.Counter[str] = collections.Counter()
    for tid, (ns, name) in after.items():
        spent[name] += ns - before.get(tid, (0, name))[0]
    return {name: round(ns / 1e6 / batches, 3) for name, ns in spent.most_common() if ns > 0}


def quantiles(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0}
    return {"count": len(values), "p50_ms": round(statistics.median(values), 2), "p99_ms": round(percentile(values, 0.99), 2),
            "max_ms": round(max(values), 2)}


class Ticker:
    """bench_host_loop's ticker (its tick, ``TICK_S``) until stopped rather than for a fixed time: how late each wake-up is."""

    def __init__(self) -> None:
        self.lateness_ms: list[float] = []
        self.running = True

    async def run(self) -> None:
        while self.running:
            asked = time.perf_counter()
            await asyncio.sleep(TICK_S)
            self.lateness_ms.append((time.perf_counter() - asked - TICK_S) * 1000)


class LoopIterations:
    """Counts the event loop's iterations (each a ``select`` call, and a wake-up when it slept) until :meth:`stop`."""

    def __init__(self, loop: Any) -> None:
        self.loop, self.count = loop, 0
        self._run_once = loop._run_once

        def run_once() -> None:
            self.count += 1
            self._run_once()

        loop._run_once = run_once

    def stop(self) -> None:
        self.loop._run_once = self._run_once


class Delays:
    """Records each completed batch's scheduling delay (an on-loop listener: the cheapest kind)."""

    run_on_loop = True

    def __init__(self) -> None:
        self.completed = 0
        self.wanted = 0
        self.reached = asyncio.Event()
        self.recording = False
        self.delays_ms: list[float] = []
        self.processing_ms: list[float] = []

    def on_batch_completed(self, event: Any) -> None:
        self.completed += 1
        if self.completed >= self.wanted:
            self.reached.set()
        info = event.batch_info
        if self.recording and info.scheduling_delay is not None and info.processing_delay is not None:
            self.delays_ms.append(info.scheduling_delay.milliseconds)
            self.processing_ms.append(info.processing_delay.milliseconds)


def counter(rdd: Any) -> None:
    rdd.count()


def no_job(rdd: Any) -> None:
    pass


OUTPUTS = {"count": counter, "none": no_job}


def double(x: int) -> int:
    return x * 2


class BareTenants:
    """What the machine allows: N tenants, each a thread running the contexts' count job once a second on the same
    SparkContext (``parallelize`` of the same 100-number list, the same ``map``, ``count``), no engine; with
    ``--output none`` no ``count``: the same Spark calls as a context's driver alone, so that what the platform's own
    calls cost at 1 and at 50 tenants (cold caches and wake-ups at one, pyspark's threads) shows beside the engine.

    A tenant's job for second k is due at ``start + k`` s; it starts then, or when the tenant's previous job ends if
    that is later (a context's batches queue the same way: one job at a time). How late its ``count`` starts (after
    the ``parallelize`` and ``map``, which a context does at generation) is the bare counterpart of the scheduling
    delay, how long the ``count`` runs of the processing delay.
    """

    def __init__(self, sc: Any, n: int, output: str = "count") -> None:
        self.sc, self.n, self.output = sc, n, output
        self.completed = [0] * n
        self.recording = False
        self.lateness_ms: list[float] = []
        self.processing_ms: list[float] = []
        self.changed = threading.Condition()
        self.stopping = False
        self.start = 0.0

    def tenant(self, i: int) -> None:
        data = list(range(RECORDS))
        k = 0
        while not self.stopping:
            due = self.start + k * BATCH_S
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # a bench, not the library: the tenant's own timer
            rdd = self.sc.parallelize(list(data)).map(double)  # what a context's generation does
            began = time.monotonic()
            OUTPUTS[self.output](rdd)  # what its job does
            ended = time.monotonic()
            with self.changed:
                if self.recording:
                    self.lateness_ms.append((began - due) * 1000)
                    self.processing_ms.append((ended - began) * 1000)
                self.completed[i] += 1
                self.changed.notify_all()
            k += 1

    def wait_completed(self, jobs: int) -> None:
        """Until every tenant completed ``jobs`` jobs."""
        with self.changed:
            self.changed.wait_for(lambda: min(self.completed) >= jobs)


def bare_level(sc: Any, n: int, warmup: int, batches: int, jvm: int | None, output: str = "count") -> dict[str, Any]:
    """``n`` bare tenants (:class:`BareTenants`): the windows and figures of :func:`one_level` that apply without an engine."""
    tenants = BareTenants(sc, n, output)
    tenants.start = time.monotonic() + 0.05
    threads = [threading.Thread(target=tenants.tenant, args=(i,), name=f"bare-tenant-{i}", daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    tenants.wait_completed(warmup)
    with tenants.changed:
        tenants.recording = True
        done_before = sum(tenants.completed)
    load_before = load()
    cpu0, wall0, jvm0 = time.process_time(), time.perf_counter(), jvm_cpu_s(jvm)
    cpu_batches = max(batches, -(-30 // n))
    tenants.wait_completed(warmup + cpu_batches)
    cpu1, wall1, jvm1 = time.process_time(), time.perf_counter(), jvm_cpu_s(jvm)
    with tenants.changed:
        done = sum(tenants.completed) - done_before
    tenants.wait_completed(warmup + cpu_batches + batches)
    tenants.stopping = True
    for t in threads:
        t.join()
    wall = wall1 - wall0
    return {
        "contexts": n,
        "load_average": load_before,
        "window_s": round(wall, 2),
        "jobs_completed": done,
        "jobs_per_s": round(done / wall, 2),
        "driver_cpu_ms_per_job": round((cpu1 - cpu0) * 1000 / done, 3),
        "jvm_cpu_ms_per_job": round((jvm1 - jvm0) * 1000 / done, 3),
        "start_lateness_ms": {**quantiles(tenants.lateness_ms), "target_p99_ms": BATCH_S * 1000 * 0.1},
        "processing_ms": quantiles(tenants.processing_ms),
        "load_average_after": load(),
    }


def beside_bare(engine: dict[str, Any], bare: dict[str, Any]) -> dict[str, Any]:
    """The engine's level against bare pyspark's at the same number of contexts: ratios, and the driver's own cost.

    ``driver_own_cpu_ms_per_context_batch``: the engine's driver CPU per completed batch less bare pyspark's per job,
    i.e. what the engine adds on the driver to the same Spark calls (meaningful while both keep up).
    """
    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else round(a / b, 3)

    completed_per_s = engine["batches_completed"] / engine["window_s"] if engine["window_s"] else None
    return {
        "completed_per_s": {"engine": None if completed_per_s is None else round(completed_per_s, 2), "bare": bare["jobs_per_s"],
                            "ratio": ratio(completed_per_s, bare["jobs_per_s"])},
        "processing_p50_ratio": ratio(engine["processing_delay_ms"].get("p50_ms"), bare["processing_ms"].get("p50_ms")),
        "scheduling_p99_ms": {"engine": engine["scheduling_delay_ms"].get("p99_ms"), "bare": bare["start_lateness_ms"].get("p99_ms")},
        "jvm_cpu_per_batch_ratio": ratio(engine["jvm_cpu_ms_per_context_batch"], bare["jvm_cpu_ms_per_job"]),
        "driver_own_cpu_ms_per_context_batch": round(engine["driver_cpu_ms_per_context_batch"] - bare["driver_cpu_ms_per_job"], 3),
    }


async def wait_completed(recorders: list[Delays], batches: int) -> None:
    """Until every context completed ``batches`` batches."""
    for r in recorders:
        r.wanted = batches
        if r.completed < batches:
            r.reached.clear()
            await r.reached.wait()


async def one_level(sc: Any, n: int, warmup: int, batches: int, jvm: int | None, output: str,
                    callgrind: bool = False) -> dict[str, Any]:
    """N contexts in one service: warm up, then measure a window of ``batches`` batches each (with ``callgrind``,
    the first window's instructions counted too)."""
    from streaming import StreamingContext

    total = warmup + max(batches, 30) + batches + 20
    gc.collect()
    tracemalloc.start()
    traced_before = tracemalloc.get_traced_memory()[0]
    rss_before = rss_bytes()
    tasks_before = len(asyncio.all_tasks())
    recorders = [Delays() for _ in range(n)]
    async with contextlib.AsyncExitStack() as stack:
        contexts = []
        for i in range(n):
            ssc = await stack.enter_async_context(StreamingContext(sc, BATCH_S, queryName=f"tenant-{i}"))
            data = [list(range(RECORDS))] * total  # the queue copies each list: the same input per context
            ssc.queueStream(data).map(double).foreachRDD(OUTPUTS[output])
            ssc.addStreamingListener(recorders[i])
            contexts.append(ssc)
        for ssc in contexts:
            await ssc.start_async()
        await wait_completed(recorders, warmup)
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0] - traced_before
        tracemalloc.stop()
        rss = rss_bytes() - rss_before
        # Window 1, CPU: nothing else on the loop. Window 2, lateness: the host's ticker beside the contexts.
        done_before = sum(r.completed for r in recorders)
        for r in recorders:
            r.recording = True
        load_before = load()
        iterations = LoopIterations(asyncio.get_running_loop())
        counter = Instructions(callgrind)
        counter.start()
        by_thread0, usage0 = thread_cpu_ns(), resource.getrusage(resource.RUSAGE_SELF)
        cpu0, wall0, jvm0 = time.process_time(), time.perf_counter(), jvm_cpu_s(jvm)
        cpu_batches = max(batches, -(-30 // n))  # at least 30 context-batches: few contexts' CPU is small
        await wait_completed(recorders, warmup + cpu_batches)
        cpu1, wall1, jvm1 = time.process_time(), time.perf_counter(), jvm_cpu_s(jvm)
        by_thread1, usage1 = thread_cpu_ns(), resource.getrusage(resource.RUSAGE_SELF)
        done = sum(r.completed for r in recorders) - done_before
        counter.stop()
        iterations.stop()
        # The window's profile, for callgrind_annotate: what a context-batch runs at 1 and at 50. Read the printed counts,
        # not a dump's total: in one run the second level's dump held about twice its window's instructions.
        if callgrind:
            subprocess.run(["callgrind_control", f"--dump=contexts-{n}", str(os.getpid())],  # noqa: ASYNC221  (a bench, outside the window)
                           check=True, stdout=subprocess.DEVNULL)
        threads = threading.active_count() - BASE[0]  # alive now, less those of a process with Spark and no context
        names = collections.Counter(re.sub(r"\d+", "N", t.name) for t in threading.enumerate())
        tasks = len(asyncio.all_tasks()) - tasks_before
        jvm_threads_now = jvm_threads(jvm)
        host = Ticker()
        ticking = asyncio.ensure_future(host.run())
        await wait_completed(recorders, warmup + cpu_batches + batches)
        host.running = False
        await ticking
        for ssc in contexts:
            await ssc.stop_async()
    wall = wall1 - wall0
    delays = [d for r in recorders for d in r.delays_ms]
    processing = [d for r in recorders for d in r.processing_ms]
    return {
        "contexts": n,
        "load_average": load_before,
        "window_s": round(wall, 2),
        "batches_completed": done,
        "driver_cpu_ms_per_context_batch": round((cpu1 - cpu0) * 1000 / done, 3),
        "driver_cpu_ms_per_context_second": round((cpu1 - cpu0) * 1000 / (n * wall), 3),
        "driver_cpu_share_of_one_core": round((cpu1 - cpu0) / wall, 3),
        "driver_cpu_ms_per_context_batch_net_of_idle": round((cpu1 - cpu0 - IDLE["cpu_s_per_s"] * wall) * 1000 / done, 3),
        "driver_cpu_ms_per_context_batch_by_thread": cpu_by_thread(by_thread0, by_thread1, done),
        "loop_iterations_per_context_batch": round(iterations.count / done, 2),
        "driver_system_cpu_share": round((usage1.ru_stime - usage0.ru_stime) / max(1e-9, cpu1 - cpu0), 3),
        "driver_context_switches_per_context_batch": {
            "voluntary": round((usage1.ru_nvcsw - usage0.ru_nvcsw) / done, 2),
            "involuntary": round((usage1.ru_nivcsw - usage0.ru_nivcsw) / done, 2)},
        **({"driver_instructions_per_context_batch": round(counter.count / done),
            "driver_instructions_per_context_batch_net_of_idle": round((counter.count - IDLE["instructions_per_s"] * wall) / done)}
           if callgrind else {}),
        "jvm_cpu_ms_per_context_batch": round((jvm1 - jvm0) * 1000 / done, 3),
        "memory_kib_per_context": round(traced / 1024 / n, 1),
        "rss_kib_per_context": round(rss / 1024 / n, 1),
        "scheduling_delay_ms": {**quantiles(delays), "target_p99_ms": BATCH_S * 1000 * 0.1},
        "processing_delay_ms": quantiles(processing),
        "host_loop_lateness_ms": {**quantiles(host.lateness_ms), "budget": {"p99_ms": 5, "max_ms": 20}},
        "threads": threads, "threads_per_context": round(threads / n, 2),
        "thread_names": dict(names.most_common(8)),
        "loop_tasks": tasks, "loop_tasks_per_context": round(tasks / n, 2),
        "jvm_threads": None if jvm_threads_now is None or BASE[1] is None else jvm_threads_now - BASE[1],
        "load_average_after": load(),
    }


def flatness(levels: list[dict[str, Any]], key: str) -> float | None:
    values = [lv[key] for lv in levels if lv[key] > 0]
    return round(max(values) / min(values), 3) if values else None


def main() -> None:
    global BATCH_S
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="1,10,20,50", help="how many contexts, comma-separated")
    parser.add_argument("--batches", type=int, default=10, help="batches per context in each window")
    parser.add_argument("--output", choices=sorted(OUTPUTS), default="count",
                        help="each batch's output: count the RDD (a Spark job), or none (the RDD is built, no job runs)")
    parser.add_argument("--warmup", type=int, default=3, help="batches per context before measuring")
    parser.add_argument("--interval-s", type=int, default=BATCH_S, help="the batch interval in seconds")
    parser.add_argument("--callgrind", action="store_true",
                        help="count the driver's instructions in each level's CPU window (run under valgrind --tool=callgrind "
                             "--instr-atstart=no; with a longer --interval-s, e.g. 5, so that the slowed driver keeps up)")
    parser.add_argument("--no-bare", dest="bare", action="store_false",
                        help="skip bare pyspark's tenants beside each level (what the machine allows)")
    parser.add_argument("--no-driver-alone", dest="driver_alone", action="store_false",
                        help="with --output count, skip the driver-alone run (--output none) beside each level")
    args = parser.parse_args()
    BATCH_S = args.interval_s
    sys.path.insert(0, str(ROOT))
    from streaming.spark import embedded_spark_context

    sc = embedded_spark_context({"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    sc.setLogLevel("ERROR")
    sc.parallelize(range(10), 2).count()  # start the Python workers
    jvm = jvm_pid()
    BASE[:] = [threading.active_count(), jvm_threads(jvm)]
    out: dict[str, Any] = {"load_average_before": load(), "cpus": os.cpu_count(), "batch_interval_s": BATCH_S,
                           "records_per_batch": RECORDS, "output": args.output, "warmup_batches": args.warmup,
                           "window_batches": args.batches}
    out["idle_loop_lateness_ms"] = {**quantiles(asyncio.run(ticker(3.0))), "load_average": load()}
    out["idle_process"] = idle_process(10.0, args.callgrind)
    asyncio.run(one_level(sc, 1, 2, 1, jvm, args.output))  # unmeasured: imports and Spark's first jobs are once per process
    levels, alone = [], []
    for index, n in enumerate(int(x) for x in args.levels.split(",")):
        runs: dict[str, Callable[[], dict[str, Any]]] = {
            "engine": lambda n=n: asyncio.run(one_level(sc, n, args.warmup, args.batches, jvm, args.output,
                                                          args.callgrind))}
        if args.bare:
            runs["bare"] = lambda n=n: bare_level(sc, n, args.warmup, args.batches, jvm, args.output)
        if args.driver_alone and args.output != "none":
            runs["alone"] = lambda n=n: asyncio.run(one_level(sc, n, args.warmup, args.batches, jvm, "none"))
        order = list(runs) if index % 2 == 0 else list(reversed(runs))  # the load drifts: alternate who goes first
        got = {}
        for who in order:
            got[who] = runs[who]()
            print(json.dumps({who: got[who]}), file=sys.stderr, flush=True)
        level = got["engine"]
        if "bare" in got:
            level["bare_pyspark"] = got["bare"]
            level["beside_bare"] = beside_bare(level, got["bare"])
        if "alone" in got:
            level["driver_alone"] = {key: got["alone"][key] for key in (
                "driver_cpu_ms_per_context_batch", "driver_cpu_ms_per_context_batch_net_of_idle", "driver_cpu_ms_per_context_second",
                "memory_kib_per_context", "scheduling_delay_ms", "host_loop_lateness_ms", "load_average")}
            alone.append(got["alone"])
        levels.append(level)
    out["levels"] = levels
    out["flatness"] = {
        "driver_cpu_largest_over_smallest": flatness(levels, "driver_cpu_ms_per_context_batch"),
        "driver_cpu_per_second_largest_over_smallest": flatness(levels, "driver_cpu_ms_per_context_second"),
        "driver_own_cpu_largest_over_smallest": flatness(alone or levels, "driver_cpu_ms_per_context_batch"),
        "driver_own_cpu_net_of_idle_largest_over_smallest": flatness(alone or levels, "driver_cpu_ms_per_context_batch_net_of_idle"),
        "bare_pyspark_cpu_largest_over_smallest": (
            flatness([lv["bare_pyspark"] for lv in levels], "driver_cpu_ms_per_job") if args.bare else None),
        "driver_over_bare_cpu_largest_over_smallest": (
            flatness([lv["beside_bare"] for lv in levels], "driver_own_cpu_ms_per_context_batch") if args.bare else None),
        "memory_largest_over_smallest": flatness(levels, "memory_kib_per_context"),
        **({"instructions_largest_over_smallest": flatness(levels, "driver_instructions_per_context_batch"),
            "instructions_net_of_idle_largest_over_smallest": flatness(levels, "driver_instructions_per_context_batch_net_of_idle")}
           if args.callgrind else {}),
        "target": 1.3,
    }
    out["load_average_after"] = load()
    sc.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
