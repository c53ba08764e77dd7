"""A Spark DataFrame as a :class:`~streamjoin.sources.Source`, streamed as Arrow record batches.

Arrival order
-------------
A stream join's answer depends on arrival order (count windows, and which of two tuples is the
earlier), so the bridge defines it: rows arrive in ascending order of the key
``(ts, *tie_break, stream)``: by ``ts``; at equal ``ts`` by the ``tie_break`` columns (default:
the DataFrame's own row order, ``monotonically_increasing_id()`` taken before any sorting, so
for R and S given as two DataFrames, R's rows come first); then R before S. Rows equal on the
whole key (a tie-break that does not tell rows apart) come in an unspecified order. Every
``order`` but ``"keep"`` streams exactly this order:

- ``"sort"``: Spark sorts the DataFrame with a range partitioning, so partition *k* holds the
  *k*-th slice of the arrival order, and streams it partition by partition. The join starts
  once Spark has read and sorted every row.
- ``"partitions"``: partition-ordered streaming (:mod:`streamjoin.spark_bridge.partitions`):
  Spark reads the partitions in order of their ``ts`` minimum, a job of about
  ``rows_per_job`` rows at a time, a job or two ahead of the join, and the driver sorts the
  rows and holds back those that a later partition may precede. The join starts after the
  first job, and Spark reading overlaps the join. Suits inputs whose partitions cover disjoint
  ``ts`` ranges, such as Parquet parts written in time order read one partition per file
  (:func:`read_files`); overlapping ranges cost driver memory, not correctness. Tie-break
  columns must be integers, booleans, dates or timestamps, without nulls.
- ``"auto"`` (the default): ``"partitions"`` when it applies, the driver would hold back at
  most half the rows between jobs and at most ``MAX_HELD_ROWS`` at once (estimated from each
  partition's rows and ``ts`` range, which the input check's one Spark pass measures), else
  ``"sort"``.
  :attr:`SparkSource.order_used` says which.
- ``"keep"`` trusts a DataFrame that is already in arrival order and whose order is
  deterministic (sorted and cached, say); its ``ts`` is still checked per stream as it
  streams.

Transport
---------
The DataFrame is streamed partition by partition, never collected whole: Spark runs one job
per partition (or per run of partitions, ``"partitions"``), the next one prefetched, and the
driver receives that partition's Arrow record batches. ``transport="arrow"`` uses the JVM's
own Arrow conversion (``Dataset.toArrowBatchRdd``, the path of ``DataFrame.toArrow()``, served
through ``PythonRDD.toLocalIteratorAndServe`` or ``PythonRDD.runJob``), with no Python workers;
it relies on PySpark internals of classic (non-Connect) Spark. ``transport="ipc"`` uses only
public API: ``mapInArrow`` turns each partition into Arrow IPC blobs that
``toLocalIterator(prefetchPartitions=True)`` (or ``SparkContext.runJob``) brings back; it
costs a Python worker per task and a copy more. ``"auto"`` (the default) takes ``"arrow"``
where it is available.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa

from streamjoin.batch import InputError
from streamjoin.checks import positive_int
from streamjoin.sources import Source
from streamjoin.spark_bridge.errors import input_file_errors, reading
from streamjoin.spark_bridge.partitions import (
    PartitionRange,
    buffered_rows,
    fetch_jobs,
    in_arrival_order,
    in_background,
    plan_jobs,
)

TRANSPORTS = ("auto", "arrow", "ipc")
ORDERS = ("auto", "sort", "partitions", "keep")
MAX_HELD_ROWS = 1 << 21  #: ``order="auto"``: most rows the driver may hold at once
_ORDER_COL = "_sj_order"


def _is_numeric(dtype) -> bool:
    from pyspark.sql import types as T

    return isinstance(
        dtype, T.ByteType | T.ShortType | T.IntegerType | T.LongType | T.FloatType | T.DoubleType
    )


def _sorts_like_spark(dtype) -> bool:
    """Whether numpy orders this column's values as Spark does (no NaN or -0.0 subtleties)."""
    from pyspark.sql import types as T

    return isinstance(
        dtype,
        T.ByteType
        | T.ShortType
        | T.IntegerType
        | T.LongType
        | T.BooleanType
        | T.DateType
        | T.TimestampType
        | T.TimestampNTZType,
    )


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


