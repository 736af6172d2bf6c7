"""The word count's median processing delay on local[2] and on a two-worker standalone cluster, pyspark.streaming and ours.

Starts a Spark standalone cluster on 127.0.0.1 from the installed pyspark (a Master and two
one-core Workers, as the tests do), then runs ``bench_vs_pyspark.py --only word_count`` once per
master in a child process (a process has one SparkContext): 5000 queued lines per 1 s batch,
flatMap, map, reduceByKey, collect; alternating rounds of pyspark.streaming and aiodstream on the
same SparkContext; the median processing delay from each engine's BatchInfo, and the ratio ours /
pyspark on each master. Then, on the cluster, the socket word count's highest stable ingest rate
(``bench_vs_pyspark --only socket_rate``: 1 s batches, the rate doubling while the batches carry
>= 90 % of the lines and keep up) with our receiver on the driver, ours as a long-running task
on an executor (its blocks in a checkpoint's write-ahead log), and pyspark.streaming's (a
receiver in an executor's JVM), in one run. Prints one JSON object with the machine's load
beside each result.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def word_count_on(master: str, rounds: int, conf: list[str]) -> dict[str, Any]:
    """``bench_vs_pyspark --only word_count`` on ``master``, in a child process; its word_count result."""
    command = [sys.executable, str(ROOT / "bench" / "bench_vs_pyspark.py"), "--only", "word_count", "--master", master,
               "--rounds", str(rounds), "--three-outputs-masters", "--spark-conf", *conf]
    child = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if child.returncode != 0:
        raise RuntimeError(f"the word count on {master} failed:\n{child.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(child.stdout)["word_count"]
    return result


def socket_rate_on(master: str, conf: list[str], start: int) -> dict[str, Any]:
    """``bench_vs_pyspark --only socket_rate`` for the three receivers on ``master``, in a child process."""
    command = [sys.executable, str(ROOT / "bench" / "bench_vs_pyspark.py"), "--only", "socket_rate", "--master", master,
               "--socket-engines", "ours,ours_executor,pyspark", "--rate-start", str(start), "--three-outputs-masters",
               "--spark-conf", *conf]
    child = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if child.returncode != 0:
        raise RuntimeError(f"the socket rate on {master} failed:\n{child.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(child.stdout)["socket_rate"]
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per engine on each master (>= 5)")
    parser.add_argument("--no-socket", action="store_true", help="skip the socket ingest rates")
    parser.add_argument("--no-word-count", action="store_true", help="skip the word count's delays")
    parser.add_argument("--rate-start", type=int, default=5000, help="the socket ladder's first rate (lines/s)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.cluster import APP_CONF, StandaloneCluster

    out: dict[str, Any] = {"cpus": os.cpu_count(), "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    with StandaloneCluster(workers=2, cores=1) as cluster:
        cluster_conf = [f"{key}={value}" for key, value in {**APP_CONF, "spark.cores.max": "2"}.items()]
        masters = {"local[2]": [], "standalone cluster, 2 workers x 1 core": cluster_conf}
        urls = {"local[2]": "local[2]", "standalone cluster, 2 workers x 1 core": cluster.master_url}
        for name, conf in ({} if args.no_word_count else masters).items():
            result = word_count_on(urls[name], args.rounds, conf)
            out[name] = {key: result[key] for key in ("pyspark_processing_ms_median", "ours_processing_ms_median",
                                                      "ratio_of_all_batches", "ratio_median_of_rounds", "ratio_min",
                                                      "ratio_max", "samples", "failed_batches", "load_average")}
            print(f"{name}: {out[name]}", file=sys.stderr, flush=True)
        if not args.no_socket:
            rates = socket_rate_on(cluster.master_url, masters["standalone cluster, 2 workers x 1 core"], args.rate_start)
            out["socket ingest on the cluster"] = {
                **{f"{engine}_max_sustained_lines_per_s": rates[engine]["max_sustained_lines_per_s"]
                   for engine in ("ours", "ours_executor", "pyspark")},
                "steps": {engine: rates[engine]["steps"] for engine in ("ours", "ours_executor", "pyspark")},
                "load_average": rates["load_average"]}
            print(f"socket: {out['socket ingest on the cluster']}", file=sys.stderr, flush=True)
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
