"""Any DataFrame through ``from_dataframe`` gives the oracle's pairs, whichever way the bridge
brings it into arrival order.

Each case builds the same kind of input (3,000 rows, ``ts`` with ties inside and across
partitions, a unique ``seq`` as the tie-break) the way a PySpark user might: from pandas or a
pyarrow table, from ``Row`` objects, from ``spark.range``, read from Parquet, CSV, JSON and
ORC files, after ``filter``, ``union``, ``join``, repartitioning and caching. Every case runs
under each ``order``, on the session's Spark (``local[2]``).
"""

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F

import streamjoin as sj
from streamjoin import spark_bridge as sb
from streamjoin.sources import Source

N = 3000
FILES = 4
QUERY = sj.Query(sj.band("x", 3), window=sj.CountWindow(40))
SCHEMA = "seq long, stream tinyint, ts long, x double"


def arrival_order(data: dict) -> dict:
    """``data`` as the bridge orders it: by ts, then seq (unique), then stream."""
    order = np.lexsort([data["stream"], data["seq"], data["ts"]])
    return {k: np.asarray(v)[order] for k, v in data.items()}


@pytest.fixture(scope="module")
def data() -> dict:
    """N rows in ts order (about five per ts) with a seq that orders ties at random."""
    rng = np.random.default_rng(11)
    return {
        "seq": rng.permutation(N).astype(np.int64),
        "stream": rng.integers(0, 2, N).astype(np.int8),
        "ts": np.sort(rng.integers(0, N // 5, N)).astype(np.int64),
        "x": rng.integers(0, 1000, N).astype(np.float64),
    }


@pytest.fixture(scope="module")
def files(data, tmp_path_factory) -> str:
    """``data`` cut in ts order into FILES files per format (plus an empty Parquet file)."""
    root = tmp_path_factory.mktemp("any_df")
    table = pa.table(data)
    for fmt in ("parquet", "csv", "json", "orc"):
        os.makedirs(root / fmt)
    pieces = np.array_split(np.arange(N), FILES)
    for k, rows in enumerate(pieces):
        part = table.take(rows)
        pq.write_table(part, root / "parquet" / f"part-{k}.parquet")
        orc.write_table(part, str(root / "orc" / f"part-{k}.orc"))
        frame = part.to_pandas()
        frame.to_csv(root / "csv" / f"part-{k}.csv", index=False, header=False)
        frame.to_json(root / "json" / f"part-{k}.json", orient="records", lines=True)
    pq.write_table(table.slice(0, 0), root / "parquet" / "part-empty.parquet")
    return str(root)


def _pandas(spark, data, files):
    return spark.createDataFrame(pd.DataFrame(data)), data


def _subset(data: dict, keep: np.ndarray) -> dict:
    return {k: v[keep] for k, v in data.items()}


def _range(spark, data, files):
    df = spark.range(N, numPartitions=3).select(
        F.col("id").alias("seq"),
        (F.col("id") % 2).cast("tinyint").alias("stream"),
        (F.col("id") / 7).cast("long").alias("ts"),
        ((F.col("id") * 7919) % 1000).cast("double").alias("x"),
    )
    seq = np.arange(N, dtype=np.int64)
    expected = {
        "seq": seq,
        "stream": (seq % 2).astype(np.int8),
        "ts": seq // 7,
        "x": ((seq * 7919) % 1000).astype(np.float64),
    }
    return df, expected


def _dim_join(spark, data, files):
    dim = spark.createDataFrame(pa.table({"k": np.arange(5), "w": np.arange(5) * 10}))
    df = spark.createDataFrame(pa.table(data)).withColumn("k", F.col("seq") % 5)
    return df.join(dim, "k").drop("k"), data


def _union(spark, data, files):
    first, second = (_subset(data, data["seq"] % 2 == y) for y in (0, 1))
    df = spark.createDataFrame(pa.table(first)).union(spark.createDataFrame(pd.DataFrame(second)))
    return df, data


CASES = {
    "pandas": _pandas,
    "pyarrow": lambda spark, data, files: (spark.createDataFrame(pa.table(data)), data),
    "rows": lambda spark, data, files: (
        spark.createDataFrame(
            [
                Row(**dict(zip(data, map(int, vals[:3]), strict=False)), x=float(vals[3]))
                for vals in zip(*data.values(), strict=True)
            ],
            SCHEMA,
        ),
        data,
    ),
    "range": _range,
    "parquet": lambda spark, data, files: (spark.read.parquet(f"{files}/parquet"), data),
    "read_files": lambda spark, data, files: (sb.read_files(spark, f"{files}/parquet"), data),
    "csv": lambda spark, data, files: (spark.read.csv(f"{files}/csv", schema=SCHEMA), data),
    "json": lambda spark, data, files: (spark.read.json(f"{files}/json", schema=SCHEMA), data),
    "orc": lambda spark, data, files: (spark.read.orc(f"{files}/orc"), data),
    "filter": lambda spark, data, files: (
        spark.createDataFrame(pd.DataFrame(data)).filter("x >= 100"),
        _subset(data, data["x"] >= 100),
    ),
    "withColumn": lambda spark, data, files: (
        spark.createDataFrame(pa.table(data)).withColumn("x", F.col("x") * 2),
        {**data, "x": data["x"] * 2},
    ),
    "parquet_filter": lambda spark, data, files: (
        sb.read_files(spark, f"{files}/parquet").where("ts >= 100 and x < 900"),
        _subset(data, (data["ts"] >= 100) & (data["x"] < 900)),
    ),
    "union": _union,
    "join": _dim_join,
    "repartition": lambda spark, data, files: (_pandas(spark, data, files)[0].repartition(4), data),
    "repartition_col": lambda spark, data, files: (
        _pandas(spark, data, files)[0].repartition("stream"),
        data,
    ),
    "empty_partitions": lambda spark, data, files: (
        _pandas(spark, data, files)[0].repartition(8, "stream"),
        data,
    ),
    "coalesce": lambda spark, data, files: (
        spark.read.parquet(f"{files}/parquet").coalesce(1),
        data,
    ),
    "sortWithinPartitions": lambda spark, data, files: (
        _pandas(spark, data, files)[0].sortWithinPartitions("x"),
        data,
    ),
    "cached": lambda spark, data, files: (spark.createDataFrame(pa.table(data)).cache(), data),
    "parquet_cached": lambda spark, data, files: (
        sb.read_files(spark, f"{files}/parquet").cache(),
        data,
    ),
}


ORDERS = ["auto", "partitions", "sort"]


def _case_orders() -> list:
    """Every (DataFrame, order); the default run reads each DataFrame in one order, the
    orders taken in turn, and ``-m slow`` the other two."""
    return [
        pytest.param(case, order, marks=() if j == i % len(ORDERS) else (pytest.mark.slow,))
        for i, case in enumerate(sorted(CASES))
        for j, order in enumerate(ORDERS)
    ]


@pytest.mark.parametrize(("case", "order"), _case_orders())
def test_any_dataframe_equals_oracle(spark, data, files, case, order):
    df, expected = CASES[case](spark, data, files)
    src = sb.from_dataframe(df, tie_break="seq", order=order)
    result = sj.run(QUERY, src, batch_size=256)
    assert result.metrics["input_tuples"] == len(expected["ts"])
    assert result.same_pairs(sj.oracle.join(QUERY, arrival_order(expected)))
    assert src.order_used == order if order != "auto" else src.order_used in ("partitions", "sort")
    df.unpersist()


class Captured(Source):
    """A source that keeps what it hands over."""

    def __init__(self, src) -> None:
        self.src = src
        self.tables: list[pa.Table] = []

    def check(self, query) -> None:
        self.src.check(query)

    def __iter__(self):
        for chunk in self.src:
            table = chunk if isinstance(chunk, pa.Table) else pa.Table.from_batches([chunk])
            self.tables.append(table)
            yield table


@pytest.mark.parametrize("order", ["auto", "partitions", "sort"])
def test_non_deterministic_dataframe_is_read_once(spark, data, order):
    """x drawn by ``rand()``: each evaluation of the DataFrame differs, so the join must see
    one of them, whole and in arrival order, and its pairs must be that one's."""
    df = spark.createDataFrame(pa.table(data)).withColumn("x", F.floor(F.rand() * 1000))
    src = Captured(sb.from_dataframe(df.repartition(3), tie_break="seq", order=order))
    result = sj.run(QUERY, src, batch_size=256)
    fed = pa.concat_tables(src.tables)
    assert fed.num_rows == N
    assert np.array_equal(fed.column("ts").to_numpy(), data["ts"])  # data is in ts order
    assert (
        np.bincount(fed.column("stream").to_numpy()).tolist()
        == np.bincount(data["stream"]).tolist()
    )
    assert result.same_pairs(sj.oracle.join(QUERY, fed))


@pytest.mark.parametrize("make", ["pandas", "parquet"])
def test_long_keys_near_the_int64_limits_compare_exactly(spark, data, tmp_path, make):
    """A ``long`` join column near both ends of int64, where float64 images collide by the
    thousand: the bridge's Arrow batches keep the integers, and the join compares them
    exactly (the images alone give other pairs)."""
    rng = np.random.default_rng(12)
    bases = rng.choice(np.array([2**62, -(2**63) + 5, 2**63 - 6], dtype=np.int64), N)
    wide = {**data, "x": bases + rng.integers(-5, 6, N)}
    if make == "pandas":
        df = spark.createDataFrame(pd.DataFrame(wide))
    else:
        pq.write_table(pa.table(wide), tmp_path / "wide.parquet")
        df = spark.read.parquet(str(tmp_path / "wide.parquet"))
    expected = sj.oracle.join(QUERY, arrival_order(wide))
    images = {**wide, "x": wide["x"].astype(np.float64)}
    assert not sj.oracle.same_pairs(sj.oracle.join(QUERY, arrival_order(images)), expected)
    result = sj.run(QUERY, sb.from_dataframe(df, tie_break="seq"), batch_size=256)
    assert result.same_pairs(expected)
