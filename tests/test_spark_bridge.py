"""The Spark bridge against the oracle: batch and streaming sources, results back, pipelines.

One local[2] SparkSession for the run (the ``spark`` fixture). Spark defines arrival order
(``ts``, then ``seq``, then R before S), so the oracle runs over the input in that order.
"""

import os
import stat
import subprocess
import sys
import time
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import predicates, tables, windows

import streamjoin as sj
from streamjoin import spark_bridge as sb
from streamjoin.spark_bridge import partitions
from streamjoin.spark_bridge.session import SparkSetupError, java_major


def in_arrival_order(data: dict) -> dict:
    """``data`` (with ``seq``) as the bridge orders it: by ts, then seq, then stream."""
    keys = [data["seq"], data["ts"]]
    if "stream" in data:
        keys.insert(0, data["stream"])
    order = np.lexsort(keys)
    return {k: v[order] for k, v in data.items()}


def with_seq(data: dict) -> dict:
    n = len(data["ts"])
    rng = np.random.default_rng(n)
    return {**data, "seq": rng.permutation(n).astype(np.int64)}


def spark_df(spark, data: dict, partitions: int = 3):
    return spark.createDataFrame(pa.table(data)).repartition(partitions)


# --- Java -----------------------------------------------------------------------------------


def fake_java(tmp_path, version_line: str) -> str:
    path = tmp_path / "bin" / "java"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize(
    "line, major",
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "11.0.2" 2019-01-15', 11),
    ],
)
def test_java_major(line, major):
    assert java_major(line) == major


def test_old_java_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    fake_java(tmp_path, 'openjdk version "11.0.2" 2019-01-15')
    with pytest.raises(SparkSetupError, match=r"is Java 11; PySpark 4 needs Java 17"):
        sb.check_java()
    with pytest.raises(SparkSetupError, match="Java 11"):
        sb.session()  # fails before starting anything


def test_missing_java_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SparkSetupError, match="Java not found"):
        sb.check_java()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(SparkSetupError, match="not an executable"):
        sb.check_java()


def test_this_machines_java_passes():
    assert sb.check_java() >= 17


