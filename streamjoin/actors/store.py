"""The tuples a join core holds for one stream, in arrival order, addressed by ref."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numba import njit

from streamjoin.batch import Batch
from streamjoin.indexes.blocks.no_refcount import njit_no_refcount

#: The int64 fields a store keeps of every tuple in one row of :attr:`TupleStore.rows`, in this
#: order: what checking and emitting a candidate pair reads (docs/design.md §2 step 1).
ROW_FIELDS = ("seq", "idx", "lo_idx", "ingest_ns")
SEQ, IDX, LO_IDX, INGEST_NS = range(len(ROW_FIELDS))
#: Bytes between rows: a row never straddles two 64-byte cache lines.
_ROW_BYTES = 8 * len(ROW_FIELDS)


def _aligned_rows(cap: int) -> np.ndarray:
    """An uninitialised int64 ``(cap, len(ROW_FIELDS))`` array starting on a 64-byte line."""
    width = len(ROW_FIELDS)
    buf = np.empty(cap * width + 8, dtype=np.int64)
    skip = (-buf.ctypes.data % 64) // 8
    return buf[skip : skip + cap * width].reshape(cap, width)


class TupleStore:
    """Append-only store of one stream's tuples at one join core.

    A tuple's *ref* is its absolute position in this store: int64, increasing, never reused,
    which is what the window indexes hold. Array row of a ref = ``ref - base``. Tuples arrive
    in ``idx`` order, so expiry (``idx`` below a bound) always drops a prefix.

    Layout: :attr:`rows` holds the :data:`ROW_FIELDS` of a tuple side by side in 32 bytes, so a
    candidate the index returns costs one cache miss, not one per field (window probes visit
    stored tuples in key order, i.e. at random); ``ts`` and the join attributes (``attrs``,
    float64 ``(n_attrs, cap)``: images, then residuals, as in
    :class:`~streamjoin.validation.Columns`) are columns.

    A residual row is written only once it is needed: while every tuple stored has the same
    residual in it (NaN: all floats; 0: all integers within ``2**52``), the row is left
    unwritten and that value remembered, which spares every append and compaction the copy.
    It is written out (:meth:`keep_residuals`) when a tuple with another residual arrives, and
    for all rows when the join starts deciding conditions on exact integers, the only time a
    kernel reads it.
    """

    def __init__(self, n_attrs: int) -> None:
        cap = 16
        self.rows = _aligned_rows(cap)
        self.ts = np.empty(cap, dtype=np.int64)
        self.attrs = np.empty((n_attrs, cap), dtype=np.float64)
        self.base = 0  # ref of array row 0
        self.head = 0  # first live row
        self.tail = 0  # one past the last row
        k = n_attrs // 2
        #: rows of ``attrs`` kept up to date: the images always, a residual once written
        self._kept = np.arange(n_attrs) < k
        #: for a residual row not kept, the value all its live rows have (None: no row yet)
        self._fill: list[float | None] = [None] * k

    def keep_residuals(self, rows: Iterable[int] | None = None) -> None:
        """Write out the residual rows not kept yet (of attributes ``rows``; default all), so
        that ``attrs`` holds every live tuple's residual from now on."""
        k = len(self._fill)
        for a in range(k) if rows is None else rows:
            if not self._kept[k + a]:
                self.attrs[k + a, self.head : self.tail] = self._fill[a]
                self._kept[k + a] = True

    def _note_residuals(self, src: np.ndarray, pos: np.ndarray) -> None:
        """Before storing the tuples at ``pos`` of a batch's ``attrs`` ``src``: keep each
        residual row whose values there differ from what its unwritten rows hold."""
        k = len(self._fill)
        for a in range(k):
            if self._kept[k + a] or not len(pos):
                continue
            if self._fill[a] is None or self.head == self.tail:
                self._fill[a] = float(src[k + a, pos[0]])
            if not _all_equal(src[k + a], pos, self._fill[a]):
                self.keep_residuals([a])

    def __len__(self) -> int:
        return self.tail - self.head

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + self.ts.nbytes + self.attrs.nbytes

    def append(self, batch: Batch, pos: np.ndarray) -> np.ndarray:
        """Store the tuples of ``batch`` at positions ``pos``; returns their refs.
        O(len(pos)), amortised (see :meth:`_make_room`)."""
        n = len(pos)
        self._note_residuals(batch.attrs, pos)
        if self.tail + n > len(self.ts):
            self._make_room(n)
        t = self.tail
        _gather_rows(self.rows, self.ts, self.attrs, self._kept, t, batch.columns(), pos)
        self.tail = t + n
        return np.arange(self.base + t, self.base + t + n, dtype=np.int64)

    def reserve(self, n: int) -> None:
        """Room for ``n`` more rows, so that appending them moves nothing (readers on other
        threads hold the arrays meanwhile)."""
        if self.tail + n > len(self.ts):
            self._make_room(n)

    def _make_room(self, n: int) -> None:
        """Move the live rows to the front, into arrays twice as large if they would fill more
        than three quarters.

        Compacting in place reuses memory the process already touched: a fresh page costs a
        fault and the kernel zeroes it first, which at a window of 2**20 was most of
        ``append``'s time. A window that stays the same size therefore settles at arrays of
        about twice its size, compacted every ``cap - live`` appends (amortised at most three
        rows copied per row appended), and touches no fresh memory after that.
        """
        live = self.tail - self.head
        cap = len(self.ts)
        h, t = self.head, self.tail
        if 4 * (live + n) > 3 * cap:
            while 4 * (live + n) > 3 * cap:
                cap *= 2
            rows = _aligned_rows(cap)
            rows[:live] = self.rows[h:t]
            ts = np.empty(cap, dtype=np.int64)
            ts[:live] = self.ts[h:t]
            attrs = np.empty((self.attrs.shape[0], cap), dtype=np.float64)
            for r in np.flatnonzero(self._kept):
                attrs[r, :live] = self.attrs[r, h:t]
            self.rows, self.ts, self.attrs = rows, ts, attrs
        else:  # 1-d copies: numpy moves overlapping 1-d ranges like memmove, no temporary
            flat, width = self.rows.reshape(-1), self.rows.shape[1]
            flat[: live * width] = flat[h * width : t * width]
            self.ts[:live] = self.ts[h:t]
            for r in np.flatnonzero(self._kept):
                row = self.attrs[r]
                row[:live] = row[h:t]
        self.base += h
        self.head, self.tail = 0, live

    def expire(self, idx_bound: int) -> int:
        """Drop tuples with ``idx < idx_bound``; returns the first live ref. O(log n)."""
        self.head = self.rows_from(idx_bound)
        return self.base + self.head

    def rows_from(self, idx_bound: int) -> int:
        """First live row whose ``idx >= idx_bound``. O(log n)."""
        return first_row(self.rows, self.head, self.tail, idx_bound)

    def batch(self, start: int, end: int, stream: int) -> Batch:
        """Rows ``[start, end)`` as a new Batch of ``stream`` (copies)."""
        rows = self.rows[start:end]
        n = end - start
        return Batch(
            seq=rows[:, SEQ].copy(),
            stream=np.full(n, stream, dtype=np.int8),
            idx=rows[:, IDX].copy(),
            ts=self.ts[start:end].copy(),
            ingest_ns=rows[:, INGEST_NS].copy(),
            lo_idx=rows[:, LO_IDX].copy(),
            attrs=self.attrs_of(start, end),
        )

    def attrs_of(self, start: int, end: int) -> np.ndarray:
        """The attributes of rows ``[start, end)`` (live ones), residuals included whether
        written out or not (a copy)."""
        attrs = self.attrs[:, start:end].copy()
        k = len(self._fill)
        for a, fill in enumerate(self._fill):
            if not self._kept[k + a]:
                attrs[k + a] = fill
        return attrs


