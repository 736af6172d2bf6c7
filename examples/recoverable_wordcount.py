"""Recoverable word count: a running count that survives a crash, through StreamingContext.getOrCreate.

The program of pyspark's ``recoverable_network_wordcount.py``, reading files instead of a socket:
a file stream counts words with ``updateStateByKey``, checkpointed to a directory. The example
runs it, "crashes" it (an immediate stop while a file may be in flight), writes more input while
it is down, and starts it again with ``getOrCreate``: the second run resumes from the checkpoint,
re-runs what was logged but not committed, picks up the files that arrived meanwhile, and its
running counts carry on from the first run's: no word lost, none counted twice. It checks the
final counts against what it wrote.

    python examples/recoverable_wordcount.py --files 6 --interval 1
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from streaming import StreamingContext

WORDS = ["spark", "stream", "batch", "state", "crash", "resume"]


def write_file(directory: Path, staging: Path, index: int) -> list[str]:
    """A new input file, moved in whole (files in a watched directory must appear atomically)."""
    words = [WORDS[(index + k) % len(WORDS)] for k in range(index % 4 + 2)]
    temp = staging / f"words-{index:04d}.txt"
    temp.write_text(" ".join(words) + "\n")
    temp.rename(directory / temp.name)
    return words


def main(files: int, interval: float) -> None:
    from pyspark import SparkConf, SparkContext

    sc = SparkContext.getOrCreate(SparkConf().setMaster("local[2]").setAppName("RecoverableWordCount")
                                  .set("spark.ui.showConsoleProgress", "false"))
    sc.setLogLevel("WARN")
    # Spark stops before the directory goes (Ctrl-C included): its tasks may still be reading the files.
    with tempfile.TemporaryDirectory(prefix="aiodstream-recoverable-") as tmp, sc:
        checkpoint, incoming, staging = Path(tmp, "checkpoint"), Path(tmp, "in"), Path(tmp, "staging")
        incoming.mkdir()
        staging.mkdir()
        # The latest counts, replaced whole by each batch (one reference swap, so the reader never
        # sees a half-updated dict): no lock in the function, which the checkpoint pickles.
        snapshot: list[dict[str, int]] = [{}]
        written: list[str] = []

        def create_context() -> StreamingContext:
            # Called on every start (restoreGraph=False below): this example keeps its counts in this
            # process's memory, so each run builds the graph anew and resumes the checkpoint's logs and
            # state. A program restarted as a new process leaves it out and gets its graph back from
            # the checkpoint, as in Spark.
            ssc = StreamingContext(sc, interval)
            counts = (ssc.textFileStream(str(incoming)).flatMap(str.split).map(lambda w: (w, 1))
                      .updateStateByKey(lambda new, old: sum(new) + (old or 0)))

            def show(batch_time: Any, rdd: Any) -> None:
                counts = dict(rdd.collect())
                snapshot[0] = counts
                print(f"{batch_time:%H:%M:%S}", " ".join(f"{w}={n}" for w, n in sorted(counts.items())), flush=True)

            counts.foreachRDD(show)
            ssc.checkpoint(str(checkpoint))
            return ssc

        def wait_for_counts(timeout: float = 180) -> None:
            deadline = time.monotonic() + timeout
            while True:
                if snapshot[0] == dict(Counter(written)):
                    return
                if time.monotonic() > deadline:
                    raise SystemExit(f"the counts did not reach the input in {timeout}s: {snapshot[0]}")
                time.sleep(0.1)

        # Run 1: half the files, counted; one more file, and a crash while it may be in flight.
        ssc = StreamingContext.getOrCreate(str(checkpoint), create_context, restoreGraph=False)
        ssc.start()
        print("-- run 1: started", flush=True)
        for index in range(files // 2):
            written.extend(write_file(incoming, staging, index))
        wait_for_counts()
        written.extend(write_file(incoming, staging, files // 2))
        time.sleep(interval * 1.5)
        print("-- crash: an immediate stop", flush=True)
        ssc.stop(stopSparkContext=False, stopGraceFully=False)

        # While it is down, more files arrive.
        for index in range(files // 2 + 1, files):
            written.extend(write_file(incoming, staging, index))

        # Run 2: the same program, resumed from the checkpoint.
        ssc = StreamingContext.getOrCreate(str(checkpoint), create_context, restoreGraph=False)
        ssc.start()
        print("-- run 2: resumed from the checkpoint", flush=True)
        wait_for_counts()
        ssc.stop(stopSparkContext=True, stopGraceFully=True)

    expected = Counter(written)
    latest = snapshot[0]
    print("final:", " ".join(f"{w}={n}" for w, n in sorted(latest.items())))
    print("expected:", " ".join(f"{w}={n}" for w, n in sorted(expected.items())))
    if latest != dict(expected):
        raise SystemExit("the running counts do not match the input")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=6, help="input files to write, half before the crash")
    parser.add_argument("--interval", type=float, default=1.0, help="batch interval in seconds")
    args = parser.parse_args()
    try:
        main(args.files, args.interval)
    except KeyboardInterrupt:  # Ctrl-C: exit as the shell expects, quietly
        raise SystemExit(130) from None
