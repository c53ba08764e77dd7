"""A side-by-side benchmark: Spark Structured Streaming vs streamjoin fed by the bridge.

One time-window band join, ``|r.x - s.x| <= eps`` and ``|r.ts - s.ts| <= W`` (W = 2 s): the
window semantics of :class:`streamjoin.TimeWindow` with the same W for both streams (the
earlier tuple is in the later one's window iff ``later.ts - earlier.ts <= W``, inclusive, so
ties and which tuple counts as the earlier do not matter). R and S: Poisson arrivals of
``RATE`` tuples per second of event time each, uniform integers ``x`` in [0, 2^31), ``eps``
for about ``MATCH_RATE`` matches per probe (:func:`streamjoin.sources.band_for_match_rate`
over a window of ``RATE * W`` tuples).

Input: :func:`streamjoin.spark_bridge.generate` writes the workload as Parquet; the script cuts
it, in arrival order, into ``files`` pairs of files ``r/part-K.parquet`` and ``s/part-K.parquet``
(columns ``seq``, ``ts``, ``x``; ``ts`` in ms since the epoch, shifted to start on 2025-01-01;
file K's modification time before file K+1's, so Spark's file source takes them in order).
Every system reads those same files.

Runs, one after the other in one process (the load average is recorded around each):

1. **Spark Structured Streaming** stream-stream inner join with the usual band-join
   workaround: both folders as file streams (``maxFilesPerTrigger`` 1 per side: one
   micro-batch is one file pair), ``t = timestamp_millis(ts)`` with ``withWatermark("t",
   delay)`` on both sides (``--delay``, default 1 s), equality key ``b = x div eps`` on S and R
   exploded to ``b - 1, b, b + 1``, join on ``r.b = s.b AND abs(r.x - s.x) <= eps AND s.t
   BETWEEN r.t - W AND r.t + W``; a ``foreachBatch`` function collects the ``(r.seq, s.seq)``
   pairs on the driver as Arrow.
2. **streamjoin through the bridge**: ``from_dataframe(read_files(spark, r), read_files(spark,
   s), tie_break="seq")`` (one Spark partition per file; ``order="auto"`` picks
   partition-ordered streaming: the Parquet footers bound each file's ``ts``, so Spark reads
   the files in time order, a few growing jobs over one RDD, while the join works on the rows
   of the jobs before) into :func:`streamjoin.run` with one join core (``single``, the default
   index for a band, BI-Sort) on the local backend, twice (the second time with Spark's code
   paths warm), and ``split(2)`` on Ray (two cores); for comparison, twice again with the
   global sort in Spark, ``from_dataframe(spark.read.parquet(r), spark.read.parquet(s),
   tie_break="seq", order="sort")``, where the join waits for Spark to read and sort
   everything. A wrapper around the source notes how long planning the read took (the schema
   check and the footers; no Spark job runs before the join) and how long the first Arrow
   batch took to arrive.
3. **streamjoin through** :class:`~streamjoin.spark_bridge.JoinSink`: the same two file
   streams (no watermark, no join in Spark), each micro-batch handed by ``foreachBatch`` to one
   long-lived ``single`` join.
4. **Where Spark loses pairs**, on the first quarter of the file pairs: Spark as in 1. over
   (a) the files with 1 % of each file's rows moved two files later (stragglers: late by about
   two micro-batches of event time, far more than the watermark delay), and (b) the files with
   the event time read as starting at the epoch, 1970-01-01 (the generator's own ``ts``);
   streamjoin through ``from_dataframe`` over the straggler files.

Measures:

- input tuples/s **end to end**: input rows / wall time from starting the Spark query (or
  calling :func:`streamjoin.run`, which includes planning the read and Spark reading the
  rows in arrival order) to the last micro-batch's pairs on the driver (or ``run``
  returning);
- **engine's own** tuples/s: for Spark, input rows / the sum of the micro-batches' durations
  (``triggerExecution`` of ``recentProgress``; the mean of Spark's per-micro-batch
  ``processedRowsPerSecond`` is in the CSV); for streamjoin, ``Result.metrics
  ["input_tuples_per_s"]`` (first ingest to last result: the Spark side of the bridge before
  the first Arrow batch is not counted; partition-ordered, Spark reading the later files
  overlaps this span, so waiting for them counts);
- **latency per pair**: for Spark, the time the pair's micro-batch had its pairs on the driver
  minus the micro-batch's start (``recentProgress`` ``timestamp``: reading the files,
  planning, the join, the state store commit and the collection all count; waiting for the
  micro-batch does not, since every file is there from the start); for streamjoin, docs/design.md §1's:
  the time the pair reached the collector minus the time the bridge handed the later tuple's
  Arrow record batch (up to 100,000 rows, ``spark.sql.execution.arrow.maxRecordsPerBatch``)
  to the emitter;
- **exactness**: pairs as ``(row of r, row of s)`` in arrival order against an exact reference
  computed by DuckDB (a hash join on neighbouring (x, ts) buckets with the exact filter),
  itself checked against :func:`streamjoin.oracle.join` on a prefix of the input: missing,
  extra and duplicated pairs;
- **the floor** (:func:`floor`): Spark alone reading the files to Arrow in one job, and the
  join alone on the same rows in memory, wall and CPU seconds, and the least end to end the
  two give overlapped on this machine's cores; and per bridge run the CPU seconds of Spark's
  JVM and of this process, which on ``c`` cores cannot take less than their sum / ``c``.

Writes ``experiments/results/spark_vs_bridge.{csv,md,png}``.

Run: ``python experiments/spark_vs_bridge.py`` (about 4 minutes on 2 cores at load 2-4, 8 at
load 5-8, most of it Spark's join; ``--quick`` for a smoke run of about 2 minutes, one of them starting Spark
and its Python workers; ``--tuples``, ``--files``, ``--delay`` to vary the input).

Why one file of ~900 lines: input generation, the exact reference (DuckDB), the Spark
Structured Streaming run, the bridge's runs and the report (with where the time went) are one
benchmark whose parts share the input files and the pair check; each part is under a banner.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import shutil
import tempfile
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import report
from report import commit

import streamjoin as sj
from streamjoin import spark_bridge as sb
from streamjoin import viz
from streamjoin.runtime.result import machine_info
from streamjoin.sources import Source

RESULTS = report.results_dir()
RATE = 2000  #: tuples per second of event time, per stream
WINDOW_MS = 2000  #: W: the time window, ms, both streams
MATCH_RATE = 1.5  #: matches per probe
SEED = 1
T0_MS = 1_735_689_600_000  #: 2025-01-01T00:00:00Z: event time starts here
BATCH = 1024  #: streamjoin batch size
STRAGGLERS = 0.01  #: share of each file's rows moved two files later in the straggler run
SCALES = {
    "full": {"tuples": 600_000, "files": 24, "oracle_rows": 20_000},
    "quick": {"tuples": 40_000, "files": 4, "oracle_rows": 5_000},
}
SPARK = "Spark Structured Streaming"
IN_ORDER = "all files, in order"
WARM = ", again (Spark side warm)"


# --------------------------------------------------------------------------------------------
# Input
# --------------------------------------------------------------------------------------------


def make_input(spark, n: int, folder: str) -> tuple[float, pa.Table]:
    """Generate the workload with Spark; return ``eps`` and the input in arrival order
    (``seq``, ``stream``, ``ts``, ``x``; ``ts`` shifted to start at ``T0_MS``)."""
    generated = os.path.join(folder, "generated")
    sb.generate(spark, n, generated, "uniform", rate=RATE, process="poisson", seed=SEED)
    # without the schema Spark wrote: it would carry over to the R and S files and make Spark
    # see a `stream` column there
    return arrival_table(pq.read_table(generated).replace_schema_metadata(None))


def arrival_table(generated: pa.Table) -> tuple[float, pa.Table]:
    """``eps`` and the generated rows in arrival order, ``ts`` shifted to ``T0_MS``."""
    table = generated.sort_by("seq")
    ts = table.column("ts").to_numpy()
    # the bridge orders by ts, then seq: the same as by seq when ts never decreases along seq
    if np.any(np.diff(ts) < 0):
        raise RuntimeError("generated ts decreases along seq; arrival order is ambiguous")
    table = table.set_column(table.schema.get_field_index("ts"), "ts", pa.array(ts + T0_MS))
    stream, x = table.column("stream").to_numpy(), table.column("x").to_numpy()
    eps = sj.sources.band_for_match_rate(
        x[stream == 0], x[stream == 1], window=RATE * WINDOW_MS // 1000, match_rate=MATCH_RATE
    )
    return eps, table.select(["seq", "stream", "ts", "x"])


def write_files(table: pa.Table, file_of_row: np.ndarray, folder: str) -> None:
    """Row g of ``table`` into ``r/part-K`` or ``s/part-K``, K = ``file_of_row[g]``, with
    modification times in K order (Spark's file source takes the oldest files first)."""
    now = time.time() - 10_000
    for side in "rs":
        os.makedirs(os.path.join(folder, side))
    for k in range(int(file_of_row.max()) + 1):
        part = table.filter(pa.array(file_of_row == k))
        for y, side in enumerate("rs"):
            path = os.path.join(folder, side, f"part-{k:05d}.parquet")
            sel = part.filter(pc.equal(part.column("stream"), y))
            pq.write_table(sel.select(["seq", "ts", "x"]), path)
            os.utime(path, (now + k, now + k))


def files_in_order(n: int, files: int) -> np.ndarray:
    """File number of each row: ``files`` runs of consecutive rows."""
    out = np.empty(n, dtype=np.int64)
    for k, rows in enumerate(np.array_split(np.arange(n), files)):
        out[rows] = k
    return out


def with_stragglers(file_of_row: np.ndarray) -> np.ndarray:
    """``file_of_row`` with ``STRAGGLERS`` of each file's rows moved two files later (rows of
    the last two files stay)."""
    rng = np.random.default_rng(SEED)
    late = (rng.random(len(file_of_row)) < STRAGGLERS) & (file_of_row + 2 <= file_of_row.max())
    return file_of_row + 2 * late


def as_rows(table: pa.Table, seq: np.ndarray) -> pa.Table:
    """Pairs given by ``seq`` values (columns ``r``, ``s``) as row numbers in arrival order."""
    out = {}
    for col in ("r", "s"):
        v = table.column(col).to_numpy()
        rows = np.searchsorted(seq, v)
        if len(v) and not np.array_equal(seq[np.minimum(rows, len(seq) - 1)], v):
            raise RuntimeError(f"pair column {col!r} holds a seq that is not in the input")
        out[col] = rows.astype(np.int64)
    return pa.table(out)


def count_rows(folder: str) -> int:
    return sum(
        pq.read_metadata(os.path.join(folder, side, f)).num_rows
        for side in "rs"
        for f in os.listdir(os.path.join(folder, side))
    )


# --------------------------------------------------------------------------------------------
# Exact reference
# --------------------------------------------------------------------------------------------


def reference(folder: str, eps: float, seq: np.ndarray) -> pa.Table:
    """All pairs of the band join over ``folder``'s files, computed by DuckDB.

    A hash join on (x bucket, ts bucket) with buckets of width ``eps`` and ``W``, R exploded to
    the 9 neighbouring buckets (a pair within both bounds has bucket numbers differing by at
    most 1 in each), then the exact filter. Integer division of non-negative integers: exact.
    """
    e, w = int(eps), WINDOW_MS
    sql = f"""
    WITH r AS (
        SELECT seq, ts, x, x // {e} + dx AS bx, ts // {w} + dt AS bt
        FROM read_parquet('{folder}/r/*.parquet'),
             (SELECT unnest([-1, 0, 1]) AS dx), (SELECT unnest([-1, 0, 1]) AS dt)),
    s AS (SELECT seq, ts, x, x // {e} AS bx, ts // {w} AS bt
          FROM read_parquet('{folder}/s/*.parquet'))
    SELECT r.seq AS r, s.seq AS s FROM r JOIN s ON r.bx = s.bx AND r.bt = s.bt
    WHERE abs(r.x - s.x) <= {e} AND abs(r.ts - s.ts) <= {w}
    """
    return as_rows(duckdb.sql(sql).to_arrow_table(), seq)


def check_reference(query, data: pa.Table, ref: pa.Table, rows: int) -> dict:
    """The oracle on the first ``rows`` rows against the reference's pairs among those rows
    and against an in-memory streamjoin run (a pair's membership depends on its two tuples
    only, so the prefix's pairs are the full answer's pairs within the prefix)."""
    prefix = data.select(["stream", "ts", "x"]).slice(0, rows)
    t0 = time.perf_counter()
    truth = sj.oracle.join(query, prefix)
    oracle_s = time.perf_counter() - t0
    r, s = ref.column("r").to_numpy(), ref.column("s").to_numpy()
    inside = (r < rows) & (s < rows)
    duck = sj.oracle.same_pairs(pa.table({"r": r[inside], "s": s[inside]}), truth)
    own = sj.oracle.same_pairs(sj.run(query, prefix, sj.topologies.single()), truth)
    print(
        f"oracle on {rows:,} rows ({oracle_s:.0f} s, {truth.num_rows:,} pairs): DuckDB {duck}; "
        f"streamjoin {own}",
        flush=True,
    )
    if not duck:
        raise RuntimeError(f"the DuckDB reference differs from the oracle: {duck}")
    return {
        "oracle_rows": rows,
        "oracle_pairs": truth.num_rows,
        "streamjoin_equals_oracle": bool(own),
    }


def exactness(pairs: pa.Table, ref: pa.Table) -> dict:
    cmp = sj.oracle.same_pairs(pairs, ref)
    return {
        "pairs": pairs.num_rows,
        "expected_pairs": ref.num_rows,
        "missing": len(cmp.missing),
        "extra": len(cmp.extra),
        "duplicates": len(cmp.duplicates),
    }


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------


def file_stream(spark, folder: str, side: str):
    schema = spark.read.parquet(os.path.join(folder, side)).schema
    return (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(os.path.join(folder, side))
    )


def spark_join(
    spark, folder: str, eps: float, delay: str, seq, ref, *, data: str = IN_ORDER, shift_ms: int = 0
) -> dict:
    """Spark Structured Streaming's stream-stream join with the equality-key workaround; the
    event time is ``ts - shift_ms``."""
    from pyspark.sql import functions as F

    e, n = int(eps), count_rows(folder)

    def side(name: str):
        t = F.timestamp_millis(F.col("ts") - F.lit(shift_ms))
        return file_stream(spark, folder, name).withColumn("t", t).withWatermark("t", delay)

    bucket = F.expr(f"x div {e}")
    r = side("r").withColumn("b", F.explode(F.array(bucket - 1, bucket, bucket + 1))).alias("r")
    s = side("s").withColumn("b", bucket).alias("s")
    w = f"INTERVAL {WINDOW_MS} MILLISECONDS"
    cond = (
        (F.col("r.b") == F.col("s.b"))
        & (F.abs(F.col("r.x") - F.col("s.x")) <= e)
        & F.expr(f"s.t BETWEEN r.t - {w} AND r.t + {w}")
    )
    joined = r.join(s, cond).select(F.col("r.seq").alias("r"), F.col("s.seq").alias("s"))
    done: dict[int, tuple[float, pa.Table]] = {}

    def collect(batch_df, batch_id: int) -> None:
        table = batch_df.toArrow()
        done[batch_id] = (time.time(), table)

    load0 = os.getloadavg()[0]
    t_start = time.time()
    checkpoint = os.path.join(folder, "checkpoint-spark")
    query = joined.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint)
    query = query.start()
    query.processAllAvailable()
    progress = query.recentProgress
    query.stop()
    batches = [p for p in progress if p["numInputRows"] > 0]
    if sum(p["numInputRows"] for p in batches) != n:
        raise RuntimeError(f"Spark read {sum(p['numInputRows'] for p in batches)} rows, not {n}")
    t_last = max(done[p["batchId"]][0] for p in batches)
    start = {p["batchId"]: _epoch(p["timestamp"]) for p in progress}
    lat = [(t_out - start[bid]) * 1e3 for bid, (t_out, _) in done.items()]
    weight = [table.num_rows for _, table in done.values()]
    trigger_ms = np.array([p["durationMs"]["triggerExecution"] for p in batches], dtype=float)
    ops = [op for p in progress for op in p.get("stateOperators", [])]
    pairs = pa.concat_tables([t.select(["r", "s"]) for _, t in done.values()])
    return {
        "system": SPARK,
        "input": data,
        "config": f"stream-stream join on bucket key + range filter, watermark {delay}",
        "tuples": n,
        "wall_s": t_last - t_start,
        "input_tuples_per_s": n / (t_last - t_start),
        "engine_tuples_per_s": n / (trigger_ms.sum() / 1e3),
        "steady_tuples_per_s": (n - batches[0]["numInputRows"]) / (trigger_ms[1:].sum() / 1e3)
        if len(batches) > 1
        else float("nan"),
        "spark_processed_rows_per_s_mean": float(
            np.mean([p["processedRowsPerSecond"] for p in batches])
        ),
        "latency_p50_ms": _weighted_percentile(lat, weight, 50),
        "latency_p99_ms": _weighted_percentile(lat, weight, 99),
        "micro_batches": len(batches),
        "micro_batch_rows": n // len(batches),
        "micro_batch_ms_p50": float(np.percentile(trigger_ms, 50)),
        "micro_batch_ms_max": float(trigger_ms.max()),
        "rows_dropped_by_watermark": sum(op.get("numRowsDroppedByWatermark", 0) for op in ops),
        "state_rows_max": max((op.get("numRowsTotal", 0) for op in ops), default=0),
        **exactness(as_rows(pairs, seq), ref),
        "load_start": load0,
        "load_end": os.getloadavg()[0],
    }


