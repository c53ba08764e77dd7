"""Handshake join (Teubner & Mueller, SIGMOD 2011), batch by batch, with two-phase forwarding.

A chain of cores: R enters at core 0 and flows right, S enters at core n-1 and flows left.
Each core holds a segment of each window; when its R segment holds more than ``capacity``
tuples it forwards the oldest to its right neighbour (S: the left one). Every (r, s) pair
meets at exactly one core, because the two move in opposite directions — but they may also
*cross* on a link, each forwarded before the other arrived. Two-phase forwarding catches that:
a forwarded batch stays in the sender's segment, marked in transit, until the neighbour
acknowledges it; an arriving R batch probes the S segment *including* S in transit, an arriving
S batch probes the R segment *excluding* R in transit. In a crossing, the R side sees the S
copy (its acknowledgement cannot have overtaken the R batch on the FIFO link) and the S side
does not see the R copy, so the pair is found once; without a crossing, the acknowledgement
arrives before the other tuple and nothing is found twice.

The last core keeps R until the emitter's horizon says no future S tuple can need it (core 0
does the same for S). At end of input a drain marker flows from each end and pushes every
segment through the chain, so pairs still apart meet. The window check (the earlier of a pair
in the later one's window) keeps the result exact whatever the segment sizes.

**Progress markers** (:mod:`streamjoin.runtime.markers`: an outer join's rows without a
partner, residual functions' columns) cannot pass a chain by the executors' gates, since a
core would wait for its neighbours' markers and they for its. The cores pass them
themselves (``passes_markers``), one lane per stream: a marker that came on a stream's
input goes on along that stream once every tuple of that stream that came before it has been
forwarded from this core (at the stream's last core: at once), and the core reports the marker
to the collector once both lanes have passed it. That keeps the markers' promise. A pair is
found at a core when one of its tuples arrives there; a tuple that came before a marker
arrives at every core before the marker does (it is forwarded first, each link FIFO), so the
pair leaves that core before the core's report. And once a marker has passed every core on
both lanes, every R tuple before it has crossed every S tuple before it. A marker moves as
the tuples before it do, segment by segment: a row waits for about as many tuples as the chain
holds of its stream beyond the last core.

**Self-joins** run as the stream joined with itself (``paired``, see
:class:`~streamjoin.actors.join_spec.JoinSpec`): the emitter sends every batch in at both
ends, as R at core 0 and as S at core n-1, numbered alike. The argument above does not look at
what the tuples are, so every R copy meets every S copy exactly once (a tuple's two copies
included), the window check deciding in either direction with the shared numbering; a meeting
counts iff its R copy is strictly the older, under θ(a, b) ∨ θ(b, a), so the pair (a, b), a
older, is found once: where a's R copy meets b's S copy. Both copies' horizons are the one
stream's: an S copy left at core 0 below it is older than every R copy still to come, and
those meetings would not count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, cast

import numpy as np

from streamjoin.actors.base import ActorConfig, Clock, RunSettings
from streamjoin.actors.handshake_ll import LowLatencyHandshakeCore
from streamjoin.actors.join_core import IndexChoice, JoinLogic
from streamjoin.actors.join_spec import JoinSpec, JoinWork
from streamjoin.actors.marker_lanes import MarkerLanes
from streamjoin.actors.router import Drain
from streamjoin.actors.window_part import WindowPart
from streamjoin.batch import Batch, Marker, PairBatch
from streamjoin.query import Query


@dataclass(frozen=True)
class HandshakeConfig(IndexChoice, ActorConfig):
    """Core ``k`` of a handshake chain of ``n``: the original (:class:`HandshakeCore`, which
    keeps ``segment`` tuples of each stream before forwarding) or, with ``low_latency``, the
    low-latency variant (:class:`~streamjoin.actors.handshake_ll.LowLatencyHandshakeCore`)."""

    k: int = 0
    n: int = 1
    segment: int | None = None
    low_latency: bool = False
    passes_markers: ClassVar[bool] = True  # one lane per stream (see module docstrings)

    @property
    def role(self) -> str:  # type: ignore[override]  # per instance, not a ClassVar:
        # the two variants are told apart in drawings and metrics
        return "handshake_ll_core" if self.low_latency else "handshake_core"

    def build(
        self, query: Query, settings: RunSettings, clock: Clock | None
    ) -> HandshakeCore | LowLatencyHandshakeCore:
        core: HandshakeCore | LowLatencyHandshakeCore
        if self.low_latency:
            core = LowLatencyHandshakeCore(query, self.k, self.n, self.index, self.index_options)
        else:
            capacity = segment_capacity(query, self.n, self.segment)
            core = HandshakeCore(query, self.k, self.n, capacity, self.index, self.index_options)
        core.warm()
        return core


def segment_capacity(query: Query, n: int, segment: int | None) -> tuple[int, int]:
    """Tuples each core of an original handshake chain of ``n`` keeps of R and of S before
    forwarding: ``segment``, or a count window spread evenly over the chain (4096 for a time
    window)."""
    if segment is not None:
        return segment, segment
    if query.window.kind == "count":  # ceil(w / n) in integers: exact up to 2**63 - 1
        return -(-query.window_size(0) // n), -(-query.window_size(1) // n)
    return 4096, 4096


@dataclass(frozen=True)
class Ack:
    """The neighbour has taken every forwarded tuple with ``idx < upto``."""

    upto: int

    def __len__(self) -> int:
        return 0


# the ports of a core, by stream: data in, acknowledgements of what it forwarded; data
# forwarded, acknowledgements of what it was forwarded (the handshake topology's names)
_IN = {0: "r_in", 1: "s_in"}
_ACK = {0: "r_ack", 1: "s_ack"}
_OUT = {0: "r_out", 1: "s_out"}
_ACK_OUT = {0: "r_ack_out", 1: "s_ack_out"}


class HandshakeCore(JoinLogic):
    """Core ``k`` of ``n`` in a handshake-join chain (see module docstring).

    Ports: ``r_in`` (R from the left, or from the emitter at core 0), ``s_in`` (S from the
    right, or from the emitter at core n-1), ``r_ack`` / ``s_ack`` (acknowledgements of what
    it forwarded). Out: ``r_out`` / ``s_out`` (forwarded tuples), ``r_ack_out`` / ``s_ack_out``
    (acknowledgements), ``out`` (pairs).

    Counters: :class:`~streamjoin.actors.join_spec.JoinWork`: a batch is one insert call
    and counts its tuples as probes whatever the segment held, a non-empty segment probed is
    a part call more, and so is each segment that shrank in its step; an acknowledgement's
    step counts the tuples it drops as expired and no part call (it costs a tenth of a
    batch's step: a call would charge it as one); tuples passed on count as tuples.
    Charged ``<index>:handshake``'s cost row: forwarding and acknowledging wrap the index's
    kernels in work of the chain's own.
    """

    cost_stage = "handshake"

    def __init__(
        self,
        query: Query,
        k: int,
        n: int,
        capacity: tuple[int, int],
        index: str | None = None,
        index_options: dict | None = None,
    ) -> None:
        self.spec = JoinSpec(query, index, index_options, paired=True)
        self.k, self.n = k, n
        self.capacity = capacity
        self.work = JoinWork()
        # a count window's segment sizes the indexes (BI-Sort's subwindows, as a join core's)
        sized = query.window.kind == "count"
        self.parts = {
            y: WindowPart(self.spec, self.work, capacity[y] if sized else None) for y in (0, 1)
        }
        self.sent_upto = [0, 0]  # tuples with idx < sent_upto[y] were forwarded
        self.draining = [False, False]
        # R leaves the chain at the right end, S at the left
        self.last = {0: k == n - 1, 1: k == 0}
        self.from_emitter = {0: k == 0, 1: k == n - 1}
        self.lanes = MarkerLanes((0, 1))
        self.came_upto = [0, 0]  # tuples with idx < came_upto[x] came on x's input

    def on_batch(self, port: str, msg) -> list[tuple[str, object]]:
        if isinstance(msg, Marker):  # counts nothing
            x = 0 if port == "r_in" else 1
            self.lanes.came(x, msg, self.came_upto[x])
            return self._markers()
        work = self.work
        held = {y: len(p.store) for y, p in self.parts.items()}
        if isinstance(msg, Batch):  # probe the other stream's segment, store in our own
            x = 0 if port == "r_in" else 1
            work.probes += len(msg)
            work.inserted += len(msg)
            work.part_calls += 1
            size = len(self.parts[1 - x].index)
            if size:
                work.part_calls += 1
                work.scan += len(msg) * self.spec.index_cls.probe_work(size)
            held[x] += len(msg)
        out = self._step(port, msg)
        acked = port in _ACK.values()
        for y, part in self.parts.items():
            gone = held[y] - len(part.store)
            if gone > 0:
                work.part_calls += 0 if acked else 1
                work.expired += gone
        for p, m in out:
            if p == "out":
                work.pairs += len(cast(PairBatch, m))
            elif isinstance(m, Batch):  # passed on: copied out of the store
                work.tuples += len(m)
        work.tuples += len(msg)
        return out + self._markers()

    def _markers(self) -> list[tuple[str, object]]:
        """The markers that may pass now: on along each lane whose tuples before them have
        all been forwarded (see module docstring), and to the collector once both lanes
        passed one."""
        out: list[tuple[str, object]] = []
        for x in (0, 1):
            for marker in self.lanes.release(x, None if self.last[x] else self.sent_upto[x]):
                if not self.last[x]:
                    out.append((_OUT[x], marker))
        reported = self.lanes.report()
        if reported is not None:
            out.append(("out", reported))
        return out

    def _step(self, port: str, msg) -> list[tuple[str, object]]:
        if port in _ACK.values():
            y = 0 if port == "r_ack" else 1
            self.parts[y].expire(msg.upto)  # the neighbour holds them now
            return []
        x = 0 if port == "r_in" else 1
        if isinstance(msg, Drain):
            self.draining[x] = True
            return [*self._forward(x), *([] if self.last[x] else [(_OUT[x], msg)])]
        batch = msg.freeze()
        if len(batch):
            self.came_upto[x] = int(batch.idx[-1]) + 1
        y = 1 - x
        xs = np.arange(len(batch))
        # R probes S including S in transit; S probes R excluding R in transit
        min_idx = self.sent_upto[0] if x == 1 else 0
        pairs = self.parts[y].probe(batch, x, xs, min_idx=min_idx)
        self.parts[x].insert(batch, xs)
        out: list[tuple[str, object]] = []
        if not self.from_emitter[x]:
            out.append((_ACK_OUT[x], Ack(int(batch.idx[-1]) + 1)))
        elif self.last[y]:  # tuples of x come straight from the emitter: expire y at its end
            self.parts[y].expire(int(batch.horizon[y]))
        out.extend(self._forward(x))
        if len(pairs):
            out.append(("out", pairs))
        return out

    def _forward(self, x: int) -> list[tuple[str, Batch]]:
        """Send the oldest tuples of stream ``x`` beyond the segment capacity (all of them
        when draining) on to the neighbour; they stay here, in transit, until acknowledged."""
        if self.last[x]:
            return []
        store = self.parts[x].store
        start = store.rows_from(self.sent_upto[x])
        keep = 0 if self.draining[x] else self.capacity[x]
        end = store.tail - keep
        if end <= start:
            return []
        batch = store.batch(start, end, x)
        self.sent_upto[x] = int(batch.idx[-1]) + 1
        return [(_OUT[x], batch)]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts.values())
