"""Structured Streaming into a long-lived join: a ``foreachBatch`` sink.

Spark calls the sink once per micro-batch, in the driver. The sink collects the micro-batch as
Arrow (one Spark job), sorts it on the driver into arrival order (``ts``, then ``tie_break``,
then R before S; see :mod:`streamjoin.spark_bridge.source`), validates it whole, and only
then hands it to a job that runs for the life of the sink (:func:`streamjoin.run` in a
background thread reading a queue). Windows therefore span micro-batch boundaries and the
result is exactly the oracle's over the concatenation of the micro-batches in the order they
were fed: ``batch_id`` order, as Spark calls the sink.

- ``batch_id`` is what Spark gives: an integer >= 0 (``ValueError`` otherwise, before the
  micro-batch is read).
- A ``batch_id`` already fed is a replay (Spark re-runs a micro-batch after a failure, or
  after a restart from its checkpoint): it is skipped, counted in :attr:`JoinSink.replayed`,
  never fed twice.
- With ``Query(..., lateness=L)`` (out-of-order input) micro-batches may overlap in event
  time, and a ``batch_id`` that comes after a higher one is fed like any other: rows behind
  the watermark (the largest ``ts`` fed minus ``L``) are late, and with ``on_late="error"``
  the first raises :class:`streamjoin.InputError` from the sink before any of its
  micro-batch is fed; with ``"drop"`` the job leaves them out and lists them in
  ``Result.late`` (:mod:`streamjoin.event_time`). The rest of this list is for input in
  order (no ``lateness``).
- A ``batch_id`` never fed that comes after a higher one was fed is late. It is fed when every
  row of it comes after every row fed so far in event time (its smallest ``ts`` above the
  largest fed): arrival in ``ts`` order is then what feeding it now gives. Otherwise it is
  rejected with :class:`streamjoin.InputError` (feeding it would change the windows of rows
  already joined, skipping it would lose its pairs); without a ``ts`` column the order is the
  ``batch_id`` order and a late micro-batch is always rejected. Never skipped silently.
- A bad micro-batch (a null join value, ``ts`` going back in time under a time window) raises
  :class:`streamjoin.InputError` from the sink before any of it is fed, so the Spark query
  fails with that message and the job keeps what came before.
- :meth:`JoinSink.stop` stops the Spark query, drains the job and returns its
  :class:`~streamjoin.Result` (an outer join's tuples without a partner are in it then: its
  input has ended); :meth:`JoinSink.close` does the last two when the query was
  stopped some other way.
- The queue between Spark and the job holds ``max_queued`` micro-batches: a join slower than
  the stream holds Spark back instead of filling memory.

Row numbers in the result (``r``, ``s``) count rows across micro-batches in the order they
were fed (each micro-batch sorted by ``ts``, then ``tie_break``, then R before S);
:attr:`JoinSink.batches` says which rows each ``batch_id`` brought.
"""

from __future__ import annotations

import queue
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamjoin.checks import number, positive_int
from streamjoin.event_time import Watermark
from streamjoin.runtime import Result, run
from streamjoin.sources import Source
from streamjoin.spark_bridge.partitions import sort_indices
from streamjoin.spark_bridge.source import arrival_keyed
from streamjoin.validation import InputError, validate

_END = object()


class _QueueSource(Source):
    """Tables put on a queue, until the end marker."""

    def __init__(self, q: queue.Queue) -> None:
        self.queue = q

    def __iter__(self):
        while (item := self.queue.get()) is not _END:
            yield item