class _TimedSource(Source):
    """A bridge source that notes how long planning the read took (its ``check``) and how
    long the first Arrow batch took to arrive (Spark reading, and sorting or not, the first
    files)."""

    def __init__(self, src) -> None:
        self.src = src
        self.check_s = self.first_batch_s = float("nan")

    def check(self, query) -> None:
        t0 = time.perf_counter()
        self.src.check(query)
        self.check_s = time.perf_counter() - t0
        self.n_rows = self.src.n_rows

    def __iter__(self):
        t0 = time.perf_counter()
        for k, batch in enumerate(self.src):
            if k == 0:
                self.first_batch_s = time.perf_counter() - t0
            yield batch


def bridge(
    spark,
    folder: str,
    query,
    topology,
    backend: str,
    ref,
    *,
    data: str = IN_ORDER,
    note: str = "",
    order: str = "auto",
    batch: int = BATCH,
) -> dict:
    """``from_dataframe`` over the files into :func:`streamjoin.run`: one partition per file
    (:func:`~streamjoin.spark_bridge.read_files`) for ``order="auto"``, Spark's own file
    packing for ``order="sort"``."""
    n = count_rows(folder)
    read = spark.read.parquet if order == "sort" else (lambda p: sb.read_files(spark, p))
    r, s = (read(os.path.join(folder, side)) for side in "rs")
    src = _TimedSource(sb.from_dataframe(r, s, tie_break="seq", order=order))
    load0 = os.getloadavg()[0]
    t0, jvm0, own0 = time.perf_counter(), jvm_cpu(spark), own_cpu()
    res = sj.run(query, src, topology, backend=backend, batch_size=batch, progress=False)
    wall = time.perf_counter() - t0
    cpu = {"jvm_cpu_s": jvm_cpu(spark) - jvm0, "driver_cpu_s": own_cpu() - own0}
    if res.metrics["input_tuples"] != n:
        raise RuntimeError(f"the bridge fed {res.metrics['input_tuples']} rows, not {n}")
    how = {"sort": "global sort", "partitions": "partition-ordered"}[src.src.order_used]
    return {
        "system": "streamjoin, from_dataframe",
        "input": data,
        "config": f"{topology.name}, {backend} backend, batch {batch}, {how}{note}",
        "backend": backend,
        "batch": batch,
        "order": order,
        "order_used": src.src.order_used,
        **_sj_metrics(res, n, wall),
        **exactness(res.pairs, ref),
        "bridge_check_s": src.check_s,
        "bridge_spark_jobs": src.src.jobs,
        "bridge_first_batch_s": src.first_batch_s,
        "join_s": res.metrics["elapsed_s"],
        **cpu,
        "load_start": load0,
        "load_end": os.getloadavg()[0],
    }