@njit(cache=True, nogil=True)
def _all_equal(row, pos, value):
    """Whether ``row[pos]`` all equal ``value`` (NaN equals NaN here)."""
    nan = value != value
    for p in pos:
        v = row[p]
        if (v == v) == nan or (not nan and v != value):
            return False
    return True


@njit(cache=True, nogil=True)
def _gather_rows(rows, ts, attrs, kept, at, src, pos):
    """Row ``at + k`` := the tuple at position ``pos[k]`` of a batch's columns ``src``
    (:class:`~streamjoin.batch.TupleColumns`), for each ``k``; of ``attrs`` only the rows
    ``kept``."""
    seq, idx, lo_idx, ingest_ns, src_ts, src_attrs = src
    for k in range(pos.shape[0]):
        p = pos[k]
        rows[at + k, SEQ] = seq[p]
        rows[at + k, IDX] = idx[p]
        rows[at + k, LO_IDX] = lo_idx[p]
        rows[at + k, INGEST_NS] = ingest_ns[p]
        ts[at + k] = src_ts[p]
    for a in range(attrs.shape[0]):
        if not kept[a]:
            continue
        for k in range(pos.shape[0]):
            attrs[a, at + k] = src_attrs[a, pos[k]]


@njit_no_refcount
def first_row(rows, start, stop, idx_bound):
    """First row in ``[start, stop)`` with ``idx >= idx_bound`` (``idx`` is non-decreasing).
    Allocates nothing: compiled without reference counting, so that a kernel's loop calls
    it without an atomic increment and decrement of ``rows`` each time."""
    while start < stop:
        mid = (start + stop) >> 1
        if rows[mid, IDX] < idx_bound:
            start = mid + 1
        else:
            stop = mid
    return start
