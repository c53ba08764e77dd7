"""Partition-ordered streaming: Spark reads the input once, and the join starts early.

A global sort into arrival order in Spark makes the join wait until Spark has read and sorted
every row. The bridge instead has Spark read the DataFrame's own partitions, a Spark job of
several partitions at a time from one RDD (so every job sees the same partitions, and each
partition is computed once), and orders the rows on the driver:

1. before reading, each partition gets a lower and upper bound of its ``ts`` where one is
   known (:mod:`streamjoin.spark_bridge.file_stats`: from the Parquet footers of the files it
   reads), else none. :func:`plan_jobs` takes the partitions whose bound is unknown first,
   then the others in order of their ``ts`` minimum, and cuts them into jobs whose size
   doubles from ``first_rows`` up to ``rows_per_job`` rows (the first job small so the join
   starts soon, later ones large so Spark's cost per job is paid rarely);
2. on the driver, each job's rows are checked as they arrive (:func:`check_arrived`: no
   null or non-finite join value), added to the rows held back so far and sorted by the full
   arrival key (``ts``, the tie-break columns, ``stream``);
3. the rows whose ``ts`` is below the next job's ``ts`` minimum are handed over, the rest held
   back: every later row has ``ts`` at least that minimum, so nothing handed over can be
   preceded by a row still to come, and rows tied on ``ts`` across a partition boundary are
   ordered by the rest of the key together. While a partition of unknown bound is still to
   come nothing is handed over; with no bound known at all the driver sorts the whole input
   once Spark has read it. A row below what was already handed over (a file changed between
   planning and reading) is an :class:`~streamjoin.InputError`, never a wrong order.

A background thread runs steps 2 and 3, and the Spark jobs, ahead of the join, so Spark reads
job *k + 1* while the join works on job *k*.

The rows come out in exactly the order a global sort gives (given keys that tell rows apart,
which the default tie-break does). Partitions whose ranges overlap, or are unknown, only make
the driver hold more rows back; :func:`buffered_rows` estimates how many, and the source falls
back to Spark's global sort when that is too many (``order="auto"``).
"""

from __future__ import annotations

import heapq
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamjoin.validation import InputError

PREFETCH_JOBS = 2  #: results of jobs kept ready ahead of the join
HAND_OVER_ROWS = 1 << 16  #: most rows handed to the join at a time


@dataclass(frozen=True)
class PartitionRange:
    """What is known about one Spark partition before it is read: its ``ts`` bounds (None
    when unknown) and rows (an estimate; with bounds, an upper bound, 0 for an empty one)."""

    pid: int  #: Spark's partition index
    rows: int
    ts_min: int | None
    ts_max: int | None


def _fetch_order(p: PartitionRange) -> tuple:
    """Unknown bounds first (in index order), then by ``ts_min``, ``ts_max``, index."""
    if p.ts_min is None:
        return (0, 0, 0, p.pid)
    return (1, p.ts_min, p.ts_max, p.pid)


def plan_jobs(
    parts: Sequence[PartitionRange], rows_per_job: int, first_rows: int | None = None
) -> list[list[PartitionRange]]:
    """The partitions to read, in the order of step 1 of the module doc (known-empty ones
    left out), cut into jobs: job *k* takes partitions until it holds at least
    ``min(rows_per_job, first_rows * 2**k)`` rows (the last may hold fewer).
    ``first_rows`` defaults to ``rows_per_job``: jobs of equal size.

    Runtime complexity: ``O(p log p)`` for ``p`` partitions.
    """
    if rows_per_job <= 0:
        raise ValueError(f"rows_per_job must be positive, got {rows_per_job}")
    target = rows_per_job if first_rows is None else max(1, min(first_rows, rows_per_job))
    jobs: list[list[PartitionRange]] = []
    rows = 0
    for part in sorted((p for p in parts if p.rows or p.ts_min is None), key=_fetch_order):
        if not jobs or rows >= target:
            if jobs:
                target = min(rows_per_job, 2 * target)
            jobs.append([])
            rows = 0
        jobs[-1].append(part)
        rows += part.rows
    return jobs


