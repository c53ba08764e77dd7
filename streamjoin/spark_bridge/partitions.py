"""Partition-ordered streaming: overlap Spark reading the input with the join.

A global sort into arrival order makes the join wait until Spark has read and sorted every
row. Inputs that arrive in time order on disk (Parquet parts written by
:func:`~streamjoin.spark_bridge.generate`, one file per span of event time, read one
partition per file by :func:`~streamjoin.spark_bridge.read_files`) do not need one: their
Spark partitions cover (nearly) disjoint ``ts`` ranges. Then, knowing each partition's
row count and ``ts`` minimum and maximum (gathered by the source's input check, in the same
Spark pass that counts nulls):

1. take the non-empty partitions in order of their ``ts`` minimum and cut them into jobs of
   about ``rows_per_job`` rows (one Spark job each);
2. on the driver, add each job's rows to the rows held back so far and sort them by the full
   arrival key (``ts``, the tie-break columns, ``stream``) with :func:`numpy.lexsort`;
3. hand over the rows whose ``ts`` is below the next job's ``ts`` minimum, and hold back the
   rest: every later row has ``ts`` at least that minimum, so nothing handed over can be
   preceded by a row still to come, and rows tied on ``ts`` across a partition boundary are
   ordered by the rest of the key together.

A background thread runs steps 1–3 a job or two ahead of the join, so Spark reads job *k + 1*
while the join works on job *k*.

The rows come out in exactly the order a global sort gives (given keys that tell rows apart,
which the default tie-break does). Partitions whose ranges overlap only make the driver hold
more rows back; :func:`buffered_rows` estimates how many, and the source falls back to the
global sort when that is many (``order="auto"``).
"""

from __future__ import annotations

import heapq
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from streamjoin.batch import InputError

PREFETCH_JOBS = 2  #: results of jobs kept ready ahead of the join


@dataclass(frozen=True)
class PartitionRange:
    """What the input check learnt about one non-empty Spark partition."""

    pid: int  #: Spark's partition index
    rows: int
    ts_min: int
    ts_max: int


def plan_jobs(parts: Sequence[PartitionRange], rows_per_job: int) -> list[list[PartitionRange]]:
    """Non-empty partitions in order of ``ts_min`` (then ``ts_max``, index), cut into runs of
    at least ``rows_per_job`` rows (the last may hold fewer), one Spark job each.

    Runtime complexity: ``O(p log p)`` for ``p`` partitions.
    """
    if rows_per_job <= 0:
        raise ValueError(f"rows_per_job must be positive, got {rows_per_job}")
    jobs: list[list[PartitionRange]] = []
    rows = rows_per_job
    for part in sorted((p for p in parts if p.rows), key=lambda p: (p.ts_min, p.ts_max, p.pid)):
        if rows >= rows_per_job:
            jobs.append([])
            rows = 0
        jobs[-1].append(part)
        rows += part.rows
    return jobs


def buffered_rows(jobs: Sequence[Sequence[PartitionRange]]) -> tuple[int, int]:
    """Estimates of the rows the driver holds: held back between two jobs (after job *j*, the
    rows fetched so far at or above job *j + 1*'s ``ts_min``), and at the peak (held back plus
    the job being merged). Each partition's rows are taken as spread evenly over its ``ts``
    range, so a partition that only touches the next one's range counts for a few rows.

    Runtime complexity: ``O(p log p + j h)`` for ``p`` partitions, ``j`` jobs and at most
    ``h`` partitions held back at once.
    """
    fetched: list[tuple[int, int, PartitionRange]] = []  # heap of partitions still held
    held = held_max = peak = 0
    for j, job in enumerate(jobs):
        peak = max(peak, held + sum(p.rows for p in job))
        for p in job:
            heapq.heappush(fetched, (p.ts_max, p.pid, p))
        if j + 1 == len(jobs):
            break
        bound = jobs[j + 1][0].ts_min  # never decreases from one job to the next
        while fetched and fetched[0][0] < bound:
            heapq.heappop(fetched)
        held = sum(
            -(-p.rows * (p.ts_max - max(bound, p.ts_min) + 1) // (p.ts_max - p.ts_min + 1))
            for _, _, p in fetched
        )
        held_max = max(held_max, held)
    return held_max, peak


def in_arrival_order(
    fetched: Iterator[list[pa.RecordBatch]],
    jobs: Sequence[Sequence[PartitionRange]],
    keys: Sequence[str],
    keep: Sequence[str],
) -> Iterator[pa.Table]:
    """Merge the jobs' rows (``fetched``: one list of record batches per job, in ``jobs``'
    order) into arrival order: steps 2 and 3 of the module doc.

    ``keys`` is the arrival key, most significant first (``ts`` first); ``keep`` the columns
    handed over. Raises :class:`~streamjoin.InputError` if a job's rows do not match what the
    check saw (a DataFrame that does not evaluate the same twice), since the order would be
    wrong.
    """
    held: pa.Table | None = None
    for j, batches in enumerate(fetched):
        job = jobs[j]
        rows = sum(b.num_rows for b in batches)
        expected = sum(p.rows for p in job)
        table = pa.Table.from_batches(batches) if batches else None
        if rows != expected or (
            rows and int(np.min(table.column("ts").to_numpy())) < min(p.ts_min for p in job)
        ):
            raise InputError(
                f"Spark partitions {[p.pid for p in job]} held {rows:,} rows, not the "
                f"{expected:,} the input check counted (or other ts): the DataFrame does not "
                "evaluate the same twice; cache it, or pass order='sort'"
            )
        if table is not None:
            held = table if held is None else pa.concat_tables([held, table])
        if held is None or not held.num_rows:
            continue
        cols = [held.column(k).to_numpy() for k in reversed(keys)]  # lexsort: last is primary
        order = np.lexsort(cols)
        ts = cols[-1][order]
        cut = len(ts) if j + 1 == len(jobs) else int(np.searchsorted(ts, jobs[j + 1][0].ts_min))
        if cut:
            yield held.take(order[:cut]).select(list(keep))
        held = held.take(order[cut:])


def fetch_jobs(
    fetch: Callable[[list[int]], list[pa.RecordBatch]], jobs: Sequence[Sequence[PartitionRange]]
) -> Iterator[list[pa.RecordBatch]]:
    """Run ``fetch`` (one Spark job) over each job's partitions, in order."""
    for job in jobs:
        yield fetch([p.pid for p in job])


def in_background(items: Iterator, depth: int = PREFETCH_JOBS) -> Iterator:
    """Iterate ``items`` in a background thread, up to ``depth`` items ahead of the consumer.

    Spark jobs and the driver's sorting then run while the consumer (the join, whose numba
    kernels release the GIL) works on earlier items. An error in the thread is raised here;
    closing the iterator early stops the thread after the item it is working on.
    """
    results: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def work() -> None:
        while not stop.is_set():
            try:
                item = (next(items, end), None)
            except BaseException as e:  # handed to the consumer
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
            if error is not None:
                raise error
            if item is end:
                return
            yield item
    finally:
        stop.set()
