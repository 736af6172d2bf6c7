"""A DStream word count on a Spark standalone cluster (``python cluster_child.py spark://host:port``).

Prints one JSON line: each batch's sorted counts, the executors the job ran on, and the batches'
input row counts from the query's progress. Spark's scheduler waits until both executors have
registered (``minRegisteredResourcesRatio`` 1.0) before the first job, so the work is spread
over the cluster's workers, not run on the driver.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from pyspark import SparkConf, SparkContext

from streaming import StreamingContext
from tests.cluster import APP_CONF

LINES = [["a b a", "c"], ["b b"], [], ["a d d c", "e"]]


def main(master: str) -> None:
    conf = (SparkConf().setMaster(master).setAppName("aiodstream-cluster-test").setAll(list(APP_CONF.items()))
            .set("spark.cores.max", "2").set("spark.driver.bindAddress", "127.0.0.1")
            .set("spark.ui.enabled", "false").set("spark.ui.showConsoleProgress", "false"))
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    counts: list[list[Any]] = []
    where: set[str] = set()

    def record(rdd: Any) -> None:
        counts.append(sorted(rdd.collect()))
        # A standalone executor runs in <work-dir>/<app id>/<executor id>, and so do its Python workers.
        where.update(rdd.mapPartitions(lambda _: [os.path.basename(os.getcwd())]).collect())

    ssc = StreamingContext(sc, 0.5)
    (ssc.queueStream(LINES).flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b, 2)
     .foreachRDD(record))
    ssc.start()
    ssc.processAllAvailable()
    rows = [p.numInputRows for p in ssc.recentProgress][:len(LINES)]
    ssc.stop(stopSparkContext=False)
    print(json.dumps({"counts": counts[:len(LINES)], "executors": sorted(where), "rows": rows}), flush=True)
    sc.stop()


if __name__ == "__main__":
    main(sys.argv[1])
