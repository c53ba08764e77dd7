"""The benchmark's band join on the stream processors a user would pick instead, side by side.

The workload of ``spark_vs_bridge.py`` (R and S, Poisson arrivals of 2,000 tuples/s of event
time each, ``|r.x - s.x| <= eps`` and ``|r.ts - s.ts| <= 2 s``, about 1.5 matches per probe),
generated once and written as

- ``parquet/{r,s}/part-K.parquet``: the 24 file pairs Spark Structured Streaming reads as in
  ``spark_vs_bridge.py`` (one micro-batch per file pair), and the exact reference (DuckDB)
  is computed from;
- ``csv/{r,s}.csv``: one CSV file per stream, with a header, rows in arrival order: what the
  other systems read. PyFlink's pip package reads no Parquet without extra jars, Pathway's CSV
  reader needs the header, and Flink's file source reads the splits of several files in no
  set order (rows of a later file first would be late and dropped), so one file per stream.

Systems, each run in a process of its own (so every run starts cold: JVMs, compilation),
the runs alternating system by system, round after round, the load average noted around each:

- **streamjoin**, one join core (``single``), from the CSV files read with pyarrow and put in
  arrival order; a first run in the process and a second (warm: numba kernels loaded); and a
  third (warm: its reorder kernels loaded by an untimed run over the first 20,000 rows), the
  disorder row: the same rows, every one arriving a uniform amount in [0, 1 s] of event time
  after its ``ts`` (``sources.disorder``, ``disorder.py``'s "all displaced"), read from one
  CSV file in that order and joined with ``lateness`` = 1 s, the others' watermark: exact,
  nothing late, so its pairs are checked against the same reference (``disorder.py`` runs
  every system on such input);
- **Spark Structured Streaming**: ``spark_vs_bridge.spark_join`` (the equality key on
  buckets of width eps, R exploded to three buckets, watermark 1 s), parallelism 2;
- **Flink SQL through PyFlink**: an interval join on event time (``TIMESTAMP_LTZ`` of ``ts``,
  watermark 1 s) with the band as a condition, parallelism 2, (a) with the bucket key as
  the equality condition (R exploded to three buckets), (b) without an equality key (Flink
  then runs the join at parallelism 1); pairs written by the filesystem sink;
- **Pathway** ``interval_join`` on ``ts`` (``interval(-W, W)``) with the bucket key as its
  ``on`` condition and the band as a filter, in static mode (the files read whole);
- **Bytewax** ``join_window``: its windows are keyed and join by key, so the band is a
  hand-written workaround: the bucket key, sliding event-time windows of length 2W every W
  (every pair within W shares at least one), ``insert_mode="product"``, then the exact band
  and time filter and a de-duplication of pairs seen in two windows; fed one stream in
  arrival order (1,000 items a batch), branched into R and S (two sources would interleave at
  random and make rows late). ``ordered=False``: the default holds values until the watermark
  passes them, and lost 1,442 of 1,497 pairs of a 4,000-tuple check, taking 48 s. The event
  clock waits 24 hours of system time, so windows close at the end of the input: its
  watermark advances with system time, and with a 1 s wait it overtook this dataflow (slower
  than event time) and dropped 499,536 of 891,569 pairs as late.

Measured: input tuples/s from starting the pipeline (after imports and creating the
environment: the JVM or the dataflow) to its last pair on disk or in memory; the process's
own wall time; pairs against the exact reference: missing, extra, duplicated.

Writes ``experiments/results/peers.{csv,md,png}``. Needs ``pip install -e ".[peers]"`` (PyFlink,
Pathway, Bytewax; never in the default install) in an environment of its own: PyFlink pins
pyarrow < 17, PySpark 4's Arrow paths need 18 or newer, so the Spark run takes the project's
main environment, ``--spark-python .venv/bin/python``. Run: ``python experiments/peers.py
--spark-python PATH`` (about 15 minutes on 2 cores at load 2-4); ``--quick`` for a smoke run
on 20,000 tuples; ``--rounds``, ``--tuples``, ``--skip`` to vary it.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
WINDOW_MS = 2000
WATERMARK_MS = 1000  #: the watermark delay of Spark and Flink, streamjoin's disorder row's lateness
SYSTEMS = ("streamjoin", "spark", "flink_bucket", "flink_nokey", "pathway", "bytewax")
LABELS = {
    "streamjoin": "streamjoin, single core (pyarrow CSV)",
    "streamjoin_warm": "streamjoin, single core, again (warm)",
    "streamjoin_disorder": "streamjoin, single core, warm, every row up to 1 s late (lateness 1 s)",
    "spark": "Spark Structured Streaming (bucket key)",
    "flink_bucket": "Flink SQL interval join (bucket key)",
    "flink_nokey": "Flink SQL interval join (no key)",
    "pathway": "Pathway interval_join (bucket key)",
    "pathway_stream": "Pathway interval_join (bucket key), streamed in",
    "bytewax": "Bytewax join_window (bucket key, sliding windows)",
}
#: What each system can say, beside this benchmark (from each one's documentation; the
#: band join above is the only thing run here).
CAN_EXPRESS = [
    ("streamjoin", "yes (BI-Sort, B+-tree … index on x)", "yes", "yes", "yes (TimeWindow(r, s))"),
    (
        "Spark Structured Streaming",
        "no: a stream-stream join needs an equality key (bucket workaround)",
        "no",
        "yes (the stream twice)",
        "yes (range condition on the two times)",
    ),
    (
        "Flink SQL (PyFlink)",
        "yes, at parallelism 1 (bucket key to parallelise)",
        "no (time intervals and windows only)",
        "yes",
        "yes (interval bounds on each side)",
    ),
    (
        "Pathway",
        "yes, every pair in the time interval checked (bucket key to narrow)",
        "no",
        "yes",
        "yes (interval(lo, hi))",
    ),
    (
        "Bytewax",
        "no: join_window joins by key (bucket key + filter, hand-written)",
        "no",
        "yes (one stream branched)",
        "no (one window for both sides)",
    ),
]


# --------------------------------------------------------------------------------------------
# Input and reference (parent)
# --------------------------------------------------------------------------------------------


def make_data(folder: str, n: int, files: int) -> dict:
    """Generate the workload; write the Parquet file pairs, the CSV files, the
    arrival-ordered table and the reference; return what the runs need."""
    import spark_vs_bridge as svb

    from streamjoin import sources

    # the parts spark_bridge.generate makes on local[2], here without Spark (its Arrow
    # paths need a pyarrow that PyFlink's pins exclude)
    parts = max(2, -(-n // 1_000_000))
    generated = pa.concat_tables(
        sources.synthetic_part(
            n, k, parts, "uniform", rate=svb.RATE, process="poisson", seed=svb.SEED
        )
        for k in range(parts)
    )
    eps, table = svb.arrival_table(generated)
    seq = table.column("seq").to_numpy()
    svb.write_files(table, svb.files_in_order(table.num_rows, files), f"{folder}/parquet")
    ref = svb.reference(f"{folder}/parquet", eps, seq)
    info = write_inputs(folder, table, eps, ref, files=files)
    late = sources.disorder(table, WATERMARK_MS, fraction=1.0, seed=svb.SEED + 1)
    pacsv.write_csv(late, f"{folder}/csv/displaced.csv")  # both streams, in arrival order
    return info


def write_inputs(folder: str, table: pa.Table, eps: float, ref: pa.Table, **extra) -> dict:
    """What a child reads: ``table`` (``seq``, ``stream``, ``ts``, ``x`` in arrival order, which
    need not be ``seq`` order) as one CSV file per stream and as Parquet, the reference's pairs
    (rows numbered by rank of ``seq``), and ``info.json`` (``eps``, ``n``, ``expected`` and
    ``extra``), which it returns."""
    os.makedirs(f"{folder}/csv")
    for y, side in enumerate("rs"):
        part = table.filter(pc.equal(table.column("stream"), y)).select(["seq", "ts", "x"])
        pacsv.write_csv(part, f"{folder}/csv/{side}.csv")
    pq.write_table(table, f"{folder}/table.parquet")
    pq.write_table(ref, f"{folder}/reference.parquet")
    info = {"eps": eps, "n": table.num_rows, "expected": ref.num_rows, **extra}
    with open(f"{folder}/info.json", "w") as f:
        json.dump(info, f)
    return info


# --------------------------------------------------------------------------------------------
# One system, one run (child process)
# --------------------------------------------------------------------------------------------


def _read_csv(folder: str, side: str) -> pa.Table:
    return pacsv.read_csv(f"{folder}/csv/{side}.csv")


def run_streamjoin(folder: str, eps: float) -> list[dict]:
    """Two runs in one process: the first (kernels loaded from numba's cache), then warm; then
    the disorder row where ``csv/displaced.csv`` is."""
    import streamjoin as sj

    query = sj.Query(sj.band("x", eps), window=sj.TimeWindow(WINDOW_MS))
    out = []
    for name in ("streamjoin", "streamjoin_warm"):
        t0 = time.perf_counter()
        r, s = (_read_csv(folder, side) for side in "rs")
        both = pa.concat_tables(
            [
                t.append_column("stream", pa.array(np.full(t.num_rows, y, np.int8)))
                for y, t in enumerate((r, s))
            ]
        )
        both = both.take(pc.sort_indices(both, [("ts", "ascending"), ("seq", "ascending")]))
        result = sj.run(query, both.select(["stream", "ts", "x"]), sj.topologies.single())
        wall = time.perf_counter() - t0
        seq = both.column("seq").to_numpy()
        pairs = pa.table(
            {k: seq[result.pairs.column(k).to_numpy()] for k in ("r", "s")}
        )  # row numbers of this run's order -> seq
        out.append({"system": name, "wall_s": wall, "pairs_table": pairs})
    if os.path.exists(f"{folder}/csv/displaced.csv"):
        query = sj.Query(sj.band("x", eps), window=sj.TimeWindow(WINDOW_MS), lateness=WATERMARK_MS)
        warm = pacsv.read_csv(f"{folder}/csv/displaced.csv").slice(0, 20_000)
        sj.run(query, warm.select(["stream", "ts", "x"]), sj.topologies.single())  # kernels in
        t0 = time.perf_counter()
        both = pacsv.read_csv(f"{folder}/csv/displaced.csv")
        result = sj.run(query, both.select(["stream", "ts", "x"]), sj.topologies.single())
        wall = time.perf_counter() - t0
        seq = both.column("seq").to_numpy()
        pairs = pa.table({k: seq[result.pairs.column(k).to_numpy()] for k in ("r", "s")})
        late = result.metrics["late_tuples"]
        out.append(
            {"system": "streamjoin_disorder", "wall_s": wall, "pairs_table": pairs, "late": late}
        )
    return out


def run_spark(folder: str, eps: float) -> list[dict]:
    import spark_vs_bridge as svb

    from streamjoin import spark_bridge as sb

    spark = sb.session(
        "local[2]",
        spark_sql_shuffle_partitions=2,
        spark_sql_streaming_numRecentProgressUpdates=100_000,
    )
    table = pq.read_table(f"{folder}/table.parquet")
    seq = table.column("seq").to_numpy()
    ref = pq.read_table(f"{folder}/reference.parquet")
    # a checkpoint left by an earlier round would resume the query past every file
    shutil.rmtree(f"{folder}/parquet/checkpoint-spark", ignore_errors=True)
    row = svb.spark_join(spark, f"{folder}/parquet", eps, "1 second", seq, ref)
    spark.stop()
    return [{"system": "spark", "wall_s": row["wall_s"], "checked": row}]


def run_flink(
    folder: str, eps: float, keyed: bool, bound_ms: int = WATERMARK_MS, timed: bool = False
) -> list[dict]:
    """The interval join, watermark ``bound_ms`` behind the largest time seen on each side.

    ``timed``: each row takes ``CURRENT_TIMESTAMP`` (evaluated per row in streaming mode) as it
    leaves its source's operator chain, each pair another as it leaves the join; a pair's
    latency is the second minus the later of its rows' first (ms resolution)."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", "2")
    e, out_dir = int(eps), f"{folder}/flink-out-{os.getpid()}"
    bound = f"INTERVAL '{bound_ms / 1000:.3f}' SECOND"  # no MILLISECOND interval in Flink SQL
    for side in "rs":
        # the header line parses to nulls (ignore-parse-errors): its time is the epoch, far
        # behind every watermark, and the view drops it
        env.execute_sql(
            f"""CREATE TABLE {side}_file (seq BIGINT, ts BIGINT, x BIGINT,
                t AS TO_TIMESTAMP_LTZ(COALESCE(ts, 0), 3),
                WATERMARK FOR t AS t - {bound})
            WITH ('connector' = 'filesystem', 'path' = '{folder}/csv/{side}.csv',
                  'format' = 'csv', 'csv.ignore-parse-errors' = 'true')"""
        )
    bucket, now = f"x / {e}", ", CURRENT_TIMESTAMP AS a" if timed else ""
    env.execute_sql(
        f"""CREATE TEMPORARY VIEW r AS SELECT seq, x, t, b{now} FROM r_file
            CROSS JOIN UNNEST(ARRAY[{bucket} - 1, {bucket}, {bucket} + 1]) AS k(b)
            WHERE seq IS NOT NULL"""
        if keyed
        else f"CREATE TEMPORARY VIEW r AS SELECT seq, x, t{now} FROM r_file WHERE seq IS NOT NULL"
    )
    env.execute_sql(
        f"CREATE TEMPORARY VIEW s AS SELECT seq, x, t, {bucket} AS b{now} FROM s_file "
        "WHERE seq IS NOT NULL"
    )
    times = ["arrived", "emitted"] if timed else []
    env.execute_sql(
        f"""CREATE TABLE pairs (r BIGINT, s BIGINT{"".join(f", {c} STRING" for c in times)})
            WITH ('connector' = 'filesystem', 'path' = '{out_dir}', 'format' = 'csv')"""
    )
    key = "r.b = s.b AND " if keyed else ""
    stamps = (
        ", CAST(GREATEST(r.a, s.a) AS STRING), CAST(CURRENT_TIMESTAMP AS STRING)" if timed else ""
    )
    w = f"INTERVAL '{WINDOW_MS // 1000}' SECOND"
    t0 = time.perf_counter()
    env.execute_sql(
        f"""INSERT INTO pairs SELECT r.seq, s.seq{stamps} FROM r, s
            WHERE {key}ABS(r.x - s.x) <= {e} AND s.t BETWEEN r.t - {w} AND r.t + {w}"""
    ).wait()
    wall = time.perf_counter() - t0
    pairs = _read_dir_csv(out_dir, ["r", "s", *times])
    shutil.rmtree(out_dir, ignore_errors=True)
    name = "flink_bucket" if keyed else "flink_nokey"
    row = {"system": name, "wall_s": wall, "pairs_table": pairs.select(["r", "s"])}
    if timed:
        ms = [pc.cast(pairs.column(c), pa.timestamp("ms")).cast(pa.int64()) for c in times]
        row["latency_ms"] = (ms[1].to_numpy() - ms[0].to_numpy()).astype(float)
    return [row]


def _read_dir_csv(folder: str, names: list[str]) -> pa.Table:
    """The pairs a sink wrote as headerless CSV files (hidden and in-progress files
    included: a file not committed would be pairs lost, which the check counts); ``r`` and
    ``s`` as integers, any other column as text."""
    types = {k: pa.int64() if k in ("r", "s") else pa.string() for k in names}
    tables = []
    for root, _, files in os.walk(folder):
        for f in files:
            path = os.path.join(root, f)
            if os.path.getsize(path):
                opts = pacsv.ReadOptions(column_names=names)
                conv = pacsv.ConvertOptions(column_types=types)
                tables.append(pacsv.read_csv(path, read_options=opts, convert_options=conv))
    empty = pa.table({k: pa.array([], t) for k, t in types.items()})
    return pa.concat_tables(tables) if tables else empty


def _pathway_band(r, s, eps: float, **join_kw):
    """Pathway's band join of ``r`` and ``s`` (``seq``, ``ts``, ``x``, any other columns):
    ``interval_join`` on ``ts`` with the bucket key as its ``on`` condition (R exploded to three
    buckets) and the band as a filter; the pairs' ``seq`` as ``r`` and ``s``, and as ``later``
    the larger ``arrival`` of the two rows when the inputs have one."""
    import pathway as pw

    e, w = int(eps), WINDOW_MS
    r = r.with_columns(b=pw.make_tuple(r.x // e - 1, r.x // e, r.x // e + 1)).flatten(pw.this.b)
    s = s.with_columns(b=s.x // e)
    later = {}
    if "arrival" in r.column_names():
        left, right = pw.left.arrival, pw.right.arrival
        later["later"] = pw.if_else(left > right, left, right)
    joined = r.interval_join(
        s, r.ts, s.ts, pw.temporal.interval(-w, w), r.b == s.b, **join_kw
    ).select(r=pw.left.seq, s=pw.right.seq, dx=pw.left.x - pw.right.x, **later)
    return joined.filter((joined.dx <= e) & (joined.dx >= -e)).without(pw.this.dx)


def run_pathway(folder: str, eps: float) -> list[dict]:
    """Static mode: the CSV files read whole, then joined."""
    import pathway as pw

    class Row(pw.Schema):
        seq: int
        ts: int
        x: int

    out = f"{folder}/pathway-out-{os.getpid()}.csv"
    t0 = time.perf_counter()
    r = pw.io.csv.read(f"{folder}/csv/r.csv", schema=Row, mode="static")
    s = pw.io.csv.read(f"{folder}/csv/s.csv", schema=Row, mode="static")
    pw.io.csv.write(_pathway_band(r, s, eps), out)
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    wall = time.perf_counter() - t0
    table = pacsv.read_csv(out)
    os.remove(out)
    table = table.filter(pc.equal(table.column("diff"), 1)).select(["r", "s"])
    return [{"system": "pathway", "wall_s": wall, "pairs_table": table}]


def run_pathway_stream(folder: str, eps: float, cutoff_ms: int, batch: int = 1024) -> list[dict]:
    """Streaming: the rows of ``table.parquet`` in arrival order (both streams, one Python
    connector), ``batch`` rows a commit, at most ``batch`` rows queued before Pathway takes
    them (``max_backlog_size``); the join with ``common_behavior(cutoff=cutoff_ms)``: each side
    ignores a row whose ``ts`` is at most its largest ``ts`` seen before minus ``cutoff_ms``,
    and forgets stored rows as old. A pair's latency: from the commit of the batch that held
    its later row to Pathway handing the pair to ``subscribe``'s callback."""
    import pathway as pw

    class Row(pw.Schema):
        stream: int
        seq: int
        ts: int
        x: int
        arrival: int

    committed: list[float] = []

    class Feed(pw.io.python.ConnectorSubject):
        def run(self) -> None:
            table = pq.read_table(f"{folder}/table.parquet")
            cols = (table.column(k).to_pylist() for k in ("stream", "seq", "ts", "x"))
            rows = zip(*cols, strict=True)
            for i, (y, seq, ts, x) in enumerate(rows):
                self.next(stream=y, seq=seq, ts=ts, x=x, arrival=i)
                if (i + 1) % batch == 0 or i + 1 == table.num_rows:
                    self.commit()
                    committed.append(time.time())

    got: list[tuple] = []

    clock = time.time

    def on_change(key, row, time, is_addition) -> None:  # subscribe's argument names
        got.append((row["r"], row["s"], row["later"], is_addition, clock()))

    t0 = time.perf_counter()
    both = pw.io.python.read(
        Feed(), schema=Row, autocommit_duration_ms=None, max_backlog_size=batch
    )
    r, s = both.filter(both.stream == 0), both.filter(both.stream == 1)
    behavior = pw.temporal.common_behavior(cutoff=cutoff_ms)
    pw.io.subscribe(_pathway_band(r, s, eps, behavior=behavior), on_change=on_change)
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    wall = time.perf_counter() - t0
    if not all(g[3] for g in got):
        raise RuntimeError("Pathway retracted a pair (keep_results is on: it should not)")
    pairs = np.array([g[:3] for g in got], dtype=np.int64).reshape(-1, 3)
    when = np.array([g[4] for g in got], dtype=float)
    latency = (when - np.asarray(committed)[pairs[:, 2] // batch]) * 1e3
    table = pa.table({"r": pairs[:, 0], "s": pairs[:, 1]})
    return [
        {"system": "pathway_stream", "wall_s": wall, "pairs_table": table, "latency_ms": latency}
    ]


def run_bytewax(folder: str, eps: float) -> list[dict]:
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    e, w = int(eps), WINDOW_MS
    t0 = time.perf_counter()
    r, s = (_read_csv(folder, side) for side in "rs")
    both = pa.concat_tables(
        [
            t.append_column("stream", pa.array(np.full(t.num_rows, y, np.int8)))
            for y, t in enumerate((r, s))
        ]
    )
    both = both.take(pc.sort_indices(both, [("ts", "ascending"), ("seq", "ascending")]))
    rows = list(
        zip(*(both.column(k).to_pylist() for k in ("stream", "seq", "ts", "x")), strict=True)
    )
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

    flow = Dataflow("band_join")
    arrivals = op.input("in", flow, TestingSource(rows, batch_size=1000))
    sides = op.branch("side", arrivals, lambda row: row[0] == 0)
    keyed_r = op.flat_map(
        "r_buckets", sides.trues, lambda row: [(str(row[3] // e + d), row) for d in (-1, 0, 1)]
    )
    keyed_s = op.map("s_bucket", sides.falses, lambda row: (str(row[3] // e), row))
    clock = win.EventClock(  # a wait longer than the run: see the module doc
        lambda row: epoch + datetime.timedelta(milliseconds=row[2]),
        wait_for_system_duration=datetime.timedelta(hours=24),
    )
    windower = win.SlidingWindower(
        length=datetime.timedelta(milliseconds=2 * w),
        offset=datetime.timedelta(milliseconds=w),
        align_to=epoch,
    )
    # ordered=False: values join in arrival order (the input is in event-time order anyway);
    # the default buffers them until the watermark passes, which here lost most pairs
    joined = win.join_window(
        "join", clock, windower, keyed_r, keyed_s, insert_mode="product", ordered=False
    )
    found: list = []
    op.output("out", joined.down, TestingSink(found))
    run_main(flow)
    pairs = set()
    for _key, (_win, (a, b)) in found:  # a side without values in a window is None
        if a is not None and b is not None and abs(a[3] - b[3]) <= e and abs(a[2] - b[2]) <= w:
            pairs.add((a[1], b[1]))
    wall = time.perf_counter() - t0
    got = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
    table = pa.table({"r": got[:, 0], "s": got[:, 1]})
    return [{"system": "bytewax", "wall_s": wall, "pairs_table": table}]


def child(name: str, folder: str, bound_ms: int = WATERMARK_MS, timed: bool = False) -> None:
    """Run one system once; print one JSON line per run. ``bound_ms``: Flink's watermark delay
    or Pathway's cutoff (``pathway_stream``); ``timed``: Flink measures latency too."""
    sys.path.insert(0, HERE)
    import spark_vs_bridge as svb

    with open(f"{folder}/info.json") as f:
        info = json.load(f)
    load0 = os.getloadavg()[0]
    eps = info["eps"]
    runners = {
        "streamjoin": lambda: run_streamjoin(folder, eps),
        "spark": lambda: run_spark(folder, eps),
        "flink_bucket": lambda: run_flink(folder, eps, keyed=True, bound_ms=bound_ms, timed=timed),
        "flink_nokey": lambda: run_flink(folder, eps, keyed=False, bound_ms=bound_ms, timed=timed),
        "pathway": lambda: run_pathway(folder, eps),
        "pathway_stream": lambda: run_pathway_stream(folder, eps, bound_ms),
        "bytewax": lambda: run_bytewax(folder, eps),
    }
    rows = runners[name]()
    table = pq.read_table(f"{folder}/table.parquet")
    seq = np.sort(table.column("seq").to_numpy())  # the reference numbers rows by seq's rank
    ref = pq.read_table(f"{folder}/reference.parquet")
    for row in rows:
        checked = row.pop("checked", None)
        if checked is None:
            checked = svb.exactness(svb.as_rows(row.pop("pairs_table"), seq), ref)
        row.update({k: checked[k] for k in ("pairs", "expected_pairs", "missing", "extra")})
        row["duplicates"] = checked["duplicates"]
        row["tuples"] = info["n"]
        row["input_tuples_per_s"] = info["n"] / row["wall_s"]
        latency = row.pop("latency_ms", None)
        if latency is not None and len(latency):
            row["latency_p50_ms"], row["latency_p99_ms"] = np.percentile(latency, [50, 99])
        row["load_start"], row["load_end"] = load0, os.getloadavg()[0]
        print("RESULT " + json.dumps(row), flush=True)


# --------------------------------------------------------------------------------------------
# Rounds and report (parent)
# --------------------------------------------------------------------------------------------


def run_once(name: str, folder: str, python: str, *options: str) -> list[dict]:
    """``name`` in a process of its own (run by ``python``, with the child's ``options``,
    ``--bound-ms`` and ``--timed``); its rows, with the process's wall time."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [python, __file__, "--child", name, "--data", folder, *options],
        capture_output=True,
        text=True,
    )
    process_s = time.perf_counter() - t0
    rows = [json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not rows:
        lines = (done.stderr + done.stdout).strip().splitlines()
        said = [ln for ln in lines if "Error" in ln or "Exception" in ln][:3] or lines[-3:]
        return [{"system": name, "error": " | ".join(said)[:1500], "process_s": process_s}]
    for row in rows:
        row["process_s"] = process_s
    return rows


def write(rows: list[dict], info: dict, base: str) -> None:
    from report import commit

    from streamjoin.runtime.result import machine_info

    os.makedirs(os.path.dirname(base), exist_ok=True)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(base + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    ok = [r for r in rows if "error" not in r]
    by_system = {s: [r for r in ok if r["system"] == s] for s in LABELS}
    summary = []
    for system, runs in by_system.items():
        if not runs:
            continue
        rates = [r["input_tuples_per_s"] for r in runs]
        summary.append(
            {
                "system": system,
                "runs": len(runs),
                "median": statistics.median(rates),
                "min": min(rates),
                "max": max(rates),
                "process_s": statistics.median(r["process_s"] for r in runs),
                "missing": max(r["missing"] for r in runs),
                "extra": max(r["extra"] + r["duplicates"] for r in runs),
                "expected": runs[0]["expected_pairs"],
                "loads": f"{min(r['load_start'] for r in runs):.1f}–"
                f"{max(r['load_end'] for r in runs):.1f}",
            }
        )
    plot(summary, base + ".png")
    m = machine_info()
    sj_cold = next((s for s in summary if s["system"] == "streamjoin"), None)
    lines = [
        "# streamjoin and the stream processors a user would pick instead",
        "",
        f"The band join of `spark_vs_bridge.py`, `|r.x - s.x| <= {info['eps']:.0f}` and "
        f"`|r.ts - s.ts| <= {WINDOW_MS} ms`, over {info['n']:,} tuples (R and S, Poisson "
        "arrivals of 2,000 tuples/s of event time each, uniform integers in [0, 2^31)); "
        f"{info['expected']:,} pairs in the exact reference (DuckDB, itself checked against "
        "`streamjoin.oracle` in `spark_vs_bridge.py`). Spark Structured Streaming reads the "
        f"{info['files']} Parquet file pairs as in `spark_vs_bridge.py`; the others read one CSV "
        "file per stream with the same rows in arrival order (streamjoin's disorder row: one file, "
        "every row displaced by up to 1 s). Each run is a process of its "
        "own; runs alternate system by system, round after round. How each system runs the "
        "join, and what is timed: the script's docstring.",
        "",
        f"Machine: {m['cpus']} CPUs, {m['processor']}, {m['platform']}, Python {m['python']}; "
        f"{info['versions']}; load average (1 min) per run in the CSV, ranges below (other "
        "processes share the 2 cores: compare within this table); "
        f"{time.strftime('%Y-%m-%d %H:%M')}; commit {commit()}; "
        f"`python experiments/peers.py {' '.join(sys.argv[1:])}`.",
        "",
        "| system | runs | input tuples/s, median (min–max) | "
        + ("× streamjoin's first run | " if sj_cold else "")
        + "process wall s (median) | missing | extra + dup. | load |",
        "|---|---:|---:|" + ("---:|" if sj_cold else "") + "---:|---:|---:|---|",
    ]
    for s in summary:
        ratio = f"{s['median'] / sj_cold['median']:.3f} | " if sj_cold else ""
        lines.append(
            f"| {LABELS[s['system']]} | {s['runs']} | {s['median']:,.0f} ({s['min']:,.0f}–"
            f"{s['max']:,.0f}) | {ratio}{s['process_s']:.1f} | {s['missing']:,} of "
            f"{s['expected']:,} | {s['extra']:,} | {s['loads']} |"
        )
    failed = [r for r in rows if "error" in r]
    if failed:
        lines += ["", "Runs that failed (the system's last words):", ""]
        lines += [f"- {LABELS.get(r['system'], r['system'])}: `{r['error']}`" for r in failed]
    lines += [
        "",
        "## What each can express",
        "",
        "From each system's documentation; only the band join above was run. *Band without "
        "equality key*: a join on |r.x − s.x| ≤ eps alone; *count windows*: the last N tuples "
        "of the other stream; *self-join*: one stream joined with itself; *asymmetric "
        "windows*: different window lengths for R and S.",
        "",
        "| system | band without equality key | count windows | self-join | asymmetric windows |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {' | '.join(row)} |" for row in CAN_EXPRESS]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


def plot(summary: list[dict], path: str) -> None:
    from streamjoin import viz

    plt = viz._pyplot()
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.6 * len(summary)))
    y = np.arange(len(summary))
    med = [s["median"] for s in summary]
    lo = [s["median"] - s["min"] for s in summary]
    hi = [s["max"] - s["median"] for s in summary]
    colors = ["C0" if s["system"].startswith("streamjoin") else "C7" for s in summary]
    ax.barh(y, med, xerr=[lo, hi], color=colors, capsize=3)
    for k, s in enumerate(summary):
        exact = "exact" if not s["missing"] and not s["extra"] else f"{s['missing']:,} missing"
        ax.text(s["max"] * 1.1, k, f"{s['median']:,.0f}  ({exact})", va="center", fontsize=8)
    ax.set_yticks(y, [LABELS[s["system"]] for s in summary], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(min(s["min"] for s in summary) / 2, max(s["max"] for s in summary) * 8)
    ax.set_xlabel("input tuples/s, end to end (log; median, bars min–max over runs)")
    ax.set_title("The same band join on streamjoin and its peers", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3, which="both")
    fig.tight_layout()
    viz.save_figure(fig, path)
    plt.close(fig)


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for pkg in ("pyspark", "apache-flink", "pathway", "bytewax"):
        try:
            out.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            out.append(f"{pkg} not installed")
    return ", ".join(out)


def _arrow_for_spark(python: str) -> bool:
    """Whether ``python`` has the pyarrow PySpark 4's Arrow paths need (18 or newer)."""
    code = "import pyarrow; print(int(pyarrow.__version__.split('.')[0]) >= 18)"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return done.stdout.strip() == "True"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20,000 tuples, one round")
    ap.add_argument("--tuples", type=int, default=600_000, help="input tuples, both streams")
    ap.add_argument("--files", type=int, default=24, help="Parquet file pairs (Spark)")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each system")
    ap.add_argument("--skip", default="", help=f"comma-separated, of {', '.join(SYSTEMS)}")
    ap.add_argument("--name", default="peers", help="RESULTS/NAME.{csv,md,png}")
    ap.add_argument("--results", default=RESULTS, help="folder of the results")
    ap.add_argument(
        "--spark-python",
        help="the Python that runs Spark (default: this one): PySpark's Arrow paths need "
        "pyarrow >= 18, PyFlink pins pyarrow < 17, so they may live in two environments",
    )
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--bound-ms", type=int, default=WATERMARK_MS, help=argparse.SUPPRESS)
    ap.add_argument("--timed", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.data, args.bound_ms, args.timed)
        return
    n, files, rounds = args.tuples, args.files, args.rounds
    if args.quick:
        n, files, rounds = 20_000, 4, 1
    skip = set(filter(None, args.skip.split(",")))
    spark_python = args.spark_python or sys.executable
    if "spark" not in skip and not _arrow_for_spark(spark_python):
        print(f"skipping Spark: {spark_python} has no pyarrow >= 18 (give --spark-python)")
        skip.add("spark")
    systems = [s for s in SYSTEMS if s not in skip]
    folder = tempfile.mkdtemp(prefix="peers-")
    try:
        info = make_data(folder, n, files)
        info["versions"] = versions()
        print(f"{info['n']:,} tuples, {info['expected']:,} pairs; {info['versions']}", flush=True)
        rows = []
        for k in range(rounds):
            turn = systems[k % len(systems) :] + systems[: k % len(systems)]
            for name in turn:
                python = spark_python if name == "spark" else sys.executable
                for row in run_once(name, folder, python):
                    row["round"] = k
                    rows.append(row)
                    print({a: (round(b, 2) if isinstance(b, float) else b) for a, b in row.items()})
        base = os.path.join(args.results, args.name)
        write(rows, info, base)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"wrote {base}.{{csv,md,png}}")


if __name__ == "__main__":
    main()
