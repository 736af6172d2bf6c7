"""A stranger at a coordinator's port, in a process of its own: ``python -m tests.streaming.continuous.fuzz_child PORT SEED``.

Sends the recorded corpus (the issue's hellos, nesting, oversized and slow hellos, idle
connections, a flood beyond the unauthenticated cap, a wrong proof followed by frames) and
seeded random bytes, all at once, and exits once the server closed every connection. Printed:
how many connections the server closed.
"""

from __future__ import annotations

import random
import struct
import sys
from typing import Awaitable, Callable

import anyio

from streaming.network import CHALLENGE_BYTES, encode_hello, new_token

CAP = 8  # the test's spark.aiodstream.network.maxUnauthenticatedConnections


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


async def drain(stream: anyio.abc.SocketStream) -> None:
    while True:
        try:
            await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError, OSError):
            return


async def send_then_drain(port: int, *chunks: bytes, stall: bool = False) -> None:
    """Send ``chunks``; with ``stall``, send only the first and wait for the server to give up."""
    try:
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            for chunk in chunks[:1] if stall else chunks:
                if chunk:
                    await stream.send(chunk)
            await drain(stream)
    except (anyio.BrokenResourceError, ConnectionError, OSError):
        pass  # the server closed first (an oversized hello is refused on its header)


async def wrong_proof_then_frames(port: int) -> None:
    try:
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            challenge = b""
            while len(challenge) < 4 + CHALLENGE_BYTES:
                challenge += await stream.receive()
            fields = {"partition": 0, "attempt": 0}
            await stream.send(encode_hello(new_token(), challenge[4:4 + CHALLENGE_BYTES], "task", fields))
            await stream.send(frame(b"\x80\x05junk") * 10)
            await drain(stream)
    except (anyio.BrokenResourceError, ConnectionError, OSError, anyio.EndOfStream):
        pass


def corpus(port: int, rng: random.Random) -> list[Callable[[], Awaitable[None]]]:
    big = struct.pack(">I", 1 << 30) + b"x" * (8 << 20)
    cases: list[Callable[[], Awaitable[None]]] = [
        lambda: send_then_drain(port, frame(b'{"token": "x", "partition": Infinity, "attempt": 0}')),
        lambda: send_then_drain(port, frame(b"[" * 4000)),
        lambda: send_then_drain(port, frame(b"\xff\xfe" * 100)),
        lambda: send_then_drain(port, struct.pack(">I", 0)),
        lambda: send_then_drain(port, frame(b'{"v":1,"role":"task","fields":{"partition":1e999,"attempt":0},"proof":"0"}')),
        lambda: send_then_drain(port, struct.pack(">I", 100) + b"{" * 10, stall=True),  # a slow hello
        lambda: send_then_drain(port, b"", stall=True),  # an idle connection
        lambda: wrong_proof_then_frames(port),
    ]
    cases += [lambda: send_then_drain(port, big) for _ in range(4)]  # 32 MiB the old driver would have buffered
    cases += [lambda: send_then_drain(port, b"", stall=True) for _ in range(CAP + 4)]  # beyond the cap
    for _ in range(20):
        data = rng.randbytes(rng.randrange(0, 8192))
        cases.append(lambda data=data: send_then_drain(port, data))  # type: ignore[misc]
    return cases


async def main(port: int, seed: int) -> None:
    cases = corpus(port, random.Random(seed))
    async with anyio.create_task_group() as tg:
        for case in cases:
            tg.start_soon(case)
    print(len(cases))


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]), int(sys.argv[2]))
