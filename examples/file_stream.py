"""File stream: count the words of the text files that appear in a directory, batch by batch.

The example watches a fresh temporary directory (or ``--directory``) with ``textFileStream`` and,
while the context runs, writes one new file after each completed batch, the safe way: written
under a hidden name, then renamed into place. Files that were there before the stream started
are ignored, as in Spark. It stops by itself once ``--files`` files have been counted.

    python examples/file_stream.py --files 3 --interval 1
"""

from __future__ import annotations

import argparse
import os
import queue
import tempfile
from operator import add
from typing import Any

from streaming import StreamingContext, StreamingListener

POEM = [
    "the wind was a torrent of darkness among the gusty trees",
    "the moon was a ghostly galleon tossed upon cloudy seas",
    "the road was a ribbon of moonlight over the purple moor",
    "and the highwayman came riding up to the old inn door",
]


class FilesSeen(StreamingListener):
    """Hands each completed batch's file list to the main thread."""

    def __init__(self) -> None:
        self.batches: queue.Queue[list[str]] = queue.Queue()

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803 - pyspark's names
        infos = batchCompleted.batchInfo().streamIdToInputInfo()
        self.batches.put([f for info in infos.values() for f in info.metadata().get("files", [])])


def write_file(directory: str, index: int) -> str:
    """Write one file atomically: hidden name first (the stream ignores it), then rename."""
    name = f"part-{index:04d}.txt"
    staged = os.path.join(directory, f".{name}.tmp")
    with open(staged, "w", encoding="utf-8") as f:
        f.write(POEM[index % len(POEM)] + "\n")
    os.rename(staged, os.path.join(directory, name))
    return name


def main(files: int, interval: float, directory: str | None) -> None:
    from pyspark import SparkConf, SparkContext

    sc = SparkContext.getOrCreate(SparkConf().setMaster("local[2]").setAppName("FileStreamWordCount")
                                  .set("spark.ui.showConsoleProgress", "false"))
    sc.setLogLevel("WARN")
    # Spark stops before the directory goes (Ctrl-C included): its tasks may still be reading the files.
    with tempfile.TemporaryDirectory(prefix="aiodstream-files-") as tmp, sc:
        watched = directory or tmp
        with open(os.path.join(watched, "already-there.txt"), "w", encoding="utf-8") as f:
            f.write("this file predates the stream and is never read\n")

        ssc = StreamingContext(sc, interval)
        seen = FilesSeen()
        ssc.addStreamingListener(seen)
        totals: dict[str, int] = {}

        counts = ssc.textFileStream(watched).flatMap(str.split).map(lambda w: (w, 1)).transform(
            lambda rdd: rdd.reduceByKey(add))

        def show(time: Any, rdd: Any) -> None:
            batch = sorted(rdd.collect(), key=lambda kv: (-kv[1], kv[0]))
            for word, n in batch:
                totals[word] = totals.get(word, 0) + n
            if batch:
                print(f"{time:%H:%M:%S}", " ".join(f"{w}={n}" for w, n in batch[:5]))

        counts.foreachRDD(show)
        ssc.start()
        written: list[str] = []
        read: list[str] = []
        while len(read) < files:
            if len(written) < files:
                written.append(write_file(watched, len(written)))
            batch_files = seen.batches.get(timeout=120)  # one completed batch
            read += [os.path.basename(f) for f in batch_files]
        ssc.stop(stopSparkContext=True, stopGraceFully=True)

    print(f"read {len(read)} files: {', '.join(read)}")
    print(f"counted {sum(totals.values())} words; 'the' appeared {totals.get('the', 0)} times")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=5, help="stop once this many files have been read")
    parser.add_argument("--interval", type=float, default=1.0, help="batch interval in seconds")
    parser.add_argument("--directory", default=None, help="watch this directory instead of a temporary one")
    args = parser.parse_args()
    try:
        main(args.files, args.interval, args.directory)
    except KeyboardInterrupt:  # Ctrl-C: exit as the shell expects, quietly
        raise SystemExit(130) from None
