"""How ``transformWithState``'s state lies in the state store: one row per value, list element, map entry and timer.

The store holds ``key -> (value, timeout)`` rows (:class:`~streaming.state.VersionedStore`). A
``transformWithState`` operator partition keeps in it, per grouping key:

- a **value state**: one row, ``var(name, key)``;
- a **list state**: one row per element, ``var(name, key) + index`` (8 bytes, big-endian, growing
  with each append; the next index is one past the greatest held);
- a **map state**: one row per entry, ``var(name, key) + pickled map key``;
- a **timer**: one row, ``timer(key) + expiry`` (8 bytes, big-endian), with the expiry as its timeout.

``var(name, key)`` is ``b"v"``, the variable's name (2-byte length, UTF-8), the pickled grouping
key (4-byte length); ``timer(key)`` is ``b"t"`` and the pickled grouping key (4-byte length). The
lengths make every prefix unambiguous, so the rows of one variable of one key (or the timers of
one key) are one range of the store's ordered keys, and a batch's cost follows the rows it touches.

A row's value is the pickled element (None for a timer). Its timeout is the time-to-live expiry
(epoch ms) of a variable made with ``ttlDurationMs``, else ``NO_TIMESTAMP``; the store's timeout
index then finds due timers (prefix ``b"t"``) and expired values (prefix ``b"v"``) at the cost of
what is due.

The operator's state variables are recorded beside its partitions in ``state/<operator>/schema``
(:data:`SCHEMA_FILE`), a JSON object: ``{"format": 1, "variables": [{"name", "kind", "ttl",
"schema"}, ...], "timeMode": ..., "outputMode": ...}``.
"""

from __future__ import annotations

import numbers
import pickle
import sys
from typing import Any

import attrs

__all__ = [
    "LIST",
    "MAP",
    "SCHEMA_FILE",
    "TIMER_PREFIX",
    "VALUE",
    "VARIABLE_PREFIX",
    "RowName",
    "decode_row_key",
    "encode_index",
    "encode_map_key",
    "key_bytes",
    "prefix_end",
    "timer_key",
    "timer_prefix",
    "variable_prefix",
]

VALUE = "value"
"""The kind of a ``ValueState``."""
LIST = "list"
"""The kind of a ``ListState``."""
MAP = "map"
"""The kind of a ``MapState``."""

VARIABLE_PREFIX = b"v"
"""Every state variable's rows start with this byte."""
TIMER_PREFIX = b"t"
"""Every timer's row starts with this byte."""

SCHEMA_FILE = "schema"
"""The name of the file recording an operator's state variables, in ``state/<operator>/`` beside ``partitions``."""

_INDEX = 8
_EXPIRY = 8


def key_bytes(key: Any) -> bytes:
    """A grouping key (or a map key) as the store's rows hold it: pickled, the same bytes for equal keys.

    Pickle alone does not give that: it writes an object met a second time as a reference to the
    first (``(s, s)`` pickles shorter than ``(s, t)`` with ``s == t``), and ``-0.0 == 0.0``. So a
    key is rebuilt first (:func:`_canonical`): every ``str`` and ``bytes`` its own object (or
    CPython's one object for that value: the empty string, one Latin-1 character, one byte), every
    tuple and list rebuilt, a tuple subclass (a namedtuple, a Row) too, as its own type; any other
    object met a second time is rebuilt from its reduction (a ``datetime`` or a ``Decimal`` twice),
    and ``-0.0`` is ``0.0``, as Spark normalizes grouping keys. A key with no object in it twice
    pickles exactly as before. Not covered: an object met twice whose reduction carries a state
    (instances of plain classes), and objects met twice inside other objects (a set's items).
    """
    kind = type(key)
    if kind is str or kind is int or kind is bytes:  # nothing in it can be met twice: the common keys, at once
        return pickle.dumps(key, protocol=5)
    return pickle.dumps(_canonical(key, set()), protocol=5)


def partition_hash(key: Any) -> int:
    """The hash that places a grouping key in a state partition: pyspark's ``portable_hash``, but a NaN is one key.

    Since Python 3.10 ``hash(nan)`` is the object's id, so ``portable_hash`` sent equal NaN keys (alone or in a tuple)
    to different partitions, each with a state of its own; here a NaN (a float, numpy's, a complex or a ``Decimal``
    one) hashes to 0, as every float NaN did before 3.10, and Spark groups NaN as one key. Every other key hashes
    exactly as ``portable_hash`` (checkpoints keep their partitions).
    """
    kind = type(key)
    if kind is not str and kind is not int and (kind is float or isinstance(key, numbers.Number)) and _is_nan(key):
        return 0
    if isinstance(key, tuple):  # portable_hash's tuple hash, item by item through this one
        h = 0x345678
        for item in key:
            h ^= partition_hash(item)
            h *= 1000003
            h &= sys.maxsize
        h ^= len(key)
        return -2 if h == -1 else int(h)
    from pyspark.rdd import portable_hash

    return int(portable_hash(key))


def _is_nan(number: Any) -> bool:
    # A float (or a subclass: numpy.float64), numpy's float32, a complex or a Decimal NaN; a signalling Decimal NaN
    # refuses to be compared: it is one too.
    try:
        return bool(number != number)
    except Exception:
        return True