def buffered_rows(jobs: Sequence[Sequence[PartitionRange]]) -> tuple[int, int]:
    """Estimates of the rows the driver holds: held back between two jobs (after job *j*, the
    rows fetched so far at or above job *j + 1*'s ``ts_min``), and at the peak (held back plus
    the job being merged). Each partition's rows are taken as spread evenly over its ``ts``
    range, so a partition that only touches the next one's range counts for a few rows; a
    partition of unknown bounds is held whole until the first job after it.

    Runtime complexity: ``O(p log p + j h)`` for ``p`` partitions, ``j`` jobs and at most
    ``h`` partitions held back at once.
    """
    # heap of partitions still held: (ts_max, pid, ts_min, partition)
    fetched: list[tuple[int, int, int, PartitionRange]] = []
    blind = 0  # rows of partitions of unknown bounds, held until the next job is merged
    held = held_max = peak = 0
    for j, job in enumerate(jobs):
        peak = max(peak, held + sum(p.rows for p in job))
        blind_now = sum(p.rows for p in job if p.ts_min is None)
        for p in job:
            if p.ts_min is not None:
                assert p.ts_max is not None  # a partition's bounds are known together
                heapq.heappush(fetched, (p.ts_max, p.pid, p.ts_min, p))
        if j + 1 == len(jobs):
            break
        bound = jobs[j + 1][0].ts_min
        blind += blind_now
        if bound is None:  # nothing can be handed over yet
            held = blind + sum(p.rows for *_, p in fetched)
        else:
            while fetched and fetched[0][0] < bound:
                heapq.heappop(fetched)
            held = blind + sum(
                -(-p.rows * (hi - max(bound, lo) + 1) // (hi - lo + 1)) for hi, _, lo, p in fetched
            )
            blind = 0
        held_max = max(held_max, held)
    return held_max, peak


def check_arrived(table, columns: Sequence[str], describe: Callable[[int], str]) -> None:
    """Raise :class:`~streamjoin.InputError` for a null in ``columns`` (the ones the join
    reads) or a NaN or infinite float among them, naming the column and the row
    (``describe(row)``, ``row`` counting rows of ``table``, a table or record batch)."""
    for name in columns:
        col = table.column(name)
        if col.null_count:
            bad, what = pc.is_null(col), "null"
        elif pa.types.is_floating(col.type) and pc.any(pc.invert(pc.is_finite(col))).as_py():
            bad, what = pc.invert(pc.is_finite(col)), "NaN or infinite"
        else:
            continue
        row = int(np.flatnonzero(bad.to_numpy(zero_copy_only=False))[0])
        raise InputError(
            f"column {name!r} is {what} in {describe(row)}; a join column must have none "
            f"(filter them, e.g. df.dropna(subset=[{name!r}]))"
        )


def sort_indices(table: pa.Table, keys: Sequence[str]) -> pa.Array:
    """Stable order of ``table`` by ``keys`` ascending as Spark orders them: nulls first,
    NaN after every number."""
    sort_keys = []
    for k in keys:
        if table.column(k).null_count:  # Arrow puts nulls last: a validity key first
            table = table.append_column(f"_valid_{k}", pc.is_valid(table.column(k)))
            sort_keys.append((f"_valid_{k}", "ascending"))
        sort_keys.append((k, "ascending"))
    return pc.sort_indices(table, sort_keys=sort_keys)


def _slices(table: pa.Table) -> Iterator[pa.Table]:
    for start in range(0, table.num_rows, HAND_OVER_ROWS):
        yield table.slice(start, HAND_OVER_ROWS)


def in_arrival_order(
    fetched: Iterator[pa.Table],
    jobs: Sequence[Sequence[PartitionRange]],
    keys: Sequence[str],
    keep: Sequence[str],
) -> Iterator[pa.Table]:
    """Merge the jobs' rows (``fetched``: one table per job, in ``jobs``' order, checked)
    into arrival order: steps 2 and 3 of the module doc.

    ``keys`` is the arrival key, most significant first (``ts`` first); ``keep`` the columns
    handed over, at most :data:`HAND_OVER_ROWS` rows at a time.
    """
    held: pa.Table | None = None
    handed: int | None = None  # every row handed over has ts below this
    for j, table in enumerate(fetched):
        if table.num_rows and handed is not None:
            low = pc.min(table.column("ts")).as_py()
            if low < handed:
                raise InputError(
                    f"Spark partition(s) {[p.pid for p in jobs[j]]} hold a row at ts {low}, "
                    f"below ts {handed}, up to which rows were already handed to the join: "
                    "the files' statistics that planned the order do not describe the rows "
                    "Spark read (did the files change while reading?); pass order='sort'"
                )
        held = table if held is None else pa.concat_tables([held, table])
        last = j + 1 == len(jobs)
        bound = None if last else jobs[j + 1][0].ts_min
        if not held.num_rows or (bound is None and not last):
            continue
        held = held.take(sort_indices(held, keys))
        if last:
            cut = held.num_rows
        else:
            assert bound is not None  # (held back above until it is known)
            cut = int(np.searchsorted(held.column("ts").to_numpy(), bound, side="left"))
            handed = bound
        yield from _slices(held.slice(0, cut).select(list(keep)))
        held = held.slice(cut)


def fetch_jobs(
    fetch: Callable[[list[int]], pa.Table],
    jobs: Sequence[Sequence[PartitionRange]],
    check: Callable[[pa.Table, list[int]], None],
) -> Iterator[pa.Table]:
    """Run ``fetch`` (one Spark job) over each job's partitions, in order, and ``check`` its
    rows as they arrive."""
    for job in jobs:
        pids = [p.pid for p in job]
        table = fetch(pids)
        check(table, pids)
        yield table


def in_background(items: Iterator, depth: int = PREFETCH_JOBS) -> Iterator:
    """Iterate ``items`` in a background thread, up to ``depth`` items ahead of the consumer.

    Spark jobs and the driver's sorting then run while the consumer (the join, whose numba
    kernels release the GIL) works on earlier items. An error in the thread is raised here at
    the consumer's next step, before the items still queued (a bad row stops the join as soon
    as it is seen); closing the iterator early stops the thread after the item it is working
    on.
    """
    results: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()
    failed: list[BaseException] = []

    def work() -> None:
        while not stop.is_set():
            item: tuple[object, BaseException | None]
            try:
                item = (next(items, end), None)
            except BaseException as e:  # handed to the consumer
                failed.append(e)
                item = (None, e)
            while not stop.is_set():
                try:
                    results.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if item[0] is end or item[1] is not None:
                return

    thread = threading.Thread(target=work, name="streamjoin-spark-fetch", daemon=True)
    thread.start()
    try:
        while True:
            item, error = results.get()
            if failed:
                raise failed[0]
            if item is end:
                return
            yield item
    finally:
        stop.set()
