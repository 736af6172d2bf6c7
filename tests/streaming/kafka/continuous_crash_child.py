"""The process the continuous Kafka crash test kills: a Kafka topic through a continuous query into another topic, checkpointed.

Usage: ``python tests/streaming/kafka/continuous_crash_child.py BOOTSTRAP IN_TOPIC OUT_TOPIC CHECKPOINT STOPFILE``.

Reads ``IN_TOPIC`` from earliest (or from the checkpoint's last committed epoch), upper-cases
each value and writes it with the producing sink to ``OUT_TOPIC``, to the partition it came from,
in 20 ms epochs with the tasks on threads of this process (no JVM). Prints ``started`` once
running; stops gracefully once STOPFILE exists.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import anyio


def upper(row: Any) -> dict[str, Any]:
    return {"key": row.key, "value": row.value.upper(), "partition": row.partition}


async def main(bootstrap: str, in_topic: str, out_topic: str, checkpoint: str, stop_file: str) -> None:
    """Run (or resume) the query until ``stop_file`` appears, then stop gracefully."""
    from scheduler import Seconds
    from streaming.continuous import Continuous, ContinuousExecution, ContinuousStream, ThreadTaskLauncher
    from streaming.kafka import KafkaContinuousSink, KafkaContinuousSource

    params = {"bootstrap.servers": bootstrap}
    source = KafkaContinuousSource(in_topic, params, startingOffsets="earliest")
    plan = ContinuousStream(source).map(upper).to(KafkaContinuousSink(params, topic=out_topic))
    options = {"spark.sql.streaming.continuous.executorPollIntervalMs": 5}
    async with ContinuousExecution(plan, Continuous(20), launcher=ThreadTaskLauncher(), checkpoint_location=checkpoint,
                                   options=options, graceful_stop_timeout=Seconds(60)) as query:
        await query.start()
        print("started", flush=True)
        while not await anyio.Path(stop_file).exists() and query.exception() is None:
            with anyio.move_on_after(0.05):
                await query.wait_for_epoch(query.last_committed_epoch + 1)
        await query.stop(graceful=True)
        if query.exception() is not None:
            raise query.exception()  # type: ignore[misc]


if __name__ == "__main__":
    level = os.environ.get("AIODSTREAM_CRASH_LOG_LEVEL")  # the engine's log on stderr, for debugging a failing run
    logging.basicConfig(level=int(level) if level else logging.WARNING, stream=sys.stderr)
    anyio.run(main, *sys.argv[1:6])
