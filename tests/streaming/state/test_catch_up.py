"""StateBehind: the failed batches an operator runs again before a later batch, in order, bounded."""

from __future__ import annotations

import pytest

from scheduler import Time
from streaming.state import STATE_CATCH_UP_LIMIT, StateBehind, StateCatchUpError


def test_the_batches_before_a_time_come_oldest_first_and_leave_once_caught_up() -> None:
    behind: StateBehind[str] = StateBehind("op")
    assert not behind
    behind.note(Time(3000), "three")
    behind.note(Time(1000), "one")
    behind.note(Time(3000), "three again")  # noted again (a partial catch-up): replaced
    assert behind
    assert behind.before(Time(3000)) == [(Time(1000), "one")]
    assert behind.before(Time(4000)) == [(Time(1000), "one"), (Time(3000), "three again")]
    behind.caught_up(Time(1000))
    behind.caught_up(Time(3000))
    assert not behind and behind.before(Time(9000)) == []


def test_past_the_limit_every_later_batch_fails_until_a_new_run() -> None:
    """The limit's next batch gives up: the kept entries are dropped, and each later batch fails saying to restart."""
    behind: StateBehind[int] = StateBehind("mapGroupsWithState")
    for batch in range(1, STATE_CATCH_UP_LIMIT + 1):
        behind.note(Time(batch * 1000), batch)
    assert len(behind.before(Time(10**9))) == STATE_CATCH_UP_LIMIT
    behind.note(Time((STATE_CATCH_UP_LIMIT + 1) * 1000), 0)
    with pytest.raises(StateCatchUpError, match=(
            rf"^the state of mapGroupsWithState is {STATE_CATCH_UP_LIMIT + 1} batches behind \(from batch 1000 ms on, "
            rf"each failed before its state version was committed; at most {STATE_CATCH_UP_LIMIT} are run again\), so "
            "no later batch can load it in this run: stop the query and start it again from its checkpoint")):
        behind.before(Time(10**9))
    behind.note(Time(10**9), 1)  # ignored once given up
    assert behind
    behind.clear()
    assert not behind and behind.before(Time(10**9)) == []


def test_the_error_names_both_batches_and_only_the_first_line_of_the_cause() -> None:
    error = StateBehind("op").failed(Time(2000), Time(3000), RuntimeError("first line\n\tat a.java.Trace"))
    assert str(error) == ("batch 3000 ms cannot load the state of op: batch 2000 ms failed before its state version was "
                          "committed, and running its state again failed too: RuntimeError: first line")
