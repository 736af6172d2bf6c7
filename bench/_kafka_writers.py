"""The writers of ``bench_kafka``: child processes offering records to a socket receiver or holding a pre-filled Kafka topic.

``python -m bench._kafka_writers --socket RATE`` sends RATE lines/s over TCP in 20 ms ticks;
``python -m bench._kafka_writers --kafka RECORDS --partitions N`` holds a mock cluster whose
topic holds RECORDS records. Each prints its address as a JSON line, then (the socket writer)
its statistics when stopped by SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
VOCABULARY = [f"w{i}" for i in range(1000)]
WORDS_PER_LINE = 8
TOPIC = "bench"
TICK_S = 0.02
DISTINCT_LINES = 1000  # both writers cycle through the same lines (8,000 words drawn: every word of the vocabulary)


def make_lines(seed: int, count: int) -> list[str]:
    """``count`` lines of 8 words drawn from 1,000 (the lines of ``bench_vs_pyspark``)."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(VOCABULARY, k=WORDS_PER_LINE)) for _ in range(count)]


# -- writers: child processes of this script, one per step --


class Stopping:
    """Set by SIGTERM: a writer's loop ends at its next tick and prints its statistics."""

    def __init__(self) -> None:
        self.flag = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: self.flag.set())


def paced(rate: int, stop: Stopping, send: Callable[[int], None]) -> dict[str, Any]:
    """Call ``send(n)`` every 20 ms tick so that ``rate`` records/s go out (catching up when late) until stopped."""
    began, cpu = time.monotonic(), time.process_time()
    sent = 0
    k = 0
    ended_by = "stopped"
    while not stop.flag.is_set():
        k += 1
        due = round(rate * TICK_S * k) - sent
        if due > 0:
            try:
                send(due)
            except OSError as error:  # the receiver went away (its context stopped)
                ended_by = str(error)
                break
            sent += due
        delay = began + k * TICK_S - time.monotonic()
        if delay > 0:
            stop.flag.wait(delay)
    seconds = time.monotonic() - began
    return {"sent": sent, "seconds": round(seconds, 3), "rate": round(sent / seconds) if seconds else 0,
            "cpu_s_per_s": round((time.process_time() - cpu) / seconds, 3) if seconds else 0.0, "ended_by": ended_by}


def serve_socket(rate: int) -> None:
    """Child mode: accept one connection and send ``rate`` lines/s until SIGTERM; print the port, then the statistics."""
    stop = Stopping()
    lines = [(line + "\n").encode() for line in make_lines(1, DISTINCT_LINES)]
    server = socket.create_server(("127.0.0.1", 0))
    print(json.dumps({"port": server.getsockname()[1]}), flush=True)
    conn, _ = server.accept()
    cursor = 0

    def send(n: int) -> None:
        nonlocal cursor
        chunk = bytearray()
        for _ in range(n):
            chunk += lines[cursor]
            cursor = (cursor + 1) % len(lines)
        conn.sendall(chunk)

    print(json.dumps(paced(rate, stop, send)), flush=True)


def serve_kafka(partitions: int, records: int) -> None:
    """Child mode: hold a mock cluster with ``records`` records in a topic of ``partitions``, until SIGTERM.

    Prints the cluster's address and the producer's own rate once every record is acknowledged
    and still held by the broker (an error if the mock's retention dropped some).
    """
    import confluent_kafka

    from streaming.kafka.testing import MockKafkaCluster

    stop = Stopping()
    values = [line.encode() for line in make_lines(1, DISTINCT_LINES)]
    with MockKafkaCluster() as cluster:
        cluster.create_topic(TOPIC, partitions)
        # Large zstd batches: the mock keeps about 5 MB per partition and answers a fetch with one batch.
        producer = confluent_kafka.Producer({
            "bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 50, "batch.size": 1_000_000,
            "batch.num.messages": 100_000, "compression.type": "zstd", "acks": 1, "enable.idempotence": False,
            "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1_048_576})
        began, cpu = time.monotonic(), time.process_time()
        produce = producer.produce
        for i in range(records):
            while True:
                try:
                    produce(TOPIC, values[i % DISTINCT_LINES], partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.005)
        if producer.flush(120):
            raise RuntimeError("the pre-fill was not acknowledged in 120 s")
        took, cpu = time.monotonic() - began, time.process_time() - cpu
        consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "bench"})
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(TOPIC, p), timeout=30)
            if low != 0 or high < records // partitions:
                print(json.dumps({"error": f"the mock broker kept offsets {low}-{high} of partition {p}'s "
                                           f"{records // partitions} records (it keeps about 5 MB a partition)"}), flush=True)
                return
        consumer.close()
        print(json.dumps({"bootstrap": cluster.bootstrap_servers, "topic": TOPIC, "partitions": partitions,
                          "records": records, "prefill_s": round(took, 3), "producer_rate": round(records / took),
                          "producer_cpu_s_per_s": round(cpu / took, 3)}), flush=True)
        stop.flag.wait()


class WriterError(RuntimeError):
    """A writer could not offer what a step needs (the mock broker's retention)."""


class Writer:
    """A writer child process: its first JSON line (address), then on :meth:`stop` its statistics."""

    def __init__(self, *mode: str) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        self.process = subprocess.Popen([sys.executable, "-m", "bench._kafka_writers", *mode], cwd=ROOT, env=env,
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            raise RuntimeError(f"writer {mode} exited with {self.process.returncode}")
        self.info: dict[str, Any] = json.loads(line)
        if "error" in self.info:
            self.process.wait()
            raise WriterError(self.info["error"])

    def stop(self) -> dict[str, Any]:
        """End the writer; its statistics."""
        self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=60)
        return dict(json.loads(out.strip().splitlines()[-1])) if out.strip() else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", type=int, metavar="RATE", help="lines per second to send")
    parser.add_argument("--kafka", type=int, metavar="RECORDS", help="records to pre-fill")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    if args.socket is not None:
        serve_socket(args.socket)
    elif args.kafka is not None:
        serve_kafka(args.partitions, args.kafka)


if __name__ == "__main__":
    main()
