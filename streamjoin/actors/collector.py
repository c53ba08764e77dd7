"""The collector: receives result pairs, stamps their latency, keeps pairs or just counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from streamjoin.actors.base import WARMED, ActorConfig, Clock, Logic, RunSettings
from streamjoin.batch import PairBatch, concat_pairs
from streamjoin.modes import Collect
from streamjoin.query import Query


class LatencyHistogram:
    """Log-bucketed latency histogram (64 buckets per power of two, ≈1.1% resolution).

    Keeps percentiles for runs that keep no pairs; memory is fixed (64 · 64 buckets).
    """

    PER_OCTAVE = 64

    def __init__(self) -> None:
        self.counts = np.zeros(64 * self.PER_OCTAVE, dtype=np.int64)
        self.max = 0

    def add(self, latency_ns: np.ndarray) -> None:
        if len(latency_ns):
            self.max = max(self.max, _add_latencies(self.counts, latency_ns, self.PER_OCTAVE))

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def percentile(self, q: float) -> float:
        """Latency (ns) at percentile ``q`` in [0, 100]: the upper edge of its bucket."""
        total = self.total
        if total == 0:
            return float("nan")
        rank = max(1, int(np.ceil(q / 100 * total)))
        b = int(np.searchsorted(np.cumsum(self.counts), rank))
        return min(2.0 ** ((b + 1) / self.PER_OCTAVE), float(self.max))


@njit(cache=True, nogil=True)
def _add_latencies(counts, latency_ns, per_octave):
    """Count each latency in bucket ``floor(log2(max(v, 1)) · per_octave)``; returns the
    largest. Pairs of one batch share their latency mostly, so the bucket of a repeated value
    is reused."""
    top = latency_ns[0]
    last, b = -1, 0
    for v in latency_ns:
        if v != last:
            last = v
            b = min(int(np.floor(np.log2(float(max(v, 1))) * per_octave)), counts.shape[0] - 1)
        counts[b] += 1
        top = max(top, v)
    return top


@dataclass(frozen=True)
class CollectorConfig(ActorConfig):
    """The collector node: keeps the run's pairs (or counts them, ``collect="count"``)."""

    role = "collector"
    #: The pairs arrive in order when the run is ordered (one core emits them in order: a
    #: ``single`` or ``shared_index`` layout): nothing is left to sort at the end.
    in_order: bool = False

    def build(self, query: Query, settings: RunSettings, clock: Clock | None) -> Collector:
        collector = Collector(settings.collect, clock, self.in_order, query.how != "inner")
        collector.warm()
        return collector


