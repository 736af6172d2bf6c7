"""A filter-and-route service in continuous mode: events over TCP in, routed files out, in milliseconds.

Two producers stand in for a topic's two partitions: each serves JSON events on its own TCP port.
The service reads both continuously (one long-running Spark task per connection), drops the
heartbeats, enriches each event with its route, and a ForeachWriter appends it to that route's
file as soon as it arrives, with no batch to wait for. The driver only cuts epochs (every second)
and commits them. At the end it prints how many events each route got and how long each event
took from its producer to its file (p50 and p99).

It lives inside an async service (the producers are tasks of the same event loop) on an
embedded local Spark, and stops by itself, gracefully, once the committed epochs have read every event sent.

    python examples/filter_and_route.py --events 3000 --rate 2000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.abc

from streaming import StreamingContext
from streaming.continuous import Continuous, ContinuousExecution

ROUTES = {"order": "orders", "payment": "payments", "error": "alerts"}
KINDS = ["order", "payment", "error", "heartbeat", "heartbeat"]


def parse(line: str) -> dict[str, Any]:
    return json.loads(line)  # type: ignore[no-any-return]


def wanted(event: dict[str, Any]) -> bool:
    kind: str = event["kind"]
    return kind != "heartbeat"


def enrich(event: dict[str, Any]) -> dict[str, Any]:
    return {**event, "route": ROUTES[event["kind"]]}


class RouteWriter:
    """pyspark's ForeachWriter contract: one file per route, partition and epoch; each event stamped on arrival."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.files: dict[str, Any] = {}
        self.suffix = ""

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.suffix = f"{partition_id}-{epoch_id}"
        return True

    def process(self, event: dict[str, Any]) -> None:
        event["routed_ms"] = time.time() * 1000
        route = event["route"]
        out = self.files.get(route)
        if out is None:
            out = self.files[route] = open(os.path.join(self.directory, f"{route}-{self.suffix}.jsonl"), "a")
        out.write(json.dumps(event) + "\n")
        out.flush()

    def close(self, error: BaseException | None) -> None:
        for out in self.files.values():
            out.close()
        self.files.clear()


async def produce(listener: anyio.abc.SocketListener, partition: int, events: int, rate: float, seed: int) -> None:
    """Serve ``events`` JSON events to the one connection this partition's task opens, at ``rate`` per second."""
    rng = random.Random(seed)
    stream = await listener.accept()
    async with stream:
        start = time.monotonic()
        for i in range(events):
            due = start + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                await anyio.sleep(delay)
            event = {"id": f"{partition}-{i}", "kind": rng.choice(KINDS), "amount": rng.randint(1, 500),
                     "sent_ms": time.time() * 1000}
            try:
                await stream.send((json.dumps(event) + "\n").encode())
            except anyio.BrokenResourceError:  # the reading task went away (its stop, or Ctrl-C killing Spark's workers)
                return
        await anyio.sleep(3600)  # keep the connection open; the service's stop ends it


async def main(events: int, rate: float, out_dir: Path) -> None:
    await anyio.Path(out_dir).mkdir(parents=True, exist_ok=True)
    listeners = [(await anyio.create_tcp_listener(local_host="127.0.0.1")).listeners[0] for _ in range(2)]
    ports = [int(lst.extra(anyio.abc.SocketAttribute.local_port)) for lst in listeners]
    per_partition = events // 2
    async with anyio.create_task_group() as producers:
        for partition, listener in enumerate(listeners):
            socket = cast(anyio.abc.SocketListener, listener)  # what a TCP listener's listeners are
            producers.start_soon(produce, socket, partition, per_partition, rate / 2, partition)
        async with StreamingContext(batchDuration=Continuous("1 second"), queryName="filter-and-route") as ssc:
            streams = [ssc.socketTextStream("127.0.0.1", port) for port in ports]
            ssc.union(*streams).map(parse).filter(wanted).map(enrich).foreach(RouteWriter(str(out_dir)))
            await ssc.start_async()
            query = ssc.runtime
            assert isinstance(query, ContinuousExecution)
            while query.is_active and query.statistics().input_rows < 2 * per_partition:  # epochs, not time
                await query.wait_for_epoch(query.last_committed_epoch + 1)
            await ssc.stop_async(stopGraceFully=True)
        producers.cancel_scope.cancel()
    for listener in listeners:
        await listener.aclose()
    report(out_dir, events)


def report(out_dir: Path, events: int) -> None:
    routed: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(out_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            routed.setdefault(event["route"], []).append(event)
    total = sum(len(v) for v in routed.values())
    ids = [e["id"] for v in routed.values() for e in v]
    latencies = sorted(e["routed_ms"] - e["sent_ms"] for v in routed.values() for e in v)
    for route in sorted(routed):
        print(f"{route}: {len(routed[route])} events")
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print(f"routed {total} of {events} events ({events - total} heartbeats dropped), each once: {len(ids) == len(set(ids))}")
    print(f"producer to file: p50 {p50:.1f} ms, p99 {p99:.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3000, help="events to send, over both partitions")
    parser.add_argument("--rate", type=float, default=2000, help="events per second, over both partitions")
    parser.add_argument("--out", type=Path, default=None, help="where the routed files go (default: a temp directory)")
    args = parser.parse_args()
    try:
        anyio.run(main, args.events, args.rate, args.out or Path(tempfile.mkdtemp(prefix="routes-")))
    except KeyboardInterrupt:  # Ctrl-C: exit as the shell expects, quietly
        raise SystemExit(130) from None