def _canonical(value: Any, seen: set[int]) -> Any:
    """``value`` with no object met twice but the ones pickle writes as values (see :func:`key_bytes`).

    ``seen``: the ids of the objects of the key kept as they are so far (all alive: the key holds them).
    """
    kind = type(value)
    if kind is tuple:
        return tuple([_canonical(item, seen) for item in value])
    if kind is list:
        return [_canonical(item, seen) for item in value]
    if kind is str:  # a new object, or CPython's one object for that value (the empty string, one Latin-1 character)
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")
    if kind is bytes:
        return bytes(bytearray(value))
    if kind is float:
        return 0.0 if value == 0.0 else value
    if kind is int or kind is bool or value is None:  # written as values, never referred to
        return value
    if isinstance(value, tuple) or id(value) in seen:  # a namedtuple or a Row (whose items may repeat), or met again
        return _rebuilt(value, seen)
    seen.add(id(value))
    return value


def _rebuilt(value: Any, seen: set[int]) -> Any:
    # A new object of value's type from its reduction's arguments, themselves canonical; as it is when the reduction
    # carries more than a callable and its arguments (a state: no object of ours to rebuild it from).
    try:
        reduce_ex: Any = type(value).__reduce_ex__  # of its type: for a class met twice, not a call of its own method
        reduced = reduce_ex(value, 5)
    except Exception:  # pickle fails on it just the same: let pickle say so
        return value
    if isinstance(reduced, str) or len(reduced) < 2 or any(part is not None for part in reduced[2:]):
        return value
    return reduced[0](*_canonical(tuple(reduced[1]), seen))


def variable_prefix(name: str, grouping_key: bytes | None = None) -> bytes:
    """The prefix of variable ``name``'s rows: of one grouping key (pickled), or of every key when None."""
    encoded = name.encode()
    if len(encoded) >= 1 << 16:
        raise ValueError(f"a state variable's name is at most 65535 bytes, got {len(encoded)}")
    head = VARIABLE_PREFIX + len(encoded).to_bytes(2, "big") + encoded
    return head if grouping_key is None else head + len(grouping_key).to_bytes(4, "big") + grouping_key


def timer_prefix(grouping_key: bytes | None = None) -> bytes:
    """The prefix of the timers of one grouping key (pickled), or of every timer when None."""
    return TIMER_PREFIX if grouping_key is None else TIMER_PREFIX + len(grouping_key).to_bytes(4, "big") + grouping_key


def timer_key(grouping_key: bytes, expiry_ms: int) -> bytes:
    """The row of a timer of ``grouping_key`` expiring at ``expiry_ms``."""
    return timer_prefix(grouping_key) + expiry_ms.to_bytes(_EXPIRY, "big")


def encode_index(index: int) -> bytes:
    """A list element's suffix."""
    return index.to_bytes(_INDEX, "big")


def encode_map_key(map_key: Any) -> bytes:
    """A map entry's suffix: its key, pickled."""
    return key_bytes(map_key)


def prefix_end(prefix: bytes) -> bytes | None:
    """The least key greater than every key starting with ``prefix`` (None: no bound, the prefix is all 0xff)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


@attrs.frozen
class RowName:
    """What a row of a ``transformWithState`` operator is, read back from its key.

    Attributes:
        variable: the state variable's name, or None for a timer.
        grouping_key: the grouping key (unpickled).
        suffix: a list element's index, a map entry's key (unpickled), a timer's expiry (ms), or None for a value.
    """

    variable: str | None
    grouping_key: Any
    suffix: Any


def decode_row_key(row_key: bytes, kinds: dict[str, str] | None = None) -> RowName:
    """Name the row stored under ``row_key``.

    ``kinds`` maps variable names to their kind (from the schema file); without it, a suffix is
    returned as raw bytes. Unpickles the keys: the checkpoint is trusted as the program is.

    Raises:
        ValueError: the key is not one of a ``transformWithState`` row.
    """
    try:
        if row_key[:1] == TIMER_PREFIX:
            size = int.from_bytes(row_key[1:5], "big")
            grouping, rest = row_key[5:5 + size], row_key[5 + size:]
            if len(grouping) != size or len(rest) != _EXPIRY:
                raise ValueError("bad timer row")
            return RowName(None, pickle.loads(grouping), int.from_bytes(rest, "big"))
        if row_key[:1] == VARIABLE_PREFIX:
            name_size = int.from_bytes(row_key[1:3], "big")
            name = row_key[3:3 + name_size].decode()
            at = 3 + name_size
            size = int.from_bytes(row_key[at:at + 4], "big")
            grouping, rest = row_key[at + 4:at + 4 + size], row_key[at + 4 + size:]
            if len(grouping) != size:
                raise ValueError("bad variable row")
            kind = (kinds or {}).get(name)
            suffix: Any
            if not rest:
                suffix = None
            elif kind == LIST:
                suffix = int.from_bytes(rest, "big")
            elif kind == MAP:
                suffix = pickle.loads(rest)
            else:
                suffix = rest
            return RowName(name, pickle.loads(grouping), suffix)
    except (UnicodeDecodeError, pickle.UnpicklingError, EOFError, ValueError, IndexError) as exc:
        raise ValueError(f"not a transformWithState state row: {row_key[:40]!r}") from exc
    raise ValueError(f"not a transformWithState state row: {row_key[:40]!r}")