class SparkSource(Source):
    """Rows of a Spark DataFrame in arrival order, as Arrow record batches (see module doc).

    Made by :func:`from_dataframe`. :meth:`check` (called by :func:`streamjoin.run` before the
    job starts) checks the columns and, in one Spark pass, counts each partition's rows, nulls
    and NaN (and S rows) and finds its ``ts`` range, then picks how to stream
    (:attr:`order_used`); iterating streams only the columns the query needs. A file Spark
    cannot read, in that pass or while streaming, is an InputError naming it
    (:mod:`~streamjoin.spark_bridge.errors`).
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
        self.n_rows = None
        self.s_rows: int | None = None  #: rows with a nonzero ``stream``, from the check
        self.partitions: list[PartitionRange] | None = None  #: non-empty ones, from the check
        self.order_used: str | None = None  #: ``"sort"``, ``"partitions"`` or ``"keep"``
        self.held_rows: int | None = None  #: estimate of rows held back (not ``"sort"``)

    @property
    def ordered(self):
        """The DataFrame in arrival order, as Spark sorts it (``order="sort"``)."""
        if not self.keys:
            return self.keyed
        return self.keyed.orderBy(*self.keys).drop(_ORDER_COL)

    # --- before the job ------------------------------------------------------------------

    def check(self, query) -> None:
        """Raise :class:`streamjoin.InputError` for a missing or non-numeric column, a null or
        NaN in a column the join reads, S rows (``stream`` 1) under a self-join, or a file
        Spark cannot read; count the rows (for the progress bar) and choose how to stream,
        all in one Spark pass."""
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
        with input_file_errors():  # the first pass that reads every file
            nulls = self._scan(columns)
        if query.self_join and self.s_rows:
            raise InputError(
                f"a self-join reads one stream, but column 'stream' has {self.s_rows:,} rows of "
                "S (1); drop the column or use a two-way Query"
            )
        for name in columns:
            if nulls[name]:
                raise InputError(
                    f"column {name!r} has {nulls[name]:,} null or NaN values; a join column "
                    f"must have none (filter them, e.g. df.dropna(subset=[{name!r}]))"
                )
        self.columns = columns

    def _scan(self, columns: list[str]) -> dict[str, int]:
        """The one Spark pass: per partition, rows, ``ts`` range and nulls (NaN too, in float
        columns) of ``columns`` and the tie-break columns; sets :attr:`n_rows` and
        :attr:`order_used`. Returns the null count of each column."""
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        schema = self.keyed.schema
        ties = [k for k in self.keys[1:] if k != "stream" and k not in columns]
        aggs = [F.count(F.lit(1)).alias("_rows")]
        if self.has_ts:
            aggs += [F.min("ts").alias("_ts_min"), F.max("ts").alias("_ts_max")]
        if self.has_stream:
            aggs.append(F.sum(F.when(F.col("stream") != 0, 1).otherwise(0)).alias("_s_rows"))
        for k, name in enumerate(columns + ties):
            c = F.col(name)
            bad = c.isNull()
            if isinstance(schema[name].dataType, T.FloatType | T.DoubleType):
                bad = bad | F.isnan(c)
            aggs.append(F.sum(F.when(bad, 1).otherwise(0)).alias(f"_null{k}"))
        # the partition id is taken below the coalesce: each input partition's own; the
        # coalesce makes one task per core read many small partitions (files) in turn
        parallelism = self.keyed.sparkSession.sparkContext.defaultParallelism
        keyed = self.keyed.withColumn("_pid", F.spark_partition_id()).coalesce(parallelism)
        rows = keyed.groupBy("_pid").agg(*aggs).collect()
        nulls = {name: sum(r[f"_null{k}"] for r in rows) for k, name in enumerate(columns + ties)}
        self.n_rows = sum(r["_rows"] for r in rows)
        self.s_rows = sum(r["_s_rows"] or 0 for r in rows) if self.has_stream else 0
        if self.has_ts:
            self.partitions = [
                PartitionRange(r["_pid"], r["_rows"], r["_ts_min"], r["_ts_max"])
                for r in rows
                if r["_rows"]
            ]
        self.order_used = self._choose(ties, nulls)
        return nulls

    def _choose(self, ties: list[str], nulls: dict[str, int]) -> str:
        """``"auto"``: partition-ordered streaming when it applies and holds back few rows."""
        if self.order in ("sort", "keep"):
            return self.order
        schema = self.keyed.schema
        unsortable = [
            k for k in self.keys[1:] if not _sorts_like_spark(schema[k].dataType) or nulls.get(k)
        ]
        jobs = plan_jobs(self.partitions, self.rows_per_job)
        self.held_rows, peak = buffered_rows(jobs)
        if self.order == "partitions":
            if unsortable:
                name = unsortable[0]
                raise InputError(
                    f"order='partitions' sorts on the driver and needs integer, boolean, date "
                    f"or timestamp tie-break columns without nulls; {name!r} is "
                    f"{schema[name].dataType.simpleString()} with {nulls.get(name, 0):,} "
                    "nulls (use order='sort')"
                )
            return "partitions"
        fits = self.held_rows <= self.n_rows // 2 and peak <= MAX_HELD_ROWS
        return "partitions" if fits and not unsortable else "sort"

    # --- streaming -----------------------------------------------------------------------

    def __iter__(self) -> Iterator[pa.RecordBatch | pa.Table]:
        with input_file_errors():
            return reading(self._batches())

    def _batches(self) -> Iterator[pa.RecordBatch | pa.Table]:
        columns = self.columns or [c for c in self.keyed.columns if c != _ORDER_COL]
        if self.order_used is None:  # iterated without check()
            if self.order in ("sort", "keep"):
                self.order_used = self.order
            else:  # the partitions' ranges decide: the pass, without a query
                self._scan([])
        if self.order_used == "partitions":
            fetched = columns + [k for k in self.keys if k not in columns]
            jobs = plan_jobs(self.partitions, self.rows_per_job)
            fetch = _fetcher(self.keyed.select(*fetched), self.transport)
            return in_background(
                in_arrival_order(fetch_jobs(fetch, jobs), jobs, self.keys, columns)
            )
        df = self.ordered.select(*columns)
        if self.transport != "ipc":
            try:
                jrdd = df._jdf.toArrowBatchRdd()
            except Exception:  # Spark Connect, or internals changed: the public path
                if self.transport == "arrow":
                    raise
            else:
                return _arrow_batches(df, jrdd)
        return _ipc_batches(df)

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


def _arrow_schema(df) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(df.schema, timezone="UTC")


def _arrow_batches(df, jrdd) -> Iterator[pa.RecordBatch]:
    """Partition by partition through the JVM's Arrow conversion (see module doc)."""
    from pyspark.core.rdd import _local_iterator_from_socket
    from pyspark.serializers import NoOpSerializer

    schema = _arrow_schema(df)
    sock_info = df.sparkSession.sparkContext._jvm.PythonRDD.toLocalIteratorAndServe(jrdd, True)
    for blob in _local_iterator_from_socket(sock_info, NoOpSerializer()):
        yield pa.ipc.read_record_batch(pa.py_buffer(blob), schema)


