"""Event time: input out of ``ts`` order under a lateness bound (docs/design.md §1).

With ``Query(..., lateness=L)``, before row *i* (arrival order, both streams together) the
*watermark* is ``max(ts of the rows before i) - L``, and row *i* is *late* if its ``ts`` lies
below it. The result is the join of the rows that are not late, stably sorted by ``ts`` (ties
keep their arrival order), with pairs reported by the rows' original numbers.

Two parts make that so, on every backend and topology:

- :class:`Watermark`, in the driver before any executor sees a row: it finds the late rows
  (an :class:`~streamjoin.batch.InputError` naming the first with ``on_late="error"``, else
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

from streamjoin.batch import Columns, InputError

_INT64_MIN = int(np.iinfo(np.int64).min)

#: What ``on_late`` may say: raise on the first late row, or leave late rows out and list them.
ON_LATE = ("error", "drop")


def take(cols: Columns, rows: np.ndarray | slice) -> Columns:
    """The rows ``rows`` (indices or a mask) of ``cols``, in that order."""
    return Columns(cols.stream[rows], cols.ts[rows], cols.attrs[:, rows])


def concat(parts: list[Columns]) -> Columns:
    """``parts`` one after another."""
    if len(parts) == 1:
        return parts[0]
    return Columns(
        np.concatenate([p.stream for p in parts]),
        np.concatenate([p.ts for p in parts]),
        np.concatenate([p.attrs for p in parts], axis=1),
    )


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


class ReorderBuffer:
    """Rows held until the watermark passes them, released in stable ``ts`` order with the
    time each arrived (module docstring). The rows it is given are never late (the
    :class:`Watermark` in the driver took those out), so the largest ``ts`` it has seen is the
    input's.

    The held rows are a few runs sorted by ``ts``, oldest arrivals first, each at least twice
    the size of the next (as the levels of a log-structured merge): a chunk becomes a run, the
    newest runs merge while the invariant is broken, and a release takes a prefix of each run
    (a view, no copy). So a row is copied O(log(held / chunk)) times however many rows the
    lateness holds back, not once per chunk.
    """

    def __init__(self, lateness: int) -> None:
        self.lateness = int(lateness)
        self.max_ts = _INT64_MIN
        self._runs: list[tuple[Columns, np.ndarray]] = []  # (rows, arrival ns), oldest first
        self.copied = 0  #: rows copied by sorts and merges (the simulator charges them)

    def __len__(self) -> int:
        return sum(len(rows) for rows, _ in self._runs)

    def push(self, cols: Columns, arrived_ns: int) -> tuple[Columns, np.ndarray] | None:
        """Take a chunk that arrived at ``arrived_ns``; return the rows now released (in
        stable ``ts`` order) and the time each arrived, or None when none is."""
        if not len(cols):
            return None
        order = np.argsort(cols.ts, kind="stable")
        self._runs.append((take(cols, order), np.full(len(cols), arrived_ns, dtype=np.int64)))
        self.copied += len(cols)
        while len(self._runs) > 1 and len(self._runs[-2][0]) < 2 * len(self._runs[-1][0]):
            newer = self._runs.pop()
            self._runs[-1] = self._merged([self._runs[-1], newer])
        self.max_ts = max(self.max_ts, int(cols.ts.max()))
        watermark = self.max_ts - self.lateness
        if watermark < _INT64_MIN:
            return None
        out, kept = [], []
        for rows, arrived in self._runs:
            cut = int(np.searchsorted(rows.ts, np.int64(watermark), side="right"))
            if cut:
                out.append((take(rows, slice(0, cut)), arrived[:cut]))
            if cut < len(rows):
                kept.append((take(rows, slice(cut, None)), arrived[cut:]))
        self._runs = kept
        return self._merged(out) if out else None

    def flush(self) -> tuple[Columns, np.ndarray] | None:
        """Every row still held (the end of input), in stable ``ts`` order; None if none."""
        runs, self._runs = self._runs, []
        return self._merged(runs) if runs else None

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
