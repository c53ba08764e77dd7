"""A Spark DataFrame as a :class:`~streamjoin.sources.Source`, streamed as Arrow record batches.

Arrival order
-------------
A stream join's answer depends on arrival order (count windows, and which of two tuples is the
earlier), so the bridge defines it: rows arrive in ascending order of the key
``(ts, *tie_break, stream)``: by ``ts``; at equal ``ts`` by the ``tie_break`` columns (default:
the DataFrame's own row order, ``monotonically_increasing_id()`` taken before any sorting, so
for R and S given as two DataFrames, R's rows come first; nulls first, NaN last, as Spark
sorts); then R before S. Rows equal on the whole key (a tie-break that does not tell rows
apart) come in an unspecified order. Every ``order`` but ``"keep"`` streams exactly this order,
for any DataFrame (a local table, files, a join, a shuffle, ``rand()``: Spark computes each
row once):

- ``"partitions"``: Spark reads the DataFrame's own partitions, several per Spark job, all
  jobs over one RDD, and the driver sorts the rows and hands them to the join
  (:mod:`streamjoin.spark_bridge.partitions`). Where the Parquet footers of the files a
  partition reads bound its ``ts`` (:mod:`streamjoin.spark_bridge.file_stats`), the
  partitions are read in ``ts`` order a job or two ahead of the join, which starts after the
  first job: Spark's reading overlaps the join, and the driver holds back only the rows a
  later partition may precede. Without bounds the driver holds every row until Spark has read
  them all, then sorts.
- ``"sort"``: Spark sorts the DataFrame with a range partitioning, so partition *k* holds the
  *k*-th slice of the arrival order, and streams it partition by partition, holding one at a
  time. The join starts once Spark has read and sorted every row.
- ``"auto"`` (the default): ``"partitions"`` when the driver would hold at most
  ``MAX_HELD_ROWS`` rows at once (estimated from the bounds, or from Spark's size estimate of
  the plan when a partition has none), and the tie-break columns are of types Arrow sorts
  (not arrays, maps or structs); else ``"sort"``. :attr:`SparkSource.order_used` says which.
- ``"keep"`` trusts a DataFrame that is already in arrival order and whose order is
  deterministic (sorted and cached, say); its ``ts`` is still checked per stream as it
  streams.

Checks
------
Nothing runs in Spark before the join starts: :meth:`SparkSource.check` checks the schema
(columns present, numeric join columns) and plans the read. Rows are checked as they arrive:
a null, NaN or infinite join value raises :class:`~streamjoin.InputError` naming the column
and the row the moment the bridge sees it (``"partitions"``: as a job's rows arrive, before
any of them is sorted; otherwise as each record batch streams), so :func:`streamjoin.run`
raises and returns no partial result.

Transport
---------
See :mod:`streamjoin.spark_bridge.transport`: ``"arrow"`` (the JVM's own Arrow conversion,
classic Spark), ``"ipc"`` (public API, a Python worker per task), ``"auto"`` (the first where
available).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence

import pyarrow as pa

from streamjoin.checks import positive_int
from streamjoin.modes import SPARK_ORDERS, TRANSPORTS, SparkOrder, Transport
from streamjoin.sources import Source
from streamjoin.spark_bridge.errors import input_file_errors, reading
from streamjoin.spark_bridge.file_stats import partition_ranges
from streamjoin.spark_bridge.partitions import (
    PartitionRange,
    buffered_rows,
    check_arrived,
    fetch_jobs,
    in_arrival_order,
    in_background,
    plan_jobs,
)
from streamjoin.spark_bridge.transport import PartitionReader, stream_batches
from streamjoin.validation import InputError

MAX_HELD_ROWS = 1 << 22  #: ``order="auto"``: most rows the driver may hold at once
FIRST_JOB_ROWS = 1 << 15  #: ``order="partitions"``: rows of the first Spark job, about
MAX_JOB_BYTES = 1 << 27  #: ``order="partitions"``: Arrow bytes of a Spark job's rows, about
_ORDER_COL = "_sj_order"


def _is_numeric(dtype) -> bool:
    from pyspark.sql import types as T

    return isinstance(
        dtype, T.ByteType | T.ShortType | T.IntegerType | T.LongType | T.FloatType | T.DoubleType
    )


def _sorts_in_arrow(dtype) -> bool:
    """Whether the driver can sort a tie-break column of this type as Spark does."""
    from pyspark.sql import types as T

    return not isinstance(dtype, T.ArrayType | T.MapType | T.StructType | T.VariantType)


def _ts_column(df, ts: str):
    """``ts`` as int64: a timestamp or date column becomes milliseconds since the epoch."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    dtype = df.schema[ts].dataType
    if isinstance(dtype, T.TimestampType | T.TimestampNTZType | T.DateType):
        return F.unix_millis(F.col(ts).cast("timestamp"))
    if isinstance(dtype, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        return F.col(ts).cast("long")
    raise InputError(
        f"column {ts!r} is {dtype.simpleString()}; ts must be an integer, a timestamp or a date"
    )


def _row_bytes(schema: pa.Schema) -> int:
    """Bytes of one row in Arrow (a variable-width value counted as 32)."""
    return sum(t.bit_width // 8 if pa.types.is_primitive(t) else 32 for t in schema.types) or 1


def _estimated_rows(df) -> int | None:
    """Spark's estimate of ``df``'s rows, from its optimised plan's statistics (no job)."""
    try:
        plan = df._jdf.queryExecution().optimizedPlan()
        stats = plan.stats()
        if stats.rowCount().isDefined():
            return int(str(stats.rowCount().get()))
        return int(str(stats.sizeInBytes())) // (8 + plan.schema().defaultSize())
    except Exception:  # Spark Connect, or internals changed: no estimate
        return None


class _Plan:
    """How one iteration reads the DataFrame (``order="partitions"``)."""

    def __init__(self, reader: PartitionReader, parts: list[PartitionRange], jobs) -> None:
        self.reader = reader
        self.parts = parts
        self.jobs = jobs


class SparkSource(Source):
    """Rows of a Spark DataFrame in arrival order, as Arrow record batches (see module doc).

    Made by :func:`from_dataframe`. :meth:`check` (called by :func:`streamjoin.run` before the
    job starts) checks the schema and picks how to stream (:attr:`order_used`) without running
    anything in Spark; iterating reads the DataFrame once, only the columns the query needs,
    checking rows as they arrive.
    """

    def __init__(
        self,
        keyed,
        keys: list[str],
        *,
        has_stream: bool,
        has_ts: bool,
        order: str,
        transport: str,
        rows_per_job: int,
    ) -> None:
        self.keyed = keyed  #: the input, ``stream``/``ts`` renamed, not sorted
        self.keys = keys  #: the arrival key, most significant first (empty for ``"keep"``)
        self.has_stream = has_stream
        self.has_ts = has_ts
        self.order = order
        self.transport = transport
        self.rows_per_job = rows_per_job
        self.columns: list[str] | None = None  # set by check(): what the query needs
        #: ``"partitions"``: the partitions read, with what was known of them beforehand
        self.partitions: list[PartitionRange] | None = None
        self.order_used: str | None = None  #: ``"sort"``, ``"partitions"`` or ``"keep"``
        self.held_rows: int | None = None  #: estimate of rows held back (``"partitions"``)
        self.jobs: int | None = None  #: Spark jobs of the read (``"partitions"``)
        self._plan: _Plan | None = None  # made by check(), used by the next iteration

    @property
    def ordered(self):
        """The DataFrame in arrival order, as Spark sorts it (``order="sort"``)."""
        if not self.keys:
            return self.keyed
        return self.keyed.orderBy(*self.keys).drop(_ORDER_COL)

    # --- before the job ------------------------------------------------------------------

    def check(self, query) -> None:
        """Raise :class:`streamjoin.InputError` for a missing or non-numeric column; choose
        how to stream. Runs nothing in Spark: values are checked as they stream."""
        present = [c for c in self.keyed.columns if c != _ORDER_COL]
        for name in query.attrs:
            if name not in present:
                raise InputError(
                    f"the DataFrame has no column {name!r} (the query joins on "
                    f"{list(query.attrs)}); columns present: {present}"
                )
        if query.window.kind == "time" and not self.has_ts:
            raise InputError("a time window needs a 'ts' column; the DataFrame has none")
        if not query.self_join and not self.has_stream:
            raise InputError(
                "a two-way join needs a 'stream' column (0 for R, 1 for S), or two DataFrames "
                "from_dataframe(r, s); for a self-join use Query(..., self_join=True)"
            )
        columns = (["stream"] if self.has_stream else []) + (["ts"] if self.has_ts else [])
        columns += [a for a in query.attrs if a not in columns]
        for name in columns:
            dtype = self.keyed.schema[name].dataType
            if not _is_numeric(dtype):
                raise InputError(
                    f"column {name!r} is {dtype.simpleString()}; the join needs numbers "
                    "(cast decimals to double, encode strings as integer codes)"
                )
        self.columns = columns
        self._plan = self._choose()

    def _choose(self) -> _Plan | None:
        """Set :attr:`order_used` (``"auto"``: see module doc) and, for ``"partitions"``,
        plan the read."""
        self.order_used = self.order
        self.partitions = self.held_rows = self.jobs = None
        if self.order in ("sort", "keep"):
            return None
        schema = self.keyed.schema
        unsortable = [k for k in self.keys[1:] if not _sorts_in_arrow(schema[k].dataType)]
        if unsortable:
            if self.order == "partitions":
                name = unsortable[0]
                raise InputError(
                    f"order='partitions' sorts on the driver, which cannot sort tie-break "
                    f"column {name!r} of type {schema[name].dataType.simpleString()} as Spark "
                    "does (use order='sort')"
                )
            self.order_used = "sort"
            return None
        fetched = self._fetched()
        try:
            adaptive = (
                fetched._jdf.queryExecution().executedPlan().nodeName() == "AdaptiveSparkPlan"
            )
        except Exception:  # Spark Connect, or internals changed
            adaptive = True
        if self.order == "auto" and adaptive:
            # an exchange below: making the RDD would run Spark's shuffle now, and no file
            # bounds are known; decide on Spark's size estimate first
            estimate = _estimated_rows(fetched)
            if estimate is None or estimate > MAX_HELD_ROWS:
                self.order_used = "sort"
                return None
        plan = self._plan_read(fetched)
        self.held_rows, peak = buffered_rows(plan.jobs)
        if self.order == "auto" and peak > MAX_HELD_ROWS:
            self.order_used = "sort"
            return None
        self.order_used = "partitions"
        self.partitions = plan.parts
        self.jobs = len(plan.jobs)
        return plan

    def _fetched(self):
        """The DataFrame the ``"partitions"`` read fetches: query columns and the key."""
        columns = self.columns or [c for c in self.keyed.columns if c != _ORDER_COL]
        return self.keyed.select(*columns, *[k for k in self.keys if k not in columns])

    def _plan_read(self, fetched) -> _Plan:
        """One RDD of ``fetched`` as Arrow, its partitions' ``ts`` bounds where the files'
        statistics give them, and the jobs that read it."""
        reader = PartitionReader(fetched, self.transport)
        n = reader.num_partitions
        if reader.rdd is not None:
            parts = partition_ranges(reader.plan, reader.rdd)
        else:
            parts = [PartitionRange(p, 0, None, None) for p in range(n)]
        blind = [p for p in parts if p.ts_min is None]
        if blind:  # rows unknown: Spark's estimate, spread evenly
            known = sum(p.rows for p in parts)
            estimate = _estimated_rows(fetched)
            each = max(1, -(-max(0, (estimate or 0) - known) // len(blind)))
            parts = [PartitionRange(p.pid, each, None, None) if p in blind else p for p in parts]
        rows_per_job = max(1, min(self.rows_per_job, MAX_JOB_BYTES // _row_bytes(reader.schema)))
        jobs = plan_jobs(parts, rows_per_job, FIRST_JOB_ROWS)
        return _Plan(reader, [p for job in jobs for p in job], jobs)

    # --- streaming -----------------------------------------------------------------------

    def __iter__(self) -> Iterator[pa.RecordBatch | pa.Table]:
        """The DataFrame's rows in arrival order, as Arrow batches checked as they come; a file
        Spark cannot read is an InputError naming it (:mod:`~streamjoin.spark_bridge.
        errors`)."""
        with input_file_errors():
            return reading(self._batches())

    def _batches(self) -> Iterator[pa.RecordBatch | pa.Table]:
        columns = self.columns or [c for c in self.keyed.columns if c != _ORDER_COL]
        plan, self._plan = self._plan, None
        if self.order_used is None or (plan is None and self.order_used == "partitions"):
            plan = self._choose()  # iterated without check(), or again after a run
        if self.order_used != "partitions":
            return self._in_order(columns)
        assert plan is not None  # _choose plans the read when it picks "partitions"
        required, keys = self.columns or [], self.keys

        def check(table: pa.Table, pids: list[int]) -> None:
            check_arrived(table, required, lambda row: _describe(table, keys, row, pids))

        fetched = fetch_jobs(plan.reader, plan.jobs, check)
        return in_background(in_arrival_order(fetched, plan.jobs, keys, columns))

    def _in_order(self, columns: list[str]) -> Iterator[pa.RecordBatch]:
        """``"sort"`` and ``"keep"``: record batches in arrival order, checked as they come."""
        required = self.columns or []
        offset = 0
        for batch in stream_batches(self.ordered.select(*columns), self.transport):

            def where(row: int, at: int = offset) -> str:
                return f"row {at + row:,}"

            check_arrived(batch, required, where)
            offset += batch.num_rows
            yield batch

    # --- results back --------------------------------------------------------------------

    def with_row_numbers(self):
        """The DataFrame in arrival order with a ``row`` column: the row number that
        :attr:`Result.pairs` ``r`` and ``s`` refer to. One extra Spark job counts the rows per
        partition; the DataFrame should be deterministic (cache it if its source is not)."""
        from pyspark.sql import functions as F

        # persisted: the counts and the numbers must come from one evaluation of the sort
        df = (
            self.ordered.withColumn("_pid", F.spark_partition_id())
            .withColumn("_mid", F.monotonically_increasing_id())
            .persist()
        )
        counts = dict(df.groupBy("_pid").count().collect())
        offsets, total = [], 0
        for pid in range(max(counts, default=-1) + 1):
            offsets.append(total)
            total += counts.get(pid, 0)
        # monotonically_increasing_id() is (partition id << 33) + position in the partition
        local = F.col("_mid") - F.shiftleft(F.col("_pid").cast("long"), 33)
        first = F.element_at(F.array(*[F.lit(o) for o in offsets or [0]]), F.col("_pid") + 1)
        return df.withColumn("row", (first + local).cast("long")).drop("_pid", "_mid")

    def pairs_with_columns(self, result, columns: Sequence[str] | None = None):
        """The result pairs as a Spark DataFrame with the joined rows' columns: ``r``, ``s``,
        ``latency_ns``, then ``r_<col>`` and ``s_<col>`` for each of ``columns`` (default: all
        columns of the input). Write it with ``.write.parquet(path)``."""
        from pyspark.sql import functions as F

        rows = self.with_row_numbers()
        columns = [c for c in rows.columns if c != "row"] if columns is None else list(columns)
        missing = [c for c in columns if c not in rows.columns]
        if missing:
            raise ValueError(f"no column {missing[0]!r} in the input; present: {rows.columns}")
        pairs = result.to_spark(rows.sparkSession)
        for side in ("r", "s"):
            side_rows = rows.select(
                F.col("row").alias(side), *[F.col(c).alias(f"{side}_{c}") for c in columns]
            )
            pairs = pairs.join(side_rows, on=side, how="left")
        ordered = ["r", "s", "latency_ns"] + [f"{x}_{c}" for c in columns for x in ("r", "s")]
        return pairs.select(*ordered)


def _describe(table: pa.Table, keys: Sequence[str], row: int, pids: list[int]) -> str:
    """A row of a Spark job, named by its arrival-key values and the partitions it read."""
    at = ", ".join(f"{k}={table.column(k)[row].as_py()!r}" for k in keys if k != _ORDER_COL)
    return f"a row ({at}) of Spark partition(s) {pids}"


def arrival_keyed(df, *, ts: str | None, stream: str | None, tie_break, order: str):
    """``df`` with ``stream`` and ``ts`` under those names (and ``_sj_order``, the default
    tie-break, when one is needed), not sorted; and the arrival key, most significant first
    (empty for ``order="keep"``)."""
    from pyspark.sql import functions as F

    if order not in SPARK_ORDERS:
        raise ValueError(f"order must be one of {SPARK_ORDERS}, got {order!r}")
    tie = [tie_break] if isinstance(tie_break, str) else list(tie_break or [])
    for name in [c for c in (ts, stream, *tie) if c is not None]:
        if name not in df.columns:
            raise InputError(f"the DataFrame has no column {name!r}; columns present: {df.columns}")
    out = df
    if stream is not None and stream != "stream":
        out = out.withColumnRenamed(stream, "stream")
    if ts is not None:
        ts_col = _ts_column(df, ts)
        out = out.withColumn("ts", ts_col) if ts == "ts" else out.withColumn("ts", ts_col).drop(ts)
    if order == "keep":
        return out, []
    if ts is None:
        raise InputError(
            f"order={order!r} sorts by ts, and the DataFrame has no ts column; pass "
            "order='keep' to stream it in its own (deterministic) order"
        )
    if not tie:
        out = out.withColumn(_ORDER_COL, F.monotonically_increasing_id())
        tie = [_ORDER_COL]
    return out, ["ts", *tie, *(["stream"] if stream is not None else [])]


def read_files(spark, path: str | Sequence[str], format: str = "parquet", **options):
    """Read files into a DataFrame with one Spark partition per file, for
    ``from_dataframe(..., order="partitions")`` (or ``"auto"``).

    Spark packs small files into partitions largest first, so a partition of
    ``spark.read.parquet`` mixes files of different time spans and the partitions' ``ts``
    ranges overlap. This reader uses a child session of ``spark`` (shared SparkContext, own
    SQL settings) with ``spark.sql.files.openCostInBytes`` so large that each file gets a
    partition of its own; a file larger than ``spark.sql.files.maxPartitionBytes`` (128 MB) is
    still split, by row group. DataFrames read through it for the same ``spark`` share that
    session, so they can be unioned or joined. ``options`` go to Spark's reader (``header``,
    ``rowTag``, …); Parquet pages that carry a checksum are verified as they are read.

    Examples
    --------
    >>> r, s = (read_files(spark, f"data/{side}") for side in "rs")      # doctest: +SKIP
    >>> sj.run(query, from_dataframe(r, s, tie_break="seq"))            # doctest: +SKIP
    """
    child = _one_file_sessions.get(spark)
    if child is None:
        child = _one_file_sessions[spark] = spark.newSession()
        child.conf.set("spark.sql.files.openCostInBytes", str(1 << 50))
    if format == "parquet":  # a page that fails its checksum is an error, not wrong rows
        options = {"parquet.page.verify-checksum.enabled": "true", **options}
    reader = child.read.format(format).options(**options)
    with input_file_errors(path if isinstance(path, str) else ", ".join(path)):
        return reader.load(path if isinstance(path, str) else list(path))


_one_file_sessions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # for read_files


def from_dataframe(
    df,
    s=None,
    *,
    ts: str | None = "ts",
    stream: str | None = "stream",
    tie_break: str | Sequence[str] | None = None,
    order: SparkOrder = "auto",
    transport: Transport = "auto",
    rows_per_job: int = 1 << 20,
) -> SparkSource:
    """A source that streams a Spark DataFrame into :func:`streamjoin.run`.

    Rows arrive in ascending order of ``(ts, *tie_break, stream)`` (see the module doc), and
    row numbers in the result count rows in that order.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        All input rows, with a ``stream`` column (0 = R, 1 = S; none for a self-join), or the
        R rows when ``s`` is given.
    s : pyspark.sql.DataFrame, optional
        The S rows; R and S are then merged by ``ts`` (R first at equal ``ts`` unless
        ``tie_break`` says otherwise).
    ts : str or None
        Event-time column: integer, or a timestamp/date (becomes milliseconds since the
        epoch). None for count windows over the DataFrame's own order (``order="keep"``).
    stream : str or None
        Stream column of a single DataFrame (ignored when ``s`` is given); None for a
        self-join.
    tie_break : str or list of str, optional
        Columns that order rows with equal ``ts`` (default: the DataFrame's own order), e.g.
        a sequence number.
    order : {"auto", "sort", "partitions", "keep"}
        How to bring rows into arrival order (see module doc): Spark reads the partitions
        and the driver orders the rows, in ``ts`` order ahead of the join where the files'
        statistics allow (``"partitions"``); a global sort in Spark (``"sort"``); the first
        unless the driver would hold too many rows (``"auto"``); or none (``"keep"``: the
        DataFrame already is in arrival order).
    transport : {"auto", "arrow", "ipc"}
        How partitions reach the driver (:mod:`streamjoin.spark_bridge.transport`).
    rows_per_job : int
        ``order="partitions"``: most rows a Spark job reads (whole partitions; the first
        job reads about 32K rows so the join starts soon, each next one twice as many, up to
        this and 128 MB of Arrow data).

    Examples
    --------
    >>> src = from_dataframe(spark.read.parquet("flights.parquet"), stream=None,
    ...                      ts="dep_ts", tie_break="id")                 # doctest: +SKIP
    >>> sj.run(query, src, topologies.single())                         # doctest: +SKIP
    """
    from pyspark.sql import DataFrame

    for name, frame in (("df", df), ("s", s)):
        if frame is not None and not isinstance(frame, DataFrame):
            kind = f"{type(frame).__module__.partition('.')[0]}.{type(frame).__name__}"
            raise ValueError(
                f"from_dataframe takes a Spark DataFrame, got {kind} as {name}; pass an "
                "in-memory table (pandas, pyarrow, a dict of numpy arrays) to "
                "streamjoin.run(query, table, ...) itself"
            )
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
    rows_per_job = positive_int("rows_per_job", rows_per_job)
    if s is not None:
        from pyspark.sql import functions as F

        if ts is None:
            raise InputError("merging two DataFrames R and S needs their ts column")
        if "stream" in df.columns or "stream" in s.columns:
            raise InputError("with two DataFrames R and S, neither may have a 'stream' column")
        df = df.withColumn("stream", F.lit(0).cast("tinyint")).unionByName(
            s.withColumn("stream", F.lit(1).cast("tinyint")), allowMissingColumns=True
        )
        stream = "stream"
    elif stream is not None and stream not in df.columns:
        stream = None if stream == "stream" else stream  # default name absent: a self-join
    keyed, keys = arrival_keyed(df, ts=ts, stream=stream, tie_break=tie_break, order=order)
    return SparkSource(
        keyed,
        keys,
        has_stream=stream is not None,
        has_ts=ts is not None,
        order=order,
        transport=transport,
        rows_per_job=rows_per_job,
    )
