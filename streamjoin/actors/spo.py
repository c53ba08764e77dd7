"""SPO-Join's pipeline as actors (Aslam, Simonini & Beedkar §3 Fig. 2, §4, Alg. 1): a mutable
stage and PO-Join workers.

Every batch goes, whole, to the mutable stage and to every worker (Alg. 1 l. 1–2; beyond a
few workers along the trees below). The *mutable stage* holds the newest tuples of each
stream in a ``po_join`` mutable part (B+-tree per served condition, bit arrays ANDed: §4.1,
the paper's predicate and intersection operators in one actor); it probes them, joins the
batch with itself (docs/design.md §2 step 2) and, at the merge threshold δ, empties the part
and ships its tuples with both key orders (:class:`MergedRun`, Alg. 1 l. 7–12), divided into
``subintervals`` pieces, to the workers round robin (§4.4). A *worker* builds a PO-Join structure from each piece it gets
(the permutation array, Alg. 2) and probes every batch against its linked set of structures
(§4.3, Alg. 4); the oldest structure leaves whole when the window has passed it.

**Exactness without the paper's hash table.** The paper's intersection and window state drift
under load (§6.6: 0.3–98% correct without a hash table at the intersection, a distributed cache
for window counts). Here nothing drifts, because every decision is a function of the batch
sequence, which every actor sees in the same order (each edge is FIFO):

- when to merge and where each piece goes is a :class:`MergePlan` every actor computes from
  the batches alone — no message announces it;
- a tuple stored in batch ``j`` and merged after batch ``m`` is probed by batches up to ``m`` at
  the mutable stage and by batches after ``m`` at the worker holding its piece, and nowhere
  else: a worker probes a batch ``l`` against exactly its pieces merged after a batch before
  ``l``. A piece may reach a worker before or after batch ``l`` does (two edges, any
  interleaving): one that arrives early waits for the batches it serves, a batch that arrives
  first waits for the piece (the paper's "queue at the PO-Join operator during a merge", §4.3);
- the intersection is the AND of bit arrays inside one actor (the predicates of one tuple
  never travel apart), and each pair is checked against the window by ``idx`` (docs/design.md §2).

**Trees among the workers** (``spo(workers, relay=d, combine=d)``). Alg. 1 l. 2 broadcasts
every tuple to every PO-Join PE; with batches, that costs the emitter one send per worker and
the collector one receive per worker for every batch, which binds once the workers' own share
of the window is small. With ``relay``, worker 0 gets the emitter's batches and every worker
passes each batch on, unchanged and before its own work, to at most ``d`` others (a
*broadcast tree*, :meth:`SPOWorker.passes_on`). With ``combine``, a worker sends its pairs for
batch ``j``, with those of the workers below it, up as one :class:`SubtreePairs` once it has
probed ``j`` and heard ``j`` from each worker below it, and the top worker sends them to the
collector (a *combining tree*). Both trees send only to higher-numbered workers, so the graph
stays acyclic. Batches still reach every worker in order on one FIFO path, so the answer is
the same; pairs found when a piece arrives after the batches that wait for it go up with the
worker's next report, or sooner with a progress marker (:meth:`SPOWorker.on_marker`), or at
end of input. What a tree costs: messages at the workers (a relaying worker sends a batch per
child, a combining one receives a report per child) and one hop per level in each pair's
latency.

**Progress markers** (:mod:`streamjoin.runtime.markers`) pass a combining tree too. When a
worker has a marker from every incoming edge it has probed every batch sent before it, built
every piece those batches planned (the mutable stage sends a piece before it passes the
marker on) and heard each worker below report every batch before it; what it still holds for
those batches is only the pairs late pieces found. It sends them up at once, as a report
outside the batch sequence (:data:`EXTRA`), before the marker: so the marker follows every
pair of the batches before it, up to the collector.
"""

from __future__ import annotations

import warnings
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from streamjoin import indexes
from streamjoin.actors.base import WARMED, ActorConfig, Clock, RunSettings
from streamjoin.actors.join_core import JoinCore, JoinLogic, warm_batch, warm_key
from streamjoin.actors.join_spec import JoinSpec, JoinWork
from streamjoin.actors.window_part import WindowPart
from streamjoin.batch import Batch, PairBatch, concat_pairs
from streamjoin.checks import positive_int
from streamjoin.indexes.spo.po_join import DEFAULT_MERGE_EVERY, POJoinIndex
from streamjoin.query import Query

