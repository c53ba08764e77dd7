"""Rebuilding a lost join core on Ray with the exact answer (:mod:`~streamjoin.runtime.
ray_executor`).

A join core's whole state is the contents of its windows, and every tuple in them came from
the emitter, in the driver. When the process of a ``join_core`` node dies (killed, OOM,
node lost) in an acyclic topology (``single``, ``split``, ``grid`` with either forwarding,
``shared_index``), Ray restarts it (``max_restarts``) and the driver rebuilds it:

*What the driver keeps.* For each emitter output port, the batches it sent there
(:class:`Retention`). Each core *c* reports to the collector, after every step that found
pairs and in the same write, a :class:`Progress`: ``D_c[y]``, the last ``seq`` of stream *y*
it has handled. Tuples of one stream reach a core in ``seq`` order, so the pairs that core
has delivered are exactly the pairs among its tuples with ``seq <= D_c`` (a core is exact
whatever the interleaving of its ports, docs/design.md §2); the collector holds a step's pairs
back until its progress has arrived, so a step counts whole or not at all. The driver asks
the collector for the ``D_c`` now and then and drops a kept batch once, for every core it
feeds, all its tuples are at or below ``D_c`` and below the window horizon of every later
prober (the emitter's horizon at ``min D_c``): what is kept is the cores' windows plus what
is in flight to them.

*How a restarted core is rebuilt and resumed.* Its successors (the collector, a chain's
next cores) are told to take a new edge from it; the collector answers with ``D_c``. Its
predecessors (the driver, a chain's previous cores) reconnect to it, and the driver sends
it, on an edge of its own that it reads to the end before any other, every kept batch for
each of its ports in ``seq`` order. Replaying them through the ordinary step rebuilds the
windows (the window check keeps a probe exact however far back the replay starts) and
finds every pair among them; the core drops those among tuples at or below ``D_c``, which
were delivered before, and reports progress from ``D_c`` on. Everything its chain
predecessors send after reconnecting is newer than or equal to what the replay held, so
each port drops tuples at or below the last ``seq`` it took.

*Pairs beyond the progress.* A logic that holds batches (a shared-index core, whose pool
threads run a batch's tasks on past the step) sends the pairs of a held batch as far as its
tasks have run, so a step's pairs may lie beyond the ``D_c`` sent with them. The collector remembers
those it took (:class:`DeliveryLog`) until a later ``D_c`` covers them, and a restarted core
drops them as well (:class:`Delivered`).

*Duplicates.* The restarted core re-delivers nothing (the ``D_c`` filter); a chain successor
that the dead core had already passed batches on to receives the replay again and drops it
by ``seq``; a predecessor's batches lost in the dead core's socket are in the replay.

Everything else — the emitter (the driver), the collector, a PanJoin manager or worker, a
handshake core (whose segments move between cores; the low-latency variant numbers batches
per core), a second failure while a core is being rebuilt, a logic error (it would happen
again) — ends the run with :class:`ActorFailed` naming the actor.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import struct
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from streamjoin.actors.join_core import JoinCoreConfig
from streamjoin.batch import Batch, PairBatch
from streamjoin.runtime.ray import wire
from streamjoin.topologies.base import Topology

#: the name a restarted core's replay edge comes from
REPLAY = "<replay>"
#: the port a recoverable core's :class:`Progress` comes to the collector on
PROGRESS_PORT = "progress"


@dataclass(frozen=True)
class Progress:
    """A recoverable core's progress, sent to the collector after a step's pairs: it has
    handled every tuple of R with ``seq <= r`` and of S with ``seq <= s`` that comes to it."""

    r: int
    s: int

    def __len__(self) -> int:
        return 0


_PROGRESS = struct.Struct("<qq")


def _decode_progress(meta: bytes, body: wire.Body) -> Progress:
    body.end()
    return Progress(*wire.unpack(_PROGRESS, meta))


wire.register(wire.Codec(6, Progress, lambda p: (_PROGRESS.pack(p.r, p.s), []), _decode_progress))


class Handled:
    """A recoverable core's progress (:class:`Progress`): the last ``seq`` of each stream in
    the batches it has handled whose output has all left. A logic may hold the output of its
    last ``held_batches``; they count once it holds fewer."""

    def __init__(self, self_join: bool, upto: tuple[int, int] = (-1, -1)) -> None:
        self.self_join = self_join
        self.upto = list(upto)
        self.batches: deque[list[int]] = deque()  # the last seqs of those still held

    def advance(self, batch: Batch | None, held: int) -> None:
        """A step has handled ``batch`` (None: a step without one) and its logic now holds
        the output of its last ``held`` batches."""
        if batch is not None:
            last = [-1, -1]
            for y in (0,) if self.self_join else (0, 1):
                seqs = batch.seq[batch.stream == y]
                if len(seqs):
                    last[y] = int(seqs[-1])
            self.batches.append(last)
        while len(self.batches) > held:
            last = self.batches.popleft()
            for y in (0, 1):
                self.upto[y] = max(self.upto[y], last[y])
        if self.self_join:
            self.upto[1] = self.upto[0]


_NONE = np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class Delivered:
    """What a recoverable core's last life delivered to the collector: every pair among its
    tuples at or below ``upto`` (``(r, s)``, per stream), and the pairs ``beyond`` it
    (``beyond_r[i], beyond_s[i]``) of batches it still held."""

    upto: tuple[int, int] = (-1, -1)
    beyond_r: np.ndarray = field(default_factory=_NONE.copy)
    beyond_s: np.ndarray = field(default_factory=_NONE.copy)

    def undelivered(self, pairs: PairBatch) -> PairBatch:
        """``pairs`` less those delivered."""
        r, s = self.upto
        keep = (pairs.r > r) | (pairs.s > s)
        if len(self.beyond_r):  # (those with a later row past them cannot be among them)
            near = keep & (np.maximum(pairs.r, pairs.s) <= self._beyond[0])
            keep[near] = ~np.isin(_pair_keys(pairs.r[near], pairs.s[near]), self._beyond[1])
        if keep.all():
            return pairs
        return PairBatch(pairs.r[keep], pairs.s[keep], pairs.ingest_ns[keep])

    @functools.cached_property
    def _beyond(self) -> tuple[int, np.ndarray]:
        """The largest row of the pairs beyond ``upto``, and the pairs as keys."""
        top = max(int(self.beyond_r.max()), int(self.beyond_s.max()))
        return top, _pair_keys(self.beyond_r, self.beyond_s)


def _pair_keys(r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """A pair a value, ``r`` and ``s`` side by side (16 bytes), for ``np.isin``."""
    rs = np.ascontiguousarray(np.stack([r, s], axis=1), dtype=np.int64)
    return rs.view(np.dtype((np.void, 16))).ravel()


class DeliveryLog:
    """The collector's record of what one recoverable core has delivered (:class:`Delivered`):
    its last progress, and the pairs it took beyond that progress."""

    def __init__(self) -> None:
        self.upto = (-1, -1)
        self.beyond_r = self.beyond_s = _NONE

    def commit(self, pairs: list[PairBatch], progress: Progress) -> None:
        """The core's ``pairs`` sent before ``progress`` are taken, with it."""
        self.upto = (progress.r, progress.s)
        kept = []
        for r, s in [(self.beyond_r, self.beyond_s), *((p.r, p.s) for p in pairs)]:
            beyond = (r > progress.r) | (s > progress.s)
            if beyond.any():
                kept.append((r[beyond], s[beyond]))
        self.beyond_r = np.concatenate([r for r, _ in kept]) if kept else _NONE
        self.beyond_s = np.concatenate([s for _, s in kept]) if kept else _NONE

    def delivered(self) -> Delivered:
        return Delivered(self.upto, self.beyond_r, self.beyond_s)


