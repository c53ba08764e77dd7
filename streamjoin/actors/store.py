"""The tuples a join core holds for one stream, in arrival order, addressed by ref."""

from __future__ import annotations

import numpy as np

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
        for name in COLUMNS:
            getattr(self, name)[t : t + n] = getattr(batch, name)[pos]
        self.attrs[:, t : t + n] = batch.attrs[:, pos]
        self.tail = t + n
        return np.arange(self.base + t, self.base + t + n, dtype=np.int64)

    def _make_room(self, n: int) -> None:
        live = self.tail - self.head
        cap = len(self.seq)
        while live + n > cap // 2:
            cap *= 2
        h, t = self.head, self.tail
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
