"""The collector: receives result pairs, stamps their latency, keeps pairs or just counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from streamjoin.actors.base import WARMED, ActorConfig, Clock, Logic, RunSettings
from streamjoin.batch import Batch, PairBatch, concat_pairs
from streamjoin.modes import Collect
from streamjoin.query import Query, Residual
from streamjoin.validation import values_of


class LatencyHistogram:
    """Log-bucketed latency histogram (64 buckets per power of two, ≈1.1% resolution).

    Keeps percentiles for runs that keep no pairs; memory is fixed (64 · 64 buckets).
    """

    PER_OCTAVE = 64

    def __init__(self) -> None:
        self.counts = np.zeros(64 * self.PER_OCTAVE, dtype=np.int64)
        self.max = 0
        self.sum_ns = 0.0  # of every latency added, exact to a float's precision
        self._seen = np.zeros(2 * _REMEMBERED, dtype=np.int64)  # (_add_latencies)

    def add(self, latency_ns: np.ndarray) -> None:
        if len(latency_ns):
            top = _add_latencies(self.counts, latency_ns, self.PER_OCTAVE, self._seen)
            self.max = max(self.max, top)
            self.sum_ns += float(latency_ns.sum())

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def mean(self) -> float:
        """Mean latency (ns) of everything added (not from the buckets: exact)."""
        total = self.total
        return self.sum_ns / total if total else float("nan")

    def percentile(self, q: float) -> float:
        """Latency (ns) at percentile ``q`` in [0, 100]: the upper edge of its bucket."""
        total = self.total
        if total == 0:
            return float("nan")
        rank = max(1, int(np.ceil(q / 100 * total)))
        b = int(np.searchsorted(np.cumsum(self.counts), rank))
        return min(2.0 ** ((b + 1) / self.PER_OCTAVE), float(self.max))


#: Latencies whose bucket :func:`_add_latencies` remembers (a power of two: a message of a
#: reordered run holds pairs of rows from tens of chunks).
_REMEMBERED = 256


@njit(cache=True, nogil=True)
def _add_latencies(counts, latency_ns, per_octave, seen):
    """Count each latency ``v`` in bucket ``floor(log2(max(v, 1)) · per_octave)`` (at most the
    last); returns the largest. The pairs of one message take few latencies (its arrival less
    the few times their rows arrived: one in order, several once a reorder buffer mixed rows
    of several chunks), often alternating: the buckets of the last few are remembered, by
    value, rather than a log each: ``seen``, int64 (2 · :data:`_REMEMBERED`,), pairs of a
    value and its bucket (zeros at first: a latency of 0 is in bucket 0), kept across calls."""
    top = latency_ns[0]
    last = counts.shape[0] - 1
    for v in latency_ns:
        h = 2 * ((v ^ (v >> 13) ^ (v >> 26)) & (_REMEMBERED - 1))
        if seen[h] != v:
            seen[h] = v
            seen[h + 1] = min(int(np.floor(np.log2(float(max(v, 1))) * per_octave)), last)
        counts[seen[h + 1]] += 1
        top = max(top, v)
    return top


@dataclass(frozen=True)
class CollectorConfig(ActorConfig):
    """The collector node: keeps the run's pairs (or counts them, ``collect="count"``)."""

    role = "collector"
    reports_logic = True
    #: The pairs arrive in order when the run is ordered (one core emits them in order: a
    #: ``single`` or ``shared_index`` layout): nothing is left to sort at the end.
    in_order: bool = False

    def build(self, query: Query, settings: RunSettings, clock: Clock | None) -> Collector:
        residuals = query.predicate.residuals
        collector = Collector(
            settings.collect, clock, self.in_order, query.how != "inner", residuals
        )
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
        notes every row a pair holds, and returns each kept row that none held, once, its
        latency counted from its arrival to then: when a progress marker has come from
        every edge (:meth:`on_marker`; the emitter sends a row once no later tuple can reach
        it, and the marker after it: every pair that could hold it has arrived then), and
        at the end of input for the rest. Exact on every layout, because no join actor needs
        to know whether a tuple met a partner (SplitJoin's cores, a grid's cells, PanJoin's
        workers, SPO's stages and a handshake chain each see a part of its partners). The
        price is a byte per input row, and 24 per kept row until it leaves.
    residuals : tuple of Residual
        The query's :func:`~streamjoin.query.where` functions, evaluated here on the pairs
        the cores found (every other condition holds for them), before an outer join notes
        its matches: the emitter also sends, on port ``columns``, the columns they read for
        every row that joins (:class:`ResidualColumns`). A batch of pairs whose rows' columns
        have not come yet (they travel on another edge) waits for them, in order.

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
        residuals: tuple[Residual, ...] = (),
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
        self._matched = HeldRows()
        self._candidates: list[PairBatch] = []
        self._evaluated = 0  # kept rows received and recorded if no pair held them
        self.markers = 0  # progress markers that came from every edge
        self.unmatched = 0
        self.residual = ResidualColumns(residuals) if residuals else None

    def on_batch(self, port: str, message) -> list:
        if port == "unmatched":
            self._candidates.append(message)
        elif port == "columns":
            assert self.residual is not None  # (the edge exists for residuals only)
            for pairs in self.residual.add(message):
                self._accept(pairs)
        elif self.residual is not None:
            for pairs in self.residual.ready(message):
                self._accept(pairs)
        else:
            self._accept(message)
        return []

    def _accept(self, pairs: PairBatch) -> None:
        if self.residual is not None:
            pairs = self.residual.keep(pairs)
        if self.outer:
            self._note_matched(pairs)
        self._record(pairs)

    def _note_matched(self, pairs: PairBatch) -> None:
        if len(pairs):
            self._matched.note(pairs.r)
            self._matched.note(pairs.s)

    def on_marker(self, marker) -> list:
        """A progress marker has come from every edge: every pair that could hold the kept
        rows the emitter sent before it (``marker.kept``: it sends a row once it is out of
        every later tuple's reach) has arrived, and those that none held leave now. Below
        the lowest row still to come or waiting (``marker.low``), no pair can hold a kept
        row any more: those rows are forgotten, so the collector's memory stays bounded by
        the window, not the run."""
        self.markers += 1
        self._leave_unmatched(marker.kept)
        waiting = [int(np.maximum(c.r, c.s).min()) for c in self._candidates if len(c)]
        self._matched.forget_below(min([marker.low, *waiting]))
        if self.residual is not None:
            self.residual.forget_below(marker.reach)
        return []

    def on_eof(self) -> list:
        """The input has ended and every pair has arrived: an outer join's kept rows that
        no pair held leave now, each once."""
        if self.residual is not None:
            for pairs in self.residual.flush():
                self._accept(pairs)
        self._leave_unmatched()
        return []

    def _leave_unmatched(self, upto: int | None = None) -> None:
        """Record the kept rows received (:attr:`_candidates`, in order) that no pair held,
        each once, their latency counted to now: the first ``upto`` the emitter sent (None:
        all; those before were recorded already)."""
        if not self.outer or not self._candidates:
            return
        every = concat_pairs(self._candidates)
        self._candidates = []
        if every is None:
            return
        if upto is not None:
            cut = upto - self._evaluated
            if cut < len(every):  # the rest came after the marker: they wait for the next
                rest = PairBatch(every.r[cut:], every.s[cut:], every.ingest_ns[cut:])
                self._candidates = [rest]
                every = PairBatch(every.r[:cut], every.s[:cut], every.ingest_ns[:cut])
        self._evaluated += len(every)
        # each row once: the emitter sends each once
        held = self._matched.held(np.maximum(every.r, every.s))
        alone = np.flatnonzero(~held)
        rows = PairBatch(every.r[alone], every.s[alone], every.ingest_ns[alone])
        self.unmatched += len(rows)
        self.in_order = False  # they leave after their pairs: arrays() sorts an ordered run
        self._record(rows)

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


class HeldRows:
    """Whether a pair held each input row, by ``seq``: a byte a row, from ``base`` on (rows
    below it no pair can hold any more: :meth:`forget_below`)."""

    def __init__(self) -> None:
        self.flags = np.zeros(0, dtype=np.bool_)
        self.base = 0

    def note(self, seqs: np.ndarray) -> None:
        """A pair held the rows ``seqs`` (those below ``base`` are ignored)."""
        at = seqs - self.base
        if len(at) and at.min() < 0:
            at = at[at >= 0]
        if not len(at):
            return
        top = int(at.max())
        if top >= len(self.flags):
            grown = np.zeros(max(top + 1, 2 * len(self.flags)), dtype=np.bool_)
            grown[: len(self.flags)] = self.flags
            self.flags = grown
        self.flags[at] = True

    def held(self, seqs: np.ndarray) -> np.ndarray:
        """Whether a pair held each of ``seqs`` (rows at ``base`` or above)."""
        at = seqs - self.base
        out = np.zeros(len(at), dtype=np.bool_)
        inside = at < len(self.flags)
        out[inside] = self.flags[at[inside]]
        return out

    def forget_below(self, seq: int) -> None:
        """No pair can hold a row below ``seq`` any more, and none is asked about: drop them
        once they are half the flags or more (each byte moved once on average)."""
        drop = seq - self.base
        if drop > 0 and 2 * drop >= len(self.flags):
            self.flags = self.flags[drop:].copy()
            self.base = seq


class ResidualColumns:
    """What the collector needs to evaluate the query's :func:`~streamjoin.query.where`
    functions: the columns they read for every row that joins, by ``seq`` (the emitter's
    ``columns`` messages: :class:`~streamjoin.batch.Batch` es whose ``attrs`` are those
    columns' image rows then residual rows), and the pairs that wait for them.

    The emitter sends rows in ``seq`` order on one edge, so every row up to the largest
    ``seq`` received is here (rows a filter dropped never pair). A batch of pairs waits
    until its rows' columns have come, and no longer. They are kept (16 bytes a
    column and row) until a progress marker says no later pair can hold them
    (:meth:`forget_below`); in a run without markers, for the whole run.
    """

    def __init__(self, residuals: tuple[Residual, ...]) -> None:
        self.residuals = residuals
        self.columns = tuple(dict.fromkeys(c for f in residuals for c in f.columns))
        m = len(self.columns)
        self._values = np.full((2 * m, 0), np.nan)
        self._base = 0  # the seq of the rows in _values[:, 0]
        self._top = -1  # every row up to this seq has come
        self._waiting: list[PairBatch] = []

    def add(self, rows: Batch) -> list[PairBatch]:
        """Take a ``columns`` message; returns the waiting pairs whose rows are all here now,
        in the order they came."""
        if len(rows):
            top = int(rows.seq[-1])
            width = self._values.shape[1]
            if top - self._base >= width:
                grown = np.full(
                    (self._values.shape[0], max(top + 1 - self._base, 2 * width)), np.nan
                )
                grown[:, :width] = self._values
                self._values = grown
            self._values[:, rows.seq - self._base] = rows.attrs
            self._top = max(self._top, top)
        out: list[PairBatch] = []
        waiting, self._waiting = self._waiting, []
        for pairs in waiting:
            out += self.ready(pairs)
        return out

    def ready(self, pairs: PairBatch) -> list[PairBatch]:
        """The pairs of ``pairs`` whose rows have come; the others wait.

        Pair by pair, not the batch as a whole: a batch may hold pairs of rows before a
        progress marker and of rows after it (a handshake core's, whose tuples wait in
        segments), and once the marker has passed, the first must have been taken.
        Not behind pairs that wait: those may be of later batches (from another core) whose
        rows have not come, and a progress marker that has passed needs every pair of the
        batches before it taken. From one core (the only layouts whose pairs come in order)
        pairs wait in the order they came, as a later pair's rows come no earlier."""
        if self._last(pairs) <= self._top:
            return [pairs]
        now = np.maximum(pairs.r, pairs.s) <= self._top
        self._waiting.append(_pairs_at(pairs, ~now))
        return [_pairs_at(pairs, now)] if now.any() else []

    def forget_below(self, seq: int) -> None:
        """No pair still to come holds a row below ``seq``: drop their columns (and those of
        no pair waiting here: pairs of earlier batches may wait behind later ones whose rows'
        columns have not come) once they are half the kept ones or more (each column moved
        once on average)."""
        for pairs in self._waiting:
            if len(pairs):
                seq = min(seq, int(pairs.r.min()), int(pairs.s.min()))
        drop = seq - self._base
        if drop > 0 and 2 * drop >= self._values.shape[1]:
            self._values = self._values[:, drop:].copy()
            self._base = seq

    def flush(self) -> list[PairBatch]:
        """Every waiting batch: the input has ended, so every row has come."""
        out, self._waiting = self._waiting, []
        return out

    @staticmethod
    def _last(pairs: PairBatch) -> int:
        return max(int(pairs.r.max()), int(pairs.s.max())) if len(pairs) else -1

    def keep(self, pairs: PairBatch) -> PairBatch:
        """The pairs every residual function keeps."""
        if not len(pairs):
            return pairs
        m = len(self.columns)
        at = {c: i for i, c in enumerate(self.columns)}
        kept = np.ones(len(pairs), dtype=np.bool_)
        for f in self.residuals:

            def side(seq: np.ndarray, f=f) -> dict[str, np.ndarray]:
                seq = seq - self._base
                if seq.min() < 0:  # (markers promise it never happens: a bug, not input)
                    raise RuntimeError("a pair holds a row whose columns were forgotten")
                return {
                    c: values_of(self._values[at[c], seq], self._values[m + at[c], seq])
                    for c in f.columns
                }

            kept &= f.keep(side(pairs.r), side(pairs.s))
        if kept.all():
            return pairs
        return PairBatch(pairs.r[kept], pairs.s[kept], pairs.ingest_ns[kept])


def _pairs_at(pairs: PairBatch, mask: np.ndarray) -> PairBatch:
    """The pairs of ``pairs`` where ``mask`` holds."""
    return PairBatch(pairs.r[mask], pairs.s[mask], pairs.ingest_ns[mask])
