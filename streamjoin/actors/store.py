"""The tuples a join core holds for one stream, in arrival order, addressed by ref."""

from __future__ import annotations

import numpy as np
from numba import njit

from streamjoin.batch import Batch

#: The int64 fields a store keeps of every tuple in one row of :attr:`TupleStore.rows`, in this
#: order: what checking and emitting a candidate pair reads (DESIGN §2 step 1).
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
    float64 ``(n_attrs, cap)``) are columns.
    """

    def __init__(self, n_attrs: int) -> None:
        cap = 16
        self.rows = _aligned_rows(cap)
        self.ts = np.empty(cap, dtype=np.int64)
        self.attrs = np.empty((n_attrs, cap), dtype=np.float64)
        self.base = 0  # ref of array row 0
        self.head = 0  # first live row
        self.tail = 0  # one past the last row

    def __len__(self) -> int:
        return self.tail - self.head

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + self.ts.nbytes + self.attrs.nbytes

    def append(self, batch: Batch, pos: np.ndarray) -> np.ndarray:
        """Store the tuples of ``batch`` at positions ``pos``; returns their refs.
        O(len(pos)), amortised (see :meth:`_make_room`)."""
        n = len(pos)
        if self.tail + n > len(self.ts):
            self._make_room(n)
        t = self.tail
        _gather_rows(
            self.rows,
            self.ts,
            self.attrs,
            t,
            batch.seq,
            batch.idx,
            batch.lo_idx,
            batch.ingest_ns,
            batch.ts,
            batch.attrs,
            pos,
        )
        self.tail = t + n
        return np.arange(self.base + t, self.base + t + n, dtype=np.int64)

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
            attrs[:, :live] = self.attrs[:, h:t]
            self.rows, self.ts, self.attrs = rows, ts, attrs
        else:  # 1-d copies: numpy moves overlapping 1-d ranges like memmove, no temporary
            flat, width = self.rows.reshape(-1), self.rows.shape[1]
            flat[: live * width] = flat[h * width : t * width]
            self.ts[:live] = self.ts[h:t]
            for row in self.attrs:
                row[:live] = row[h:t]
        self.base += h
        self.head, self.tail = 0, live

    def expire(self, idx_bound: int) -> int:
        """Drop tuples with ``idx < idx_bound``; returns the first live ref. O(log n)."""
        self.head = self.rows_from(idx_bound)
        return self.base + self.head

    def rows_from(self, idx_bound: int) -> int:
        """First live row whose ``idx >= idx_bound``. O(log n)."""
        return _first_row(self.rows, self.head, self.tail, idx_bound)

    def batch(self, start: int, end: int, stream: int) -> Batch:
        """Rows ``[start, end)`` as a new Batch of ``stream`` (copies)."""
        cols = {name: self.rows[start:end, c].copy() for c, name in enumerate(ROW_FIELDS)}
        n = end - start
        return Batch(
            stream=np.full(n, stream, dtype=np.int8),
            ts=self.ts[start:end].copy(),
            attrs=self.attrs[:, start:end].copy(),
            **cols,
        )


@njit(cache=True, nogil=True)
def _gather_rows(rows, ts, attrs, at, seq, idx, lo_idx, ingest_ns, src_ts, src_attrs, pos):
    """Row ``at + k`` := the tuple at batch position ``pos[k]``, for each ``k``."""
    for k in range(pos.shape[0]):
        p = pos[k]
        rows[at + k, SEQ] = seq[p]
        rows[at + k, IDX] = idx[p]
        rows[at + k, LO_IDX] = lo_idx[p]
        rows[at + k, INGEST_NS] = ingest_ns[p]
        ts[at + k] = src_ts[p]
    for a in range(attrs.shape[0]):
        for k in range(pos.shape[0]):
            attrs[a, at + k] = src_attrs[a, pos[k]]


@njit(cache=True, nogil=True)
def _first_row(rows, start, stop, idx_bound):
    """First row in ``[start, stop)`` with ``idx >= idx_bound`` (``idx`` is non-decreasing)."""
    while start < stop:
        mid = (start + stop) >> 1
        if rows[mid, IDX] < idx_bound:
            start = mid + 1
        else:
            stop = mid
    return start
