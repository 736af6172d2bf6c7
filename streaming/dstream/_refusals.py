"""What a DStream program cannot do on Spark Connect yet, refused at the call with the alternative to use.

No Spark counterpart: pyspark.streaming does not run on Spark Connect at all. Each entry names a
feature that needs a SparkContext in the driver (accumulators, py4j, tasks that call back into
this process) and what to write instead (docs/connect.md lists them).
"""

from __future__ import annotations

from ._environment import StreamEnvironment

__all__ = ["CONNECT_REFUSALS", "refuse_on_connect"]

_CLASSIC = "or run the program on a classic SparkContext (SparkSession.builder.master(...).getOrCreate())"

CONNECT_REFUSALS: dict[str, tuple[str, str]] = {
    "withWatermark": (
        "withWatermark",
        f"it gathers event times in a Spark accumulator; drop late records yourself in a transform, {_CLASSIC}"),
    "mapGroupsWithState": (
        "mapGroupsWithState",
        f"its state store is not carried to Spark Connect yet; keep per-key state with updateStateByKey, {_CLASSIC}"),
    "flatMapGroupsWithState": (
        "flatMapGroupsWithState",
        f"its state store is not carried to Spark Connect yet; keep per-key state with updateStateByKey, {_CLASSIC}"),
    "transformWithState": (
        "transformWithState",
        f"its state store is not carried to Spark Connect yet; keep per-key state with updateStateByKey, {_CLASSIC}"),
}
"""Method name -> (what is refused, the alternative), for :func:`refuse_on_connect`."""


def refuse_on_connect(env: StreamEnvironment, method: str) -> None:
    """Raise ``ConnectNotSupportedError`` if ``env``'s context runs on Spark Connect and ``method`` cannot; nothing otherwise.

    Raises:
        ConnectNotSupportedError: on Spark Connect (the message names the alternative).
    """
    feature, alternative = CONNECT_REFUSALS[method]
    env.spark.require_jvm(feature, alternative)
