"""A pyspark.streaming program, unchanged but for its import, for ``aiodstream calibrate --program``'s test.

It takes its master and settings from spark-submit's arguments (as the command passes them), runs
a word count over a queue of small batches and waits for termination: the recorded trace's batch
limit stops it.
"""

from pyspark import SparkContext

from streaming import StreamingContext

sc = SparkContext.getOrCreate()
sc.setLogLevel("ERROR")
ssc = StreamingContext(sc, 0.2)
batches = [sc.parallelize([f"a b c {i}", "b c", "c"] * 50, 2) for i in range(100)]
(ssc.queueStream(batches).flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b)
 .foreachRDD(lambda rdd: rdd.collect()))
ssc.start()
ssc.awaitTermination()
sc.stop()
