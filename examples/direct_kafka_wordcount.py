"""Direct Kafka word count: the words of the text records of a Kafka topic, counted per batch (every 2 seconds).

pyspark 2.4's direct_kafka_wordcount.py with the imports changed: each batch reads the records
that reached the topic's partitions since the batch before, straight from the brokers, one
task per partition. It starts at the partitions' ends (``auto.offset.reset`` largest, 0.8's
default), so produce records once it runs. A broker to try it on (librdkafka's mock cluster):

    python -m streaming.kafka.testing --topic words:3      # prints its address, e.g. 127.0.0.1:40123
    python examples/direct_kafka_wordcount.py 127.0.0.1:40123 words

The tasks read Kafka themselves: their Python (``PYSPARK_PYTHON``) needs aiodstream and confluent-kafka.
``--remote sc://host:port`` runs the same program on a Spark Connect session instead of a local
SparkContext: each batch is then read by the Connect server's Python workers (they need the
same packages, and must reach the brokers).
``--batches N`` stops after N batches (pyspark's version runs until killed); ``--interval`` sets
the batch interval in seconds.
"""

from __future__ import annotations

import argparse
import threading
from typing import Any

from pyspark import SparkConf, SparkContext

from streaming import StreamingContext, StreamingListener  # was: from pyspark.streaming import StreamingContext
from streaming.kafka import KafkaUtils  # was: from pyspark.streaming.kafka import KafkaUtils


class StopAfter(StreamingListener):
    """Signals once ``wanted`` batches have completed."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.completed = 0
        self.done = threading.Event()

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803 - pyspark's names
        self.completed += 1
        if self.completed >= self.wanted:
            self.done.set()


def main(brokers: str, topic: str, interval: float, batches: int | None, remote: str | None = None) -> None:
    if remote is None:
        conf = SparkConf().setAppName("PythonStreamingDirectKafkaWordCount").setIfMissing("spark.master", "local[2]")
        sc = SparkContext.getOrCreate(conf.set("spark.ui.showConsoleProgress", "false"))
        sc.setLogLevel("WARN")
        ssc = StreamingContext(sc, interval)
    else:  # Spark Connect: the session stands where the SparkContext was
        from pyspark.sql import SparkSession

        ssc = StreamingContext(SparkSession.builder.remote(remote).getOrCreate(), interval)

    kvs = KafkaUtils.createDirectStream(ssc, [topic], {"metadata.broker.list": brokers})
    lines = kvs.map(lambda x: x[1])
    counts = lines.flatMap(lambda line: line.split(" ")).map(lambda word: (word, 1)).reduceByKey(lambda a, b: a + b)
    counts.pprint()

    if batches is None:
        ssc.start()
        ssc.awaitTermination()
        return
    stopper = StopAfter(batches)
    ssc.addStreamingListener(stopper)
    ssc.start()
    if not stopper.done.wait(timeout=batches * interval + 120):
        raise SystemExit(f"only {stopper.completed} of {batches} batches completed in time")
    ssc.stop(stopSparkContext=True, stopGraceFully=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("broker_list", help="the brokers, host:port[,host:port...]")
    parser.add_argument("topic", help="the topic to count the words of")
    parser.add_argument("--interval", type=float, default=2.0, help="batch interval in seconds (2, as pyspark's)")
    parser.add_argument("--batches", type=int, default=None, help="stop after this many batches (default: run until killed)")
    parser.add_argument("--remote", default=None, help="a Spark Connect URL (sc://host:port): run on its session")
    args = parser.parse_args()
    try:
        main(args.broker_list, args.topic, args.interval, args.batches, args.remote)
    except KeyboardInterrupt:  # Ctrl-C: exit as the shell expects, quietly
        raise SystemExit(130) from None
