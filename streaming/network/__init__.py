"""Bounded TCP: authenticated front doors for the driver's ports (the counterpart of Spark's RPC authentication),
and bounded reading of TCP text from sources.

``FrontDoor`` admits a connection only after a small hello, read under a timeout, proved the run's
token (challenge and HMAC, compared in constant time); ``connect``/``handshake`` are the peer's
blocking side, for executors' tasks. The hello's parse and proof are plain functions (``_hello``).
``LineDecoder`` turns a source's bytes into lines as Spark's socket receiver reads them, each at
most ``spark.aiodstream.receiver.maxLineLength`` characters (``_lines``): the socket receivers and
the continuous ``SocketSource`` read through it.
"""

from ._client import HelloRefusedError, connect, handshake
from ._front_door import (
    ACCEPT_RETRY_S,
    HELLO_TIMEOUT_KEY,
    IDLE_TIMEOUT_KEY,
    MAX_UNAUTHENTICATED_KEY,
    Admitted,
    FrameTooLargeError,
    FrontDoor,
    FrontDoorSettings,
    FrontDoorStatistics,
    accept_forever,
    check_seconds,
    count_setting,
    timeout_setting,
)
from ._hello import (
    ACCEPTED_SIZE,
    CHALLENGE_BYTES,
    FRAME_HEADER,
    HELLO_MAX_BYTES,
    HELLO_VERSION,
    MAX_FIELD,
    Hello,
    HelloError,
    RoleSchema,
    accept,
    encode_challenge,
    encode_hello,
    hello_size,
    new_challenge,
    new_token,
    parse_hello,
    prove,
)
from ._lines import (
    DEFAULT_MAX_LINE_LENGTH,
    MAX_LINE_LENGTH_KEY,
    RECONNECT_CONSEQUENCE,
    JavaUtf8Decoder,
    LineDecoder,
    LineTooLongError,
    check_max_line_length,
    max_line_length,
)

__all__ = [
    "ACCEPTED_SIZE",
    "ACCEPT_RETRY_S",
    "Admitted",
    "CHALLENGE_BYTES",
    "DEFAULT_MAX_LINE_LENGTH",
    "FRAME_HEADER",
    "FrameTooLargeError",
    "FrontDoor",
    "FrontDoorSettings",
    "FrontDoorStatistics",
    "HELLO_MAX_BYTES",
    "HELLO_TIMEOUT_KEY",
    "HELLO_VERSION",
    "Hello",
    "HelloError",
    "HelloRefusedError",
    "IDLE_TIMEOUT_KEY",
    "JavaUtf8Decoder",
    "LineDecoder",
    "LineTooLongError",
    "MAX_FIELD",
    "MAX_LINE_LENGTH_KEY",
    "MAX_UNAUTHENTICATED_KEY",
    "RECONNECT_CONSEQUENCE",
    "RoleSchema",
    "accept",
    "accept_forever",
    "check_max_line_length",
    "check_seconds",
    "connect",
    "count_setting",
    "encode_challenge",
    "encode_hello",
    "hello_size",
    "handshake",
    "max_line_length",
    "new_challenge",
    "new_token",
    "parse_hello",
    "prove",
    "timeout_setting",
]