#: The index of both stages, and what they fall back to when it can serve no condition.
_INDEX = "po_join"


def _po_join(part: WindowPart) -> POJoinIndex:
    """The ``po_join`` index of one of the stages' parts."""
    index = part.index
    assert isinstance(index, POJoinIndex)  # the spec's index, and its fallback
    return index


@dataclass
class MergedRun:
    """One piece of a merge of the mutable part (SPO-Join Alg. 1 l. 8–12), on its way to a
    worker: its tuples in arrival order and their positions in the order of the first served
    condition's key and of the second's (the mutable part's sorted leaves, §4.2)."""

    #: global number of the piece (MergePlan order)
    piece: int
    #: the stream the tuples belong to
    stream: int
    #: the tuples, arrival order
    rows: Batch
    #: int64 (n,): positions in ``rows`` in first-key order
    a_order: np.ndarray
    #: int64 (n,): positions in ``rows`` in second-key order
    b_order: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)


@dataclass(frozen=True)
class MergeSettings:
    """When the mutable part merges: every ``every`` stored tuples of a stream, or once its
    oldest tuple is ``after`` ``ts`` units older than the batch's newest (time), whichever
    comes first; each merge is cut into ``subintervals`` pieces of consecutive arrivals."""

    every: int | None = DEFAULT_MERGE_EVERY
    after: int | None = None
    subintervals: int = 1

    def __post_init__(self) -> None:
        if self.every is None and self.after is None:
            raise ValueError("spo needs merge_every or merge_after")
        if self.every is not None:
            positive_int("merge_every", self.every)
        if self.after is not None:
            positive_int("merge_after", self.after)
        positive_int("subintervals", self.subintervals)


class MergePlan:
    """Which merges follow each batch and which worker gets each piece, computed from the
    batch sequence alone so that the mutable stage and every worker agree without a message
    (SPO-Join §4.5's window state, made deterministic). Pieces are numbered in order and
    dealt to the workers round robin (§4.4)."""

    def __init__(self, streams: tuple[int, ...], workers: int, settings: MergeSettings) -> None:
        self.streams, self.workers, self.settings = streams, workers, settings
        self.count = dict.fromkeys(streams, 0)
        self.oldest_ts: dict[int, int | None] = dict.fromkeys(streams)
        self.batches = 0
        self.pieces = 0

    def step(self, batch: Batch) -> list[tuple[int, list[tuple[int, int]]]]:
        """The merges after ``batch``: ``[(stream, [(piece, worker), …]), …]``."""
        self.batches += 1
        s, out = self.settings, []
        newest = int(batch.ts.max()) if len(batch) else None
        for y in self.streams:
            ys = np.flatnonzero(batch.stream == y)
            if len(ys):
                self.count[y] += len(ys)
                if self.oldest_ts[y] is None:
                    self.oldest_ts[y] = int(batch.ts[ys[0]])
            if not self.count[y]:
                continue
            due = s.every is not None and self.count[y] >= s.every
            oldest = self.oldest_ts[y]
            # an empty batch brings no newer ts: only a count can make a merge due
            if s.after is not None and newest is not None and oldest is not None:
                due = due or newest - oldest >= s.after
            if due:
                first = self.pieces
                self.pieces += s.subintervals
                out.append((y, [(p, p % self.workers) for p in range(first, self.pieces)]))
                self.count[y], self.oldest_ts[y] = 0, None
        return out


def split_pieces(n: int, a_pos: np.ndarray, b_pos: np.ndarray, pieces: int):
    """Positions ``[0, n)`` cut into ``pieces`` ranges of consecutive arrivals (some empty when
    ``n < pieces``), with both key orders restricted to each: ``[(start, end, a, b), …]``
    (``a``, ``b`` relative to ``start``). O(pieces · n)."""
    edges = np.linspace(0, n, pieces + 1).astype(np.int64)
    out = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        a = a_pos[(a_pos >= lo) & (a_pos < hi)] - lo
        b = b_pos[(b_pos >= lo) & (b_pos < hi)] - lo
        out.append((int(lo), int(hi), a, b))
    return out


#: :attr:`SubtreePairs.batch` of a report outside the batch sequence: pairs a worker sends up
#: with a progress marker (:meth:`SPOWorker.on_marker`).
EXTRA = -1


