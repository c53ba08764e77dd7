"""The emitter: stamps arrivals and closes batches on size or delay (docs/design.md §2)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
from numba import njit

from streamjoin.actors.base import WARMED, ActorConfig, Clock, Logic, RunSettings
from streamjoin.actors.router import RouteSpec, SingleRoute
from streamjoin.batch import MARKER_PORT, Batch, Marker, PairBatch, concat_pairs
from streamjoin.event_time import ReorderBuffer
from streamjoin.indexes.blocks.sorted_runs import lower_bound
from streamjoin.query import Query
from streamjoin.validation import Columns, check_ts_continues

#: An outer join's rows (:meth:`Emitter._note_unmatched`) go to the collector in messages of
#: at least this many rows (and the rest at the end of input) when the run sends no progress
#: markers: it needs them only when the input ends.
UNMATCHED_ROWS = 8192
#: With progress markers (``RunSettings.markers``), the emitter sends one after at least this
#: many rows in batches, or after :data:`MARKER_NS` with rows sent since the last, whichever
#: comes first: an outer join's row leaves at most about that much after it leaves the
#: other stream's reach (a marker costs a message on every edge).
MARKER_ROWS = 8192
MARKER_NS = 100_000_000


@dataclass(frozen=True)
class EmitterConfig(ActorConfig):
    """The emitter node: where its batches go (a route spec of :mod:`~streamjoin.actors.
    router`)."""

    role = "emitter"
    route: RouteSpec = field(default_factory=SingleRoute)

    def build(self, query: Query, settings: RunSettings, clock: Clock | None) -> Emitter:
        emitter = Emitter(
            query, settings.batch_size, settings.max_delay_ns, clock, self.route, settings.markers
        )
        emitter.warm()
        return emitter


class Emitter(Logic):
    """Turns validated input chunks into stamped, seq-ordered :class:`Batch` es.

    For each tuple it stamps ``seq`` (global arrival number), ``idx`` (rank in its stream),
    ``ingest_ns`` (when the chunk was handed over, from ``clock``) and ``lo_idx``: the first
    ``idx`` of the opposite stream (own stream for a self-join) in the tuple's window.

    - count window ``w_Y``: ``lo_idx = max(0, n_Y - w_Y)`` with ``n_Y`` the Y tuples before it;
    - time window ``t_Y``: Y's ``ts`` is non-decreasing, so the Y tuples before x with
      ``x.ts - y.ts <= t_Y`` (``y.ts >= x.ts - t_Y``, the bound saturating at the int64
      minimum) are the contiguous ``idx`` range ``[lo_idx, n_Y)``; ``lo_idx`` is a binary
      search in the ``ts`` of the Y tuples still reachable.

    Each batch also carries ``horizon``: for each stream, an idx below which no later tuple's
    window reaches, which lets cores expire.

    A batch closes when it holds ``batch_size`` tuples or when its oldest tuple has waited
    ``max_delay_ns`` (checked on every chunk and :meth:`on_tick`); ``route`` (a route spec)
    decides which cores it goes to (:mod:`streamjoin.actors.router`). A chunk that is exactly
    one batch goes on as it is.

    An outer join (``query.how``): the rows of the kept sides also go to the collector, on
    port ``unmatched``, as ``(seq, -1)`` or ``(-1, seq)``; it returns those that no pair
    holds. With ``markers`` (``RunSettings.markers``) a row goes once it is out of every
    later tuple's reach (its ``idx`` below the last batch's ``horizon``), and a progress
    marker (:class:`~streamjoin.batch.Marker`) follows, every :data:`MARKER_ROWS` rows or
    :data:`MARKER_NS`: once the collector has it from every edge, all pairs that could hold
    those rows have come, and the rows without one leave. Without, they go in messages of
    :data:`UNMATCHED_ROWS` and leave at the end of input.

    With ``Query.lateness`` (out-of-order input) the emitter first holds each chunk's rows in
    a :class:`~streamjoin.event_time.ReorderBuffer` and stamps them as the watermark releases
    them, in ``ts`` order, each with the time it arrived: ``seq`` then numbers rows in that
    order, and latency counts the wait.

    Counters (``COUNTERS``): tuples taken in, messages and tuples sent, and tuples copied to
    merge chunks into batches or cut them, by the route into the parts of a batch it splits
    (a grid's or a handshake chain's R and S), or by the reorder buffer's sorts and merges (a
    cost the simulator charges apart from the tuples sent).
    """

    cost_group = "emitter"
    COUNTERS: ClassVar[tuple[str, ...]] = ("tuples_in", "msgs_out", "tuples_out", "copied")

    def __init__(
        self,
        query: Query,
        batch_size: int,
        max_delay_ns: int | None = None,
        clock: Callable[[], int] | None = None,
        route: RouteSpec | None = None,
        markers: bool = False,
    ) -> None:
        self.query = query
        self.route_spec = route or SingleRoute()
        self.route = self.route_spec.router(query.self_join)
        self.batch_size = batch_size
        self.max_delay_ns = max_delay_ns
        self.clock = clock
        self.n_seen = 0
        self.count = np.zeros(2, dtype=np.int64)  # tuples seen per stream
        self.horizon = np.zeros(2, dtype=np.int64)
        self.last_ts = np.full(2, np.iinfo(np.int64).min, dtype=np.int64)
        # time windows: ts of stream Y from idx ts_base[Y] on (the reachable part)
        self.ts_hist = [np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)]
        self.ts_base = np.zeros(2, dtype=np.int64)
        # out-of-order input (Query.lateness): rows wait here until the watermark passes them
        self.reorder = None if query.lateness is None else ReorderBuffer(query.lateness)
        #: the query has filters: rows that fail one are stamped, then dropped
        self.filters = bool(query.predicate.filters)
        self._pending: list[Batch] = []
        self._pending_n = 0
        self.copied = 0  # tuples copied into a batch other than the chunk they came in
        # an outer join (Query.how): the tuples whose side it keeps go to the collector too,
        # as pairs (seq, -1) or (-1, seq), which it returns if no pair holds them
        self.keep = query.keeps_unmatched
        #: per stream, its kept rows not sent yet: pieces of (seq, idx, ingest_ns), in order
        self._kept: tuple[list, list] = ([], [])
        self._kept_n = 0
        self.markers = markers
        # residual functions with markers: per stream, pieces (first idx, seqs) of its rows
        # still within a later tuple's reach, whose seq the marker's ``reach`` names
        self._reachable: tuple[list, list] | None = (
            ([], []) if markers and query.predicate.residuals else None
        )
        self._marked = 0  # markers sent
        self._kept_sent = 0  # kept rows sent to the collector
        self._unmarked = 0  # rows sent in batches since the last marker
        self._marked_ns: int | None = None  # when the last marker was sent
        self._sent_horizon = np.zeros(2, dtype=np.int64)  # the last batch's horizon
        # residual functions (sj.where): the columns they read go to the collector, which
        # evaluates them: their image and residual rows of ``attrs``
        k, at = len(query.attrs), {a: i for i, a in enumerate(query.attrs)}
        wanted = [at[c] for c in query.predicate.residual_columns]
        self._residual_rows = np.array(wanted + [k + a for a in wanted], dtype=np.int64)
        self._columns: list[Batch] = []
        self.tuples_in = self.msgs_out = self.tuples_out = 0

    def counters(self) -> tuple[int, int, int, int]:
        return (self.tuples_in, self.msgs_out, self.tuples_out, self.copied)

    def warm(self) -> None:
        """Load the stamping kernels (numba's disk cache) on a throwaway emitter sending along
        the same route, so a run's timed part does not pay for it (once per process for each
        window kind and join kind)."""
        q = self.query  # (with lateness, the reorder buffer's kernel too)
        key = ("emitter", q.window.kind, q.self_join, q.lateness is not None)
        WARMED.once(key, self._warm)

    def _warm(self) -> None:
        spare = Emitter(self.query, self.batch_size, None, self.clock, self.route_spec)
        n = 2 if self.query.self_join else 4
        cols = Columns(
            stream=np.array([0, 1, 0, 1][:n], dtype=np.int8) * (not self.query.self_join),
            ts=np.arange(n, dtype=np.int64),
            attrs=np.zeros((2 * len(self.query.attrs), n)),  # images, then residuals
        )
        spare.on_chunk(cols, 0)
        if self.reorder is not None:  # out of order too: the reorder buffer's ring
            spare.on_chunk(Columns(cols.stream, cols.ts[::-1] + n, cols.attrs), 0)
        spare.on_eof()

    # -- entry points --------------------------------------------------------------------------

    def on_chunk(self, cols: Columns, ingest_ns: int | None = None) -> list[tuple[str, Batch]]:
        """Stamp a chunk of arrivals and return the batches it closes."""
        if ingest_ns is None:
            ingest_ns = self.clock() if self.clock else 0
        self.tuples_in += len(cols)
        if self.reorder is not None:  # the whole batches it releases
            copied = self.reorder.copied
            self._pend_released(self.reorder.push(cols, ingest_ns, self.batch_size))
            self.copied += self.reorder.copied - copied
            return self._sent(self._close(full_only=True) + self._tick())
        if len(cols):
            self._pend(self._stamp(cols, ingest_ns))
        out = self._close(full_only=True)
        return self._sent(out + self._tick())

    def on_tick(self) -> list[tuple[str, Batch]]:
        """Close the open batch if its oldest tuple has waited ``max_delay_ns``."""
        return self._sent(self._tick())

    def on_batch(self, port: str, message) -> list[tuple[str, Batch]]:
        raise TypeError("the emitter takes input chunks (on_chunk), not batches")

    def on_eof(self) -> list[tuple[str, Batch]]:
        """Flush what is left (rows held for the watermark too), then whatever the route sends
        after the last batch."""
        if self.reorder is not None:
            self._pend_released(self.reorder.flush())
        return self._sent(self._close(full_only=False) + self.route.eof(), eof=True)

    def _tick(self) -> list[tuple[str, Batch]]:
        if self.max_delay_ns is None or self.clock is None:
            return []
        oldest = self.oldest_open_ns
        if oldest is None or self.clock() - oldest < self.max_delay_ns:
            return []
        if self.reorder is not None:  # the rows released, a part of a batch
            self._pend_released(self.reorder.take())
        return self._close(full_only=False)

    def _sent(self, out: list, eof: bool = False) -> list:
        if self._columns:  # before the batches: the collector needs them for their pairs
            out = [("columns", b) for b in self._columns] + out
            self._columns = []
        if eof:
            if self._kept_n:
                out = [("unmatched", self._take_kept(None)), *out]
        elif self.markers:
            out = self._mark(out)
        elif self._kept_n >= UNMATCHED_ROWS:
            out = [("unmatched", self._take_kept(None)), *out]
        if out:
            self.msgs_out += len(out)
            self.tuples_out += sum([len(m) for _, m in out])
        return out

    @property
    def open_tuples(self) -> int:
        """Tuples in the open batch (not those held for the watermark)."""
        return self._pending_n + (self.reorder.n_ready if self.reorder is not None else 0)

    @property
    def oldest_open_ns(self) -> int | None:
        """When the tuple that has waited longest in the open batch arrived (None if it is
        empty). Out-of-order input releases tuples in ``ts`` order, so that may be any of
        them, not the first."""
        if self.reorder is None:
            # arrival order: the first is the oldest
            return int(self._pending[0].ingest_ns[0]) if self._pending else None
        times = [int(b.ingest_ns.min()) for b in self._pending]
        ready = self.reorder.oldest_ready_ns()
        times += [] if ready is None else [ready]
        return min(times) if times else None

    # -- stamping --------------------------------------------------------------------------------

    def _stamp(self, cols: Columns, ingest_ns: int | np.ndarray) -> Batch:
        """``cols`` stamped; ``ingest_ns`` when they arrived (one time, or one per row).
        Under a time window ``ts`` must not decrease within a stream: input in arrival order
        is checked before the run, and the reorder buffer releases rows in ``ts`` order."""
        n = len(cols)
        stream = cols.stream
        if self.filters:  # a row that fails a filter (marked by validate: streamjoin.
            joins = stream < 2  # row_filters) is stamped, for it holds its window place, and
            stream = stream & 1  # then dropped: it joins nothing
        seq = np.arange(self.n_seen, self.n_seen + n, dtype=np.int64)
        q = self.query
        if q.window.kind == "count":
            idx, lo_idx, horizons = stamp_count(
                stream, self.count, q.window_size(0), q.window_size(1), q.self_join
            )
        else:
            check_ts_continues(cols, self.last_ts, self.n_seen)
            idx, lo_idx, horizons, self.ts_hist[0], self.ts_hist[1] = stamp_time(
                stream,
                cols.ts,
                self.count,
                self.ts_hist[0],
                self.ts_hist[1],
                self.ts_base,
                self.horizon,
                q.window_size(0),
                q.window_size(1),
                q.self_join,
            )
        self.n_seen += n
        if self.keep != (False, False):
            self._note_unmatched(stream, seq, idx, ingest_ns)
        if self._reachable is not None:
            for y, pieces in enumerate(self._reachable):
                at = np.flatnonzero(stream == y)
                if len(at):
                    pieces.append((int(idx[at[0]]), seq[at]))
        batch = Batch(
            seq=seq,
            stream=stream,
            idx=idx,
            ts=cols.ts,
            ingest_ns=np.full(n, ingest_ns, dtype=np.int64)
            if np.ndim(ingest_ns) == 0
            else np.asarray(ingest_ns, dtype=np.int64),
            lo_idx=lo_idx,
            attrs=np.ascontiguousarray(cols.attrs),
            horizon=horizons,  # per-row horizons; cut to the batch's last row in _close
        )
        # (a batch's horizon is then its last kept row's: a lower bound, so expiry only waits)
        if self.filters and not joins.all():
            batch = batch.take(np.flatnonzero(joins))
        if len(self._residual_rows) and len(batch):
            columns = batch.attrs[self._residual_rows]  # (the horizon: none, it expires nothing)
            self._columns.append(replace(batch, attrs=columns, horizon=np.zeros(2, np.int64)))
        return batch

    def _note_unmatched(self, stream: np.ndarray, seq: np.ndarray, idx, ingest_ns) -> None:
        """Keep the rows of the sides an outer join keeps (filtered rows too: they join
        nothing) until they go to the collector (:meth:`_mark`)."""
        one_time = np.ndim(ingest_ns) == 0
        for y, kept in enumerate(self.keep):
            if kept:
                at = np.flatnonzero(stream == y)
                if len(at):
                    if one_time:
                        times = np.full(len(at), ingest_ns, dtype=np.int64)
                    else:
                        times = np.asarray(ingest_ns, dtype=np.int64)[at]
                    self._kept[y].append((seq[at], idx[at], times))
                    self._kept_n += len(at)

    def _mark(self, out: list) -> list:
        """``out`` and, when a marker is due (:data:`MARKER_ROWS` rows in batches since the
        last, or :data:`MARKER_NS` with some), the kept rows now out of every later tuple's
        reach (its ``idx`` below the last batch's ``horizon``) and the marker after
        ``out``'s batches."""
        now = self.clock() if self.clock else None
        if self._marked_ns is None:
            self._marked_ns = now
        due = self._unmarked >= MARKER_ROWS or (
            self._unmarked > 0
            and now is not None
            and self._marked_ns is not None
            and now - self._marked_ns >= MARKER_NS
        )
        if not due:
            return out
        self._marked += 1
        self._unmarked, self._marked_ns = 0, now
        notes = []
        if self._kept_n:
            reached = self._take_kept(self._sent_horizon)
            notes = [("unmatched", reached)] if len(reached) else []
        low = min([int(p[0][0][0]) for p in self._kept if p], default=self.n_seen)
        marker = Marker(self._marked, self._kept_sent, low, self._reach())
        return [*notes, *out, (MARKER_PORT, marker)]

    def _reach(self) -> int:
        """The lowest ``seq`` a pair found after the last batch sent can hold: of the rows
        still in a later tuple's reach (``idx`` at or above the last batch's ``horizon``),
        or of the rows not sent yet. Rows below it are forgotten here."""
        reach = self.n_seen
        if self._reachable is None:
            return reach
        for y, pieces in enumerate(self._reachable):
            h = int(self._sent_horizon[y])
            while pieces and pieces[0][0] + len(pieces[0][1]) <= h:
                pieces.pop(0)  # every row of the piece is out of reach
            if pieces:
                first, seqs = pieces[0]
                reach = min(reach, int(seqs[max(0, h - first)]))
        return reach

    def _take_kept(self, horizon: np.ndarray | None) -> PairBatch:
        """The kept rows of each stream whose ``idx`` is below ``horizon`` (None: all), as
        ``(seq, -1)`` for R and ``(-1, seq)`` for S; the rest stay."""
        parts = []
        for y, pieces in enumerate(self._kept):
            if not pieces:
                continue
            seq, idx, times = (np.concatenate([p[k] for p in pieces]) for k in range(3))
            cut = len(seq) if horizon is None else int(np.searchsorted(idx, horizon[y]))
            pieces.clear()
            if cut < len(seq):
                pieces.append((seq[cut:], idx[cut:], times[cut:]))
            if cut:
                none = np.full(cut, -1, dtype=np.int64)
                r, s = (seq[:cut], none) if y == 0 else (none, seq[:cut])
                parts.append(PairBatch(r, s, times[:cut]))
        self._kept_n = sum(len(p[0]) for pieces in self._kept for p in pieces)
        taken = concat_pairs(parts) or PairBatch.empty()
        self._kept_sent += len(taken)
        return taken

    # -- closing ---------------------------------------------------------------------------------

    def _pend(self, stamped: Batch) -> None:
        """Add stamped rows to the open batch (none when a filter dropped them all)."""
        if len(stamped):
            self._pending.append(stamped)
            self._pending_n += len(stamped)

    def _pend_released(self, released: tuple[Columns, np.ndarray] | None) -> None:
        """Stamp rows the reorder buffer released (in ``ts`` order, with their arrivals) and
        add them to the open batch."""
        if released is not None:
            self._pend(self._stamp(*released))

    def _close(self, full_only: bool) -> list[tuple[str, Batch]]:
        if not self._pending or (full_only and self._pending_n < self.batch_size):
            return []
        if len(self._pending) == 1:
            stamped = self._pending[0]
        else:
            stamped = _concat_rows(self._pending)
            self.copied += len(stamped)
        n = len(stamped)
        cut = n - n % self.batch_size if full_only else n
        out = []
        for start in range(0, cut, self.batch_size):
            end = min(start + self.batch_size, cut)
            # a chunk that is exactly one batch goes on as it is (the usual case: run() cuts
            # chunks to the batch size)
            if end - start == n:
                part = stamped
            else:
                part = stamped.take(slice(start, end))  # views, but attrs
                self.copied += end - start
            part.horizon = stamped.horizon[:, end - 1].copy()
            self._sent_horizon = part.horizon
            self._unmarked += end - start
            taken = self.route.copied
            out.extend(self.route(part))
            self.copied += self.route.copied - taken  # a route's parts of a batch
        if n > cut:
            rest = stamped.take(slice(cut, n))
            rest.horizon = stamped.horizon[:, cut:]
            self.copied += n - cut
            self._pending = [rest]
        else:
            self._pending = []
        self._pending_n = n - cut
        return out


_INT64_MIN = np.iinfo(np.int64).min


@njit(cache=True, nogil=True)
def stamp_count(stream, count, w_r, w_s, self_join):
    """``(idx, lo_idx, horizons)`` of a chunk under a count window, in one pass.

    ``count`` (int64 ``(2,)``, tuples seen per stream) is advanced in place. A tuple's
    ``lo_idx`` is ``max(0, n_Y - w_Y)`` for the ``n_Y`` tuples of its probed stream Y before
    it; ``horizons[Y, g]`` is ``max(0, count_Y - w_Y)`` after row ``g``: no later window
    reaches below it. O(len(stream)).
    """
    n = stream.shape[0]
    idx = np.empty(n, dtype=np.int64)
    lo_idx = np.empty(n, dtype=np.int64)
    horizons = np.empty((2, n), dtype=np.int64)
    c_r, c_s = count[0], count[1]
    for g in range(n):
        if stream[g] == 1:
            idx[g] = c_s
            lo_idx[g] = max(0, c_r - w_r)
            c_s += 1
        else:
            idx[g] = c_r
            lo_idx[g] = max(0, c_r - w_r) if self_join else max(0, c_s - w_s)
            c_r += 1
        horizons[0, g] = max(0, c_r - w_r)
        horizons[1, g] = max(0, c_s - w_s)
    count[0] = c_r
    count[1] = c_s
    return idx, lo_idx, horizons


@njit(cache=True, nogil=True)
def stamp_time(stream, ts, count, hist_r, hist_s, base, horizon, w_r, w_s, self_join):
    """``(idx, lo_idx, horizons, hist_r, hist_s)`` of a chunk under a time window, in one pass.

    ``hist_r``/``hist_s`` hold the ``ts`` of each stream's tuples from idx ``base[Y]`` on (the
    ones a later window may still reach; ``base[Y] + len(hist) == count[Y]``). A tuple's
    ``lo_idx`` is the first idx of its probed stream Y whose ``ts`` is at or above its
    :func:`~streamjoin.query.window_start` (``ts - w_Y`` saturated at the int64 minimum),
    at most the ``n_Y`` tuples of Y before it: Y's ``ts`` do not decrease, so that is a
    lower-bound search, and as the probing stream's ``ts`` do not decrease either, each search
    starts where the last one for Y ended. ``horizons[Y, g]`` is the largest ``lo_idx`` of
    Y's probers up to row ``g`` (and at least ``horizon[Y]``): no later window reaches below
    it. ``count``, ``base`` and ``horizon`` are advanced in place; the returned histories
    start at the new ``base``. O(len(stream) · log(history)) at worst, O(len(stream) +
    history) when the window moves steadily.
    """
    n = stream.shape[0]
    n_s = 0
    for g in range(n):
        n_s += stream[g] == 1
    h_r = np.empty(hist_r.shape[0] + n - n_s, dtype=np.int64)
    h_s = np.empty(hist_s.shape[0] + n_s, dtype=np.int64)
    h_r[: hist_r.shape[0]] = hist_r
    h_s[: hist_s.shape[0]] = hist_s
    a, b = hist_r.shape[0], hist_s.shape[0]
    for g in range(n):
        if stream[g] == 1:
            h_s[b] = ts[g]
            b += 1
        else:
            h_r[a] = ts[g]
            a += 1
    idx = np.empty(n, dtype=np.int64)
    lo_idx = np.empty(n, dtype=np.int64)
    horizons = np.empty((2, n), dtype=np.int64)
    c_r, c_s = count[0], count[1]
    at_r, at_s = 0, 0  # where the last search in each history ended
    hz_r, hz_s = horizon[0], horizon[1]
    for g in range(n):
        x = np.int64(stream[g])
        y = x if self_join else 1 - x
        if x == 1:
            idx[g] = c_s
            c_s += 1
        else:
            idx[g] = c_r
            c_r += 1
        w = w_s if y == 1 else w_r
        t = ts[g]
        start = max(t, np.int64(_INT64_MIN + w)) - w
        h = h_s if y == 1 else h_r
        lo = lower_bound(h, at_s if y == 1 else at_r, h.shape[0], start)
        # tuples of Y before this one (its own stream, this one excluded, for a self-join)
        before = idx[g] if self_join else (c_s if y == 1 else c_r)
        lo_idx[g] = min(base[y] + lo, before)
        if y == 1:
            at_s = lo
            hz_s = max(hz_s, lo_idx[g])
        else:
            at_r = lo
            hz_r = max(hz_r, lo_idx[g])
        horizons[0, g] = hz_r
        horizons[1, g] = hz_s
    cut_r, cut_s = hz_r - base[0], hz_s - base[1]
    base[0], base[1] = hz_r, hz_s
    horizon[0], horizon[1] = hz_r, hz_s
    count[0], count[1] = c_r, c_s
    return idx, lo_idx, horizons, h_r[cut_r:], h_s[cut_s:]


def _concat_rows(stamped: list[Batch]) -> Batch:
    """Concatenate stamped chunks whose ``horizon`` is still per row (shape (2, n))."""
    out = Batch.concat(stamped)
    out.horizon = np.concatenate([b.horizon for b in stamped], axis=1)
    return out