def test_spark_bridge_is_an_attribute_of_the_package_loaded_on_use():
    """As the README shows: ``import streamjoin as sj`` then ``sj.spark_bridge...``, while
    ``import streamjoin`` alone loads neither the bridge nor PySpark."""
    code = (
        "import sys, streamjoin as sj\n"
        "print(sorted({'pyspark', 'streamjoin.spark_bridge'} & set(sys.modules)))\n"
        "print(sj.spark_bridge.from_dataframe.__name__, 'spark_bridge' in dir(sj))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "from_dataframe True"]
    with pytest.raises(AttributeError, match="no attribute 'spark_bridges'"):
        sj.spark_bridges  # noqa: B018


# --- batch source ---------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["arrow", "ipc"])
@pytest.mark.parametrize("window", [sj.CountWindow(50), sj.TimeWindow(4)])
def test_dataframe_source_equals_oracle(spark, transport, window):
    data = sj.sources.synthetic(3000, low=0, high=3000, seed=5)
    data = with_seq({k: data.column(k).to_numpy() for k in data.column_names})
    query = sj.Query(sj.band("x", 3), window=window)
    src = sb.from_dataframe(spark_df(spark, data), tie_break="seq", transport=transport)
    result = sj.run(query, src, batch_size=128)
    assert result.same_pairs(sj.oracle.join(query, in_arrival_order(data)))
    assert result.metrics["input_tuples"] == 3000


def test_two_dataframes_merge_by_ts_r_first(spark):
    rng = np.random.default_rng(1)
    r = {"ts": np.sort(rng.integers(0, 200, 400)), "x": rng.integers(0, 50, 400)}
    s = {"ts": np.sort(rng.integers(0, 200, 300)), "x": rng.integers(0, 50, 300)}
    query = sj.Query(sj.equal("x") & sj.less_equal("ts_copy"), window=sj.TimeWindow(20))
    for d, seq in ((r, np.arange(400)), (s, np.arange(300))):
        d["ts_copy"] = d["ts"].astype(np.float64)
        d["seq"] = seq
    src = sb.from_dataframe(spark_df(spark, r), spark_df(spark, s, 2), tie_break=["x", "seq"])
    # expected order: ts, then x and seq, then R before S
    merged = {k: np.concatenate([r[k], s[k]]) for k in r}
    merged["stream"] = np.repeat(np.array([0, 1], np.int8), [400, 300])
    order = np.lexsort((merged["stream"], merged["seq"], merged["x"], merged["ts"]))
    merged = {k: v[order] for k, v in merged.items()}
    result = sj.run(query, src, sj.topologies.grid(2, 2), batch_size=16)
    assert result.same_pairs(sj.oracle.join(query, merged))


def test_self_join_and_equal_timestamps(spark):
    n = 2000
    data = with_seq({"ts": np.repeat(np.arange(n // 10), 10), "x": np.arange(n) % 7})
    query = sj.Query(sj.equal("x"), window=sj.CountWindow(30), self_join=True)
    src = sb.from_dataframe(spark_df(spark, data), stream=None, tie_break="seq")
    result = sj.run(query, src, batch_size=1 << 9)
    assert result.same_pairs(sj.oracle.join(query, in_arrival_order(data)))


def test_empty_dataframe(spark):
    data = {"stream": np.zeros(0, np.int8), "ts": np.zeros(0, np.int64), "x": np.zeros(0)}
    src = sb.from_dataframe(spark.createDataFrame(pa.table(data)))
    result = sj.run(sj.Query(sj.band("x", 1), window=sj.CountWindow(4)), src)
    assert result.count == 0 and result.metrics["input_tuples"] == 0


@settings(max_examples=examples(10), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.booleans(), st.data())
def test_random_inputs_through_spark_equal_oracle(spark, self_join, draw):
    data = with_seq(draw.draw(tables(self_join, max_rows=80)))
    query = sj.Query(draw.draw(predicates()), window=draw.draw(windows()), self_join=self_join)
    df = spark.createDataFrame(pa.table(data))
    # round robin: partitions overlap in ts; by range: disjoint, equal ts in one partition
    by_range = draw.draw(st.booleans())
    df = df.repartitionByRange(3, "ts") if by_range else df.repartition(2)
    order = draw.draw(st.sampled_from(["auto", "sort", "partitions"]))
    src = sb.from_dataframe(
        df,
        stream=None if self_join else "stream",
        tie_break="seq",
        order=order,
        rows_per_job=draw.draw(st.sampled_from([1, 9, 1 << 16])),
    )
    result = sj.run(query, src, batch_size=draw.draw(st.sampled_from([1, 7, 64])))
    assert src.order_used in ((order,) if order != "auto" else ("sort", "partitions"))
    assert result.same_pairs(sj.oracle.join(query, in_arrival_order(data)))


# --- partition-ordered streaming --------------------------------------------------------------


def write_files(folder, parts: list[dict]) -> None:
    """Each of ``parts`` as one Parquet file (an empty dict entry list gives an empty file)."""
    os.makedirs(folder, exist_ok=True)
    for k, part in enumerate(parts):
        pq.write_table(pa.table(part), os.path.join(folder, f"part-{k:04d}.parquet"))


def cut(data: dict, sizes) -> list[dict]:
    """``data`` cut into consecutive runs of ``sizes`` rows."""
    bounds = np.cumsum([0, *sizes])
    return [{c: v[a:b] for c, v in data.items()} for a, b in pairwise(bounds)]


def streamed(src, query) -> pa.Table:
    """What ``src`` hands to the join, as one table."""
    src.check(query)
    return pa.concat_tables(
        pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b for b in src
    )


@pytest.mark.parametrize("rows_per_job", [1, 700, 1 << 16])
def test_disjoint_partitions_stream_in_order(spark, tmp_path, rows_per_job):
    """Files in time order, read one partition each (Spark numbers them by size, not time),
    with runs of equal ts cut by file boundaries and an empty file."""
    n = 3000
    data = sj.sources.synthetic(n, low=0, high=3000, seed=8)
    data = {k: data.column(k).to_numpy() for k in data.column_names}
    data["ts"] = np.arange(n, dtype=np.int64) // 7  # equal ts across most file boundaries
    data["seq"] = np.arange(n, dtype=np.int64)
    write_files(str(tmp_path / "in"), cut(data, [400, 1100, 0, 250, 900, 350]))
    df = sb.read_files(spark, str(tmp_path / "in"))
    assert df.rdd.getNumPartitions() == 6
    src = sb.from_dataframe(df, tie_break="seq", rows_per_job=rows_per_job)
    for query in (
        sj.Query(sj.band("x", 3), window=sj.CountWindow(60)),
        sj.Query(sj.band("x", 3), window=sj.TimeWindow(9)),
    ):
        result = sj.run(query, src, batch_size=64)
        assert src.order_used == "partitions" and src.held_rows <= 1100  # whole partitions
        assert result.same_pairs(sj.oracle.join(query, data))
    got = streamed(src, query)
    assert np.array_equal(got.column("ts").to_numpy(), data["ts"])
    assert np.array_equal(got.column("x").to_numpy(), data["x"])


def test_equal_ts_interleaved_across_partitions(spark, tmp_path):
    """Rows at the same ts in two partitions, their tie-break values interleaved: the driver
    holds them back and orders them together."""
    p0 = {"ts": [0, 1, 2, 2, 2], "seq": [0, 1, 2, 4, 6], "stream": [0, 1, 0, 1, 0]}
    p1 = {"ts": [2, 2, 3, 5], "seq": [3, 5, 7, 8], "stream": [1, 0, 1, 1]}
    p2 = {"ts": [5, 5, 6], "seq": [9, 10, 11], "stream": [0, 1, 0]}
    parts = [{**p, "x": np.asarray(p["seq"], np.float64)} for p in (p0, p1, p2)]
    for p in parts:
        p["stream"] = np.asarray(p["stream"], np.int8)
    write_files(str(tmp_path / "in"), parts)
    data = {c: np.concatenate([np.asarray(p[c]) for p in parts]) for c in parts[0]}
    expected = in_arrival_order(data)
    query = sj.Query(sj.band("x", 2), window=sj.CountWindow(3))
    src = sb.from_dataframe(
        sb.read_files(spark, str(tmp_path / "in")),
        tie_break="seq",
        order="partitions",
        rows_per_job=1,
    )
    got = streamed(src, query)
    assert np.array_equal(got.column("x").to_numpy(), expected["x"])  # x numbers the rows
    assert sj.run(query, src).same_pairs(sj.oracle.join(query, expected))


def test_overlapping_partitions_are_held_or_sorted_in_spark(spark, monkeypatch):
    """Round robin: every partition spans all of ts. The driver holds the rows until Spark
    has read them all (small input), or Spark sorts them (more than MAX_HELD_ROWS)."""
    data = sj.sources.synthetic(3000, low=0, high=3000, seed=6)
    data = with_seq({k: data.column(k).to_numpy() for k in data.column_names})
    query = sj.Query(sj.band("x", 3), window=sj.CountWindow(50))
    expected = sj.oracle.join(query, in_arrival_order(data))
    df = spark_df(spark, data, 3)
    src = sb.from_dataframe(df, tie_break="seq", rows_per_job=100)
    assert sj.run(query, src, batch_size=128).same_pairs(expected)
    assert src.order_used == "partitions" and src.held_rows >= 2000  # held until the end
    monkeypatch.setattr(sb.source, "MAX_HELD_ROWS", 1000)
    src = sb.from_dataframe(df, tie_break="seq", rows_per_job=100)
    assert sj.run(query, src, batch_size=128).same_pairs(expected)
    assert src.order_used == "sort"


def test_two_dataframes_from_file_pairs_stream_by_partitions(spark, tmp_path):
    """R and S as file pairs (as written by the experiment), the default tie-break: R before
    S at equal ts, each side in its DataFrame's own order; the same order as Spark's sort."""
    data = sj.sources.synthetic(4000, low=0, high=4000, seed=3)
    data = {k: data.column(k).to_numpy() for k in data.column_names}
    data["ts"] = data["ts"] // 3  # equal ts within and across streams
    data["id"] = np.arange(len(data["ts"]), dtype=np.int64)
    sizes = [700, 0, 1300, 1200, 800]
    for side, y in (("r", 0), ("s", 1)):
        mine = {c: v[data["stream"] == y] for c, v in data.items() if c != "stream"}
        per_side = np.diff(np.searchsorted(data["id"][data["stream"] == y], np.cumsum([0, *sizes])))
        write_files(str(tmp_path / side), cut(mine, per_side))
    r, s = (sb.read_files(spark, str(tmp_path / side)) for side in "rs")
    query = sj.Query(sj.band("x", 4), window=sj.TimeWindow(20))
    src = sb.from_dataframe(r, s, rows_per_job=1000)
    result = sj.run(query, src, sj.topologies.grid(2, 2), batch_size=32)
    assert src.order_used == "partitions"
    ordered = src.ordered.select("stream", "ts", "x", "id").toArrow()
    assert result.same_pairs(sj.oracle.join(query, ordered))
    assert result.same_pairs(sj.run(query, sb.from_dataframe(r, s, order="sort")))
    got = streamed(src, query)
    assert np.array_equal(got.column("x").to_numpy(), ordered.column("x").to_numpy())
    assert np.array_equal(got.column("stream").to_numpy(), ordered.column("stream").to_numpy())


def test_partition_order_with_empty_partitions_and_ipc(spark, tmp_path):
    data = sj.sources.synthetic(1000, low=0, high=1000, seed=1)
    data = {k: data.column(k).to_numpy() for k in data.column_names}
    data["seq"] = np.arange(1000, dtype=np.int64)
    write_files(str(tmp_path / "in"), cut(data, [0, 300, 0, 0, 600, 100, 0]))
    df = sb.read_files(spark, str(tmp_path / "in"))
    assert df.rdd.getNumPartitions() == 7
    query = sj.Query(sj.band("x", 3), window=sj.CountWindow(40))
    for transport, read in (("arrow", 3), ("ipc", 7)):
        src = sb.from_dataframe(df, tie_break="seq", transport=transport, rows_per_job=1)
        result = sj.run(query, src, batch_size=16)
        # the footers tell the Arrow path that 4 partitions are empty; "ipc" reads them all
        assert src.order_used == "partitions" and len(src.partitions) == read
        assert result.same_pairs(sj.oracle.join(query, data))
    empty = spark.createDataFrame(pa.table({k: v[:0] for k, v in data.items()}))
    src = sb.from_dataframe(empty, tie_break="seq", order="partitions")
    assert sj.run(query, src).metrics["input_tuples"] == 0 and src.partitions == []


def new_jobs(spark, since: set[int]) -> list[int]:
    """Spark jobs (outside job groups) started since ``since`` was taken."""
    return sorted(set(spark.sparkContext.statusTracker().getJobIdsForGroup()) - since)


def test_one_spark_pass_in_few_jobs_from_file_statistics(spark, tmp_path, monkeypatch):
    """No Spark job before the join: the footers bound each file's ts, so the first job's
    rows are handed over before Spark reads the rest, in jobs that grow."""
    n = 12_000
    data = sj.sources.synthetic(n, low=0, high=n, seed=12)
    data = {k: data.column(k).to_numpy() for k in data.column_names}
    data["seq"] = np.arange(n, dtype=np.int64)
    write_files(str(tmp_path / "in"), cut(data, [1000] * 12))
    df = sb.read_files(spark, str(tmp_path / "in"))
    query = sj.Query(sj.band("x", 3), window=sj.TimeWindow(50))
    expected = sj.oracle.join(query, data)
    monkeypatch.setattr(sb.source, "FIRST_JOB_ROWS", 1000)
    for rows_per_job, jobs in ((1 << 20, 4), (4000, 5)):  # 1, 2, 4, (4 or 5), 1 files
        before = set(spark.sparkContext.statusTracker().getJobIdsForGroup())
        src = sb.from_dataframe(df, tie_break="seq", rows_per_job=rows_per_job)
        src.check(query)
        assert new_jobs(spark, before) == []  # planned without Spark
        assert src.order_used == "partitions" and src.jobs == jobs
        assert all(p.ts_min is not None for p in src.partitions)
        assert sj.run(query, src, batch_size=256).same_pairs(expected)
        assert len(new_jobs(spark, before)) == jobs


@pytest.mark.parametrize("zone", ["UTC", None])
def test_file_statistics_through_conversions_and_filters(spark, tmp_path, zone):
    """ts as a timestamp column (an instant, or a wall-clock time in a UTC session;
    milliseconds through unix_millis), filtered: bounds known; ts computed by a function that
    is not monotone: unknown, and the answer the same."""
    from pyspark.sql import functions as F

    n = 4000
    data = sj.sources.synthetic(n, low=0, high=n, seed=13)
    data = {k: data.column(k).to_numpy() for k in data.column_names}
    data["seq"] = np.arange(n, dtype=np.int64)
    when = pa.array(data["ts"] * 1000 + 1_700_000_000_000_000, pa.timestamp("us", tz=zone))
    write_files(str(tmp_path / "in"), cut({**data, "when": when}, [1000] * 4))
    df = sb.read_files(spark, str(tmp_path / "in")).drop("ts")
    keep = data["x"] < 3000
    ms = {**{k: v[keep] for k, v in data.items()}, "ts": data["ts"][keep] + 1_700_000_000_000}
    query = sj.Query(sj.band("x", 3), window=sj.TimeWindow(40))
    src = sb.from_dataframe(df.where("x < 3000"), ts="when", tie_break="seq")
    assert sj.run(query, src).same_pairs(sj.oracle.join(query, ms))
    assert src.order_used == "partitions" and len(src.partitions) == 4
    # the files' minima, unfiltered: a lower bound of what the filter keeps
    firsts = [1_700_000_000_000 + data["ts"][1000 * k] for k in range(4)]
    assert [p.ts_min for p in src.partitions] == firsts
    flipped = df.withColumn("ts", -F.unix_millis("when")).where("x < 3000")
    src = sb.from_dataframe(flipped, tie_break="seq")
    minus = {**ms, "ts": -ms["ts"]}
    assert sj.run(query, src).same_pairs(sj.oracle.join(query, in_arrival_order(minus)))
    assert src.order_used == "partitions" and all(p.ts_min is None for p in src.partitions)


def test_partition_order_needs_sortable_tie_break(spark, no_job):
    df = spark.createDataFrame(
        pa.table({"stream": [0, 1], "ts": [1, 1], "x": [1.0, 2.0], "w": [[0.5], [0.25]]})
    )
    query = sj.Query(sj.band("x", 1), window=sj.CountWindow(4))
    with pytest.raises(sj.InputError, match="tie-break column 'w' of type array<double>"):
        sj.run(query, sb.from_dataframe(df, tie_break="w", order="partitions"))
    src = sb.from_dataframe(df, tie_break="w")
    src.check(query)
    assert src.order_used == "sort"
    with pytest.raises(ValueError, match="order must be one of"):
        sb.from_dataframe(df, order="time")


def test_partition_plan_and_held_rows():
    P = partitions.PartitionRange
    parts = [P(0, 10, 20, 29), P(1, 10, 0, 9), P(2, 0, 0, 0), P(3, 10, 9, 19), P(4, 5, 30, 40)]
    jobs = partitions.plan_jobs(parts, 10)
    assert [[p.pid for p in job] for job in jobs] == [[1], [3], [0], [4]]
    # 1 ends at 9 where 3 starts: about a tenth of it held back after [1]
    assert partitions.buffered_rows(jobs) == (1, 11)
    assert [[p.pid for p in job] for job in partitions.plan_jobs(parts, 15)] == [[1, 3], [0, 4]]
    assert partitions.buffered_rows(partitions.plan_jobs(parts, 100)) == (0, 35)
    # growing jobs: 1 partition (>= 5 rows), then >= 10, then the rest
    grown = partitions.plan_jobs(parts, 100, first_rows=5)
    assert [[p.pid for p in job] for job in grown] == [[1], [3], [0, 4]]
    # unknown bounds come first, and everything is held until they are all read
    blind = [*parts, P(5, 7, None, None), P(6, 0, None, None)]
    jobs = partitions.plan_jobs(blind, 10)
    assert [[p.pid for p in job] for job in jobs] == [[5, 6, 1], [3], [0], [4]]
    # after [5, 6, 1]: 5's 7 rows and a tenth of 1's held; at the peak with 3's 10 rows
    assert partitions.buffered_rows(jobs) == (8, 18)
    with pytest.raises(ValueError, match="rows_per_job"):
        partitions.plan_jobs(parts, 0)


def test_background_iteration_hands_over_errors_and_stops():
    assert list(partitions.in_background(iter(range(7)), depth=2)) == list(range(7))

    def failing():
        yield 1
        raise sj.InputError("bad partition")

    with pytest.raises(sj.InputError, match="bad partition"):
        list(partitions.in_background(failing()))
    pulled = []

    def endless():
        while True:
            pulled.append(len(pulled))
            yield pulled[-1]

    items = partitions.in_background(endless(), depth=2)
    assert next(items) == 0
    items.close()  # the thread stops: at most the queue and one item more are pulled
    time.sleep(0.5)
    assert len(pulled) <= 5


@settings(max_examples=examples(50), deadline=None)
@given(st.data())
def test_merging_jobs_gives_arrival_order(draw):
    """Random partitions (overlapping or not, bounds known or not) and job sizes: the merge
    equals a lexsort, and a row below what was already handed over is an error."""
    n_parts = draw.draw(st.integers(1, 6))
    parts, pieces = [], []
    for pid in range(n_parts):
        n = draw.draw(st.integers(0, 12))
        lo = draw.draw(st.integers(0, 20))
        ts = np.sort(
            np.array(draw.draw(st.lists(st.integers(lo, lo + 8), min_size=n, max_size=n)), np.int64)
        )
        seq = np.array(draw.draw(st.permutations(range(n))), np.int64) + 100 * pid
        pieces.append(pa.table({"ts": ts, "seq": seq, "stream": (seq % 2).astype(np.int8)}))
        if draw.draw(st.booleans()):
            parts.append(partitions.PartitionRange(pid, n, None, None))
        elif n:
            parts.append(partitions.PartitionRange(pid, n, int(ts.min()), int(ts.max())))
    jobs = partitions.plan_jobs(parts, draw.draw(st.integers(1, 30)))
    fetched = (pa.concat_tables([pieces[p.pid] for p in job]) for job in jobs)
    got = list(partitions.in_arrival_order(fetched, jobs, ["ts", "seq", "stream"], ["seq"]))
    whole = pa.concat_tables([pieces[p.pid] for p in parts] or [pieces[0].slice(0, 0)])
    order = np.lexsort([whole.column(c).to_numpy() for c in ("stream", "seq", "ts")])
    seq = np.concatenate([t.column("seq").to_numpy() for t in got]) if got else np.zeros(0)
    assert np.array_equal(seq, whole.column("seq").to_numpy()[order])
    if len(jobs) > 1 and jobs[1][0].ts_min is not None:
        early = jobs[1][0].ts_min - 1  # a row the statistics said could not come that late
        late = (
            pa.concat_tables([pieces[p.pid] for p in job]) if j != 1 else _with_row(job, early)
            for j, job in enumerate(jobs)
        )
        with pytest.raises(sj.InputError, match="statistics that planned the order"):
            list(partitions.in_arrival_order(late, jobs, ["ts", "seq", "stream"], ["seq"]))


def _with_row(job, ts: int) -> pa.Table:
    return pa.table({"ts": [ts], "seq": [-1], "stream": pa.array([0], pa.int8())})


# --- errors ---------------------------------------------------------


@pytest.fixture
def no_job(monkeypatch):
    """Fail the test if a job starts."""

    def started(*args, **kwargs):
        raise AssertionError("the job started")

    monkeypatch.setattr(sj.runtime.Local, "run", started)


def test_missing_column_is_a_clear_error(spark, no_job):
    df = spark.createDataFrame(pa.table({"stream": [0, 1], "ts": [1, 2], "y": [1.0, 2.0]}))
    query = sj.Query(sj.band("x", 1), window=sj.CountWindow(4))
    with pytest.raises(sj.InputError, match="no column 'x'"):
        sj.run(query, sb.from_dataframe(df))
    with pytest.raises(sj.InputError, match="no column 'when'"):
        sb.from_dataframe(df, ts="when")


@pytest.mark.parametrize("order", ["partitions", "sort"])
def test_null_in_join_column_is_a_clear_error_and_no_result(spark, order):
    """Checked as the rows stream (no Spark pass before the join): the column and the row
    are named, and run() raises instead of returning what was joined so far."""
    n = 5000
    x = np.arange(n, dtype=np.float64)
    x[4321] = np.nan
    data = pa.table({"seq": np.arange(n), "stream": np.arange(n) % 2, "ts": np.arange(n), "x": x})
    df = spark.createDataFrame(data).repartition(3)
    query = sj.Query(sj.band("x", 1), window=sj.CountWindow(4))
    src = sb.from_dataframe(df, tie_break="seq", order=order)
    where = "ts=4321, seq=4321" if order == "partitions" else "row 4,321"
    with pytest.raises(sj.InputError, match=f"column 'x' is NaN or infinite in .*{where}"):
        sj.run(query, src, batch_size=64)
    nulls = data.set_column(3, "x", pa.array([None if i == 7 else v for i, v in enumerate(x)]))
    src = sb.from_dataframe(spark.createDataFrame(nulls), tie_break="seq", order=order)
    with pytest.raises(sj.InputError, match="column 'x' is null in"):
        sj.run(query, src, batch_size=64)


def test_non_numeric_column_is_a_clear_error(spark, no_job):
    df = spark.createDataFrame(pa.table({"stream": [0, 1], "ts": [1, 2], "x": ["a", "b"]}))
    with pytest.raises(sj.InputError, match="column 'x' is string"):
        sj.run(sj.Query(sj.band("x", 1), window=sj.CountWindow(4)), sb.from_dataframe(df))


# --- results back ---------------------------------------------------------------------------


def test_results_back_to_spark_and_parquet(spark, tmp_path):
    data = sj.sources.synthetic(1500, low=0, high=1500, seed=2)
    data = with_seq({k: data.column(k).to_numpy() for k in data.column_names})
    query = sj.Query(sj.band("x", 2), window=sj.CountWindow(40))
    src = sb.from_dataframe(spark_df(spark, data), tie_break="seq")
    result = sj.run(query, src)
    back = result.to_spark(spark).toArrow()
    assert result.same_pairs(back)
    path = str(tmp_path / "pairs.parquet")
    src.pairs_with_columns(result, ["seq", "x", "ts"]).write.parquet(path)
    table = pq.read_table(path).sort_by([("r", "ascending"), ("s", "ascending")])
    assert table.num_rows == result.count
    ordered = in_arrival_order(data)
    r, s = table.column("r").to_numpy(), table.column("s").to_numpy()
    for col in ("seq", "x", "ts"):  # the columns are those of the rows the numbers name
        assert np.array_equal(table.column(f"r_{col}").to_numpy(), ordered[col][r])
        assert np.array_equal(table.column(f"s_{col}").to_numpy(), ordered[col][s])


def test_an_outer_joins_pairs_with_their_columns_from_a_spark_source(spark):
    """``result.pairs_with(source)`` joins the rows' columns in Spark, as ``pairs_with`` does
    in memory: the same table, nulls on an outer join's missing side (its row number too,
    as in ``to_spark``, where it is -1 in memory)."""
    data = sj.sources.synthetic(600, low=0, high=3000, seed=6)
    data = with_seq({k: data.column(k).to_numpy() for k in data.column_names})
    query = sj.Query(sj.band("x", 2), window=sj.CountWindow(40), how="full")
    src = sb.from_dataframe(spark_df(spark, data), tie_break="seq")
    result = sj.run(query, src, batch_size=64)
    got = result.pairs_with(src, ["seq", "x"]).toArrow()
    assert got.column("r").null_count > 0
    for side in ("r", "s"):
        got = got.set_column(got.column_names.index(side), side, pc.fill_null(got.column(side), -1))
    want = result.pairs_with(in_arrival_order(data), ["seq", "x"])
    key = [("r", "ascending"), ("s", "ascending")]
    assert got.num_rows == want.num_rows == result.count
    assert got.column("s_x").null_count > 0 and got.column("r_x").null_count > 0
    assert got.sort_by(key).select(want.column_names).equals(want.sort_by(key))


# --- streaming ------------------------------------------------------------------------------


def write_parts(folder, data: dict, parts: int) -> None:
    """``data`` as ``parts`` Parquet files, named so Spark's file source takes them in order."""
    os.makedirs(folder, exist_ok=True)
    n, now = len(data["ts"]), time.time()
    for k, rows in enumerate(np.array_split(np.arange(n), parts)):
        pq.write_table(
            pa.table({c: v[rows] for c, v in data.items()}),
            os.path.join(folder, f"part-{k:04d}.parquet"),
        )
        os.utime(os.path.join(folder, f"part-{k:04d}.parquet"), (now + k, now + k))


@pytest.mark.parametrize("window", [sj.CountWindow(300), sj.TimeWindow(40)])
def test_streaming_windows_span_micro_batches(spark, tmp_path, window):
    data = sj.sources.synthetic(4000, low=0, high=4000, seed=9)
    data = {k: data.column(k).to_numpy() for k in data.column_names}
    data["seq"] = np.arange(len(data["ts"]), dtype=np.int64)
    folder = str(tmp_path / "in")
    write_parts(folder, data, 8)  # 500 rows per micro-batch: windows span several
    stream_df = (
        spark.readStream.schema(spark.read.parquet(folder).schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(folder)
    )
    query = sj.Query(sj.band("x", 4), window=window)
    if window.kind == "time":  # a full outer join with a residual function: at stop()
        keep = sj.where(lambda r, s: (r.x + s.x) % 3 != 0, columns=["x"])
        query = sj.Query(sj.band("x", 4) & keep, window=window, how="full")
    sink = sb.JoinSink(query, sj.topologies.split(2), tie_break="seq", batch_size=64)
    streaming = sink.start(stream_df)
    streaming.processAllAvailable()
    result = sink.stop()
    assert [b[0] for b in sink.batches] == list(range(8))
    assert result.metrics["input_tuples"] == 4000
    assert result.same_pairs(sj.oracle.join(query, data))


def test_streaming_sink_on_ray(spark, ray_session):
    data = sj.sources.synthetic(2000, low=0, high=2000, seed=4)
    data = {k: data.column(k).to_numpy() for k in data.column_names}
    data["seq"] = np.arange(2000, dtype=np.int64)
    query = sj.Query(sj.band("x", 4), window=sj.CountWindow(300))
    sink = sb.JoinSink(
        query, sj.topologies.grid(1, 2), tie_break="seq", backend="ray", batch_size=64
    )
    for k, rows in enumerate(np.array_split(np.arange(2000), 4)):
        sink(spark.createDataFrame(pa.table({c: v[rows] for c, v in data.items()})), k)
    result = sink.close(timeout=300)
    assert result.metrics["backend"] == "ray"
    assert result.same_pairs(sj.oracle.join(query, data))


def test_streaming_late_micro_batch_is_fed_in_order_or_rejected(spark):
    """ids 0, 2, 1 as in Spark's order but late: batch 1's rows precede batch 2's in event
    time, so it is rejected, not skipped; a late id whose rows all come after everything fed
    is fed; a replay of an id already fed is skipped."""
    rng = np.random.default_rng(3)
    n, parts = 1200, 4
    data = {
        "seq": np.arange(n),
        "stream": rng.integers(0, 2, n).astype(np.int8),
        "ts": np.arange(n) // 2,
        "x": rng.integers(0, 200, n).astype(np.float64),
    }
    pieces = [{k: v[rows] for k, v in data.items()} for rows in np.array_split(np.arange(n), parts)]
    frames = [spark.createDataFrame(pa.table(p)) for p in pieces]  # ts 0-149, 150-299, ...
    for window in (sj.CountWindow(100), sj.TimeWindow(30)):
        query = sj.Query(sj.band("x", 2), window=window)
        sink = sb.JoinSink(query, tie_break="seq")
        sink(frames[0], 0)
        sink(frames[2], 2)
        with pytest.raises(sj.InputError, match=r"micro-batch 1 came after micro-batch 2.*150"):
            sink(frames[1], 1)
        sink(frames[2], 2)  # a replay: skipped
        sink(frames[3], 1)  # late, but all its rows come after everything fed: fed
        result = sink.close()
        assert sink.replayed == 1
        assert [b[0] for b in sink.batches] == [0, 2, 1]
        fed = {k: np.concatenate([pieces[i][k] for i in (0, 2, 3)]) for k in data}
        assert result.same_pairs(sj.oracle.join(query, fed))
    sink = sb.JoinSink(sj.Query(sj.band("x", 2), window=sj.CountWindow(9)), ts=None)
    sink(frames[0].drop("ts"), 5)
    with pytest.raises(sj.InputError, match="without a ts column"):
        sink(frames[3].drop("ts"), 4)
    assert sink.close().metrics["input_tuples"] == len(pieces[0]["ts"])


def test_streaming_overlapping_micro_batches_with_lateness(spark):
    """Micro-batches whose event times overlap, one coming after a higher batch_id, a replay:
    with lateness the job is exact on the rows in ts order, late rows listed (drop) or the
    micro-batch that holds one refused before any of it is fed (error)."""
    data = sj.sources.disorder(sj.sources.synthetic(2_000, low=0, high=500, seed=11), 30, seed=12)
    data = data.append_column("seq", pa.array(np.arange(2_000)))
    pieces = [data.slice(a, 500) for a in range(0, 2_000, 500)]
    frames = [spark.createDataFrame(p) for p in pieces]
    for on_late in ("drop", "error"):
        query = sj.Query(sj.band("x", 2), window=sj.TimeWindow(40), lateness=25, on_late=on_late)
        sink = sb.JoinSink(query, sj.topologies.split(2), tie_break="seq", batch_size=64)
        sink(frames[0], 0)
        sink(frames[2], 2)
        sink(frames[2], 2)  # a replay: skipped
        if on_late == "drop":
            sink(frames[1], 1)  # overlaps batch 2 in event time; rows behind 25 are late
            sink(frames[3], 3)
            fed = pa.concat_tables([pieces[0], pieces[2], pieces[1], pieces[3]])
        else:
            with pytest.raises(sj.InputError, match=r"row \d+ is late: its ts"):
                sink(frames[1], 1)
            fed = pa.concat_tables([pieces[0], pieces[2]])
        result = sink.close()
        assert sink.replayed == 1
        # each micro-batch is fed sorted by (ts, seq): the oracle sees the same order
        fed = pa.concat_tables([_sorted(p) for p in _pieces_of(fed, 500)])
        assert result.same_pairs(sj.oracle.join(query, fed))
        late = sj.oracle.late_rows(query, fed)
        assert result.late.column("row").to_pylist() == late.tolist()
        assert (len(late) > 0) == (on_late == "drop")


def _pieces_of(table, rows):
    return [table.slice(a, rows) for a in range(0, table.num_rows, rows)]


def _sorted(table):
    return table.sort_by([("ts", "ascending"), ("seq", "ascending"), ("stream", "ascending")])


def test_streaming_replay_not_fed_twice_and_bad_batch_rejected(spark):
    query = sj.Query(sj.band("x", 1), window=sj.TimeWindow(10))
    sink = sb.JoinSink(query, tie_break="seq")
    a = {"seq": [0, 1, 2], "stream": [0, 1, 0], "ts": [1, 2, 3], "x": [1.0, 1.5, 2.0]}
    b = {"seq": [3, 4], "stream": [1, 1], "ts": [4, 5], "x": [2.0, 9.0]}
    bad_null = {"seq": [5], "stream": [0], "ts": [6], "x": pa.array([None], pa.float64())}
    bad_ts = {"seq": [6], "stream": [1], "ts": [1], "x": [1.0]}
    sink(spark.createDataFrame(pa.table(a)), 0)
    sink(spark.createDataFrame(pa.table(b)), 1)
    sink(spark.createDataFrame(pa.table(a)), 1)  # replayed batch_id: skipped
    with pytest.raises(sj.InputError, match="null"):
        sink(spark.createDataFrame(pa.table(bad_null)), 2)
    with pytest.raises(sj.InputError, match="goes back"):
        sink(spark.createDataFrame(pa.table(bad_ts)), 2)
    result = sink.close()
    assert sink.replayed == 1 and sink.rows == 5
    fed = {k: np.concatenate([np.asarray(a[k]), np.asarray(b[k])]) for k in a}
    assert result.same_pairs(sj.oracle.join(query, fed))
    with pytest.raises(RuntimeError, match="closed"):
        sink(spark.createDataFrame(pa.table(b)), 3)


# --- pipelines ------------------------------------------------------------------------------


def test_generate_on_spark_is_an_arrival_ordered_workload(spark, tmp_path):
    path = str(tmp_path / "gen")
    df = sb.generate(
        spark, 20_000, path, "gaussian", parts=4, rate=5000, process="poisson", scale=1000.0, seed=3
    )
    table = df.toArrow().sort_by("seq")
    assert abs(table.num_rows - 20_000) < 1000
    assert set(table.column_names) == {"seq", "stream", "ts", "x"}
    stream, ts = table.column("stream").to_numpy(), table.column("ts").to_numpy()
    for y in (0, 1):
        assert np.all(np.diff(ts[stream == y]) >= 0)
    data = {k: table.column(k).to_numpy() for k in table.column_names}
    query = sj.Query(sj.band("x", 0.05), window=sj.TimeWindow(100))
    result = sj.run(query, sb.from_dataframe(spark.read.parquet(path), tie_break="seq"))
    assert result.count > 0
    assert result.same_pairs(sj.oracle.join(query, in_arrival_order(data)))
    # one partition per part: the parts' spans of event time are disjoint, streamed in order
    src = sb.from_dataframe(sb.read_files(spark, path), tie_break="seq", rows_per_job=1)
    assert sj.run(query, src).same_pairs(result) and src.order_used == "partitions"


def test_generated_parts_match_in_memory_constant_workload():
    whole = sj.sources.synthetic(10_000, rate=1000, rate_s=3000, seed=0)
    parts = pa.concat_tables(
        [sj.sources.synthetic_part(10_000, k, 5, rate=1000, rate_s=3000, seed=0) for k in range(5)]
    )
    assert parts.num_rows == whole.num_rows
    for col in ("stream", "ts"):  # same arrivals; values are drawn per part
        assert np.array_equal(parts.column(col).to_numpy(), whole.column(col).to_numpy())


def test_flights_self_join_and_weather_band_join(spark):
    flights = sb.flights(spark)
    assert flights.count() == 336_776
    # SPO-Join style: a later flight that flies farther in less air time, last 200 flights
    first = flights.dropna(subset=["air_time"]).orderBy("ts", "id").limit(3000)
    query = sj.Query(
        sj.greater("distance") & sj.less("air_time"), window=sj.CountWindow(200), self_join=True
    )
    src = sb.from_dataframe(first, stream=None, tie_break="id")
    result = sj.run(query, src, sj.topologies.split(2))
    data = first.orderBy("ts", "id").select("ts", "distance", "air_time").toArrow()
    assert result.count > 0
    assert result.same_pairs(sj.oracle.join(query, data))
    # flights (R) and hourly weather (S) at the same airport within the hour
    day = "ts < 1357257600000"  # 2013-01-04
    r = flights.where(day).select("ts", "origin_code", "id")
    s = sb.weather(spark).where(day).select("ts", "origin_code", "id")
    query = sj.Query(sj.equal("origin_code"), window=sj.TimeWindow(3_600_000))
    src = sb.from_dataframe(r, s, tie_break="id")  # (ts, id, stream) is unique
    result = sj.run(query, src)
    merged = src.ordered.select("stream", "ts", "origin_code").toArrow()
    assert result.count > 0
    assert result.same_pairs(sj.oracle.join(query, merged))


# --- command line ---------------------------------------------------------------------------


def test_cli_generate_then_run_from_parquet(spark, tmp_path, capsys):
    from streamjoin.cli import main

    path = str(tmp_path / "data.parquet")
    assert main(["generate", "-n", "6000", "--parts", "3", "-o", path, "--seed", "4"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert main(["generate", "-n", "10", "-o", path]) == 2  # exists: refused, no traceback
    assert "already exists" in capsys.readouterr().err
    out = str(tmp_path / "out")
    code = main(
        [
            "run",
            "--source",
            f"parquet:{path}",
            "--window-kind",
            "time",
            "--window",
            "30",
            "--check",
            "--topology",
            "split:2",
            "-o",
            out,
            "--no-progress",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    assert "oracle: same pairs" in text
    assert "input read partition by partition" in text  # generate's parts are ts-disjoint
    assert os.path.exists(os.path.join(out, "metrics.json"))
    assert main(["run", "--source", "spark:csv"]) == 2
    assert "--source must be" in capsys.readouterr().err