@dataclass
class SubtreePairs:
    """What a worker in a combining tree sends up for batch ``batch`` (its number in the
    batch sequence every worker sees): the pairs it and the workers below it found since its
    last report (module docstring). Exactly one per batch, in order, and one more at end of
    input when pairs found after the last batch remain (``batch`` = the number of batches);
    between them, with a progress marker, reports of batch :data:`EXTRA` (no batch: the pairs
    it holds, sent early)."""

    batch: int
    pairs: PairBatch

    def __len__(self) -> int:
        return len(self.pairs)


@dataclass(frozen=True)
class TreePlace:
    """A worker's place in the broadcast and combining trees (module docstring): how many
    workers it passes batches on to (ports ``down0``…), how many report to it (ports
    ``sub0``…), and whether it reports to another worker (:class:`SubtreePairs`) rather
    than to the collector (plain pairs). The default: no tree (Alg. 1 as written)."""

    down: int = 0
    below: int = 0
    reports: bool = False


@dataclass(frozen=True)
class SPOMutableConfig(ActorConfig):
    """SPO-Join's mutable stage (:class:`SPOMutableStage`): the merge settings, the number of
    workers, and options of the ``po_join`` mutable part (``intersect``, B+-tree sizes)."""

    role = "spo_mutable"
    workers: int = 1
    merge: MergeSettings = field(default_factory=MergeSettings)
    index_options: dict = field(default_factory=dict)

    def check(self, query: Query) -> None:
        """Warn, as a join core over ``po_join`` does, when ``po_join`` serves no condition of
        ``query`` and the stages scan their windows instead (once per topology: the workers
        hold the same index)."""
        note = indexes.plan(_INDEX, query.predicate, query.self_join).note
        if note:  # stacklevel: the caller of sj.run, as a join core's warning
            warnings.warn(note, indexes.IndexFallbackWarning, stacklevel=4)

    def build(self, query: Query, settings: RunSettings, clock: Clock | None) -> SPOMutableStage:
        stage = SPOMutableStage(query, self.workers, self.merge, self.index_options)
        stage.warm()
        return stage

    @property
    def index(self) -> str:
        return _INDEX


@dataclass(frozen=True)
class SPOWorkerConfig(ActorConfig):
    """PO-Join worker ``k`` of ``workers`` (:class:`SPOWorker`)."""

    role = "spo_worker"
    k: int = 0
    workers: int = 1
    merge: MergeSettings = field(default_factory=MergeSettings)
    tree: TreePlace = field(default_factory=TreePlace)

    def build(self, query: Query, settings: RunSettings, clock: Clock | None) -> SPOWorker:
        worker = SPOWorker(query, self.k, self.workers, self.merge, self.tree)
        worker.warm()
        return worker

    @property
    def index(self) -> str:
        return _INDEX


class _Stage(JoinLogic):
    """What both SPO stages share: the spec over ``po_join``, the join cost group's counters
    charged with ``po_join``'s coefficients (:class:`~streamjoin.actors.join_core.JoinLogic`);
    each stage warms the whole pipeline, not a join core alone."""

    #: merges follow batch boundaries (:class:`MergePlan`), which coalescing would move
    merges_batches = False

    def __init__(self, query: Query, index_options: dict) -> None:
        options = {**index_options, "merge_every": None}  # the plan decides, not the index
        self.spec = JoinSpec(query, _INDEX, options, fallback=_INDEX)
        self.work = JoinWork()

    #: the stage's own cost key: ``po_join:<stage>`` (the two stages do different work over
    #: the same counters: the mutable one probes and grows its part, a worker probes its runs;
    #: one set of coefficients for both charged one half and the other double)
    STAGE: str = ""

    @property
    def cost_key(self) -> str:
        # also when po_join serves no condition (the spec's fallback is po_join)
        return f"{_INDEX}:{self.STAGE}"


