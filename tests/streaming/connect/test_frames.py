"""FrameRDD against pyspark's RDD: each method on the classic shared SparkContext and on a Connect
session gives the same partitions (``glom()``), the same order and the same results."""

from __future__ import annotations

from operator import add
from typing import Any, Callable

import pytest

pytestmark = pytest.mark.connect

WORDS = "the quick brown fox jumps over the lazy dog the end fox".split()
PAIRS = [(w, i) for i, w in enumerate(WORDS)]
OTHER = [("the", "a"), ("fox", "b"), ("cat", "c"), ("the", "d"), ("end", "e")]


def listed(groups: Any) -> Any:
    """ResultIterables as lists, so two engines' groups compare."""
    return [(k, list(v)) for k, v in groups]


# name -> (build an RDD from a context, how to read it: "glom" compares partitions)
RDD_CASES: dict[str, Callable[[Any], Any]] = {
    "parallelize": lambda sc: sc.parallelize(list(range(10)), 3),
    "parallelize_uneven": lambda sc: sc.parallelize(list(range(2050)), 3).map(lambda x: x % 7),
    "parallelize_more_slices": lambda sc: sc.parallelize([1, 2, 3], 5),
    "parallelize_empty": lambda sc: sc.parallelize([], 3),
    "parallelize_range": lambda sc: sc.parallelize(range(3, 40, 3), 4),
    "parallelize_uploaded": lambda sc: sc.parallelize([("x" * 200, i) for i in range(7000)], 3).mapValues(lambda i: i * 2),
    "map": lambda sc: sc.parallelize(range(10), 3).map(lambda x: x * 2),
    "flatMap": lambda sc: sc.parallelize(WORDS, 2).flatMap(lambda w: list(w)),
    "filter": lambda sc: sc.parallelize(range(20), 4).filter(lambda x: x % 3 == 0),
    "mapPartitions": lambda sc: sc.parallelize(range(10), 4).mapPartitions(lambda it: [sum(it)]),
    "mapPartitionsWithIndex": lambda sc: sc.parallelize(range(10), 4).mapPartitionsWithIndex(lambda i, it: [(i, list(it))]),
    "mapPartitions_empty_partitions": lambda sc: sc.parallelize([], 3).mapPartitions(lambda it: ["ran"]),
    "pipelined": lambda sc: sc.parallelize(range(30), 3).map(lambda x: x + 1).filter(lambda x: x % 2).flatMap(lambda x: [x, -x]),
    "union": lambda sc: sc.parallelize(range(5), 2).union(sc.parallelize(range(5, 12), 3)),
    "context_union": lambda sc: sc.union([sc.parallelize([1], 1), sc.parallelize([2, 3], 2), sc.parallelize([4], 1)]),
    "reduceByKey": lambda sc: sc.parallelize(PAIRS, 3).reduceByKey(add),
    "reduceByKey_partitions": lambda sc: sc.parallelize(PAIRS, 2).reduceByKey(add, 5),
    "wordcount": lambda sc: sc.parallelize(WORDS, 3).map(lambda w: (w, 1)).reduceByKey(add),
    "partitionBy": lambda sc: sc.parallelize(PAIRS, 2).partitionBy(3),
    "partitionBy_int_keys": lambda sc: sc.parallelize([(i, i) for i in range(-5, 20)], 2).partitionBy(4),
    "combineByKey": lambda sc: sc.parallelize(PAIRS, 3).combineByKey(lambda v: [v], lambda c, v: [*c, v], lambda a, b: a + b),
    "groupByKey": lambda sc: sc.parallelize(PAIRS, 3).groupByKey().mapValues(list),
    "foldByKey": lambda sc: sc.parallelize(PAIRS, 3).foldByKey(0, add),
    "aggregateByKey": lambda sc: sc.parallelize(PAIRS, 2).aggregateByKey((0, 0), lambda a, v: (a[0] + v, a[1] + 1),
                                                                        lambda a, b: (a[0] + b[0], a[1] + b[1])),
    "mapValues": lambda sc: sc.parallelize(PAIRS, 2).mapValues(lambda v: v * 10),
    "flatMapValues": lambda sc: sc.parallelize(PAIRS, 2).flatMapValues(lambda v: range(v % 3)),
    "keys": lambda sc: sc.parallelize(PAIRS, 2).keys(),
    "values": lambda sc: sc.parallelize(PAIRS, 2).values(),
    "partitioned_union": lambda sc: sc.parallelize(PAIRS, 2).reduceByKey(add, 3).union(sc.parallelize(OTHER, 2).reduceByKey(add, 3)),
    "join": lambda sc: sc.parallelize(PAIRS, 2).join(sc.parallelize(OTHER, 3)),
    "join_partitions": lambda sc: sc.parallelize(PAIRS, 2).join(sc.parallelize(OTHER, 3), 4),
    "leftOuterJoin": lambda sc: sc.parallelize(PAIRS, 2).leftOuterJoin(sc.parallelize(OTHER, 2)),
    "rightOuterJoin": lambda sc: sc.parallelize(PAIRS, 2).rightOuterJoin(sc.parallelize(OTHER, 2)),
    "fullOuterJoin": lambda sc: sc.parallelize(PAIRS, 2).fullOuterJoin(sc.parallelize(OTHER, 2)),
    "join_of_partitioned": lambda sc: sc.parallelize(PAIRS, 2).reduceByKey(add).join(sc.parallelize(OTHER, 2).reduceByKey(add)),
    "cogroup": lambda sc: sc.parallelize(PAIRS, 2).cogroup(sc.parallelize(OTHER, 2)).mapValues(lambda vs: tuple(map(list, vs))),
    "cartesian": lambda sc: sc.parallelize([1, 2, 3], 2).cartesian(sc.parallelize("ab", 2)),
    "distinct": lambda sc: sc.parallelize(WORDS, 3).distinct(),
    "sortBy": lambda sc: sc.parallelize(WORDS, 3).sortBy(lambda w: (len(w), w)),
    "sortByKey": lambda sc: sc.parallelize(PAIRS, 3).sortByKey(),
    "sortByKey_descending": lambda sc: sc.parallelize(PAIRS, 3).sortByKey(False, 2),
    "sortByKey_one_partition": lambda sc: sc.parallelize(PAIRS, 3).sortByKey(True, 1),
    "coalesce": lambda sc: sc.parallelize(range(20), 5).coalesce(2),
    "coalesce_more": lambda sc: sc.parallelize(range(20), 3).coalesce(7),
    "repartition": lambda sc: sc.parallelize(range(45), 3).repartition(4),
    "repartition_fewer": lambda sc: sc.parallelize(range(100), 5).repartition(2),
    "glom_of_shuffle": lambda sc: sc.parallelize(range(7), 3).map(lambda x: (x % 4, x)).groupByKey(6).mapValues(sorted),
    "keyBy": lambda sc: sc.parallelize(WORDS, 2).keyBy(len),
    "sample": lambda sc: sc.parallelize(range(100), 3).sample(False, 0.3, 7),
    "emptyRDD": lambda sc: sc.emptyRDD(),
    "coalesce_of_shuffle": lambda sc: sc.parallelize(PAIRS, 2).reduceByKey(add, 5).coalesce(2),
    "repartition_of_shuffle": lambda sc: sc.parallelize(PAIRS * 3, 2).groupByKey(3).mapValues(len).repartition(4),
    "zipWithIndex": lambda sc: sc.parallelize(WORDS, 3).zipWithIndex(),
    "zipWithUniqueId": lambda sc: sc.parallelize(WORDS, 3).zipWithUniqueId(),
    "subtract": lambda sc: sc.parallelize(WORDS, 3).subtract(sc.parallelize(["the", "fox"], 1)),
    "subtractByKey": lambda sc: sc.parallelize(PAIRS, 3).subtractByKey(sc.parallelize(OTHER, 2)),
    "intersection": lambda sc: sc.parallelize(WORDS, 3).intersection(sc.parallelize(["the", "fox", "cat"], 2)),
    "groupWith": lambda sc: sc.parallelize(PAIRS, 2).groupWith(sc.parallelize(OTHER, 1), sc.parallelize(PAIRS[:3], 1))
                             .mapValues(lambda vs: tuple(map(list, vs))),
    "union_of_union": lambda sc: sc.parallelize([1, 2], 2).union(sc.parallelize([3], 1).union(sc.parallelize([4, 5, 6], 2)))
                                   .mapPartitionsWithIndex(lambda i, it: [(i, list(it))]),
    "groupBy": lambda sc: sc.parallelize(range(10), 2).groupBy(lambda x: x % 3).mapValues(sorted),
    "groupBy_partitions": lambda sc: sc.parallelize(WORDS, 3).groupBy(len, 4, lambda k: k // 2).mapValues(list),
    "range": lambda sc: sc.range(5, numSlices=2),
    "range_step": lambda sc: sc.range(20, 1, -3, 3),
    "sampleByKey": lambda sc: sc.parallelize(PAIRS * 5, 3).sampleByKey(False, {w: 0.5 for w in WORDS}, 11),
    "pipe": lambda sc: sc.parallelize(WORDS, 2).pipe("tr a-z A-Z"),
    "repartitionAndSortWithinPartitions": lambda sc: sc.parallelize(PAIRS, 2).repartitionAndSortWithinPartitions(3, len, False, str.upper),
}


KNOWN_COUNT = {
    "parallelize", "parallelize_uneven", "parallelize_more_slices", "parallelize_empty", "parallelize_range",
    "parallelize_uploaded", "map", "union", "context_union", "partitionBy", "partitionBy_int_keys", "mapValues", "keys",
    "values", "coalesce", "coalesce_more", "repartition", "repartition_fewer", "keyBy", "zipWithIndex", "zipWithUniqueId",
    "range", "range_step",
}
"""The cases whose FrameRDD knows its count without running (``known_count``): parallelize's, through the operations
that keep every value's count; the others (filters, shuffles' aggregations, partition functions) do not."""


@pytest.mark.parametrize("case", RDD_CASES)
def test_the_same_partitions_as_pyspark(case: str, spark_context: Any, frame_context: Any) -> None:
    """Each transformation gives pyspark's partitions, element order and values (``glom().collect()``); a count known
    without running is the count of those values."""
    build = RDD_CASES[case]
    classic, frame = build(spark_context), build(frame_context)
    assert frame.getNumPartitions() == classic.getNumPartitions()
    partitions = classic.glom().collect()
    assert frame.glom().collect() == partitions
    assert frame.known_count == (sum(map(len, partitions)) if case in KNOWN_COUNT else None)


ACTION_CASES: dict[str, Callable[[Any], Any]] = {
    "collect": lambda sc: sc.parallelize(range(10), 3).map(str).collect(),
    "count": lambda sc: sc.parallelize(range(1000), 3).filter(lambda x: x % 7).count(),
    "take": lambda sc: sc.parallelize(range(100), 4).take(30),
    "take_more_than_all": lambda sc: sc.parallelize(range(5), 4).take(30),
    "first": lambda sc: sc.parallelize(WORDS, 3).first(),
    "isEmpty": lambda sc: (sc.parallelize([], 2).isEmpty(), sc.parallelize([1], 2).isEmpty(), sc.emptyRDD().isEmpty()),
    "reduce": lambda sc: sc.parallelize(range(1, 11), 4).reduce(lambda a, b: a * b),
    "fold": lambda sc: sc.parallelize(range(10), 3).fold(1, add),
    "aggregate": lambda sc: sc.parallelize(range(10), 3).aggregate((0, 0), lambda a, v: (a[0] + v, a[1] + 1),
                                                                  lambda a, b: (a[0] + b[0], a[1] + b[1])),
    "sum": lambda sc: sc.parallelize(range(10), 3).sum(),
    "countByValue": lambda sc: sorted(sc.parallelize(WORDS, 3).countByValue().items()),
    "countByKey": lambda sc: sorted(sc.parallelize(PAIRS, 3).countByKey().items()),
    "collectAsMap": lambda sc: sc.parallelize(PAIRS, 3).collectAsMap(),
    "groupByKey_types": lambda sc: [type(v).__name__ for _, v in sc.parallelize(PAIRS, 2).groupByKey().collect()],
    "getNumPartitions": lambda sc: sc.parallelize(range(3), 5).union(sc.parallelize([1], 2)).getNumPartitions(),
    "defaultParallelism": lambda sc: sc.defaultParallelism,
    "default_partitions": lambda sc: sc.parallelize(range(10)).getNumPartitions(),
    "lookup": lambda sc: sc.parallelize(PAIRS, 3).lookup("the"),
    "max_min": lambda sc: (sc.parallelize(WORDS, 3).max(), sc.parallelize(WORDS, 3).min(key=len)),
    "stats": lambda sc: (sc.parallelize(range(10), 3).mean(), sc.parallelize(range(10), 3).stdev(), sc.parallelize([1.5, 2], 2).variance()),
    "top_takeOrdered": lambda sc: (sc.parallelize(range(20), 3).top(4), sc.parallelize(WORDS, 3).takeOrdered(3, key=len)),
    "reduceByKeyLocally": lambda sc: sorted(sc.parallelize(PAIRS, 3).reduceByKeyLocally(add).items()),
    "treeReduce": lambda sc: (sc.parallelize(range(50), 7).treeReduce(add), sc.parallelize(WORDS, 5).treeReduce(add, 3)),
    "treeAggregate": lambda sc: sc.parallelize(range(50), 9).treeAggregate([], lambda a, v: [*a, v], add, 3),
    "takeSample": lambda sc: (sc.parallelize(range(100), 3).takeSample(False, 7, 5), sc.parallelize(range(10), 2).takeSample(True, 20, 3)),
    "randomSplit": lambda sc: [r.glom().collect() for r in sc.parallelize(range(30), 3).randomSplit([1.0, 2.0], 17)],
    "histogram": lambda sc: (sc.parallelize(range(10), 3).histogram(2), sc.parallelize([1, 5, 9, 3], 2).histogram([0, 5, 10])),
    "sample_stats": lambda sc: (sc.parallelize(range(10), 3).sampleStdev(), sc.parallelize(range(10), 3).sampleVariance()),
    "toLocalIterator": lambda sc: list(sc.parallelize(range(7), 3).map(str).toLocalIterator()),
    "name": lambda sc: (sc.parallelize([1], 1).name(), sc.parallelize([1], 1).setName("x").name()),
    "id": lambda sc: type(sc.parallelize([1], 1).id()).__name__,
    "context_version": lambda sc: (sc.version, sc.appName),
}


@pytest.mark.parametrize("case", ACTION_CASES)
def test_the_same_action_results_as_pyspark(case: str, spark_context: Any, frame_context: Any) -> None:
    """Each action returns what pyspark's returns."""
    run = ACTION_CASES[case]
    assert run(frame_context) == run(spark_context)
