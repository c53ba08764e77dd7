"""The columnar :class:`Batch` actors exchange, and the pairs they send on
(:class:`PairBatch`); the input they are stamped from is :mod:`streamjoin.validation`'s."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np


def columns_at(attrs: np.ndarray, index: np.ndarray | slice) -> np.ndarray:
    """The columns ``index`` (positions, a boolean mask or a slice) of a ``(k, n)`` matrix,
    C-contiguous. ``np.take`` along the columns: six times as fast as ``attrs[:, index]``
    for a few rows (numpy's two-dimensional fancy indexing)."""
    if isinstance(index, slice):
        return np.ascontiguousarray(attrs[:, index])
    if index.dtype == np.bool_:
        index = np.flatnonzero(index)
    return np.take(attrs, index, axis=1)


class TupleColumns(NamedTuple):
    """A batch's per-tuple columns as kernels take them (:meth:`Batch.columns`)."""

    #: int64 (n,): global arrival number
    seq: np.ndarray
    #: int64 (n,): rank within its own stream
    idx: np.ndarray
    #: int64 (n,): first idx of the other stream in the tuple's window
    lo_idx: np.ndarray
    #: int64 (n,): when the source handed the tuple over (monotonic ns)
    ingest_ns: np.ndarray
    #: int64 (n,): event time
    ts: np.ndarray
    #: float64 (k, n): join attributes, images then residuals
    attrs: np.ndarray


@dataclass
class Batch:
    """Columnar batch of tuples exchanged between actors (docs/design.md §2).

    All arrays have one entry per tuple, in ``seq`` order. ``lo_idx`` is the first ``idx`` of
    the opposite stream (own stream for a self-join) that is in this tuple's window at its
    arrival, for count and time windows alike, so any core checks window membership as
    ``y.idx >= x.lo_idx``. ``horizon[Y]`` is a bound stamped by the emitter: no tuple emitted
    after this batch will need a tuple of stream Y with ``idx < horizon[Y]``. ``store`` tells
    the receiving join core whether to keep the batch's tuples (False: probe only, as at the
    cores of a split join that do not own the batch).
    """

    seq: np.ndarray  # int64, global arrival number (input row)
    stream: np.ndarray  # int8, 0 = R, 1 = S
    idx: np.ndarray  # int64, rank within its own stream
    ts: np.ndarray  # int64, event time
    ingest_ns: np.ndarray  # int64, when the source handed the tuple over (monotonic ns)
    lo_idx: np.ndarray  # int64, first idx of the other stream in the window
    attrs: np.ndarray  # float64 (k, n), join attributes
    horizon: np.ndarray = field(default_factory=lambda: np.zeros(2, dtype=np.int64))
    store: bool = True

    def __len__(self) -> int:
        return len(self.seq)

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f).nbytes for f in _ARRAYS) + self.horizon.nbytes

    def take(self, index: np.ndarray | slice) -> Batch:
        """The tuples at ``index`` (integer positions, a boolean mask, or a slice: then the
        one-dimensional columns are views), order kept; per-row horizons (``(2, n)``, an
        emitter's pending rows) are taken with their rows."""
        horizon = self.horizon[:, index] if self.horizon.ndim == 2 else self.horizon.copy()
        return Batch(
            self.seq[index],
            self.stream[index],
            self.idx[index],
            self.ts[index],
            self.ingest_ns[index],
            self.lo_idx[index],
            attrs=columns_at(self.attrs, index),
            horizon=horizon,
            store=self.store,
        )

    def columns(self) -> TupleColumns:
        """The per-tuple columns a kernel reads, as one argument."""
        return TupleColumns(self.seq, self.idx, self.lo_idx, self.ingest_ns, self.ts, self.attrs)

    def freeze(self) -> Batch:
        """Mark every array read-only (in place) and return self.

        Batches that crossed a process boundary (Ray's object store) arrive read-only, and numba
        compiles read-only and writable arguments separately; join actors freeze what they
        receive so each kernel has one signature on every executor.
        """
        for name in _ARRAYS:
            getattr(self, name).setflags(write=False)
        return self

    def with_store(self, store: bool) -> Batch:
        """The same tuples (arrays shared, not copied) with another ``store`` flag."""
        return dataclasses.replace(self, store=store)

    @staticmethod
    def concat(batches: list[Batch]) -> Batch:
        """Tuples of ``batches`` one after another; the last horizon wins."""

        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(b, name) for b in batches])

        return Batch(
            cat("seq"),
            cat("stream"),
            cat("idx"),
            cat("ts"),
            cat("ingest_ns"),
            cat("lo_idx"),
            attrs=np.concatenate([b.attrs for b in batches], axis=1),
            horizon=batches[-1].horizon.copy(),
        )


_ARRAYS = ("seq", "stream", "idx", "ts", "ingest_ns", "lo_idx", "attrs")


@dataclass
class PairBatch:
    """Output pairs of one actor step: input row numbers and the later ingest time."""

    r: np.ndarray  # int64
    s: np.ndarray  # int64
    ingest_ns: np.ndarray  # int64, max(ingest of r, ingest of s)

    def __len__(self) -> int:
        return len(self.r)

    @staticmethod
    def empty() -> PairBatch:
        z = np.empty(0, dtype=np.int64)
        return PairBatch(z, z.copy(), z.copy())


def concat_pairs(parts: list[PairBatch]) -> PairBatch | None:
    """One PairBatch of all non-empty ``parts``, or None."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return PairBatch(
        *(np.concatenate([getattr(p, f) for p in parts]) for f in ("r", "s", "ingest_ns"))
    )


#: The port a logic names for a :class:`Marker` it sends: executors send a marker on it to
#: every successor (a logic that passes markers itself names the port it sends one on).
MARKER_PORT = "marker"


@dataclass(frozen=True)
class Marker:
    """A progress marker (Flink's and Chandy–Lamport's: a message that every edge carries in
    order with the data). The emitter sends the ``number``-th after the batches before it;
    a node passes a marker on once it has come on each of its incoming edges and the node has
    handled every message before it (sending the output of any batch it held,
    ``held_batches``), so when the collector has it from every edge, every pair of those
    batches has arrived. An outer join's rows leave by it
    (:meth:`~streamjoin.actors.collector.Collector.on_marker`): ``kept`` is how many of its
    rows the emitter had sent the collector before the marker (more may have come by the
    time the marker has come on every edge: they wait for the next), and ``low`` the lowest
    ``seq`` of a kept row it had not sent yet (the collector forgets rows below that no pair
    can hold any more); ``reach`` is the lowest ``seq`` a pair of the batches after the
    marker can hold (the collector forgets the residual functions' columns below it)."""

    number: int
    kept: int = 0
    low: int = 0
    reach: int = 0

    def __len__(self) -> int:
        return 0