class SPOMutableStage(_Stage):
    """The mutable stage (module docstring). In: batches (port ``in``). Out: pairs (``out``),
    and :class:`MergedRun` pieces to worker ``k`` (``w{k}``).

    Counters: :class:`~streamjoin.actors.join_spec.JoinWork` as a join core's; tuples
    shipped by a merge count as expired (they leave this stage).
    """

    STAGE = "mutable"

    def __init__(
        self, query: Query, workers: int, merge: MergeSettings, index_options: dict | None = None
    ) -> None:
        super().__init__(query, index_options or {})
        self.workers = workers
        self.merge = merge
        self.index_options = dict(index_options or {})
        self.plan = MergePlan(self.spec.streams, workers, merge)
        self.parts = {y: WindowPart(self.spec, self.work) for y in self.spec.streams}

    def on_batch(self, port: str, batch: Batch) -> list[tuple[str, object]]:
        spec, work = self.spec, self.work
        batch = batch.freeze()
        views = {x: spec.in_key_order(batch, x) for x in spec.streams}
        in_order = {x: xs[order] for x, (xs, _, order) in views.items()}
        work.tuples += len(batch)
        found = []
        for x, (xs, keys, order) in views.items():  # Alg. 1 l. 3: the mutable part
            part = self.parts[spec.probed(x)]
            work.probe_call(len(xs), part.index)
            found.append(part.probe(batch, x, in_order[x], keys=keys[:, order]))
        by_stream = tuple(in_order.values())
        if spec.one_stream:
            by_stream += (by_stream[0][:0],)
        found.append(spec.join_batch(batch, by_stream))
        for y, (ys, keys, order) in views.items():
            self.parts[y].insert(batch, ys, keys=keys, order=order)
            work.inserted += len(ys)
            work.part_calls += 1 if len(ys) else 0
        out: list[tuple[str, object]] = []
        for y, pieces in self.plan.step(batch):  # Alg. 1 l. 7–14
            out += self._merge(y, pieces)
        for y in spec.streams:
            work.expired += self.parts[y].expire(int(batch.horizon[y]))
        pairs = concat_pairs(found)
        if pairs is not None:
            work.pairs += len(pairs)
            out.insert(0, ("out", pairs))
        return out

    def _merge(self, y: int, pieces: list[tuple[int, int]]) -> list[tuple[str, MergedRun]]:
        """Empty stream ``y``'s part and cut its live tuples into the planned pieces."""
        part = self.parts[y]
        store = part.store
        a_slots, b_slots, _, slot_refs = _po_join(part).take_mutable()
        first_ref = store.base + store.head  # tuples below it expired: they go nowhere
        a_pos = slot_refs[a_slots] - first_ref
        b_pos = slot_refs[b_slots] - first_ref
        a_pos, b_pos = a_pos[a_pos >= 0], b_pos[b_pos >= 0]
        rows = store.batch(store.head, store.tail, y)
        self.work.expired += len(rows)
        self.work.part_calls += 1
        self.parts[y] = WindowPart(self.spec, self.work)
        out = []
        cuts = split_pieces(len(rows), a_pos, b_pos, len(pieces))
        for (piece, worker), (lo, hi, a, b) in zip(pieces, cuts, strict=True):
            piece_rows = rows.take(np.arange(lo, hi)) if (lo, hi) != (0, len(rows)) else rows
            out.append((f"w{worker}", MergedRun(piece, y, piece_rows, a, b)))
        return out

    def warm(self) -> None:
        """The join core's kernels over ``po_join``, then a throwaway stage and worker through
        a few merges (every kernel a run reaches: merging, building, probing structures)."""
        WARMED.once(("spo", *warm_key(self.spec)), lambda: warm_pipeline(self.spec.query))


