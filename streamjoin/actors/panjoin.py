"""PanJoin's manager and workers (Pan & Jacobsen §III-A), over any registered window index.

Each stream's window is a chronological chain of subwindows placed round robin on the
workers. The manager owns that topology — which subwindows exist, where, how full, the last
``idx`` each holds — and turns every batch into commands for the workers: *create* a
subwindow, *probe* subwindows of the opposite stream, *insert* tuples into the newest one,
*expire* the oldest whole. Workers never talk to each other; they send result pairs to the
collector. The manager joins the batch with itself (pairs whose earlier tuple is in the same
batch, docs/design.md §2 step 2), so the workers only probe what was stored before the batch.

The paper's workers report "oldest subwindow empty / newest full" back to the manager (Step
5). Here the manager counts what it inserted and knows the window bounds from the emitter's
horizons, so it needs no feedback and the actor graph stays acyclic.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from streamjoin import indexes
from streamjoin.actors.base import WARMED, ActorConfig, Clock, Logic, RunSettings
from streamjoin.actors.join_core import IndexChoice, JoinLogic, warm_batch
from streamjoin.actors.join_spec import JoinSpec, JoinWork
from streamjoin.actors.window_part import WindowPart
from streamjoin.batch import Batch, PairBatch, concat_pairs
from streamjoin.indexes.panjoin.subwindows import SubwindowIndex
from streamjoin.query import Query


@dataclass
class WorkerCommand:
    """One batch and what one worker must do with it, in this order: create, probe, insert,
    expire (probing sees the subwindows as they stood at the batch start)."""

    batch: Batch
    create: list[int] = field(default_factory=list)
    probe: list[tuple[int, list[int]]] = field(default_factory=list)  # (stream x, subwindows)
    insert: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (subwindow, positions)
    expire: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.batch)

    @property
    def ingest_ns(self) -> np.ndarray:
        """When the batch's tuples arrived."""
        return self.batch.ingest_ns


@dataclass
class _Subwindow:
    id: int
    stream: int
    worker: int
    count: int = 0
    last_idx: int = -1