def _partition_to_ipc(batches):
    """``mapInArrow`` function: each record batch as one Arrow IPC stream in a binary cell."""
    import pyarrow as pa

    for batch in batches:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        yield pa.record_batch(
            [pa.array([sink.getvalue().to_pybytes()], pa.binary())], names=["ipc"]
        )


def _ipc_batches(df) -> Iterator[pa.RecordBatch]:
    """Partition by partition through ``mapInArrow`` and ``toLocalIterator`` (public API)."""
    for row in df.mapInArrow(_partition_to_ipc, "ipc binary").toLocalIterator(
        prefetchPartitions=True
    ):
        yield from pa.ipc.open_stream(row.ipc)


def _ipc_cells(rows):
    """``SparkContext.runJob`` function: the IPC blobs of a partition's rows."""
    return [row.ipc for row in rows]


def _fetcher(df, transport: str) -> Callable[[list[int]], list[pa.RecordBatch]]:
    """A function that runs one Spark job over the given partitions of ``df`` and returns
    their Arrow record batches (partition-ordered streaming; transports as in the module doc)."""
    sc = df.sparkSession.sparkContext
    if transport != "ipc":
        try:
            jrdd = df._jdf.toArrowBatchRdd().toJavaRDD()
        except Exception:  # Spark Connect, or internals changed: the public path
            if transport == "arrow":
                raise
        else:
            from pyspark.core.rdd import _load_from_socket
            from pyspark.serializers import NoOpSerializer

            schema = _arrow_schema(df)

            def fetch_arrow(pids: list[int]) -> list[pa.RecordBatch]:
                sock_info = sc._jvm.PythonRDD.runJob(sc._jsc.sc(), jrdd, pids)
                with _load_from_socket(sock_info, NoOpSerializer()) as blobs:
                    return [pa.ipc.read_record_batch(pa.py_buffer(b), schema) for b in blobs]

            return fetch_arrow
    rdd = df.mapInArrow(_partition_to_ipc, "ipc binary").rdd

    def fetch_ipc(pids: list[int]) -> list[pa.RecordBatch]:
        return [b for blob in sc.runJob(rdd, _ipc_cells, pids) for b in pa.ipc.open_stream(blob)]

    return fetch_ipc


