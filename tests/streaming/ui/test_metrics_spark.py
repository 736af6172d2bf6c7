"""Prometheus metrics of a real DStream program on local[2], scraped through the ASGI endpoint while it runs."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from listeners import EventRecorder
from streaming import StreamingContext
from streaming.ui import StreamingMetrics
from tests.streaming.ui.test_metrics import samples, scrape, value

pytestmark = pytest.mark.spark


def test_a_pyspark_program_s_batches_are_in_the_scraped_metrics(spark_context: Any) -> None:
    """Batch counts, input records and the delay histograms equal what the bus reported for the same batches."""
    metrics = StreamingMetrics()
    recorder = EventRecorder()

    async def body() -> None:
        with anyio.fail_after(90):
            async with StreamingContext(spark_context, 0.2, queryName="metered") as ssc:
                ssc.queueStream([[1, 2], [3, 4, 5], [6]]).map(lambda x: x * 2).foreachRDD(lambda rdd: rdd.count())
                metrics.attach(ssc)
                ssc.addStreamingListener(recorder)
                await ssc.start_async()
                await recorder.wait_for_batches(4)
                await ssc.runtime.listener_bus.wait_delivered()
                status, text, _ = await scrape(metrics.asgi_app())
                batches = list(recorder.completed_batches)
                await ssc.stop_async()
        assert status == 200
        found = samples(text)
        assert value(found, "aiodstream_batches_total", query="metered", outcome="succeeded") == len(batches)
        records = sum(i.num_records for b in batches for i in b.stream_id_to_input_info.values())
        assert records == 6
        assert value(found, "aiodstream_input_records_total", query="metered", input="0") == records
        total = [b.total_delay.milliseconds / 1000 for b in batches]
        assert value(found, "aiodstream_batch_total_delay_seconds_count", query="metered") == len(total)
        assert value(found, "aiodstream_batch_total_delay_seconds_sum", query="metered") == pytest.approx(sum(total))
        assert value(found, "aiodstream_query_progress_reports_total", query="metered") >= 1

    anyio.run(body)
