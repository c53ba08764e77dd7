"""Event time: input out of ``ts`` order under a lateness bound (docs/design.md §1).

With ``Query(..., lateness=L)``, before row *i* (arrival order, both streams together) the
*watermark* is ``max(ts of the rows before i) - L``, and row *i* is *late* if its ``ts`` lies
below it. The result is the join of the rows that are not late, stably sorted by ``ts`` (ties
keep their arrival order), with pairs reported by the rows' original numbers.

Two parts make that so, on every backend and topology:

- :class:`Watermark`, in the driver before any executor sees a row: it finds the late rows
  (an :class:`~streamjoin.validation.InputError` naming the first with ``on_late="error"``, else
  left out and listed), and remembers the ``ts`` of the rows it keeps, from which the run maps
  the join's row numbers back to the input's (:meth:`Watermark.row_numbers`);
- :class:`ReorderBuffer`, in the emitter: it holds rows until the watermark passes them and
  releases them in stable ``ts`` order, each with the time it arrived, so latency counts the
  wait. A row at or below the watermark can be released: every row still to come that is not
  late has a ``ts`` at or above it, and comes later in arrival order.

A quiet input holds rows back until more input moves the watermark, or until the end of input
releases them all (as a watermark does in Flink or Spark; ``max_delay`` bounds only the wait
in an open batch).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from streamjoin.batch import columns_at
from streamjoin.validation import Columns, InputError

_INT64_MIN = int(np.iinfo(np.int64).min)


def take(cols: Columns, rows: np.ndarray | slice) -> Columns:
    """The rows ``rows`` (indices or a mask) of ``cols``, in that order."""
    if isinstance(rows, slice):  # views
        return Columns(cols.stream[rows], cols.ts[rows], cols.attrs[:, rows])
    return Columns(cols.stream[rows], cols.ts[rows], columns_at(cols.attrs, rows))


def concat(parts: list[Columns]) -> Columns:
    """``parts`` one after another."""
    if len(parts) == 1:
        return parts[0]
    return Columns(
        np.concatenate([p.stream for p in parts]),
        np.concatenate([p.ts for p in parts]),
        np.concatenate([p.attrs for p in parts], axis=1),
    )


@njit(cache=True, nogil=True)
def order_and_max(ts: np.ndarray) -> tuple[bool, int]:
    """Whether ``ts`` (int64, not empty) never decreases, and its largest value: one pass."""
    top = ts[0]
    in_order = True
    for i in range(1, ts.shape[0]):
        if ts[i] < ts[i - 1]:
            in_order = False
        if ts[i] > top:
            top = ts[i]
    return in_order, top


def behind(ahead: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """``ahead - ts`` where ``ahead > ts``, exactly (uint64: the difference of two int64 can
    exceed int64), else 0."""
    gap = ahead.view(np.uint64) - ts.view(np.uint64)  # modulo 2**64: exact when ahead > ts
    return np.where(ahead > ts, gap, np.uint64(0))


class Watermark:
    """Late rows found, chunk by chunk, in arrival order (module docstring).

    Parameters
    ----------
    lateness : int
        ``L``, in ``ts`` units (>= 0).
    on_late : {"error", "drop"}
    keep_order : bool
        Keep the ``ts`` of every row that is not late (8 bytes a row), for
        :meth:`row_numbers`; a run that only counts its pairs needs none.
    """

    def __init__(self, lateness: int, on_late: str = "error", *, keep_order: bool = True) -> None:
        self.lateness = int(lateness)
        self.on_late = on_late
        self.keep_order = keep_order
        self.max_ts = _INT64_MIN  #: the largest ``ts`` so far (the int64 minimum before any)
        self.rows = 0  #: rows seen, late ones included
        self._kept_ts: list[np.ndarray] = []  # what row_numbers() needs (if keep_order)
        self._late: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.n_late = 0  #: rows left out as late

    def late(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each row of a chunk that comes next: whether it is late, and the largest ``ts``
        before it (int64; the int64 minimum before the first row)."""
        before = np.empty(len(ts), dtype=np.int64)
        if len(ts):
            before[0] = self.max_ts
            np.maximum.accumulate(np.maximum(ts[:-1], self.max_ts), out=before[1:])
        bound = np.uint64(min(self.lateness, 2**64 - 1))  # no gap of two int64 exceeds it
        return behind(before, ts) > bound, before

    def split(self, cols: Columns) -> Columns:
        """The rows of the next chunk that are not late; the late ones raise
        (``on_late="error"``: nothing of this chunk is kept) or are recorded."""
        if not len(cols):
            return cols
        in_order, top = order_and_max(cols.ts)
        if in_order and int(cols.ts[0]) >= self.max_ts - self.lateness:  # none can be late
            if self.keep_order:
                self._kept_ts.append(cols.ts)
            self.rows += len(cols)
            self.max_ts = max(self.max_ts, top)
            return cols
        late, before = self.late(cols.ts)
        first = self.rows
        if late.any():
            if self.on_late == "error":
                i = int(np.argmax(late))
                raise InputError(
                    f"row {first + i} is late: its ts {int(cols.ts[i])} lies below the "
                    f"watermark {int(before[i]) - self.lateness} (the largest ts before it, "
                    f"{int(before[i])}, minus lateness {self.lateness}); raise lateness= or "
                    "pass on_late='drop' to leave late rows out and list them"
                )
            rows = np.flatnonzero(late)
            self._late.append((first + rows, cols.stream[rows], cols.ts[rows]))
            self.n_late += len(rows)
            cols = take(cols, ~late)
        if self.keep_order:
            self._kept_ts.append(cols.ts)
        self.rows = first + len(late)
        if len(cols):
            self.max_ts = max(self.max_ts, int(cols.ts.max()))
        return cols

    def row_numbers(self) -> np.ndarray:
        """The input row number of each row in the order the join saw it (the kept rows
        stably sorted by ``ts``): int64, indexed by the join's row numbers."""
        if not self.keep_order:
            raise RuntimeError("this Watermark was made with keep_order=False")
        kept = np.ones(self.rows, dtype=bool)
        for rows, _, _ in self._late:
            kept[rows] = False
        rows = np.flatnonzero(kept)
        ts = np.concatenate(self._kept_ts) if self._kept_ts else np.empty(0, dtype=np.int64)
        return rows[np.argsort(ts, kind="stable")]

    def late_rows(self) -> pa.Table:
        """The rows left out as late: their input row numbers, ``stream`` and ``ts``."""
        parts = self._late or [(np.empty(0, np.int64), np.empty(0, np.int8), np.empty(0, np.int64))]
        return pa.table(
            {
                "row": np.concatenate([p[0] for p in parts]).astype(np.int64),
                "stream": np.concatenate([p[1] for p in parts]).astype(np.int8),
                "ts": np.concatenate([p[2] for p in parts]).astype(np.int64),
            }
        )