class SPOWorker(_Stage):
    """PO-Join worker ``k`` (module docstring). In: batches (``in``), :class:`MergedRun`
    pieces (``runs``) and, in a combining tree, the reports of the workers below it
    (``sub0``…). Out: pairs (``out``: plain pairs to the collector, or one
    :class:`SubtreePairs` per batch to the worker above), and in a broadcast tree the batches
    it passes on (``down0``…).

    Counters: :class:`~streamjoin.actors.join_spec.JoinWork`; a probe of one stream's linked
    set is one part call, a piece's tuples count as inserted when they arrive and as expired
    when they leave the window; ``pairs`` counts the pairs this worker found, not those it
    passes up for the workers below it.
    """

    STAGE = "worker"

    def __init__(
        self,
        query: Query,
        k: int,
        workers: int,
        merge: MergeSettings,
        tree: TreePlace | None = None,
    ) -> None:
        super().__init__(query, {})
        self.k = k
        self.tree = tree = tree or TreePlace()
        self._heard = [0] * tree.below  # reports heard from each worker below
        self._below: dict[int, list[PairBatch]] = {}  # batch -> pairs reported from below
        self._held: list[PairBatch] = []  # pairs of this worker not yet sent
        self._sent = 0  # batches reported (or, to the collector, sent on)
        self.plan = MergePlan(self.spec.streams, workers, merge)
        # per stream: a store and a po_join index holding only structures (the linked set)
        self.parts = {y: WindowPart(self.spec, self.work) for y in self.spec.streams}
        # per stream, for each structure held (oldest first): the batch after which it merged
        self.merged_after: dict[int, deque[int]] = {y: deque() for y in self.spec.streams}
        self.planned: dict[int, tuple[int, int]] = {}  # piece -> (stream, merged after batch)
        self.early: dict[int, MergedRun] = {}  # pieces here before the batch that plans them
        self.waiting: dict[int, list[Batch]] = {}  # piece -> batches that must probe it
        self.batches = 0

    def passes_on(self, port: str, msg) -> list[tuple[str, Batch]]:
        """A batch, unchanged, to the workers below this one in the broadcast tree."""
        if port != "in":
            return []
        return [(f"down{i}", msg) for i in range(self.tree.down)]

    def on_batch(self, port: str, msg) -> list[tuple[str, object]]:
        if port == "runs":
            found = self._arrive(msg)
        elif port == "in":
            found = self._probe(msg.freeze())
        elif port.startswith("sub") and port[3:].isdigit() and int(port[3:]) < self.tree.below:
            self._hear(int(port[3:]), msg)
            return self._report()
        else:
            ports = ["in", "runs", *(f"sub{c}" for c in range(self.tree.below))]
            raise ValueError(f"spo worker has no input port {port!r}; ports: {ports}")
        pairs = concat_pairs(found)
        if pairs is not None:
            self.work.pairs += len(pairs)
            self._held.append(pairs)
        return self._report()

    def _hear(self, c: int, report: SubtreePairs) -> None:
        """The report of the ``c``-th worker below: the next batch's, at end of input one
        more, or pairs sent early with a marker (:data:`EXTRA`: they go up with this worker's
        own held pairs; :class:`SubtreePairs`)."""
        if report.batch == EXTRA:
            self._held.append(report.pairs)
            return
        if report.batch != self._heard[c]:
            raise ValueError(
                f"spo worker {self.k} expected the report of batch {self._heard[c]} from the "
                f"worker below it on sub{c}, got batch {report.batch}"
            )
        self._heard[c] += 1
        if len(report.pairs):
            self._below.setdefault(report.batch, []).append(report.pairs)

    def _report(self) -> list[tuple[str, object]]:
        """Send on what is complete: per batch probed here and heard from every worker below,
        one report up (or, at the top of the tree, the pairs to the collector)."""
        out: list[tuple[str, object]] = []
        while self._sent < self.batches and all(h > self._sent for h in self._heard):
            found, self._held = self._held + self._below.pop(self._sent, []), []
            pairs = concat_pairs(found)
            if self.tree.reports:
                out.append(("out", SubtreePairs(self._sent, pairs or PairBatch.empty())))
            elif pairs is not None:
                out.append(("out", pairs))
            self._sent += 1
        if not self.tree.reports and self._held:  # found by a piece after its batches
            pairs, self._held = concat_pairs(self._held), []
            if pairs is not None:
                out.append(("out", pairs))
        return out

    def on_marker(self, marker) -> list[tuple[str, object]]:
        """A progress marker has come on every incoming edge: send up the pairs this worker
        holds (module docstring), as an :data:`EXTRA` report (at the top of the tree they went
        to the collector as they were found)."""
        if not self.tree.reports or not self._held:
            return []
        pairs, self._held = concat_pairs(self._held), []
        return [("out", SubtreePairs(EXTRA, pairs))] if pairs is not None else []

    def on_eof(self) -> list[tuple[str, object]]:
        """Everything still held: each batch's report, then what came after the last batch
        (found when late pieces arrived, or reported so from below)."""
        out = self._report()
        n = self.batches
        if self._sent != n or any(h not in (n, n + 1) for h in self._heard):
            raise RuntimeError(
                f"spo worker {self.k} ended after {n} batches having reported {self._sent} "
                f"and heard {self._heard} from below: a combining tree lost a report"
            )
        rest = [p for ps in self._below.values() for p in ps]
        pairs, self._held, self._below = concat_pairs(self._held + rest), [], {}
        if self.tree.reports and pairs is not None:
            out.append(("out", SubtreePairs(n, pairs)))
        elif pairs is not None:
            out.append(("out", pairs))
        return out

    def _probe(self, batch: Batch) -> list[PairBatch]:
        """Probe the structures merged before this batch (Alg. 4), queue it for those still
        on their way, then follow the plan and the window."""
        spec, work = self.spec, self.work
        number = self.batches
        self.batches += 1
        work.tuples += len(batch)
        found = []
        for x in spec.streams:
            y = spec.probed(x)
            ready = sum(1 for after in self.merged_after[y] if after < number)
            found.append(self._probe_structures(batch, x, 0, ready))
        for piece, (_, after) in self.planned.items():
            if after < number:
                self.waiting.setdefault(piece, []).append(batch)
        for y, pieces in self.plan.step(batch):
            for piece, worker in pieces:
                if worker == self.k:
                    self.planned[piece] = (y, number)
                    if piece in self.early:  # no batch after this one came yet
                        self._build(self.early.pop(piece))
        for y in spec.streams:
            part = self.parts[y]
            held = _po_join(part).n_structures
            work.expired += part.expire(int(batch.horizon[y]))
            for _ in range(held - _po_join(part).n_structures):
                self.merged_after[y].popleft()
        return found

    def _arrive(self, run: MergedRun) -> list[PairBatch]:
        """A piece: build its structure if it is planned already, and probe the batches that
        waited for it; else keep it until the batch that plans it comes."""
        if run.piece not in self.planned:
            self.early[run.piece] = run
            return []
        last = self._build(run)
        waiting = self.waiting.pop(run.piece, [])
        if last is None or not waiting:
            return []
        # the batches that waited probe the piece as one: each tuple carries its own window
        # bound (docs/design.md §2), and one probe call per stream, not per batch, keeps a worker
        # that runs ahead of the mutable stage from paying a call for every batch it waited
        batch = waiting[0] if len(waiting) == 1 else Batch.concat(waiting)
        return [
            self._probe_structures(batch, x, last, last + 1)
            for x in self.spec.streams
            if self.spec.probed(x) == run.stream
        ]

    def _build(self, run: MergedRun) -> int | None:
        """Store a planned piece's tuples and build their structure (Alg. 2); returns its
        place in the linked set, or None if nothing of it is live."""
        y, (stream, after) = run.stream, self.planned.pop(run.piece)
        if stream != y:
            raise ValueError(f"piece {run.piece} was planned for stream {stream}, came as {y}")
        rows, n = run.rows.freeze(), len(run.rows)
        self.work.inserted += n
        self.work.part_calls += 1
        if n == 0:
            return None
        part = self.parts[y]
        refs = part.store_rows(rows, np.arange(n))
        keys = self.spec.keys(rows, np.arange(n), y)
        if not _po_join(part).add_structure(run.a_order, run.b_order, keys, refs):
            return None
        self.merged_after[y].append(after)
        return _po_join(part).n_structures - 1

    def _probe_structures(self, batch: Batch, x: int, first: int, end: int) -> PairBatch:
        """Pairs of the batch's stream-``x`` tuples with structures ``first..end-1`` of the
        stream they probe."""
        part = self.parts[self.spec.probed(x)]
        xs = np.flatnonzero(batch.stream == x)
        if end <= first or len(xs) == 0:
            return PairBatch.empty()
        with _po_join(part).only_structures(first, end):
            self.work.probe_call(len(xs), part.index)
            return part.probe(batch, x, xs)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts.values())

    def warm(self) -> None:
        WARMED.once(("spo", *warm_key(self.spec)), lambda: warm_pipeline(self.spec.query))


def warm_pipeline(query: Query) -> None:
    """Compile (or load) every kernel of an SPO run: a join core over ``po_join`` (probes, the
    in-batch join), then a throwaway stage feeding a throwaway worker through merges, pieces
    arriving both before and after the batches they serve."""
    JoinCore(query, _INDEX).warm()
    merge = MergeSettings(every=200, subintervals=2)
    stage = SPOMutableStage(query, 1, merge)
    worker = SPOWorker(query, 0, 1, merge)
    k, n = len(query.attrs), 512
    per_stream = n if query.self_join else n // 2
    for b in range(4):
        batch = warm_batch(k, query.self_join, n, first=b * per_stream, horizon=b * per_stream // 2)
        batch.seq = batch.seq + b * n
        runs = [msg for port, msg in stage.on_batch("in", batch) if port != "out"]
        if b % 2:
            worker.on_batch("in", batch)
        for run in runs:
            worker.on_batch("runs", run)
        if not b % 2:
            worker.on_batch("in", batch)
