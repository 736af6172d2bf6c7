"""``aiodstream state CHECKPOINT``: show the stateful operators of a checkpoint, an operator's rows at a batch, or its changes.

Read-only, like Spark's ``state-metadata`` and ``statestore`` data sources it mirrors (``streaming.state.read_state``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from ._cli_checkpoint import EXIT_DAMAGED, EXIT_OK, EXIT_USAGE, directory_argument, one_line, unreadable

__all__ = ["add_state"]


def add_state(commands: Any) -> None:
    """Register ``aiodstream state`` on the command line's subparsers."""
    p = commands.add_parser(
        "state",
        help="show the state a checkpoint holds",
        description="Show the stateful operators of a checkpoint (mapGroupsWithState, flatMapGroupsWithState, "
                    "transformWithState): without --operator, each operator's name, partitions and the batches its "
                    "state can be read at; with --operator, its rows after a batch (the newest committed by "
                    "default), or with --changes what a range of batches changed. Reads only; changes nothing, "
                    "also while the query runs. --operator unpickles the state's keys and values, as the program "
                    "does: read only checkpoints you would run the program of.",
    )
    p.add_argument("directory", type=directory_argument,
                   help="the checkpoint directory of a DStream program or a Pipeline (its state is under "
                        "stateful/state): a local path, or a URI fsspec reaches")
    p.add_argument("--operator", type=_non_negative, metavar="N", help="show the rows of operator N")
    p.add_argument("--batch", type=_non_negative, metavar="B", help="the rows after batch B (default: the newest committed)")
    p.add_argument("--changes", type=_batch_range, metavar="START[:END]",
                   help="the changes of batches START to END (default: the newest committed) instead of the rows")
    p.add_argument("--json", action="store_true", help="print JSON (values that are not JSON as their repr)")
    p.set_defaults(handler=_state)


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _batch_range(text: str) -> tuple[int, int | None]:
    start, _, end = text.partition(":")
    first, last = _non_negative(start), None if not end else _non_negative(end)
    if last is not None and last < first:
        raise argparse.ArgumentTypeError(f"the range ends before it starts: {text!r}")
    return first, last


def _state(args: argparse.Namespace) -> int:
    from scheduler import CorruptCheckpointError

    from .state import StateNotFoundError, StateStoreError, read_state, read_state_changes, read_state_metadata

    if args.operator is None and (args.batch is not None or args.changes is not None):
        print("aiodstream state: error: --batch and --changes need --operator", file=sys.stderr)
        return EXIT_USAGE
    if args.batch is not None and args.changes is not None:
        print("aiodstream state: error: --batch and --changes do not go together", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.operator is None:
            _print_operators(args.directory, read_state_metadata(args.directory), args.json)
        elif args.changes is not None:
            changes = read_state_changes(args.directory, args.operator, args.changes[0], args.changes[1])
            _print_rows([(c.batch_id, c.change_type, *_fields(c.record)) for c in changes],
                        ["batch", "change", *_COLUMNS], args.json)
        else:
            records = read_state(args.directory, args.operator, args.batch)
            _print_rows([_fields(r) for r in records], _COLUMNS, args.json)
    except (StateStoreError, ValueError) as exc:
        print(f"aiodstream state: error: {one_line(str(exc))}", file=sys.stderr)
        # damage (4): a file that cannot be read as what it should be; what is not there (a directory, an operator,
        # a batch) is the arguments' fault (2), as a bad --batch range is
        damaged = isinstance(exc, (StateStoreError, CorruptCheckpointError)) and not isinstance(exc, StateNotFoundError)
        return EXIT_DAMAGED if damaged else EXIT_USAGE
    except BrokenPipeError:
        raise  # stdout's reader went away: the command line's status for it, not an unreadable file's
    except OSError as exc:  # a file the system will not read (a directory, no permission): its name, as `checkpoint` does
        print(f"aiodstream state: error: {one_line(unreadable(exc))}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


_COLUMNS = ["partition", "kind", "variable", "key", "item", "value", "timeout_ms"]


def _fields(record: Any) -> tuple[Any, ...]:
    return (record.partition_id, record.kind, record.variable, record.key, record.item, record.value, record.timeout_ms)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _text(column: str, value: Any) -> str:
    # keys, items and values as Python shows them ('7' is not 7); the other columns as plain words and numbers
    return "-" if value is None else repr(value) if column in _DATA else str(value)


_DATA = frozenset({"key", "item", "value"})


def _print_rows(rows: Sequence[tuple[Any, ...]], columns: Sequence[str], as_json: bool) -> None:
    if as_json:
        print(json.dumps([{c: _jsonable(v) for c, v in zip(columns, row, strict=True)} for row in rows], indent=2))
        return
    cells = [list(columns)] + [[_text(c, v) for c, v in zip(columns, row, strict=True)] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
    print(f"({len(rows)} {'row' if len(rows) == 1 else 'rows'})")


def _print_operators(directory: str, operators: Sequence[Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps([{
            "operatorId": m.operator_id, "operatorName": m.operator_name, "numPartitions": m.num_partitions,
            "minBatchId": m.min_batch_id, "maxBatchId": m.max_batch_id,
            "operatorProperties": json.loads(m.operator_properties),
        } for m in operators], indent=2))
        return
    rows = [("checkpoint", directory)]
    for m in operators:
        batches = "no state to read yet" if m.max_batch_id is None else (
            f"batch {m.max_batch_id}" if m.min_batch_id == m.max_batch_id else f"batches {m.min_batch_id}..{m.max_batch_id}")
        described = f"{m.operator_name}, {m.num_partitions} partition{'' if m.num_partitions == 1 else 's'}, {batches}"
        variables = _variables(m.operator_properties)
        rows.append((f"operator {m.operator_id}", described + (f"; variables: {variables}" if variables else "")))
    if not operators:
        rows.append(("operators", "none"))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label.ljust(width)}  {value}")


def _variables(properties: str) -> str:
    """``count (value), seen (list, ttl 60000 ms)``: a transformWithState schema's variables, as one line."""
    described = []
    for variable in json.loads(properties).get("variables", []):
        ttl = variable.get("ttl")
        extra = f", ttl {ttl} ms" if ttl else ""
        described.append(f"{variable.get('name')} ({variable.get('kind')}{extra})")
    return ", ".join(described)