class JoinSink:
    """A ``foreachBatch`` function that feeds micro-batches into one long-lived join.

    Parameters
    ----------
    query : streamjoin.Query
    topology : streamjoin.topologies.Topology, optional
    ts, stream, tie_break :
        Column names, as for :func:`streamjoin.spark_bridge.from_dataframe` (``stream=None``
        for a self-join).
    max_queued : int
        Micro-batches that may wait for the join before the sink blocks Spark.
    **run_options
        Passed to :func:`streamjoin.run` (``backend``, ``batch_size``, ``max_delay``,
        ``collect``, …); ``progress`` defaults to off.

    Examples
    --------
    >>> sink = JoinSink(query, topologies.single(), backend="local")       # doctest: +SKIP
    >>> sink.start(spark.readStream.parquet("in/"))                       # doctest: +SKIP
    >>> result = sink.stop()                                              # doctest: +SKIP
    """

    def __init__(
        self,
        query,
        topology=None,
        *,
        ts: str | None = "ts",
        stream: str | None = "stream",
        tie_break=None,
        max_queued: int = 4,
        **run_options,
    ) -> None:
        max_queued = positive_int("max_queued", max_queued)
        if query.self_join:
            stream = None
        elif stream is None:
            raise ValueError("a two-way join needs the stream column's name")
        if query.window.kind == "time" and ts is None:
            raise ValueError("a time window needs the ts column's name")
        self.query = query
        self.ts, self.stream, self.tie_break = ts, stream, tie_break
        self.columns = (["stream"] if stream else []) + (["ts"] if ts else [])
        self.columns += [a for a in query.attrs if a not in self.columns]
        self.rows = 0  #: rows fed so far
        self.batches: list[tuple[int, int, int]] = []  #: (batch_id, first row, rows) fed
        self.replayed = 0  #: micro-batches skipped as replays
        self._fed_ids: set[int] = set()
        self._max_ts: int | None = None  # the largest ts fed so far, both streams
        self.streaming_query = None  #: the Spark query :meth:`start` started
        self._last_ts = np.full(2, np.iinfo(np.int64).min, dtype=np.int64)
        self._watermark = None  # out-of-order input refusing late rows: checked at the sink
        if query.lateness is not None and query.on_late == "error":
            self._watermark = Watermark(query.lateness, "error", keep_order=False)
        if query.lateness is not None and ts is None:
            raise ValueError("lateness= needs the ts column's name")
        self._queue: queue.Queue = queue.Queue(maxsize=max_queued)
        self._lock = threading.Lock()
        self._closed = False
        self._result: Result | None = None
        self._error: BaseException | None = None
        run_options.setdefault("progress", False)
        self._thread = threading.Thread(
            target=self._run, args=(topology, run_options), name="streamjoin-sink", daemon=True
        )
        self._thread.start()

    def _run(self, topology, run_options) -> None:
        try:
            self._result = run(self.query, _QueueSource(self._queue), topology, **run_options)
        except BaseException as e:  # handed to the next feed or to close()
            self._error = e

    def _check_alive(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the join job failed: {self._error!r}") from self._error

    # --- the foreachBatch function -------------------------------------------------------

    def __call__(self, batch_df, batch_id: int) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the sink is closed; start a new JoinSink")
            self._check_alive()
            # Spark numbers a query's micro-batches 0, 1, 2, …: anything else is not Spark's
            batch_id = int(number("batch_id", batch_id, integer=True, low=0))
            if batch_id in self._fed_ids:
                self.replayed += 1
                return
            table = self._arrival_ordered(batch_df)
            late_id = self._fed_ids and batch_id < max(self._fed_ids)
            if late_id and table.num_rows and self.query.lateness is None:
                self._check_late(table, batch_id)
            self._validate(table)
            self._put(table)
            self.batches.append((batch_id, self.rows, table.num_rows))
            self._fed_ids.add(batch_id)
            self.rows += table.num_rows
            if self.ts and table.num_rows:
                last = int(pc.max(table.column("ts")).as_py())
                self._max_ts = last if self._max_ts is None else max(self._max_ts, last)

    def _check_late(self, table, batch_id: int) -> None:
        """A micro-batch that comes after a higher ``batch_id`` was fed: feed it only if all
        its rows come after everything fed so far (see module doc)."""
        latest = max(self._fed_ids)
        if not self.ts:
            raise InputError(
                f"micro-batch {batch_id} came after micro-batch {latest} was fed; without a "
                "ts column rows arrive in batch_id order, so feeding it now would change the "
                "windows and skipping it would lose its pairs (feed micro-batches in batch_id "
                "order: one streaming query per JoinSink)"
            )
        first = int(pc.min(table.column("ts")).as_py())
        if self._max_ts is not None and first <= self._max_ts:
            raise InputError(
                f"micro-batch {batch_id} came after micro-batch {latest} was fed, and its "
                f"rows (ts from {first}) do not all come after the rows fed so far (ts up to "
                f"{self._max_ts}): feeding it now would change the windows of rows already "
                "joined and skipping it would lose its pairs (feed micro-batches in batch_id "
                "order: one streaming query per JoinSink)"
            )

    def _arrival_ordered(self, batch_df) -> pa.Table:
        """The micro-batch's columns, collected in one Spark job and sorted on the driver
        (stable: the micro-batch's own order breaks the remaining ties)."""
        keyed, _ = arrival_keyed(
            batch_df, ts=self.ts, stream=self.stream, tie_break=self.tie_break, order="keep"
        )
        missing = [c for c in self.columns if c not in keyed.columns]
        if missing:
            raise InputError(
                f"the micro-batch has no column {missing[0]!r}; columns present: {batch_df.columns}"
            )
        ties = [self.tie_break] if isinstance(self.tie_break, str) else list(self.tie_break or [])
        ties = [t for t in ties if t not in self.columns]
        table = keyed.select(*self.columns, *ties).toArrow()
        if self.ts:
            keys = ["ts", *ties, *(["stream"] if self.stream else [])]
            table = table.take(sort_indices(table, keys))
        return table.select(self.columns)

    def _validate(self, table) -> None:
        cols = validate(table, self.query, row_offset=self.rows)
        if self.query.lateness is not None:  # out of order: no ts order to check
            if self._watermark is not None:  # late rows refused here, before any is fed
                self._watermark.split(cols)
            return
        if self.query.window.kind != "time" or not len(cols):
            return
        per_stream = [cols.ts[(cols.stream & 1) == y] for y in (0, 1)]
        for y, ts in enumerate(per_stream):  # across micro-batches (validate checks within)
            if len(ts) and ts[0] < self._last_ts[y]:
                raise InputError(
                    f"ts of stream {'RS'[y]} goes back from {self._last_ts[y]} to {ts[0]} in "
                    f"the micro-batch starting at row {self.rows}; a time window needs "
                    "non-decreasing ts per stream across micro-batches"
                )
        for y, ts in enumerate(per_stream):  # only once the whole micro-batch passed
            if len(ts):
                self._last_ts[y] = ts[-1]

    def _put(self, item) -> None:
        while True:
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                self._check_alive()

    # --- starting and stopping -----------------------------------------------------------

    def start(self, df, s=None, *, trigger: dict | None = None, checkpoint: str | None = None):
        """Start ``df.writeStream.foreachBatch(self)``; return the StreamingQuery.

        ``s``: a second streaming DataFrame for S (``df`` is then R, and neither has a
        ``stream`` column). ``trigger``: keyword arguments of ``DataStreamWriter.trigger``.
        ``checkpoint``: a checkpoint folder, so a restarted query resumes (its replayed
        micro-batches are skipped).
        """
        if s is not None:
            from pyspark.sql import functions as F

            df = df.withColumn("stream", F.lit(0).cast("tinyint")).unionByName(
                s.withColumn("stream", F.lit(1).cast("tinyint")), allowMissingColumns=True
            )
            self.stream = "stream"
        writer = df.writeStream.foreachBatch(self)
        if trigger:
            writer = writer.trigger(**trigger)
        if checkpoint:
            writer = writer.option("checkpointLocation", checkpoint)
        self.streaming_query = writer.start()
        return self.streaming_query

    def stop(self, timeout: float | None = None) -> Result:
        """Stop the query :meth:`start` started, then :meth:`close`."""
        if self.streaming_query is not None:
            self.streaming_query.stop()
        return self.close(timeout)

    def close(self, timeout: float | None = None) -> Result:
        """Drain the job and return its result (all micro-batches fed so far).

        Raises the job's error, if it failed, and ``TimeoutError`` if it does not finish in
        ``timeout`` seconds.
        """
        with self._lock:
            if not self._closed:
                self._closed = True
                self._put(_END)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the join job did not finish within {timeout} s")
        self._check_alive()
        assert self._result is not None  # the job ended without an error: it has its result
        return self._result
