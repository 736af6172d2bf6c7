"""Seed ``applyInPandasWithState``'s state store with many keys in seconds, through Spark's own store code.

``applyInPandasWithState`` calls Python once per key, building pandas frames for the key's rows and
for its state: on local[2] its seed cost about 1.4 ms of CPU per key (100,000 keys: 137 s of the
process tree's CPU, 297 s of wall time at load 18), so 1,000,000 keys take 20 to 40 minutes. The
bench needs the state, not that cost (the seed is never timed), so :func:`seed_by_store` writes it
the way Spark would have, in three steps:

1. the real query (the same function, schema, output mode, partitions and checkpoint) runs once
   over a file of a few of the seed's keys, so every piece of the checkpoint is Spark's own: its
   offset, commit and source logs, the operator's metadata and state schema, and version 1 of
   each partition's store;
2. a streaming aggregation, which runs in the JVM alone, reads the whole seed file and keeps per
   key ``max(struct(value AS total))`` in its store. Its rows are the rows the operator keeps:
   the key row ``(key string)`` and the value row ``(groupState struct<total long>)`` (a seed key
   occurs once with value 1, so its running count is that value), in the same hash partitions
   (both place a key by Murmur3 of the key column, ``spark.sql.shuffle.partitions`` of them),
   written by the same store provider with the same codec;
3. each partition's version 1 of the aggregation replaces the query's version 1.

:func:`state_summary` reads the query's state back through Spark's state reader (the number of
keys and the sum of the counts), so the bench checks the seed before the rounds and every
increment after them. ``--pyspark-seed operator`` runs the seed through the operator instead.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

__all__ = ["seed_by_store", "state_summary"]


def seed_by_store(spark: Any, schema: str, seed_file: Path, checkpoint: Path, run_query: Callable[[list[Path]], Any]) -> None:
    """Give the query of ``run_query`` (checkpointed at ``checkpoint``, not yet run) every key of ``seed_file``, count 1 each.

    ``run_query(files)`` places ``files`` where the query reads and runs it over them.
    """
    from pyspark.sql import functions

    with tempfile.TemporaryDirectory(prefix="aiodstream-bench-seed-") as tmp:
        root = Path(tmp)
        head = root / "head" / "part-seed-head.json"
        head.parent.mkdir()
        with open(seed_file) as lines:
            head.write_text("".join(line for _, line in zip(range(4), lines, strict=False)))
        run_query([head])
        source = root / "whole"
        source.mkdir()
        shutil.copyfile(seed_file, source / seed_file.name)
        aggregated = root / "aggregated-ck"
        query = (spark.readStream.schema(schema).json(str(source)).groupBy("key")
                 .agg(functions.max(functions.struct(functions.col("value").alias("total"))).alias("groupState"))
                 .writeStream.outputMode("update").format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", str(aggregated)).start())
        query.awaitTermination()
        theirs, ours = aggregated / "state" / "0", checkpoint / "state" / "0"
        partitions = sorted(p.name for p in theirs.iterdir() if p.name.isdigit())
        if partitions != sorted(p.name for p in ours.iterdir() if p.name.isdigit()):
            raise RuntimeError(f"the aggregation's partitions {partitions} are not the operator's")
        for p in partitions:
            for version_file in (theirs / p).iterdir():  # HDFS: 1.delta and its .crc; RocksDB: 1.zip and SSTs/
                if version_file.name == "_metadata":  # partition 0 keeps the operator's state schema here: not this
                    continue
                if version_file.is_dir():
                    shutil.copytree(version_file, ours / p / version_file.name, dirs_exist_ok=True)
                else:
                    shutil.copyfile(version_file, ours / p / version_file.name)


def state_summary(spark: Any, checkpoint: Path) -> dict[str, int]:
    """The keys the operator's store holds at its last version and the sum of their counts (Spark's state reader)."""
    from pyspark.sql import functions

    state = spark.read.format("statestore").load(str(checkpoint))
    row = state.agg(functions.count("*").alias("keys"), functions.sum("value.groupState.total").alias("total")).collect()[0]
    return {"keys": int(row["keys"]), "total": int(row["total"] or 0)}