def sink(spark, folder: str, query, topology, ref) -> dict:
    """The same file streams into :class:`JoinSink` through ``foreachBatch``."""
    n = count_rows(folder)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    join_sink = sb.JoinSink(query, topology, tie_break="seq", batch_size=BATCH)
    streaming = join_sink.start(
        file_stream(spark, folder, "r"),
        file_stream(spark, folder, "s"),
        checkpoint=os.path.join(folder, "checkpoint-sink"),
    )
    streaming.processAllAvailable()
    res = join_sink.stop()
    wall = time.perf_counter() - t0
    if res.metrics["input_tuples"] != n:
        raise RuntimeError(f"the sink fed {res.metrics['input_tuples']} rows, not {n}")
    return {
        "system": "streamjoin, JoinSink",
        "input": IN_ORDER,
        "config": f"{topology.name}, local backend, batch {BATCH}",
        **_sj_metrics(res, n, wall),
        "micro_batches": len(join_sink.batches),
        "micro_batch_rows": n // max(1, len(join_sink.batches)),
        **exactness(res.pairs, ref),
        "load_start": load0,
        "load_end": os.getloadavg()[0],
    }


def jvm_cpu(spark) -> float:
    """CPU seconds the Spark driver's JVM (``local[2]``: Spark's executors too) has used, or
    NaN where ``/proc`` does not tell."""
    try:
        pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return float("nan")


