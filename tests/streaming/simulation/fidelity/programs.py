"""The two programs of the simulator's fidelity test: a word count, and a program with three outputs.

Each is a pyspark.streaming program on aiodstream's StreamingContext, over a queue of
deterministic batches of text (``LINES`` lines of eight words each per batch), with two
partitions per RDD. ``warm_up`` runs the same operations once on plain RDDs first, so that the
first recorded batches do not pay for starting Spark's Python workers.
"""

from __future__ import annotations

import random
from typing import Any, Callable

LINES = 3000
WORDS = [f"w{k}" for k in range(500)]
PARTITIONS = 2


def lines(batch: int, count: int = LINES) -> list[str]:
    """Batch ``batch``'s lines (the same for every run)."""
    rng = random.Random(batch)
    return [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(count)]


def _pairs(word: str) -> tuple[str, int]:
    return (word, 1)


def _add(a: int, b: int) -> int:
    return a + b


def _ends_in_seven(word: str) -> bool:
    return word.endswith("7")


def _collect(rdd: Any) -> None:
    rdd.collect()


def wordcount(stream: Any) -> None:
    """One output: the word counts of each batch, collected on the driver."""
    stream.flatMap(str.split).map(_pairs).reduceByKey(_add, PARTITIONS).foreachRDD(_collect)


def three_outputs(stream: Any) -> None:
    """Three outputs on the same words: the counts, how many end in 7, and the total length."""
    words = stream.flatMap(str.split)
    words.map(_pairs).reduceByKey(_add, PARTITIONS).foreachRDD(_collect)
    words.filter(_ends_in_seven).count().foreachRDD(_collect)
    words.map(len).reduce(_add).foreachRDD(_collect)


PROGRAMS: dict[str, Callable[[Any], None]] = {"wordcount": wordcount, "three_outputs": three_outputs}
# Batch intervals (seconds): each program loaded but stable in every configuration, with room
# for a slower machine. Processing takes about 150 ms and, with one concurrent job, 400-460 ms a
# batch on the 2-core test machine; at 0.5 s the three-output program ran at 90 % of its interval
# on local[4], where one hiccup queues the next several batches and the scheduling delay's p95
# measures the hiccup rather than the engine.
INTERVALS = {"wordcount": 0.3, "three_outputs": 0.7}


def warm_up(sc: Any, rounds: int = 25) -> None:
    """Run the programs' operations on plain RDDs, so Spark's Python workers and the JVM are warm."""
    for i in range(rounds):
        words = sc.parallelize(lines(10_000 + i), PARTITIONS).flatMap(str.split)
        words.map(_pairs).reduceByKey(_add, PARTITIONS).collect()
        words.filter(_ends_in_seven).count()
        words.map(len).reduce(_add)
