"""The tuples a join core holds for one stream, in arrival order, addressed by ref."""

from __future__ import annotations

import numpy as np
from numba import njit

from streamjoin.batch import Batch

#: The int64 columns a store keeps of every tuple (besides the join attributes).
COLUMNS = ("seq", "idx", "lo_idx", "ts", "ingest_ns")


class TupleStore:
    """Append-only columnar store of one stream's tuples at one join core.

    A tuple's *ref* is its absolute position in this store: int64, increasing, never reused,
    which is what the window indexes hold. Array row of a ref = ``ref - base``. Tuples arrive
    in ``idx`` order, so expiry (``idx`` below a bound) always drops a prefix.
    """

    def __init__(self, n_attrs: int) -> None:
        cap = 16
        for name in COLUMNS:
            setattr(self, name, np.empty(cap, dtype=np.int64))
        self.attrs = np.empty((n_attrs, cap), dtype=np.float64)
        self.base = 0  # ref of array row 0
        self.head = 0  # first live row
        self.tail = 0  # one past the last row

    def __len__(self) -> int:
        return self.tail - self.head

    @property
    def nbytes(self) -> int:
        return self.attrs.nbytes + sum(getattr(self, name).nbytes for name in COLUMNS)

    def append(self, batch: Batch, pos: np.ndarray) -> np.ndarray:
        """Store the tuples of ``batch`` at positions ``pos``; returns their refs."""
        n = len(pos)
        if self.tail + n > len(self.seq):
            self._make_room(n)
        t = self.tail
        _gather_rows(
            (self.seq, self.idx, self.lo_idx, self.ts, self.ingest_ns), self.attrs, t,
            (batch.seq, batch.idx, batch.lo_idx, batch.ts, batch.ingest_ns), batch.attrs, pos,
        )  # fmt: skip
        self.tail = t + n
        return np.arange(self.base + t, self.base + t + n, dtype=np.int64)

    def _make_room(self, n: int) -> None:
        """Move the live rows to the front, into larger arrays if they would be half full.

        Compacting in place reuses memory the process already touched: fresh arrays cost a
        page fault per 4 KiB written, which at a window of 2**20 was most of ``append``'s
        time. The live rows then never overlap their new place (the arrays are at most half
        full after compaction, so ``head >= live``).
        """
        live = self.tail - self.head
        cap = len(self.seq)
        h, t = self.head, self.tail
        if live + n <= cap // 2:
            for name in COLUMNS:
                col = getattr(self, name)
                col[:live] = col[h:t]
            self.attrs[:, :live] = self.attrs[:, h:t]
        else:
            while live + n > cap // 2:
                cap *= 2
            for name in COLUMNS:
                new = np.empty(cap, dtype=np.int64)
                new[:live] = getattr(self, name)[h:t]
                setattr(self, name, new)
            attrs = np.empty((self.attrs.shape[0], cap), dtype=np.float64)
            attrs[:, :live] = self.attrs[:, h:t]
            self.attrs = attrs
        self.base += h
        self.head, self.tail = 0, live

    def expire(self, idx_bound: int) -> int:
        """Drop tuples with ``idx < idx_bound``; returns the first live ref."""
        self.head += int(np.searchsorted(self.idx[self.head : self.tail], idx_bound, side="left"))
        return self.base + self.head

    def rows_from(self, idx_bound: int) -> int:
        """First live row whose ``idx >= idx_bound``."""
        live = self.idx[self.head : self.tail]
        return self.head + int(np.searchsorted(live, idx_bound, side="left"))

    def batch(self, start: int, end: int, stream: int) -> Batch:
        """Rows ``[start, end)`` as a new Batch of ``stream`` (copies)."""
        cols = {name: getattr(self, name)[start:end].copy() for name in COLUMNS}
        n = end - start
        return Batch(stream=np.full(n, stream, dtype=np.int8), attrs=self.attrs[:, start:end].copy(),
                     **cols)  # fmt: skip


@njit(cache=True, nogil=True)
def _gather_rows(dst, dst_attrs, at, src, src_attrs, pos):
    """``dst[c][at + k] = src[c][pos[k]]`` for each int64 column ``c`` and the attribute rows."""
    for c in range(len(dst)):
        d, s = dst[c], src[c]
        for k in range(pos.shape[0]):
            d[at + k] = s[pos[k]]
    for a in range(dst_attrs.shape[0]):
        for k in range(pos.shape[0]):
            dst_attrs[a, at + k] = src_attrs[a, pos[k]]
