"""A restart with a changed processor is refused or allowed as pyspark 4.3's transformWithStateInPandas does, with Spark's error class."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from streaming.state import StatefulProcessor, TransformWithStateError, TransformWithStateSpec, record_schema
from tests.streaming.tws.reference import Setup, Variable, declare, rocksdb_session, spark_restart

pytestmark = pytest.mark.spark

VALUE_AND_LIST: tuple[Variable, ...] = (("v", "value", "s string"), ("l", "list", "s string"))

CASES: dict[str, tuple[Setup, Setup]] = {
    "a field renamed": ((VALUE_AND_LIST, "None", "append"), ((("v", "value", "t string"), VALUE_AND_LIST[1]), "None", "append")),
    "int widened to long": (((("v", "value", "s int"),), "None", "append"), ((("v", "value", "s long"),), "None", "append")),
    "a value made a list": ((VALUE_AND_LIST, "None", "append"), ((("v", "list", "s string"), VALUE_AND_LIST[1]), "None", "append")),
    "a variable removed, one added": ((VALUE_AND_LIST, "None", "append"), ((VALUE_AND_LIST[0], ("m", "map", "s long")), "None", "append")),
    "the time mode": ((VALUE_AND_LIST, "None", "append"), (VALUE_AND_LIST, "EventTime", "append")),
}
"""A first run's setup and a restart's, by what changed between them: one case per verdict and error class
(an added field, a map's values and the output mode give the same classes as the widened type and the time mode)."""


class Declares(StatefulProcessor):
    """Declares the variables of a setup (aiodstream's side); no output."""

    def __init__(self, variables: tuple[Variable, ...]) -> None:
        """The variables ``init`` declares."""
        self.variables = variables

    def init(self, handle: Any) -> None:
        """Declare them."""
        declare(handle, self.variables)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:  # noqa: N803
        """Nothing."""
        return iter(())


def ours_restart(directory: Path, first: Setup, second: Setup) -> str:
    """``first``'s schema recorded, then ``second`` checked against it at a restart: "allowed" or the error class."""
    for index, (variables, time_mode, output_mode) in enumerate((first, second)):
        spec = TransformWithStateSpec(Declares(variables), output_mode, time_mode, time_mode == "EventTime")
        try:
            record_schema(str(directory), 0, spec)
        except TransformWithStateError as exc:
            if index == 0:
                raise
            return exc.error_class
    return "allowed"


@pytest.fixture
def spark(spark_context: Any) -> Iterator[Any]:
    """The shared session with the RocksDB state store provider for the test."""
    with rocksdb_session(spark_context) as session:
        yield session


@pytest.mark.parametrize("change", sorted(CASES))
def test_a_restart_is_refused_or_allowed_as_pyspark_does(spark: Any, tmp_path: Path, change: str) -> None:
    """The same verdict (allowed, or Spark's error class) for the same change between runs."""
    first, second = CASES[change]
    assert ours_restart(tmp_path / "ck", first, second) == spark_restart(spark, first, second)
