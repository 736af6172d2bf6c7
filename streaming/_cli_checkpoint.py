"""``aiodstream checkpoint DIR``: show a query's checkpoint directory (what ``Checkpoint.describe`` reads).

Read-only, like Spark's offsets and commits logs it summarises.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

import attrs

__all__ = ["EXIT_DAMAGED", "EXIT_OK", "EXIT_USAGE", "add_checkpoint", "directory_argument"]

# The command line's exit statuses (``streaming._cli`` adds the simulator's).
EXIT_OK = 0
EXIT_USAGE = 2  # argparse's own status for bad arguments; also a bad model file
EXIT_DAMAGED = 4  # checkpoint: an entry cannot be read


def add_checkpoint(commands: Any) -> None:
    p = commands.add_parser(
        "checkpoint",
        help="show a query's checkpoint directory",
        description="Show a checkpoint directory: the query id, the batch grid, the newest offsets and commit, "
                    "and the batches a restart would re-run. Reads only; changes nothing.",
    )
    p.add_argument("directory", type=directory_argument,
                   help="the checkpoint directory (a runtime's checkpoint_location): a local path, or a "
                        "URI Spark resolves (hdfs://, s3a://, ...), read through Hadoop's FileSystem API")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--hadoop", action="store_true", help="read a local path or file: URI through Hadoop's FileSystem API too")
    p.set_defaults(handler=_checkpoint)


def directory_argument(text: str) -> str:
    """A checkpoint directory argument: refused when empty (a path of "" would otherwise mean the current directory)."""
    if not text:
        raise argparse.ArgumentTypeError("the checkpoint directory is empty; give its path ('.' for this directory)")
    return text


def _ids(ids: Sequence[int]) -> str:
    if not ids:
        return "none"
    span = f"batch {ids[0]}" if len(ids) == 1 else f"batches {ids[0]}..{ids[-1]}"
    gaps = "" if ids[-1] - ids[0] + 1 == len(ids) else f" with gaps ({ids[-1] - ids[0] + 1 - len(ids)} missing)"
    return f"{len(ids)} {'entry' if len(ids) == 1 else 'entries'}, {span}{gaps}"


def _offset_json(offset: str | None) -> Any:
    if offset is None:
        return None
    try:
        return json.loads(offset)  # parsed once already when the entry was read; this is a second parse
    except (ValueError, RecursionError):  # pragma: no cover - only near the recursion limit, which the first parse passed
        return offset


def _timestamp(ms: int) -> str:
    from scheduler import format_timestamp

    return format_timestamp(ms)  # any long, as Spark prints one: a year past 9999 has more digits


def one_line(text: str) -> str:
    # One line per problem, and never a credential: a URI's password or secret parameter in the
    # message (also one from Hadoop or fsspec, which the library does not compose) is redacted.
    from scheduler import redact_uri

    return redact_uri(" ".join(text.splitlines()))


def unreadable(exc: OSError) -> str:
    """What a command says of a file the system will not read (a directory, no permission): its name and why."""
    return f"cannot read {exc.filename}: {exc.strerror or exc}" if exc.filename is not None else str(exc)


def _graph_damage(location: Any) -> list[Any]:
    """The DStream graph file's damage (walked, never unpickled), as one more damaged entry; none without one."""
    from scheduler import CorruptCheckpointError

    from .dstream import check_recipe

    try:
        check_recipe(location)
    except CorruptCheckpointError as exc:
        return [exc]
    except OSError as exc:
        path = str(exc.filename) if exc.filename is not None else str(location)
        return [CorruptCheckpointError(unreadable(exc), path=path)]
    return []