def own_cpu() -> float:
    """CPU seconds this process has used (every thread)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cores() -> int:
    """Processors this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def floor(spark, folder: str, query, table: pa.Table, batches, runs: int = 3) -> dict:
    """What the bridge's end to end cannot beat on this machine, measured: Spark alone reading
    the same files to Arrow in one job (``toArrow``, no join; wall time and the JVM's CPU
    seconds), and the join alone on the same rows in memory at each batch size (wall and CPU
    seconds); medians of ``runs``, after one run of each to warm up. On ``c`` cores,
    overlapping the two perfectly, the end to end is at least ``max(read, join, (read CPU +
    join CPU) / c)``: ``{"read_s", "read_cpu_s", "cores", "joins": {batch: {"join_s",
    "join_cpu_s", "floor_s"}}}``. (Spark's Python side of ``toArrow`` is not counted: the
    floor is if anything low.)"""
    paths = [os.path.join(folder, side) for side in "rs"]
    data = table.select(["stream", "ts", "x"])
    read, read_cpu = [], []
    joins: dict = {b: ([], []) for b in batches}
    for k in range(runs + 1):
        t0, c0 = time.perf_counter(), jvm_cpu(spark)
        spark.read.parquet(*paths).toArrow()
        if k:
            read.append(time.perf_counter() - t0)
            read_cpu.append(jvm_cpu(spark) - c0)
        for b, (wall, cpu) in joins.items():
            t0, c0 = time.perf_counter(), own_cpu()
            sj.run(query, data, sj.topologies.single(), batch_size=b, progress=False)
            if k:
                wall.append(time.perf_counter() - t0)
                cpu.append(own_cpu() - c0)
    out = {
        "read_s": float(np.median(read)),
        "read_cpu_s": float(np.median(read_cpu)),
        "cores": cores(),
        "joins": {},
    }
    for b, (wall, cpu) in joins.items():
        j, jc = float(np.median(wall)), float(np.median(cpu))
        busy = (out["read_cpu_s"] + jc) / out["cores"]
        f = max(out["read_s"], j, busy if busy == busy else 0.0)
        out["joins"][b] = {"join_s": j, "join_cpu_s": jc, "floor_s": f}
    return out