def arrival_keyed(df, *, ts: str | None, stream: str | None, tie_break, order: str):
    """``df`` with ``stream`` and ``ts`` under those names (and ``_sj_order``, the default
    tie-break, when one is needed), not sorted; and the arrival key, most significant first
    (empty for ``order="keep"``)."""
    from pyspark.sql import functions as F

    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
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


def arrival_ordered(df, *, ts: str | None, stream: str | None, tie_break, order: str):
    """``df`` with ``stream`` and ``ts`` under those names, sorted into arrival order by Spark
    (``order="keep"``: not sorted)."""
    out, keys = arrival_keyed(df, ts=ts, stream=stream, tie_break=tie_break, order=order)
    return out.orderBy(*keys).drop(_ORDER_COL) if keys else out


def read_files(spark, path: str | Sequence[str], format: str = "parquet", **options):
    """Read files into a DataFrame with one Spark partition per file, for
    ``from_dataframe(..., order="partitions")`` (or ``"auto"``).

    Spark packs small files into partitions largest first, so a partition of
    ``spark.read.parquet`` mixes files of different time spans and the partitions' ``ts``
    ranges overlap. This reader uses a child session of ``spark`` (shared SparkContext, own
    SQL settings) with ``spark.sql.files.openCostInBytes`` so large that each file gets a
    partition of its own; a file larger than ``spark.sql.files.maxPartitionBytes`` (128 MB) is
    still split, by row group. DataFrames read through it for the same ``spark`` share that
    session, so they can be unioned or joined.

    Examples
    --------
    >>> r, s = (read_files(spark, f"data/{side}") for side in "rs")      # doctest: +SKIP
    >>> sj.run(query, from_dataframe(r, s, tie_break="seq"))            # doctest: +SKIP
    """
    child = _one_file_sessions.get(spark)
    if child is None:
        child = _one_file_sessions[spark] = spark.newSession()
        child.conf.set("spark.sql.files.openCostInBytes", str(1 << 50))
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
    order: str = "auto",
    transport: str = "auto",
    rows_per_job: int = 1 << 16,
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
        How to bring rows into arrival order (see module doc): a global sort in Spark,
        partition-ordered streaming that overlaps Spark with the join, the better of the two
        for this input (``"auto"``), or none (the DataFrame already is in it).
    transport : {"auto", "arrow", "ipc"}
        How partitions reach the driver (see module doc).
    rows_per_job : int
        ``order="partitions"``: rows Spark reads per job (whole partitions, taken in order of
        their ``ts`` minimum).

    Examples
    --------
    >>> src = from_dataframe(spark.read.parquet("flights.parquet"), stream=None,
    ...                      ts="dep_ts", tie_break="id")                 # doctest: +SKIP
    >>> sj.run(query, src, topologies.single())                         # doctest: +SKIP
    """
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
