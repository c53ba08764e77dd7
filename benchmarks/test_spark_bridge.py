"""Streaming a cached DataFrame out of Spark: the bridge vs Spark's own ``toArrow``.

Run: ``python -m pytest benchmarks/test_spark_bridge.py --benchmark-enable -o addopts="" -p
no:cacheprovider``. The issue's target: a cached 10 M-row DataFrame into the emitter at
≥ 5 M rows/s where ``toArrow()`` (which collects everything at once) does about 8 M rows/s;
compare the rows/s of the cases in one run (``extra_info``). ``BRIDGE_ROWS`` sets the size.
The cached rows are in arrival order, 8 partitions of consecutive ``ts``; most cases stream
them as they are (``order="keep"``), ``test_bridge_arrival_order`` orders them as an input not
known to be ordered would be.
"""

import os
import time

import pytest

import streamjoin as sj
from streamjoin.actors.emitter import Emitter
from streamjoin.spark_bridge import from_dataframe, session
from streamjoin.validation import validate

N = int(os.environ.get("BRIDGE_ROWS", 10_000_000))
QUERY = sj.Query(sj.band("x", 1.0), window=sj.TimeWindow(1000))


@pytest.fixture(scope="module")
def cached():
    """N rows (stream, ts, x) in arrival order, cached in Spark's memory, with its source."""
    spark = session("local[2]", spark_driver_memory="4g")  # toArrow holds all N rows
    df = (
        spark.range(N, numPartitions=8)
        .selectExpr("cast(id % 2 as tinyint) as stream", "id div 2 as ts", "rand(1) * 1e6 as x")
        .cache()
    )
    df.count()
    source = from_dataframe(df, order="keep")
    source.check(QUERY)  # the schema check, once (run() does it per run)
    yield spark, df, source
    df.unpersist()


def _rate(benchmark, rows):
    benchmark.extra_info["rows"] = rows
    benchmark.extra_info["rows_per_s"] = rows / benchmark.stats.stats.mean


def test_spark_to_arrow(benchmark, cached):
    _, df, _ = cached
    table = benchmark.pedantic(df.toArrow, rounds=2, iterations=1)
    _rate(benchmark, table.num_rows)


@pytest.mark.parametrize("transport", ["arrow", "ipc"])
def test_bridge_batches(benchmark, cached, transport):
    _, _, source = cached
    source.transport = transport

    def stream():
        return sum(b.num_rows for b in source)

    rows = benchmark.pedantic(stream, rounds=2, iterations=1)
    source.transport = "auto"
    _rate(benchmark, rows)


@pytest.mark.parametrize("order", ["partitions", "sort"])
def test_bridge_arrival_order(benchmark, cached, order):
    """Bringing the rows into arrival order: partition-ordered streaming (jobs in order of
    each partition's ts minimum, sorted on the driver) against Spark's global sort."""
    _, df, _ = cached
    source = from_dataframe(df, order=order)
    source.check(QUERY)
    assert source.order_used == order

    def stream():
        return sum(b.num_rows for b in source)

    rows = benchmark.pedantic(stream, rounds=2, iterations=1)
    assert rows == N
    _rate(benchmark, rows)


def test_bridge_into_emitter(benchmark, cached):
    """Partitions as Arrow batches, validated and stamped by the emitter into 16K batches."""
    _, _, source = cached

    def feed():
        emitter = Emitter(QUERY, batch_size=16_384, clock=time.monotonic_ns)
        rows = batches = 0
        for chunk in source:
            cols = validate(chunk, QUERY, row_offset=rows)
            batches += len(emitter.on_chunk(cols))
            rows += len(cols)
        batches += len(emitter.on_eof())
        assert batches >= rows // 16_384
        return rows

    rows = benchmark.pedantic(feed, rounds=2, iterations=1)
    assert rows == N
    _rate(benchmark, rows)


def test_plan_before_the_job(benchmark, cached):
    """:meth:`SparkSource.check`: the schema and the plan of the read, no Spark job."""
    _, df, _ = cached
    source = from_dataframe(df)
    benchmark.pedantic(source.check, args=(QUERY,), rounds=2, iterations=1)
    assert source.order_used in ("partitions", "sort")