class Collector(Logic):
    """Sink of the result stream.

    Latency of a pair = arrival here − max(ingest time of r, ingest time of s) (docs/design.md §1,
    DP-Join Def. 3), read from ``clock`` (wall or virtual nanoseconds).

    Parameters
    ----------
    collect : {"pairs", "count"}
        ``"pairs"`` keeps every pair with its latency; ``"count"`` keeps a count and a latency
        histogram only, for runs too large to hold.
    clock : callable returning int nanoseconds
    in_order : bool
        The pairs of an ordered run arrive in order (:class:`CollectorConfig`); otherwise
        :meth:`arrays` sorts them at the end.
    outer : bool
        An outer join (``Query.how``): the emitter also sends, on port ``unmatched``, the
        rows of the sides the join keeps as ``(seq, -1)`` or ``(-1, seq)``. The collector
        notes every row a pair holds, and when the input ends (:meth:`on_eof`: every pair
        has arrived) it returns each noted row that none held, once, its latency counted
        from its arrival to then. Exact on every layout, because no join actor needs to know
        whether a tuple met a partner (SplitJoin's cores, a grid's cells, PanJoin's workers,
        SPO's stages and a handshake chain each see a part of its partners); the price is a
        byte per input row and 24 per kept row until the end, and the rows leave then,
        not when they leave the other stream's window.

    Counter (``COUNTERS``): pairs received (with an outer join's rows without a partner).
    """

    cost_group = "collector"
    COUNTERS: ClassVar[tuple[str, ...]] = ("pairs",)

    def __init__(
        self,
        collect: Collect = "pairs",
        clock: Callable[[], int] | None = None,
        in_order: bool = False,
        outer: bool = False,
    ) -> None:
        if collect not in ("pairs", "count"):
            raise ValueError(f"collect must be 'pairs' or 'count', got {collect!r}")
        self.collect = collect
        self.clock = clock
        self.in_order = in_order
        self.count = 0
        self.histogram = LatencyHistogram()
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self._r: list[np.ndarray] = []
        self._s: list[np.ndarray] = []
        self._lat: list[np.ndarray] = []
        self.outer = outer
        #: outer join: whether a pair held the row of each seq, and the kept sides' rows
        self._matched = np.zeros(0, dtype=np.bool_)
        self._candidates: list[PairBatch] = []
        self.unmatched = 0

    def on_batch(self, port: str, pairs: PairBatch) -> list:
        if self.outer:
            if port == "unmatched":
                self._candidates.append(pairs)
                return []
            self._note_matched(pairs)
        self._record(pairs)
        return []

    def _note_matched(self, pairs: PairBatch) -> None:
        if not len(pairs):
            return
        top = max(int(pairs.r.max()), int(pairs.s.max()))
        if top >= len(self._matched):
            grown = np.zeros(max(top + 1, 2 * len(self._matched)), dtype=np.bool_)
            grown[: len(self._matched)] = self._matched
            self._matched = grown
        self._matched[pairs.r] = True
        self._matched[pairs.s] = True

    def on_eof(self) -> list:
        """The input has ended and every pair has arrived: an outer join's kept rows that
        no pair held leave now, each once."""
        if not self.outer or not self._candidates:
            return []
        every = concat_pairs(self._candidates)
        self._candidates = []
        if every is None:
            return []
        # each row once, in row order: the emitter sends each once, in order, on one edge
        seq = np.maximum(every.r, every.s)
        held = np.zeros(len(seq), dtype=np.bool_)
        inside = seq < len(self._matched)
        held[inside] = self._matched[seq[inside]]
        alone = np.flatnonzero(~held)
        rows = PairBatch(every.r[alone], every.s[alone], every.ingest_ns[alone])
        self.unmatched += len(rows)
        self.in_order = False  # they leave after every pair: arrays() sorts an ordered run
        self._record(rows)
        return []

    def _record(self, pairs: PairBatch) -> None:
        now = self.clock() if self.clock else 0
        latency = now - pairs.ingest_ns
        self.count += len(pairs)
        self.histogram.add(latency)
        if self.first_ns is None:
            self.first_ns = now
        self.last_ns = now
        if self.collect == "pairs":
            self._r.append(pairs.r)
            self._s.append(pairs.s)
            self._lat.append(latency)

    def counters(self) -> tuple[int]:
        return (self.count,)

    def warm(self) -> None:
        """Load the histogram kernel (numba's disk cache) on a throwaway histogram."""
        WARMED.once("collector", lambda: LatencyHistogram().add(np.ones(1, dtype=np.int64)))

    def arrays(self, ordered: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Kept pairs ``(r, s, latency_ns)``; with ``ordered``, sorted by the later tuple's row
        (then the earlier one's), the order tuple-at-a-time processing emits them in (as
        they arrived, if they arrive ``in_order``)."""
        if not self._r:
            z = np.empty(0, dtype=np.int64)
            return z, z.copy(), z.copy()
        r, s, lat = (np.concatenate(x) for x in (self._r, self._s, self._lat))
        if ordered and not self.in_order:
            order = np.lexsort((np.minimum(r, s), np.maximum(r, s)))
            r, s, lat = r[order], s[order], lat[order]
        return r, s, lat