def _checkpoint(args: argparse.Namespace) -> int:
    from scheduler import Checkpoint, CheckpointError, CorruptCheckpointError

    from .spark import HadoopFileManager, resolve_checkpoint_path

    try:
        # A URI other than file: starts a JVM (Spark's Hadoop configuration, spark.hadoop.* from spark-defaults).
        location = resolve_checkpoint_path(args.directory, mode="hadoop" if args.hadoop else None, default_fs=None,
                                           hadoop=HadoopFileManager)
        checkpoint = Checkpoint(location)
        d = checkpoint.describe()
        d = attrs.evolve(d, damaged=(*d.damaged, *_graph_damage(location)))
    except CorruptCheckpointError as exc:
        print(f"aiodstream checkpoint: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_DAMAGED
    except CheckpointError as exc:
        print(f"aiodstream checkpoint: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"aiodstream checkpoint: error: {one_line(unreadable(exc))}", file=sys.stderr)
        return EXIT_USAGE
    status = _print_checkpoint(d, args.json, str(checkpoint.metadata_path))
    # Every entry that cannot be read: one line each, after the summary of what could be read.
    for damaged in d.damaged:
        print(f"aiodstream checkpoint: error: {one_line(str(damaged))}", file=sys.stderr)
    return EXIT_DAMAGED if d.damaged else status


def _print_checkpoint(d: Any, as_json: bool, metadata_path: str) -> int:
    from scheduler import redact_uri

    latest = d.latest_offsets
    stamp = latest[1].metadata.batch_timestamp_ms if latest is not None and latest[1].metadata is not None else None
    if as_json:
        summary = {
            "location": d.location,
            "queryId": None if d.query_id is None else str(d.query_id),
            "batchDurationMs": None if d.grid is None else d.grid.batch_duration.milliseconds,
            "zeroTimeMs": None if d.grid is None else d.grid.zero_time.milliseconds,
            "offsets": list(d.offset_ids),
            "commits": list(d.commit_ids),
            "lastOffsets": None if latest is None else {
                "batchId": latest[0], "batchTimestampMs": stamp, "offsets": [_offset_json(o) for o in latest[1].offsets],
            },
            "lastCommit": None if d.latest_commit is None else {
                "batchId": d.latest_commit[0], "nextBatchWatermarkMs": d.latest_commit[1].next_batch_watermark_ms,
            },
            "pending": list(d.pending),
            "tempFiles": d.temp_files,
            "damaged": [{"path": exc.path, "error": str(exc)} for exc in d.damaged],
        }
        print(redact_uri(json.dumps(summary, indent=2)))  # a source's offset may name a URI too
        return EXIT_OK
    if d.query_id is not None:
        query = str(d.query_id)
    else:
        damaged = any(exc.path == metadata_path for exc in d.damaged)
        query = "unreadable (see the error below)" if damaged else "none (no metadata file)"
    rows = [("checkpoint", d.location), ("query id", query)]
    if d.grid is not None:
        zero = d.grid.zero_time.milliseconds
        rows.append(("batch grid", f"every {d.grid.batch_duration.milliseconds} ms from zero time {zero} ms ({_timestamp(zero)})"))
    rows += [("offsets", _ids(d.offset_ids)), ("commits", _ids(d.commit_ids))]
    if latest is not None:
        when = "" if stamp is None else f" at {stamp} ms ({_timestamp(stamp)})"
        rows.append(("last offsets", f"batch {latest[0]}{when}"))
        rows += [(f"  source {i}", "- (no offset yet)" if o is None else o) for i, o in enumerate(latest[1].offsets)]
    if d.latest_commit is not None:
        rows.append(("last commit", f"batch {d.latest_commit[0]} (nextBatchWatermarkMs {d.latest_commit[1].next_batch_watermark_ms})"))
    if d.pending:
        names = ", ".join(str(i) for i in d.pending)
        rows.append(("pending", f"{'batch' if len(d.pending) == 1 else 'batches'} {names}: logged, not committed; "
                                "a restart re-runs them with the same batch time and input"))
    else:
        rows.append(("pending", "none: every logged batch is committed"))
    if d.temp_files:
        rows.append(("leftovers", f"{d.temp_files} temporary file(s) from a killed writer: never read, removed at the next start"))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label.ljust(width)}  {redact_uri(value)}")
    return EXIT_OK
