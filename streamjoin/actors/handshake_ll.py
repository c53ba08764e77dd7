"""Low-latency handshake join (Roy, Teubner & Gemulla, VLDB 2014), batch by batch.

The chain of the original handshake join (:mod:`streamjoin.actors.handshake`) — R enters at
core 0 and flows right, S enters at core n-1 and flows left — but tuples no longer queue in
segments: every batch is *fast-forwarded* through the whole chain at once, probing at each core
the opposite stream's tuples stored there, and is *stored at one core only*, its home
(PIM-Tree §2.2.3 and Fig. 3 summarise the variant; DP-Join §III-B the original's latency).
Homes are round robin per batch, counted from the stream's entry end: every core sees a
stream's batches in the same order (each link is FIFO), so each knows every batch's home
without being told.

**Exactness.** A pair (e, l), e the earlier by ``seq``, is found at e's home h, and only there:

1. a batch probes the stored opposite tuples of every core it passes and keeps only those
   *earlier* than the probing tuple: l finds e iff l reaches h after e was stored there;
2. a batch reaching its home also probes a *crossing log* of the opposite tuples that passed
   this core before it, keeping only those *later* than the probing tuple: e finds l iff l
   reached h before e did.

Every tuple passes every core, and a core handles one message at a time, so at h exactly one
of "e first" and "l first" holds: the pair is found once, whatever the delivery order. The
cores where two tuples cross (on a link, in either direction) play no part: without the log a
later l overtaking e on the way to h would be missed, and without the seq filter of step 1 a
pair whose tuples crossed between their two homes would be found at both. The window check
(the earlier in the later's window) keeps the result exact, as everywhere (docs/design.md §2).

**State.** Per-link FIFO is what bounds it. Each stream reaches a core in ``seq`` order, so
after a batch of stream x no later x needs a logged y older than that batch's last tuple (the
log drops it) nor a stored y below the batch's ``horizon`` (expired, as in a join core). At
end of input the emitter's drain marker follows each stream through the chain: behind it no
tuple of that stream comes, so a core drops the other stream's stored tuples and log.

**Progress markers** pass the chain by the cores themselves (``passes_markers``), one lane
per stream, since the executors' gate would wait on the chain's cycles: a core passes a marker
on along its stream at once (as a batch, before its own step) and reports it to the collector
once it has come on every stream the core serves
(:class:`~streamjoin.actors.marker_lanes.MarkerLanes`). A pair is found at the earlier
tuple's home when the later of the two reaches it, and both reach it before any marker that
follows them (each link FIFO): so the pair leaves the home before the home reports the marker,
and when the collector has a marker from every core, every pair of the batches before it has
come.

**Self-joins.** With one stream there is nothing to cross: it enters at core 0 only, and every
batch passes every core in ``seq`` order (one FIFO path). So the tuples stored at a core when a
batch reaches it are all older than the batch, and the pair (a, b), a older, is found once: at
a's home, by b probing a there if they came in different batches (a was stored before b
arrived), or by the in-batch join (docs/design.md §2 step 2) of their batch at its home. No log, and no
seq filter is needed; expiry follows each batch's ``horizon`` as in a join core.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from streamjoin.actors.join_core import JoinLogic
from streamjoin.actors.join_spec import JoinSpec, JoinWork
from streamjoin.actors.marker_lanes import MarkerLanes
from streamjoin.actors.router import Drain
from streamjoin.actors.window_part import WindowPart
from streamjoin.batch import Batch, Marker, PairBatch, concat_pairs
from streamjoin.query import Query

_IN = {"r_in": 0, "s_in": 1}
_OUT = {0: "r_out", 1: "s_out"}  # where each stream's batches go on along the chain
_NEVER = np.iinfo(np.int64).max


def _later_of(pairs: PairBatch, stream: int) -> PairBatch:
    """The pairs whose later tuple (higher ``seq``) is of ``stream``."""
    keep = pairs.s > pairs.r if stream == 1 else pairs.r > pairs.s
    if keep.all():
        return pairs
    return PairBatch(pairs.r[keep], pairs.s[keep], pairs.ingest_ns[keep])


class LowLatencyHandshakeCore(JoinLogic):
    """Core ``k`` of ``n`` in a low-latency handshake-join chain (see module docstring).

    Ports: ``r_in`` (R from the left, or from the emitter at core 0), ``s_in`` (S from the
    right, or from the emitter at core n-1). Out: ``r_out`` / ``s_out`` (every batch, passed
    on unchanged before any work: :meth:`passes_on`), ``out`` (pairs).

    Parameters
    ----------
    query : Query
        A two-way join, or a self-join (which uses ``r_in`` and ``r_out`` only).
    k, n : int
        This core's place in the chain and the chain's length.
    index : str, optional
        Window index of the tuples stored here (default as for a join core).
    index_options : dict, optional
        Keyword arguments for each index instance.

    Counters: :class:`~streamjoin.actors.join_spec.JoinWork` of the batches (as at a join
    core); at a batch's home the join with the crossing log counts a part call, and as tuples
    more those it concatenates (the batch's and every logged batch's it looks at: each is
    copied, then sorted or dropped) and those it joins; a drain marker's step counts what it
    drops as expired. Charged ``<index>:handshake_ll``'s cost row:
    the crossing log and the round-robin homes wrap the index's kernels in work of their own.
    """

    cost_stage = "handshake_ll"

    def __init__(
        self,
        query: Query,
        k: int,
        n: int,
        index: str | None = None,
        index_options: dict | None = None,
    ) -> None:
        self.spec = JoinSpec(query, index, index_options)
        self.index_name = self.spec.index_name
        self.k, self.n = k, n
        self.work = JoinWork()
        # home to every n-th batch: about a window's n-th part of each stream, which sizes
        # the indexes (BI-Sort's subwindows, as a join core's) where the window is a count
        window = query.window
        self.parts = {
            y: WindowPart(
                self.spec, self.work, -(-window.size(y) // n) if window.kind == "count" else None
            )
            for y in self.spec.streams
        }
        self.crossed: dict[int, deque[Batch]] = {0: deque(), 1: deque()}  # the crossing log
        self.seen = [0, 0]  # batches of each stream that passed here: they number the homes
        self.drained = [False, False]
        self.last = {0: k == n - 1, 1: k == 0}  # R leaves the chain at the right end, S left
        self.lanes = MarkerLanes(self.spec.streams)
        self.stats = {"probes": 0, "pairs": 0, "inserted": 0, "expired": 0, "crossed": 0}

    def home(self, x: int, j: int) -> int:
        """Home core of the ``j``-th batch of stream ``x``: round robin from its entry end."""
        return j % self.n if x == 0 else self.n - 1 - j % self.n

    def passes_on(self, port: str, msg) -> list[tuple[str, object]]:
        """The message on to the next core, unchanged, before this core's step (the chain's
        fast-forward): nothing at the end of the chain."""
        if isinstance(msg, Marker) and _IN.get(port) not in self.spec.streams:
            return []  # (a self-join's S end: nothing comes on it)
        x = self._stream_of(port)
        return [] if self.last[x] else [(_OUT[x], msg)]

    def _stream_of(self, port: str) -> int:
        ports = [p for p, x in _IN.items() if x in self.spec.streams]
        if port not in ports:
            raise ValueError(f"handshake core has no input port {port!r}; ports: {ports}")
        return _IN[port]

    def on_batch(self, port: str, msg) -> list[tuple[str, object]]:
        """Probe, store and log one batch (or end a stream on a ``Drain``); returns its pairs
        as ``[("out", PairBatch)]``; a progress marker goes to the collector once it has come
        on every stream served here. What goes on along the chain is :meth:`passes_on`'s."""
        if isinstance(msg, Marker):  # counts nothing
            self.lanes.came(_IN[port], msg)
            self.lanes.release(_IN[port], None)
            reported = self.lanes.report()
            return [] if reported is None else [("out", reported)]
        x = self._stream_of(port)
        y = self.spec.probed(x)
        if isinstance(msg, Drain):  # no x comes after it: y here has nothing left to meet
            self.drained[x] = True
            gone = self.parts[y].expire(_NEVER)
            self.stats["expired"] += gone
            self.work.expired += gone
            self.crossed[y].clear()
            return []
        batch = msg.freeze()
        xs = np.arange(len(batch))
        at_home = self.home(x, self.seen[x]) == self.k
        self.seen[x] += 1
        self.stats["probes"] += len(batch)
        work = self.work
        work.tuples += len(batch)
        work.probe_call(len(batch), self.parts[y].index)
        if self.spec.one_stream:  # the stored tuples are all earlier; step 2: the batch itself
            found = [self.parts[x].probe(batch, x, xs)]
            if at_home:
                found.append(self.spec.join_batch(batch))
        else:  # step 1: the stored y earlier than each probing tuple
            found = [_later_of(self.parts[y].probe(batch, x, xs), x)]
            if at_home:  # step 2: the logged y later than each probing tuple
                crossed = self._join_crossed(batch, x)
                self.stats["crossed"] += len(crossed)
                found.append(crossed)
            if not self.drained[y]:
                self.crossed[x].append(batch)
        if at_home:
            self.parts[x].insert(batch, xs)
            self.stats["inserted"] += len(batch)
            work.inserted += len(batch)
            work.part_calls += 1 if len(batch) else 0
        # no x after this batch needs a y older than its last tuple or below its horizon
        log, last_seq = self.crossed[y], batch.seq[-1]
        while log and log[0].seq[-1] < last_seq:
            log.popleft()
        gone = self.parts[y].expire(int(batch.horizon[y]))
        self.stats["expired"] += gone
        work.expired += gone
        pairs = concat_pairs(found)
        if pairs is None:
            return []
        self.stats["pairs"] += len(pairs)
        work.pairs += len(pairs)
        return [("out", pairs)]

    def _join_crossed(self, batch: Batch, x: int) -> PairBatch:
        """Pairs of ``batch`` (stream x, at its home) with the logged y tuples later than the
        x tuple: one seq-ordered batch of both, joined with itself (docs/design.md §2 step 2)."""
        first = batch.seq[0]
        log = [b for b in self.crossed[1 - x] if b.seq[-1] > first]
        if not log:
            return PairBatch.empty()
        both = Batch.concat([batch, *log])
        self.work.tuples += len(both)  # each is copied, then sorted or dropped
        keep = np.flatnonzero((both.stream == x) | (both.seq > first))
        both = both.take(keep[np.argsort(both.seq[keep], kind="stable")]).freeze()
        # an in-batch join of its own, over the batch and the log (a logged tuple costs more
        # than a passed one, the more the smaller its batches: the row's tuples coefficient
        # averages them)
        self.work.part_calls += 1
        self.work.tuples += len(both)
        return _later_of(self.spec.join_batch(both), 1 - x)

    @property
    def nbytes(self) -> int:
        """Bytes of the stored tuples, their indexes and the crossing log."""
        held = sum(p.nbytes for p in self.parts.values())
        return held + sum(b.nbytes for log in self.crossed.values() for b in log)