def subwindow_sizes(query: Query, subwindows: int, subwindow_size: int | None) -> dict[int, int]:
    """Tuples a PanJoin subwindow of each stream holds: ``subwindow_size`` if given, else for
    a count window of ``w`` tuples ``ceil(w / subwindows)``, else (time windows) 4096."""
    if subwindow_size is not None:
        return {y: subwindow_size for y in (0, 1)}
    if query.window.kind == "count":
        # ceil(w / subwindows) in integers: exact for windows up to 2**63 - 1
        return {y: -(-query.window_size(y) // subwindows) for y in (0, 1)}
    return {y: 4096 for y in (0, 1)}


@dataclass(frozen=True)
class ManagerConfig(ActorConfig):
    """PanJoin's manager node: ``workers`` workers, each window cut into ``subwindows``
    subwindows (count windows) or subwindows of ``subwindow_size`` tuples. ``index`` only picks
    the in-batch join's kernels; index options belong to the workers (a subwindow index's own
    ``subwindow_size`` option is another thing than the manager's)."""

    role = "manager"
    workers: int = 1
    subwindows: int = 4
    subwindow_size: int | None = None
    index: str | None = None

    def build(self, query: Query, settings: RunSettings, clock: Clock | None) -> PanJoinManager:
        manager = PanJoinManager(
            query, self.workers, self.subwindows, self.subwindow_size, self.index
        )
        manager.warm()
        return manager


@dataclass(frozen=True)
class WorkerConfig(IndexChoice, ActorConfig):
    """A PanJoin worker node: the index (and its options) inside each of its subwindows, sized
    by the manager's subwindows (``subwindows``, ``subwindow_size``: :class:`ManagerConfig`'s)."""

    role = "worker"
    subwindows: int = 4
    subwindow_size: int | None = None

    def build(self, query: Query, settings: RunSettings, clock: Clock | None) -> PanJoinWorker:
        items = max(subwindow_sizes(query, self.subwindows, self.subwindow_size).values())
        worker = PanJoinWorker(query, self.index, self.index_options, items)
        worker.warm()
        return worker


class PanJoinManager(Logic):
    """Plans the subwindow commands for every batch (PanJoin §III-A Steps 1–3).

    Parameters
    ----------
    query : Query
    workers : int
        Number of workers (ports ``w0``, ``w1``, … on the topology).
    subwindows : int
        Subwindows per window for a count window: each holds ``ceil(w / subwindows)`` tuples.
    subwindow_size : int, optional
        Tuples per subwindow, overriding ``subwindows`` (required sense for time windows;
        default 4096 there).
    index : str, optional
        Only used for the batch's self-join kernels (the workers hold the indexes).

    Counters: tuples planned, commands sent, pairs of the in-batch join.
    """

    cost_group = "manager"
    COUNTERS: ClassVar[tuple[str, ...]] = ("tuples", "msgs_out", "pairs")
    merges_batches = True

    def __init__(
        self,
        query: Query,
        workers: int,
        subwindows: int,
        subwindow_size: int | None = None,
        index: str | None = None,
    ) -> None:
        self.spec = JoinSpec(query, index)
        self.workers = workers
        self.size = subwindow_sizes(query, subwindows, subwindow_size)
        self.chains: dict[int, deque[_Subwindow]] = {y: deque() for y in self.spec.streams}
        self.next_id = 0
        self.placed = {y: y for y in self.spec.streams}  # streams start on different workers
        self.tuples = self.msgs_out = self.pairs = 0

    def counters(self) -> tuple[int, int, int]:
        return (self.tuples, self.msgs_out, self.pairs)

    def on_batch(self, port: str, batch: Batch) -> list[tuple[str, object]]:
        spec = self.spec
        batch = batch.freeze()
        commands: dict[int, WorkerCommand] = {}

        def command(worker: int) -> WorkerCommand:
            if worker not in commands:
                commands[worker] = WorkerCommand(batch)
            return commands[worker]

        # probe: every live subwindow of the probed stream, as it stands at the batch start
        for x in spec.streams:
            if not np.any(batch.stream == x):
                continue
            by_worker: dict[int, list[int]] = {}
            for sub in self.chains[spec.probed(x)]:
                if sub.count:
                    by_worker.setdefault(sub.worker, []).append(sub.id)
            for worker, subs in by_worker.items():
                command(worker).probe.append((x, subs))
        # insert: fill the newest subwindow, create the next one when it is full
        if batch.store:
            for y in spec.streams:
                pos = np.flatnonzero(batch.stream == y)
                while len(pos):
                    sub = self._newest(y, command)
                    take = pos[: self.size[y] - sub.count]
                    command(sub.worker).insert.append((sub.id, take))
                    sub.count += len(take)
                    sub.last_idx = int(batch.idx[take[-1]])
                    pos = pos[len(take) :]
        # expire whole subwindows no later tuple can reach (PanJoin §III-G)
        for y in spec.streams:
            chain = self.chains[y]
            while chain and chain[0].count and chain[0].last_idx < batch.horizon[y]:
                old = chain.popleft()
                command(old.worker).expire.append(old.id)
        out: list[tuple[str, object]] = [(f"w{w}", c) for w, c in sorted(commands.items())]
        self.tuples += len(batch)
        self.msgs_out += len(out)
        pairs = spec.join_batch(batch) if batch.store else PairBatch.empty()
        if len(pairs):
            out.append(("out", pairs))
            self.pairs += len(pairs)
        return out

    def warm(self) -> None:
        """Compile (or load from the disk cache) the in-batch join's kernels on a throwaway
        batch, so the first batch of a run does not pay for it (once per process)."""
        WARMED.once(("manager", self.spec.query.self_join), self._warm)

    def _warm(self) -> None:
        batch = warm_batch(len(self.spec.query.attrs), self.spec.query.self_join).freeze()
        self.spec.join_batch(batch)

    def _newest(self, y: int, command) -> _Subwindow:
        chain = self.chains[y]
        if not chain or chain[-1].count >= self.size[y]:
            worker = self.placed[y] % self.workers
            self.placed[y] += 1
            chain.append(_Subwindow(self.next_id, y, worker))
            command(worker).create.append(self.next_id)
            self.next_id += 1
        return chain[-1]

    def on_eof(self) -> list:
        return []


class PanJoinWorker(JoinLogic):
    """Holds subwindows (one :class:`WindowPart` each) and carries out the manager's commands
    (PanJoin §III-A Step 4).

    ``subwindow_items``: about how many tuples a subwindow holds (the manager's size), which
    sizes the index inside it as a join core's window sizes its index
    (:meth:`~streamjoin.indexes.base.WindowIndex.window_options`, where the user set none of
    its options; BI-Sort's own runs then grow with the subwindow instead of staying 2^16).

    Counters: :class:`~streamjoin.actors.join_spec.JoinWork` (a subwindow created or dropped
    is a part call; whole subwindows are dropped in O(1), so nothing counts as expired).
    Charged ``<index>:panjoin``'s cost row (a row shared with single cores fitted the
    workers' steps poorly).
    """

    cost_stage = "panjoin"

    def __init__(
        self,
        query: Query,
        index: str | None = None,
        index_options: dict | None = None,
        subwindow_items: int | None = None,
    ):
        self.spec = JoinSpec(query, index, index_options)
        self.subwindow_items = subwindow_items
        self.parts: dict[int, WindowPart] = {}
        self.work = JoinWork()

    def on_batch(self, port: str, cmd: WorkerCommand) -> list[tuple[str, PairBatch]]:
        spec, work = self.spec, self.work
        batch = cmd.batch.freeze()
        work.tuples += len(batch)
        work.part_calls += len(cmd.insert) + len(cmd.create) + len(cmd.expire)
        for sub in cmd.create:
            self.parts[sub] = WindowPart(spec, work, self.subwindow_items)
        # each stream's tuples in key order, once per command: the subwindows are probed with
        # sorted keys (no index sorts them again), and an insert of all of a stream's tuples
        # takes the order along
        views = {x: spec.in_key_order(batch, x) for x in spec.streams}
        found = []
        for x, subs in cmd.probe:
            xs, keys, order = views[x]
            xs, keys = xs[order], keys[:, order]
            for sub in subs:
                part = self.parts[sub]
                work.probe_call(len(xs), part.index)
                found.append(part.probe(batch, x, xs, keys=keys))
        for sub, pos in cmd.insert:  # pos: a non-empty run of one stream's positions
            xs, keys, order = views[int(batch.stream[pos[0]])]
            whole = len(pos) == len(xs)
            self.parts[sub].insert(batch, pos, *((keys, order) if whole else ()))
            work.inserted += len(pos)
        for sub in cmd.expire:
            del self.parts[sub]
        out = concat_pairs(found)
        if out is None:
            return []
        work.pairs += len(out)
        return [("out", out)]

    def held_items(self) -> int:
        """Tuples its subwindows hold, both streams. A probe batch here searches several
        subwindows, each counted a probe; a tree's probe of one subwindow misses about as
        often as a join core's probe of a window as large as all of them, since the
        subwindows share the caches (what the smaller trees lack are upper levels, which
        stay cached)."""
        return sum(len(p) for p in self.parts.values())

    @property
    def window_costs_apply(self) -> bool:
        """Whether a join core's window costs describe its probes: not over an index with
        subwindows of its own (BI-Sort, RaP-Table, WiB+-Tree: a counted probe searches as
        many runs as the index's own sizing makes)."""
        return not issubclass(indexes.get(self.spec.index_name), SubwindowIndex)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts.values())
