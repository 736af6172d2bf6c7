"""Which state version each batch of a query committed: its id's, unless its offsets entry recorded another.

A batch loads a state version and commits the next. Batch ids follow the batch times on the grid,
so they skip between Once or AvailableNow runs while versions count the batches that ran; the
engine then records the version in the offsets entry (``STATE_VERSION_KEY``). The ids run
ahead of the versions from the first skip on and never fall back, so a newest entry without
the key means no entry has one: each batch's version is its id.
"""

from __future__ import annotations

from scheduler import CheckpointPath, CorruptCheckpointError, OffsetSeqLog, recorded_state_version

from ._store_format import StateNotFoundError, StateStoreError

__all__ = ["BatchVersions"]


class BatchVersions:
    """The batches of a query's checkpoint and the state versions they committed (``batch + 1`` unless recorded).

    Args:
        offsets: the query's offsets log directory, or ``None`` for a stores' root without logs.
    """

    def __init__(self, offsets: CheckpointPath | None) -> None:
        self._loaded: dict[int, int] | None = None  # batch id -> the version it loaded; None: each batch its id's
        if offsets is None or not offsets.is_dir():
            return
        log = OffsetSeqLog(offsets)
        ids = log.batch_ids()
        if not ids or _recorded(log, ids[-1]) is None:
            return
        self._loaded = {batch_id: _loaded_by(log, batch_id) for batch_id in ids}

    def committed_by(self, batch: int) -> int:
        """The state version batch ``batch`` committed.

        Raises:
            StateNotFoundError: the versions are recorded and the batch's offsets entry is gone
                (purged, or the batch never ran: its id was skipped).
        """
        if self._loaded is None:
            return batch + 1
        loaded = self._loaded.get(batch)
        if loaded is None:
            raise StateNotFoundError(
                f"no state of batch {batch}: its offsets entry is not in the checkpoint (purged, or no batch took that id "
                f"between two Once or AvailableNow runs), and the state versions of this checkpoint are not its batch ids; "
                f"batches with entries: {_span(sorted(self._loaded))}")
        return loaded + 1

    def batches(self, start: int, end: int) -> list[int]:
        """The batches from ``start`` to ``end`` (inclusive) that committed a version, in order.

        Raises:
            StateNotFoundError: the versions are recorded and ``start`` is older than the oldest
                batch whose offsets entry is kept: the entries in between were purged (or no
                batch took those ids), so which batches ran there is not known.
        """
        if self._loaded is None:
            return list(range(start, end + 1))
        ids = sorted(self._loaded)
        if start < ids[0]:
            raise StateNotFoundError(
                f"no change feed from batch {start}: the offsets entries before batch {ids[0]} are not in the checkpoint "
                "(purged, or no batch took those ids between Once or AvailableNow runs), and the state versions of this "
                f"checkpoint are not its batch ids; batches with entries: {_span(ids)}")
        return [b for b in ids if start <= b <= end]

    def batch_of(self, version: int) -> int | None:
        """The batch that committed state version ``version`` (>= 1), or ``None`` if no retained entry says."""
        if self._loaded is None:
            return version - 1
        for batch_id, loaded in self._loaded.items():
            if loaded + 1 == version:
                return batch_id
        return None


def _recorded(log: OffsetSeqLog, batch_id: int) -> int | None:
    entry = log.get(batch_id)
    if entry is None:
        return None
    try:
        return recorded_state_version(entry, str(log.path_of(batch_id)))
    except CorruptCheckpointError as exc:  # a damaged file, as the reader reports one
        raise StateStoreError(str(exc)) from exc


def _loaded_by(log: OffsetSeqLog, batch_id: int) -> int:
    recorded = _recorded(log, batch_id)
    return batch_id if recorded is None else recorded


def _span(ids: list[int]) -> str:
    return "none" if not ids else f"{ids[0]} to {ids[-1]}" if len(ids) > 2 else ", ".join(map(str, ids))