def recoverable_nodes(topology: Topology) -> frozenset[str]:
    """The nodes a run rebuilds when their process is lost: the join cores of an acyclic
    topology (module docstring)."""
    if topology.cyclic:
        return frozenset()
    return frozenset(topology.nodes("join_core"))


def feeds(topology: Topology) -> dict[str, list[tuple[str, str]]]:
    """``emitter out_port -> [(core, in_port), …]``: the cores whose input port carries that
    port's batches, directly or passed on along a chain (on the output port a core's
    :class:`~streamjoin.actors.join_core.JoinCoreConfig` names in ``forward``)."""
    out: dict[str, list[tuple[str, str]]] = {}
    graph = topology.graph
    for _, v, d in graph.out_edges(topology.emitter, data=True):
        if v == topology.collector:  # (an outer join's kept rows: no core needs them again)
            continue
        chain = out.setdefault(d["src_port"], [])
        node, port = v, d["dst_port"]
        while node is not None:
            chain.append((node, port))
            config = topology.config(node)
            chained = (config.forward or {}) if isinstance(config, JoinCoreConfig) else {}
            nxt = [
                (w, e["dst_port"])
                for _, w, e in graph.out_edges(node, data=True)
                if port in chained and e["src_port"] == chained[port]
            ]
            node, port = nxt[0] if nxt else (None, None)
    return out