#: Runs of one level the reorder buffer merges into one run of the next (tiering, as in a
#: log-structured merge): a row is copied about ``log_T(held / chunk)`` times.
TIER = 8


class ReorderBuffer:
    """Rows held until the watermark passes them, released in stable ``ts`` order with the
    time each arrived (module docstring). The rows it is given are never late (the
    :class:`Watermark` in the driver took those out), so the largest ``ts`` it has seen is the
    input's.

    The held rows are runs sorted by ``ts``, oldest arrivals first: each chunk becomes a run
    (sorted if it is not already), and :data:`TIER` runs of one level merge into one of the
    next, so a row is copied O(log(held / chunk)) times however many rows the lateness holds
    back, and a release checks a few runs. A release takes a prefix of each run (a view) and
    merges those prefixes. A chunk in order that the watermark passes whole, with nothing
    held (``lateness=0`` on input in order), goes on as it is.
    """

    def __init__(self, lateness: int) -> None:
        self.lateness = int(lateness)
        self.max_ts = _INT64_MIN
        self._runs: list[tuple[Columns, np.ndarray, int]] = []  # (rows, arrival ns, level)
        self.copied = 0  #: rows copied by sorts and merges (the simulator charges them)

    def __len__(self) -> int:
        return sum(len(rows) for rows, _, _ in self._runs)

    def push(self, cols: Columns, arrived_ns: int) -> tuple[Columns, np.ndarray] | None:
        """Take a chunk that arrived at ``arrived_ns``; return the rows now released (in
        stable ``ts`` order) and the time each arrived, or None when none is."""
        n = len(cols)
        if not n:
            return None
        ts = cols.ts
        in_order, top = order_and_max(ts)
        self.max_ts = max(self.max_ts, top)
        if not in_order:
            cols = take(cols, np.argsort(ts, kind="stable"))
            self.copied += n
        arrived = np.full(n, arrived_ns, dtype=np.int64)
        bound = self.max_ts - self.lateness
        watermark = None if bound < _INT64_MIN else bound  # None: nothing can go yet
        if not self._runs:  # nothing held: this run alone decides
            cut = 0 if watermark is None else _cut(cols.ts, watermark)
            if cut < n:
                self._runs.append((take(cols, slice(cut, None)), arrived[cut:], 0))
            return (take(cols, slice(0, cut)), arrived[:cut]) if cut else None
        self._runs.append((cols, arrived, 0))
        while len(self._runs) >= TIER and all(
            run[2] == self._runs[-1][2] for run in self._runs[-TIER:]
        ):
            merged = self._merged([(rows, at) for rows, at, _ in self._runs[-TIER:]])
            level = self._runs[-1][2] + 1
            del self._runs[-TIER:]
            self._runs.append((*merged, level))
        if watermark is None:
            return None
        out, kept = [], []
        for rows, at, level in self._runs:
            cut = 0 if rows.ts[0] > watermark else _cut(rows.ts, watermark)
            if cut:
                out.append((take(rows, slice(0, cut)), at[:cut]))
            if cut < len(rows):
                kept.append((take(rows, slice(cut, None)), at[cut:], level))
        self._runs = kept
        return self._merged(out) if out else None

    def flush(self) -> tuple[Columns, np.ndarray] | None:
        """Every row still held (the end of input), in stable ``ts`` order; None if none."""
        runs, self._runs = self._runs, []
        return self._merged([(rows, at) for rows, at, _ in runs]) if runs else None

    def _merged(self, runs: list[tuple[Columns, np.ndarray]]) -> tuple[Columns, np.ndarray]:
        """Sorted runs, oldest arrivals first, as one run sorted by ``ts``: at equal ``ts`` the
        older run's rows first (a stable sort of their concatenation, which merges runs)."""
        if len(runs) == 1:
            return runs[0]
        rows = concat([r for r, _ in runs])
        arrived = np.concatenate([a for _, a in runs])
        order = np.argsort(rows.ts, kind="stable")
        self.copied += len(order)
        return take(rows, order), arrived[order]


def _cut(ts: np.ndarray, watermark: int) -> int:
    """How many rows of sorted ``ts`` lie at or below ``watermark``."""
    return int(np.searchsorted(ts, np.int64(watermark), side="right"))
