"""A Spark DataFrame as a :class:`~streamjoin.sources.Source`, streamed as Arrow record batches.

Arrival order
-------------
A stream join's answer depends on arrival order (count windows, and which of two tuples is the
earlier), so the bridge defines it: rows arrive by ``ts``, then by the ``tie_break`` columns
(default: the DataFrame's own row order, through ``monotonically_increasing_id()`` taken
before sorting; for R and S given as two DataFrames, R's rows before S's), then R before S. Spark sorts by these keys with a
range partitioning, so partition *k* holds the *k*-th slice of the arrival order.
``order="keep"`` skips the sort for a DataFrame that is already in arrival order and whose
order is deterministic (sorted and cached, say); its ``ts`` is still checked per stream as it
streams.

Transport
---------
The sorted DataFrame is streamed partition by partition, never collected whole: Spark runs
one job per partition (the next one prefetched) and the driver receives that partition's
Arrow record batches. ``transport="arrow"`` uses the JVM's own Arrow conversion
(``Dataset.toArrowBatchRdd``, the path of ``DataFrame.toArrow()``, served through
``PythonRDD.toLocalIteratorAndServe``), with no Python workers; it relies on PySpark internals
of classic (non-Connect) Spark. ``transport="ipc"`` uses only public API: ``mapInArrow`` turns
each partition into Arrow IPC blobs that ``toLocalIterator(prefetchPartitions=True)`` brings
back; it costs a Python worker per task and a copy more. ``"auto"`` (the default) takes
``"arrow"`` where it is available.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa

from streamjoin.batch import InputError
from streamjoin.sources import Source

TRANSPORTS = ("auto", "arrow", "ipc")
ORDERS = ("sort", "keep")
_ORDER_COL = "_sj_order"


def _is_numeric(dtype) -> bool:
    from pyspark.sql import types as T

    return isinstance(dtype, T.ByteType | T.ShortType | T.IntegerType | T.LongType |
                      T.FloatType | T.DoubleType)  # fmt: skip


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
    job starts) checks the columns, counts the rows and looks for nulls and NaN in one Spark
    pass; iterating streams only the columns the query needs.
    """

    def __init__(self, ordered, *, has_stream: bool, has_ts: bool, transport: str) -> None:
        self.ordered = ordered  #: the DataFrame in arrival order (``stream``/``ts`` renamed)
        self.has_stream = has_stream
        self.has_ts = has_ts
        self.transport = transport
        self.columns: list[str] | None = None  # set by check(): what the query needs
        self.n_rows = None

    # --- before the job ------------------------------------------------------------------

    def check(self, query) -> None:
        """Raise :class:`streamjoin.InputError` for a missing or non-numeric column, or a
        null or NaN in a column the join reads; count the rows (for the progress bar)."""
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        df = self.ordered
        present = df.columns
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
        if query.self_join and self.has_stream:
            raise InputError("a self-join reads one stream; the DataFrame has a 'stream' column")
        columns = (["stream"] if self.has_stream else []) + (["ts"] if self.has_ts else [])
        columns += [a for a in query.attrs if a not in columns]
        for name in columns:
            dtype = df.schema[name].dataType
            if not _is_numeric(dtype):
                raise InputError(
                    f"column {name!r} is {dtype.simpleString()}; the join needs numbers "
                    "(cast decimals to double, encode strings as integer codes)"
                )
        counts = [F.count(F.lit(1)).alias("_rows")]
        for name in columns:
            c = F.col(name)
            bad = c.isNull()
            if isinstance(df.schema[name].dataType, T.FloatType | T.DoubleType):
                bad = bad | F.isnan(c)
            counts.append(F.sum(F.when(bad, 1).otherwise(0)).alias(name))
        row = df.agg(*counts).collect()[0]
        for name in columns:
            if row[name]:
                raise InputError(
                    f"column {name!r} has {row[name]:,} null or NaN values; a join column must "
                    f"have none (filter them, e.g. df.dropna(subset=[{name!r}]))"
                )
        self.columns = columns
        self.n_rows = int(row["_rows"])

    # --- streaming -----------------------------------------------------------------------

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        df = self.ordered if self.columns is None else self.ordered.select(*self.columns)
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
        df = (self.ordered.withColumn("_pid", F.spark_partition_id())
              .withColumn("_mid", F.monotonically_increasing_id()).persist())  # fmt: skip
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
            side_rows = rows.select(F.col("row").alias(side),
                                    *[F.col(c).alias(f"{side}_{c}") for c in columns])  # fmt: skip
            pairs = pairs.join(side_rows, on=side, how="left")
        ordered = ["r", "s", "latency_ns"] + [f"{x}_{c}" for c in columns for x in ("r", "s")]
        return pairs.select(*ordered)


def _arrow_batches(df, jrdd) -> Iterator[pa.RecordBatch]:
    """Partition by partition through the JVM's Arrow conversion (see module doc)."""
    from pyspark.core.rdd import _local_iterator_from_socket
    from pyspark.serializers import NoOpSerializer
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema, timezone="UTC")
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
        yield pa.record_batch([pa.array([sink.getvalue().to_pybytes()], pa.binary())],
                              names=["ipc"])  # fmt: skip


def _ipc_batches(df) -> Iterator[pa.RecordBatch]:
    """Partition by partition through ``mapInArrow`` and ``toLocalIterator`` (public API)."""
    for row in df.mapInArrow(_partition_to_ipc, "ipc binary").toLocalIterator(
        prefetchPartitions=True
    ):
        yield from pa.ipc.open_stream(row.ipc)


def arrival_ordered(df, *, ts: str | None, stream: str | None, tie_break, order: str):
    """``df`` with ``stream`` and ``ts`` under those names, sorted into arrival order."""
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
        return out
    if ts is None:
        raise InputError(
            "order='sort' sorts by ts, and the DataFrame has no ts column; pass order='keep' "
            "to stream it in its own (deterministic) order"
        )
    if not tie:
        out = out.withColumn(_ORDER_COL, F.monotonically_increasing_id())
        tie = [_ORDER_COL]
    out = out.orderBy("ts", *tie, *(["stream"] if stream is not None else []))
    return out.drop(_ORDER_COL)


def from_dataframe(
    df,
    s=None,
    *,
    ts: str | None = "ts",
    stream: str | None = "stream",
    tie_break: str | Sequence[str] | None = None,
    order: str = "sort",
    transport: str = "auto",
) -> SparkSource:
    """A source that streams a Spark DataFrame into :func:`streamjoin.run`.

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
    order : {"sort", "keep"}
        Sort into arrival order, or trust that ``df`` already is in it (see module doc).
    transport : {"auto", "arrow", "ipc"}
        How partitions reach the driver (see module doc).

    Examples
    --------
    >>> src = from_dataframe(spark.read.parquet("flights.parquet"), stream=None,
    ...                      ts="dep_ts", tie_break="id")                 # doctest: +SKIP
    >>> sj.run(query, src, topologies.single())                         # doctest: +SKIP
    """
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
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
    ordered = arrival_ordered(df, ts=ts, stream=stream, tie_break=tie_break, order=order)
    return SparkSource(ordered, has_stream=stream is not None, has_ts=ts is not None,
                       transport=transport)  # fmt: skip