class Retention:
    """The batches the driver keeps so that a lost core can be rebuilt (module docstring):
    per emitter output port, those some core it feeds may still need."""

    def __init__(self, fed: dict[str, list[tuple[str, str]]], self_join: bool) -> None:
        self.fed = fed
        self.self_join = self_join
        self.kept: dict[str, deque] = {p: deque() for p in fed}
        self.seqs: list[int] = []  # the horizon log: largest seq so far, by batch
        self.horizons: list[np.ndarray] = []
        self.top = -1

    def add(self, port: str, batch: Batch) -> None:
        if port in self.kept and len(batch):
            self.kept[port].append(batch)
            self.top = max(self.top, int(batch.seq[-1]))
            self.seqs.append(self.top)
            self.horizons.append(batch.horizon)

    @property
    def tuples(self) -> int:
        return sum(len(b) for q in self.kept.values() for b in q)

    def horizon(self, seq: int) -> np.ndarray:
        """A lower bound of the emitter's horizon after row ``seq``."""
        k = bisect.bisect_right(self.seqs, seq)
        return self.horizons[k - 1] if k else np.zeros(2, dtype=np.int64)

    def trim(self, delivered: dict[str, tuple[int, int]]) -> None:
        """Drop the batches no core needs, given each core's delivered progress."""
        bounds = {}
        for cores in self.fed.values():
            for core, _ in cores:
                r, s = delivered.get(core, (-1, -1))
                low = r if self.self_join else min(r, s)
                bounds[core] = (low, self.horizon(low))
        for port, q in self.kept.items():
            while q and all(self._done(q[0], *bounds[c]) for c, _ in self.fed[port]):
                q.popleft()
        low = min((b[0] for b in bounds.values()), default=-1)
        cut = max(0, bisect.bisect_right(self.seqs, low) - 1)
        if cut:
            del self.seqs[:cut], self.horizons[:cut]

    @staticmethod
    def _done(batch: Batch, low: int, horizon: np.ndarray) -> bool:
        """Whether a core whose delivered progress is at least ``low`` in every stream can
        need ``batch`` no more: every tuple handled and out of every later window."""
        if batch.seq[-1] > low:
            return False
        for y in (0, 1):
            idx = batch.idx[batch.stream == y]
            if len(idx) and idx[-1] >= horizon[y]:
                return False
        return True

    def replay(self, core: str) -> list[tuple[str, Batch]]:
        """``(in_port, batch)`` of everything kept for ``core``, in ``seq`` order."""
        streams = [
            [(int(b.seq[0]), port, b) for b in self.kept[p]]
            for p, cores in self.fed.items()
            for c, port in cores
            if c == core
        ]
        return [(port, b) for _, port, b in heapq.merge(*streams, key=lambda t: t[0])]
