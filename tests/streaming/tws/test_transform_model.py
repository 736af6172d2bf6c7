"""transformWithState against a plain in-memory model: random operations on all three kinds of state and timers."""

from __future__ import annotations

import pickle
import tempfile
from pathlib import Path
from typing import Any, Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.state import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
    TransformWithStateSpec,
)

from .tws_support import Batches

Op = tuple[Any, ...]

ops = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 9)),
    st.tuples(st.just("put"), st.lists(st.integers(0, 9), min_size=1, max_size=3)),
    st.tuples(st.just("clear_list")),
    st.tuples(st.just("update"), st.integers(0, 9)),
    st.tuples(st.just("clear_value")),
    st.tuples(st.just("map_put"), st.sampled_from(["x", "y", 3]), st.integers(0, 9)),
    st.tuples(st.just("map_remove"), st.sampled_from(["x", "y", 3])),
    st.tuples(st.just("clear_map")),
    st.tuples(st.just("timer"), st.integers(0, 40)),
    st.tuples(st.just("delete_timer"), st.integers(0, 40)),
)
batches = st.lists(st.lists(st.tuples(st.sampled_from(["a", "b", 7]), ops), max_size=6), min_size=1, max_size=4)


class Applies(StatefulProcessor):
    """Applies each row's operation, then outputs the key's whole state; a fired timer outputs it too."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """A value, a list, a map."""
        self.handle = handle
        self.value = handle.getValueState("value", "int")
        self.list = handle.getListState("list", "int")
        self.map = handle.getMapState("map", "string", "int")

    def snapshot(self, key: Any) -> tuple[Any, ...]:
        """The key's state as the model holds it."""
        return (key, self.value.get(), list(self.list.get()), sorted(self.map.iterator(), key=repr),
                list(self.handle.listTimers()))

    def handleInputRows(self, key: Any, rows: Iterator[Op], timerValues: TimerValues) -> Iterator[Any]:  # noqa: N803
        """Apply the rows in order."""
        for op in rows:
            name, args = op[0], op[1:]
            if name == "append":
                self.list.appendValue(args[0])
            elif name == "put":
                self.list.put(list(args[0]))
            elif name == "clear_list":
                self.list.clear()
            elif name == "update":
                self.value.update(args[0])
            elif name == "clear_value":
                self.value.clear()
            elif name == "map_put":
                self.map.updateValue(args[0], args[1])
            elif name == "map_remove":
                self.map.removeKey(args[0])
            elif name == "clear_map":
                self.map.clear()
            elif name == "timer":
                self.handle.registerTimer(args[0])
            else:
                self.handle.deleteTimer(args[0])
        yield ("data", *self.snapshot(key))

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,  # noqa: N803
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Any]:  # noqa: N803
        """Output the timer and the state it sees."""
        yield ("timer", expiredTimerInfo.getExpiryTimeInMs(), *self.snapshot(key))


class Model:
    """The rules in plain dicts: data pass by pickled key, then due timers (at or before the batch time) by expiry."""

    def __init__(self) -> None:
        """Empty state."""
        self.value: dict[Any, int] = {}
        self.list: dict[Any, list[int]] = {}
        self.map: dict[Any, dict[Any, int]] = {}
        self.timers: dict[Any, set[int]] = {}

    def snapshot(self, key: Any) -> tuple[Any, ...]:
        """The key's state."""
        return (key, self.value.get(key), list(self.list.get(key, [])), sorted(self.map.get(key, {}).items(), key=repr),
                sorted(self.timers.get(key, set())))

    def batch(self, rows: list[tuple[Any, Op]], now: int) -> list[Any]:
        """One batch's outputs."""
        outputs: list[Any] = []
        for key in sorted({key for key, _ in rows}, key=lambda k: pickle.dumps(k, protocol=5)):
            for row_key, op in rows:
                if row_key == key:
                    self.apply(key, op)
            outputs.append(("data", *self.snapshot(key)))
        due = sorted((expiry, pickle.dumps(key, protocol=5), key) for key, expiries in self.timers.items()
                     for expiry in expiries if expiry <= now)
        for expiry, _, key in due:
            outputs.append(("timer", expiry, *self.snapshot(key)))
            self.timers[key].discard(expiry)
        return outputs

    def apply(self, key: Any, op: Op) -> None:
        """One operation."""
        name, args = op[0], op[1:]
        if name == "append":
            self.list.setdefault(key, []).append(args[0])
        elif name == "put":
            self.list[key] = list(args[0])
        elif name == "clear_list":
            self.list.pop(key, None)
        elif name == "update":
            self.value[key] = args[0]
        elif name == "clear_value":
            self.value.pop(key, None)
        elif name == "map_put":
            self.map.setdefault(key, {})[args[0]] = args[1]
        elif name == "map_remove":
            self.map.get(key, {}).pop(args[0], None)
        elif name == "clear_map":
            self.map.pop(key, None)
        elif name == "timer":
            self.timers.setdefault(key, set()).add(args[0])
        else:
            self.timers.get(key, set()).discard(args[0])


@settings(max_examples=40, deadline=None)
@given(batches)
def test_random_operations_match_the_model(plan: list[list[tuple[Any, Op]]]) -> None:
    """Whatever the operations and batches, each batch outputs what the in-memory model says, in the same order."""
    model = Model()
    with tempfile.TemporaryDirectory() as root:
        runs = Batches(Path(root), TransformWithStateSpec(Applies(), "update", "ProcessingTime", False))
        for number, rows in enumerate(plan):
            now = 10 * (number + 1)
            assert runs.run(rows, batch_ms=now) == model.batch(rows, now)
