"""CoordinatorServer: the epoch coordinator's TCP side, one connection per task (Spark's ``EpochCoordinator`` RPC endpoint).

Behind the front door (a task proves the run's token in its hello), it answers each task's polls
for the current epoch and feeds its reports and commits to the sans-I/O coordinator, handing the
actions that come out to whoever performs them, in order.
"""

from __future__ import annotations

import pickle
import time as _time
from typing import Any, Callable

import anyio
import anyio.abc

from ..network import Admitted, FrontDoor
from ._coordinator import CoordinatorAction, EpochCoordinator
from ._protocol import GetCurrentEpoch, encode_frame, task_message_error

__all__ = ["CoordinatorServer"]


class CoordinatorServer:
    """Serves the coordinator to the tasks: one connection per partition, frames in, replies and actions out.

    A stranger's connection, an unreadable frame or a message a task may not send ends that one
    connection and nothing else; a fault of ours (``fail``) fails the query, never the host's
    task group.

    Attributes:
        connections: task connections accepted (after their hello).
        open_connections: task connections open now.
    """

    def __init__(self, coordinator: EpochCoordinator, door: FrontDoor, *, max_frame_bytes: int,
                 deliver: Callable[[list[CoordinatorAction], float], None], fail: Callable[[BaseException], None],
                 changed: Callable[[], None], log: Any) -> None:
        """A server for ``coordinator`` behind ``door``.

        Args:
            coordinator: the state machine the tasks' messages go to.
            door: the front door admitting only this run's tasks.
            max_frame_bytes: the largest frame a task may send after its hello.
            deliver: takes the coordinator's actions and when their message arrived (never waits).
            fail: fails the query with an error of ours.
            changed: called when a connection closes (a stop waits for the last one).
            log: the query's logger.
        """
        self._coordinator = coordinator
        self._door = door
        self._max_frame = max_frame_bytes
        self._deliver = deliver
        self._fail = fail
        self._changed = changed
        self._log = log
        self._partitions: set[int] = set()  # partitions with an open task connection
        self._scope: anyio.CancelScope | None = None
        self.connections = 0
        self.open_connections = 0

    async def serve(self, listener: anyio.abc.Listener[anyio.abc.SocketStream], *,
                    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Accept the tasks' connections on ``listener`` until :meth:`close`; ready once listening."""
        with anyio.CancelScope() as scope:
            self._scope = scope
            async with listener, anyio.create_task_group() as tg:
                task_status.started()
                # The front door admits only connections whose hello proved this run's token;
                # whatever a stranger sends ends in that connection, never in this task group.
                await self._door.serve(listener, self._connection, tg)  # an accept that fails is retried, not fatal

    def close(self) -> None:
        """Stop serving: the connections close, and tasks still polling find the coordinator gone and end."""
        if self._scope is not None:
            self._scope.cancel()

    async def _connection(self, admitted: Admitted) -> None:
        partition = admitted.hello.fields["partition"]
        if partition in self._partitions:
            self._log.warning("a second connection for a task's partition was refused", partition=partition)
            return
        self._partitions.add(partition)
        self.connections += 1
        self.open_connections += 1
        try:
            await self._serve_task(admitted, partition)
        finally:
            self._partitions.discard(partition)
            self.open_connections -= 1
            self._changed()

    async def _serve_task(self, task: Admitted, partition: int) -> None:
        """Answer one task's asks and feed its reports and commits to the coordinator, until it disconnects.

        A frame that cannot be read, or a message this task may not send (a driver-only message, another
        partition's report, an epoch it cannot have closed), closes this connection and nothing else.
        """
        coordinator = self._coordinator
        try:
            while True:
                try:
                    # Unpickled only behind the front door: the peer proved this run's token, so it is one of our tasks.
                    message = pickle.loads(await task.read_frame(self._max_frame))
                except (anyio.EndOfStream, anyio.IncompleteRead):
                    return  # the task ended (or the stop closed the coordinator)
                except TimeoutError:
                    self._log.warning("a task sent nothing within spark.network.timeout; its connection was closed",
                                      partition=partition, timeout_s=task.idle_timeout_s)
                    return
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
                    return
                except Exception as exc:  # too large, or anything unpickling raised: one connection's fault
                    self._log.warning("a task sent an unreadable frame; its connection was closed", partition=partition,
                                      error=f"{exc!r:.300}")
                    return
                error = task_message_error(message, partition, coordinator.current_epoch)
                if error is not None:
                    self._log.warning("a task sent a message it may not send; its connection was closed",
                                      partition=partition, error=error)
                    return
                if isinstance(message, GetCurrentEpoch):  # the hot path: every poll of every task
                    await task.send(encode_frame(pickle.dumps(coordinator.current())))
                    continue
                arrived = _time.perf_counter()  # only to measure the commit cost, never for scheduling
                _, actions = coordinator.handle(message)
                self._deliver(actions, arrived)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            return  # the reply could not be sent: the task is gone
        except Exception as exc:  # a fault of ours, not the peer's: the query fails with it, the host's task group never sees it
            self._fail(exc)