def _sj_metrics(res, n: int, wall: float) -> dict:
    m = res.metrics
    return {
        "tuples": n,
        "wall_s": wall,
        "input_tuples_per_s": n / wall,
        "engine_tuples_per_s": m["input_tuples_per_s"],
        "latency_p50_ms": m["latency_ms"]["p50"],
        "latency_p99_ms": m["latency_ms"]["p99"],
    }


def _epoch(stamp: str) -> float:
    """A ``recentProgress`` timestamp (``2025-01-01T00:00:00.123Z``) in seconds since the epoch."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _weighted_percentile(values, weights, q: float) -> float:
    """Percentile ``q`` of ``values``, each counted ``weights`` times (pairs per micro-batch)."""
    v, w = np.asarray(values, float), np.asarray(weights, float)
    if w.sum() == 0:
        return float("nan")
    order = np.argsort(v)
    cum = np.cumsum(w[order])
    return float(v[order][np.searchsorted(cum, q / 100 * cum[-1])])


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _label(row: dict) -> str:
    if row["system"] == SPARK:
        name = f"Spark, watermark {row['config'].split('watermark ')[1]}"
    else:
        name = f"{row['system']}: {row['config'].split(',')[0]}"
        name += ", Ray" if "ray" in row["config"] else ""
        name += ", global sort" if row.get("order_used") == "sort" else ""
        batch = row["config"].split("batch ")[1].split(",")[0]
        name += f", batch {batch}" if batch != str(BATCH) else ""
        name += WARM.removeprefix(",") if row["config"].endswith(WARM) else ""
    return name if row["input"] == IN_ORDER else f"{name}\n{row['input']}"


def write(rows: list[dict], info: dict, loads: tuple[float, float], name: str) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    base = os.path.join(RESULTS, name)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(base + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    plot(rows, base + ".png")
    main = [r for r in rows if r["input"] == IN_ORDER]
    spark = next(r for r in main if r["system"] == SPARK)
    ours = [r for r in main if r["system"] != SPARK]
    m = machine_info()
    lines = [
        "# Spark Structured Streaming vs streamjoin fed by the Spark bridge",
        "",
        f"Band join `|r.x - s.x| <= {info['eps']:.0f}` and `|r.ts - s.ts| <= {WINDOW_MS} ms` "
        f"(TimeWindow({WINDOW_MS}) on both streams) over {info['n']:,} tuples: R and S Poisson "
        f"arrivals of {RATE:,} tuples/s of event time each (a window holds about "
        f"{RATE * WINDOW_MS // 1000:,} tuples per stream), uniform integers in [0, 2^31), eps "
        f"for {MATCH_RATE} matches per probe; generated by `spark_bridge.generate`, cut into "
        f"{info['files']} R/S Parquet file pairs that every system reads. What each run does "
        "and how each figure is measured: the script's docstring.",
        "",
        f"Machine: {m['cpus']} CPUs, {m['processor']}, {m['platform']}, Python {m['python']}, "
        f"PySpark {info['pyspark']} (`local[2]`, 2 shuffle partitions), DuckDB "
        f"{duckdb.__version__}; load average (1 min) {loads[0]:.1f} at the start, "
        f"{loads[1]:.1f} at the end, per run in the table (other processes share the 2 cores: "
        f"compare within this table); {time.strftime('%Y-%m-%d %H:%M')}; commit "
        f"{commit()} plus the working tree; `{report.command_line()}`.",
        "",
        f"Exact reference: DuckDB, {info['expected']:,} pairs; equal to "
        f"`streamjoin.oracle.join` on the first {info['oracle_rows']:,} rows "
        f"({info['oracle_pairs']:,} pairs), as is an in-memory streamjoin run "
        f"({'yes' if info['streamjoin_equals_oracle'] else 'NO'}).",
        "",
        "| system | input | configuration | tuples | input tuples/s end to end | engine's "
        "own tuples/s | latency p50 / p99 (ms) | micro-batches: rows, ms p50 / max | pairs | "
        "missing | extra + dup. | load start → end |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        mb = (
            f"{r['micro_batches']} × {r['micro_batch_rows']:,}"
            if "micro_batches" in r and r["micro_batches"] == r["micro_batches"]
            else "–"
        )
        if r.get("micro_batch_ms_p50") == r.get("micro_batch_ms_p50") and r["system"] == SPARK:
            mb += f", {r['micro_batch_ms_p50']:,.0f} / {r['micro_batch_ms_max']:,.0f}"
        lines.append(
            f"| {r['system']} | {r['input']} | {r['config']} | {r['tuples']:,} | "
            f"{r['input_tuples_per_s']:,.0f} | {r['engine_tuples_per_s']:,.0f} | "
            f"{r['latency_p50_ms']:,.0f} / {r['latency_p99_ms']:,.0f} | {mb} | "
            f"{r['pairs']:,} | {r['missing']:,} of {r['expected_pairs']:,} | "
            f"{r['extra'] + r['duplicates']:,} | {r['load_start']:.1f} → {r['load_end']:.1f} |"
        )
    steady = spark["steady_tuples_per_s"]
    lines += [
        "",
        "Ratios to Spark Structured Streaming on the same files (watermark "
        f"{info['delay']}: {spark['input_tuples_per_s']:,.0f} tuples/s end to end, "
        f"{spark['engine_tuples_per_s']:,.0f} by its own clock, {steady:,.0f} without its first "
        "micro-batch, which pays for starting the query); the targets are ≥ 30x cold and ≥ 50x "
        "warm end to end at 600K tuples, ≥ 60x at 6M, with zero missing or extra pairs:",
        "",
    ]
    for r in ours:
        lines.append(
            f"- {_label(r)}: **{r['input_tuples_per_s'] / spark['input_tuples_per_s']:,.1f}x** "
            f"end to end ({r['input_tuples_per_s'] / steady:,.1f}x Spark without its first "
            f"micro-batch); {r['engine_tuples_per_s'] / spark['engine_tuples_per_s']:,.1f}x "
            f"engine against engine ({r['engine_tuples_per_s'] / steady:,.1f}x); "
            f"{r['missing']} missing, {r['extra'] + r['duplicates']} extra or duplicated."
        )
    runs = [r for r in ours if "bridge_check_s" in r and r["bridge_check_s"] == r["bridge_check_s"]]
    if runs:
        parts = "; ".join(
            f"{_label(r)}: {r['wall_s']:.1f} s = planning {r['bridge_check_s']:.1f} s + "
            f"waiting for the first Arrow batch {r['bridge_first_batch_s']:.1f} s + the join "
            f"from first to last result {r['join_s']:.1f} s + "
            f"{r['wall_s'] - r['bridge_check_s'] - r['bridge_first_batch_s'] - r['join_s']:.1f} s "
            "of starting and finishing the job"
            + (
                f" ({r['bridge_spark_jobs']} Spark jobs)"
                if r.get("bridge_spark_jobs") == r.get("bridge_spark_jobs")
                and r.get("bridge_spark_jobs") is not None
                else ""
            )
            for r in runs
        )
        lines += [
            "",
            "Where the bridge's end-to-end time goes (planning checks the schema and reads the "
            "Parquet footers, no Spark job; with the global sort the first Arrow batch comes "
            "once Spark has read and sorted all the files and Spark's work and the join do not "
            "overlap; partition-ordered, the first batch comes after Spark's first job has read "
            "the first files, and Spark reads the next files while the join runs, so the "
            f"join's span includes Spark's reading; nulls are checked as rows arrive): {parts}.",
        ]
    fl = info.get("floor")
    if fl:
        lines += [
            "",
            f"**The floor on this machine** (`floor()`, medians of 3 warm runs): Spark alone "
            f"reads the {info['files']} file pairs to Arrow in one job in {fl['read_s']:.2f} s "
            f"({fl['read_cpu_s']:.2f} CPU seconds of the JVM); the join alone on the same rows "
            f"in memory, and the least end to end the two allow overlapped perfectly on the "
            f"{fl['cores']} cores, with the partition-ordered `local` bridge runs of that batch "
            "size against it:",
            "",
        ]
        for b, j in fl["joins"].items():
            tps = info["n"] / j["floor_s"]
            same = [
                r
                for r in ours
                if r.get("batch") == b
                and r.get("backend") == "local"
                and r.get("order_used") == "partitions"
            ]
            reached = ", ".join(
                f"{r['input_tuples_per_s'] / tps:.0%}{' (warm)' if WARM in r['config'] else ''}"
                for r in same
            )
            lines.append(
                f"- batch {b}: the join alone {j['join_s']:.2f} s ({j['join_cpu_s']:.2f} CPU "
                f"seconds); floor {j['floor_s']:.2f} s = {tps:,.0f} tuples/s, "
                f"{tps / spark['input_tuples_per_s']:,.0f}x Spark Structured Streaming here; "
                f"the bridge reached {reached or 'no run'} of it."
            )
    # Ray runs join in other processes, whose CPU this process does not see
    cpu_runs = [
        r for r in runs if r.get("backend") == "local" and r.get("jvm_cpu_s") == r.get("jvm_cpu_s")
    ]
    if cpu_runs:
        n_cores = fl["cores"] if fl else cores()
        lines += [
            "",
            "The CPU each `local` bridge run used (Spark's JVM, which runs its executors in "
            "`local[2]`, plus this process: the join, Arrow and the driver's work) and the "
            f"least time that takes on {n_cores} cores: "
            + "; ".join(
                f"{_label(r)}: {r['jvm_cpu_s']:.2f} + {r['driver_cpu_s']:.2f} CPU s, at least "
                f"{(r['jvm_cpu_s'] + r['driver_cpu_s']) / n_cores:.2f} s, took "
                f"{r['wall_s']:.2f} s"
                for r in cpu_runs
            )
            + ".",
        ]
    lines += ["", "## Why Spark is slow here and where it loses pairs", "", _why(rows, spark)]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


def _why(rows: list[dict], spark: dict) -> str:
    late = next((r for r in rows if r["system"] == SPARK and "stragglers" in r["input"]), None)
    epoch = next((r for r in rows if r["system"] == SPARK and "epoch" in r["input"]), None)
    ours_late = next((r for r in rows if r["system"] != SPARK and "stragglers" in r["input"]), None)
    text = (
        "**Slow.** Spark's stream-stream join has no band predicate: the equality key on "
        "buckets of width eps turns every R row into three, and each micro-batch shuffles its "
        "new rows to the join's partitions, probes the other side's state store (a hash map "
        "per partition and side, rows kept in Spark's binary row format), adds them to their "
        "own side's state, evicts what the watermark allows, and commits a new state version "
        "to the checkpoint. Per micro-batch it also lists the folders, plans the query, writes "
        "a write-ahead-log entry and commits offsets, whatever the batch holds: micro-batches "
        f"of {spark['micro_batch_rows']:,} rows took {spark['micro_batch_ms_p50']:,.0f} ms "
        f"(median; the first {spark['micro_batch_ms_max']:,.0f} ms), i.e. "
        f"{spark['engine_tuples_per_s']:,.0f} tuples/s while busy, and each pair waits for "
        "its whole micro-batch. streamjoin probes sorted arrays (BI-Sort) with numba "
        "kernels, a batch of 1024 tuples at a time, with no shuffle, no state serialisation "
        "and no per-batch planning.\n\n"
        "**Missing pairs.** An inner stream-stream join emits a pair as soon as both rows "
        "have been seen, so the watermark does not delay results; it decides what is "
        "forgotten. The watermark is max(event time seen) − delay, the minimum over the two "
        "streams, advanced after each micro-batch. Spark drops "
        "an input row as late when its event time is at or below the watermark that was in "
        "force for the *previous* micro-batch (`eventTimeWatermarkForLateEvents` in "
        "`IncrementalExecution`), and evicts "
        "state rows the current watermark puts out of any future match "
        "(`eventTimeWatermarkForEviction`: `r.t < watermark − W` for R). So rows that arrive "
        "in order never count as late, and on these in-order files "
        f"Spark dropped {spark['rows_dropped_by_watermark']:,} rows and missed "
        f"{spark['missing']:,} pairs. "
    )
    if late:
        text += (
            f"With {STRAGGLERS:.0%} of the rows landing two files (about "
            f"{2 * spark['micro_batch_rows'] / (2 * RATE):.0f} s of event time) late — a "
            f"straggler well beyond the {spark['config'].split('watermark ')[1]} delay — "
            f"Spark dropped {late['rows_dropped_by_watermark']:,} rows (R rows count three "
            f"times, once per exploded bucket) and missed {late['missing']:,} of "
            f"{late['expected_pairs']:,} pairs"
        )
        if ours_late:
            text += (
                f"; streamjoin via `from_dataframe` over the same straggler files missed "
                f"{ours_late['missing']:,} (the bridge brings the input into arrival order "
                "before the join, holding back the rows a straggler may precede; a `JoinSink` "
                "would instead reject the micro-batch whose `ts` goes back, with an "
                "`InputError`)"
            )
        text += ". A larger delay keeps those pairs at the cost of more state and later "
        text += "eviction. "
    if epoch:
        text += (
            "With the event time read as starting at the epoch (1970-01-01, the generator's "
            f"own `ts`), Spark dropped {epoch['rows_dropped_by_watermark']:,} rows and missed "
            f"{epoch['missing']:,} of {epoch['expected_pairs']:,} pairs: in the first "
            "micro-batch the watermark is 0 and rows at exactly the epoch count as late. "
            "This, or files picked up out of order, is a likely source of the issue's "
            "earlier measurement (22 of 300,849 pairs missed). "
        )
    text += (
        "streamjoin has no watermark: it keeps each window exactly, checks window membership "
        "per pair, and its answer equals the oracle's."
    )
    return text


def plot(rows: list[dict], path: str) -> None:
    plt = viz._pyplot()
    labels = [_label(r) + f" ({r['tuples']:,})" for r in rows]
    y = np.arange(len(rows))
    fig, axes = plt.subplots(1, 2, figsize=(14, 1.5 + 0.8 * len(rows)), sharey=True)
    ax = axes[0]
    ax.barh(y - 0.2, [r["input_tuples_per_s"] for r in rows], 0.4, label="end to end")
    ax.barh(y + 0.2, [r["engine_tuples_per_s"] for r in rows], 0.4, label="engine's own clock")
    for k, r in enumerate(rows):
        for dy, key in ((-0.2, "input_tuples_per_s"), (0.2, "engine_tuples_per_s")):
            ax.text(r[key], k + dy, f" {r[key]:,.0f}", va="center", fontsize=7)
    ax.set_xscale("log")
    ax.set_xlim(1e3, ax.get_xlim()[1] * 4)
    ax.set_xlabel("input tuples/s (log)")
    ax.set_title("Throughput")
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="upper right")  # beside Spark's short bars, clear of the labels
    ax = axes[1]
    ax.barh(y - 0.2, [r["latency_p50_ms"] for r in rows], 0.4, label="p50")
    ax.barh(y + 0.2, [r["latency_p99_ms"] for r in rows], 0.4, label="p99")
    for k, r in enumerate(rows):
        ax.text(
            r["latency_p99_ms"], k + 0.2, f" {r['latency_p99_ms']:,.0f}", va="center", fontsize=7
        )
    ax.set_xscale("log")
    low = min(r["latency_p50_ms"] for r in rows)  # streamjoin's p50 is a millisecond or two
    ax.set_xlim(10 ** np.floor(np.log10(low / 2)), ax.get_xlim()[1] * 3)
    ax.set_xlabel("latency per pair, ms (log)")
    ax.set_title(
        "Latency per pair. Spark: micro-batch end − start;\nstreamjoin: collector − "
        "ingest of the later tuple's Arrow batch",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="lower right")
    for ax in axes:
        ax.grid(True, axis="x", alpha=0.3, which="both")
    fig.suptitle(
        "Spark Structured Streaming vs streamjoin via the Spark bridge: one band join, "
        "the same Parquet files (input tuples in brackets)",
        fontsize=10,
    )
    fig.tight_layout()
    viz.save_figure(fig, path)
    plt.close(fig)


# --------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small input, for a smoke run")
    ap.add_argument("--tuples", type=int, help="input tuples, both streams")
    ap.add_argument("--files", type=int, help="R/S file pairs = Spark micro-batches")
    ap.add_argument("--delay", default="1 second", help="Spark's watermark delay")
    ap.add_argument("--data", help="an empty folder for the Parquet files (default: temporary)")
    ap.add_argument(
        "--skip",
        default="",
        help="comma-separated: ray, sink, losses, sort (--quick: ray, losses)",
    )
    ap.add_argument(
        "--name", default="spark_vs_bridge", help="results/NAME.{csv,md,png} (default: %(default)s)"
    )
    ap.add_argument(
        "--batches",
        type=lambda text: [int(b) for b in text.split(",")],
        default=[BATCH],
        help="streamjoin batch sizes of the from_dataframe runs (default: %(default)s)",
    )
    args = ap.parse_args()
    scale = SCALES["quick" if args.quick else "full"]
    name = args.name + ("_quick" if args.quick else "")
    n, files = args.tuples or scale["tuples"], args.files or scale["files"]
    skip = set(filter(None, args.skip.split(",")))
    if args.quick:
        skip |= {"ray", "losses"}  # starting Ray costs 20-30 s here
    folder = args.data or tempfile.mkdtemp(prefix="spark_vs_bridge-")
    if os.path.exists(folder) and os.listdir(folder):
        ap.error(f"{folder} is not empty")
    loads = [os.getloadavg()[0]]
    spark = sb.session(
        "local[2]",
        spark_sql_shuffle_partitions=2,
        spark_sql_streaming_numRecentProgressUpdates=100_000,
    )
    import pyspark

    rows: list[dict] = []

    def record(row: dict) -> None:
        rows.append(row)
        print({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)

    try:
        t0 = time.perf_counter()
        eps, table = make_input(spark, n, folder)
        n, seq = table.num_rows, table.column("seq").to_numpy()  # n: about the n asked for
        in_order = files_in_order(n, files)
        main_dir = os.path.join(folder, "in_order")
        write_files(table, in_order, main_dir)
        query = sj.Query(sj.band("x", eps), window=sj.TimeWindow(WINDOW_MS))
        ref = reference(main_dir, eps, seq)
        print(
            f"{n:,} tuples in {files} file pairs, eps {eps:.0f}, {ref.num_rows:,} pairs "
            f"({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
        info = {
            "n": n,
            "files": files,
            "eps": eps,
            "delay": args.delay,
            "name": name,
            "expected": ref.num_rows,
            "pyspark": pyspark.__version__,
            **check_reference(query, table, ref, scale["oracle_rows"]),
        }
        sj.run(
            query, table.select(["stream", "ts", "x"]).slice(0, 20_000), sj.topologies.single()
        )  # compile or load the numba kernels

        record(spark_join(spark, main_dir, eps, args.delay, seq, ref))
        single = sj.topologies.single()
        for batch in args.batches:
            record(bridge(spark, main_dir, query, single, "local", ref, batch=batch))
            record(bridge(spark, main_dir, query, single, "local", ref, note=WARM, batch=batch))
        info["floor"] = floor(spark, main_dir, query, table, args.batches)
        print(f"floor: {info['floor']}", flush=True)
        if "sort" not in skip:
            record(bridge(spark, main_dir, query, single, "local", ref, order="sort"))
            record(bridge(spark, main_dir, query, single, "local", ref, order="sort", note=WARM))
        if "ray" not in skip:
            import ray

            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            try:
                record(bridge(spark, main_dir, query, sj.topologies.split(2), "ray", ref))
            finally:
                ray.shutdown()
        if "sink" not in skip:
            record(sink(spark, main_dir, query, single, ref))
        if "losses" not in skip:
            q = min(files, max(4, files // 4))
            quarter = in_order[in_order < q]
            part = table.slice(0, len(quarter))
            epoch_dir, late_dir = os.path.join(folder, "epoch"), os.path.join(folder, "late")
            write_files(part, quarter, epoch_dir)
            write_files(part, with_stragglers(quarter), late_dir)
            part_ref = reference(epoch_dir, eps, seq)
            label = f"first {q} file pairs, {STRAGGLERS:.0%} stragglers 2 files late"
            record(spark_join(spark, late_dir, eps, args.delay, seq, part_ref, data=label))
            record(bridge(spark, late_dir, query, single, "local", part_ref, data=label))
            label = f"first {q} file pairs, event time from the epoch"
            record(
                spark_join(
                    spark, epoch_dir, eps, args.delay, seq, part_ref, data=label, shift_ms=T0_MS
                )
            )
        loads.append(os.getloadavg()[0])
        write(rows, info, (loads[0], loads[1]), name)
    finally:
        spark.stop()
        if not args.data:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"wrote {os.path.join(RESULTS, name)}.{{csv,md,png}}")


if __name__ == "__main__":
    main()
