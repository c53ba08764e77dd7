"""The join core: the batch algorithm of docs/design.md §2 over any registered window index."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from streamjoin import compile_ahead, indexes
from streamjoin.actors.base import WARMED, ActorConfig, Clock, Logic, RunSettings, options_key
from streamjoin.actors.join_spec import JOIN_COUNTERS, JoinSpec, JoinWork
from streamjoin.actors.window_part import WindowPart
from streamjoin.batch import Batch, PairBatch, concat_pairs
from streamjoin.query import Query


@dataclass(frozen=True)
class IndexChoice:
    """The window index a join actor holds: a registry name (None: chosen from the predicate
    at run time, :func:`~streamjoin.indexes.default_for`) and the index's own options."""

    index: str | None = None
    index_options: dict = field(default_factory=dict)

    #: The options go to another form of the index that checks them (the shared-index core).
    checks_options_itself: ClassVar[bool] = False

    def check(self, query: Query) -> None:
        """A ``ValueError`` naming an option the index does not take (the index chosen from
        the predicate when none is named); a warning
        (:class:`~streamjoin.indexes.IndexFallbackWarning`) if the index named cannot serve
        ``query``'s first condition: the join stays exact, another condition is served or the
        window is scanned (:func:`~streamjoin.indexes.plan`)."""
        if self.index_options and not self.checks_options_itself:
            name = self.index or indexes.default_for(query.predicate, query.self_join)
            indexes.check_options(name, self.index_options)
        if self.index is None:
            return
        note = indexes.plan(self.index, query.predicate, query.self_join).note
        if note:
            warnings.warn(note, indexes.IndexFallbackWarning, stacklevel=4)


@dataclass(frozen=True)
class JoinCoreConfig(IndexChoice, ActorConfig):
    """A join core node (:class:`JoinCore`): its index, its input ports and the streams each
    carries (None: one port ``"in"`` with both), the output port on which it passes each input
    port's batches on along a chain (``forward``, named by the topology; DP-Join's
    forwarding), and whether it runs a self-join as the stream joined with itself
    (``paired``: a grid core, which sees R and S copies apart)."""

    role = "join_core"
    ports: dict | None = None
    forward: dict | None = None
    paired: bool = False
    #: The core's output is the whole result stream (one core): with ``ordered`` runs it
    #: sorts each batch's pairs, so the collector receives them in order as they come.
    in_order: bool = False

    def build(self, query: Query, settings: RunSettings, clock: Clock | None) -> JoinCore:
        ordered = settings.ordered and self.in_order
        core = JoinCore(
            query,
            self.index,
            self.index_options,
            self.ports,
            self.forward,
            self.paired,
            ordered,
        )
        core.warm()
        return core


class JoinLogic(Logic):
    """What every join actor shares (join core, handshake cores, PanJoin worker): a
    :class:`~streamjoin.actors.join_spec.JoinSpec` (``spec``) and the ``join`` cost group's
    counters (``work``), charged with its index's coefficients; warming runs a join core over
    the same index (the same kernels)."""

    cost_group = "join"
    COUNTERS = JOIN_COUNTERS
    #: A layout's join actor whose steps wrap the index's kernels in work of its own (a
    #: PanJoin worker's call per subwindow, a handshake core's forwarding) is charged a cost
    #: row of its own, ``<index>:<stage>``, fitted on that layout's steps; a profile without
    #: the row charges the index's (:class:`~streamjoin.runtime.sim.costs.CostModel`).
    cost_stage: ClassVar[str | None] = None
    spec: JoinSpec
    work: JoinWork

    @property
    def cost_key(self) -> str:
        """The index, or ``<index>:<stage>`` for a layout's stage (``cost_stage``)."""
        index = self.spec.index_name
        return index if self.cost_stage is None else f"{index}:{self.cost_stage}"

    def counters(self) -> tuple:
        return self.work.as_tuple()

    def held_items(self) -> int | None:
        """Tuples this actor's window parts hold, both streams (what its steps' working set
        grows with), or None for an actor whose state is not window parts."""
        parts = getattr(self, "parts", None)
        return None if parts is None else sum(len(p) for p in parts.values())

    def warm(self) -> None:
        JoinCore(self.spec.query, self.spec.index_name, self.spec.index_options).warm()


class JoinCore(JoinLogic):
    """Joins batches of both streams exactly as tuple-at-a-time probe → insert → expire would.

    For a batch (tuples of both streams in ``seq`` order), docs/design.md §2:

    1. each tuple x probes the index of the opposite stream as it stood at the batch start;
       candidates y are kept iff ``y.idx >= x.lo_idx`` (in x's window) and θ holds exactly;
    2. pairs whose earlier tuple is in the same batch come from :func:`join_within_batch`;
    3. the batch's tuples are stored and indexed, and tuples below the batch's ``horizon``
       expire from stores and indexes.

    Each pair is produced once, by the later tuple. One entry point, :meth:`on_batch`, so every
    executor drives the same object.

    In parallel topologies a core sees part of the input: a batch with ``store=False`` is only
    probed (split join: another core owns it), and R and S may arrive on different ports
    (``ports`` maps each input port to the streams it carries; DP-Join grid). Each port is FIFO,
    so expiry of stream Y follows only the horizons of batches from ports that carry Y's
    probers: a prober emitted earlier can then no longer be on its way.

    A ``paired`` core runs a self-join as the stream joined with itself (a DP-Join grid:
    :class:`~streamjoin.actors.join_spec.JoinSpec`): R copies on one port, S copies on the
    other, each message one-sided, so step 2 is skipped — the R and S copies of one batch meet
    at one core, and the later of the two to get there finds their pairs by probing the other.
    Both copies carry the one stream's horizon: an R copy's lets the S copies below it expire,
    which are older than every R copy still to come on its port, and a meeting with an older
    S copy does not count.

    Parameters
    ----------
    query : Query
    index : str, optional
        Registry name of the window index (default: :func:`~streamjoin.indexes.default_for`
        the predicate).
    index_options : dict, optional
        Keyword arguments for the index constructor (fan-out, chain length, …).
    ports : dict, optional
        Input port -> streams it carries (default: one port ``"in"`` with both).
    forward : dict, optional
        Input port -> the output port on which every batch of that port is passed on,
        unchanged, before it is joined (chain layouts; :meth:`passes_on`); default: none.
    paired : bool
        Run a self-join as the stream joined with itself (ignored for a two-way join).
    ordered : bool
        Return each batch's pairs in order of the later tuple's ``seq`` (then the earlier's):
        a core whose input arrives in ``seq`` order on one port then emits the result stream
        in the order tuple-at-a-time processing would.

    Counters: :class:`~streamjoin.actors.join_spec.JoinWork`.
    """

    merges_batches = True

    def __init__(
        self,
        query: Query,
        index: str | None = None,
        index_options: dict | None = None,
        ports: dict[str, tuple[int, ...]] | None = None,
        forward: dict[str, str] | None = None,
        paired: bool = False,
        ordered: bool = False,
    ):
        self.query = query
        self.spec = JoinSpec(query, index, index_options, paired)
        self.index_name = self.spec.index_name
        self.work = JoinWork()
        window = query.window
        self.parts = {
            y: WindowPart(self.spec, self.work, window.size(y) if window.kind == "count" else None)
            for y in self.spec.streams
        }
        self.ports = {"in": (0, 1)} if ports is None else {p: tuple(v) for p, v in ports.items()}
        if self.spec.paired and any(len(v) > 1 for v in self.ports.values()):
            raise ValueError(
                f"a paired self-join core takes R and S copies on different ports; got {ports}"
            )
        self.forward = dict(forward or {})
        if not set(self.forward) <= set(self.ports):
            raise ValueError(
                f"join core passes on ports {sorted(self.forward)} it does not take; "
                f"ports: {list(self.ports)}"
            )
        self.ordered = ordered

    # -- one batch ---------------------------------------------------------------------------

    def passes_on(self, port: str, batch: Batch) -> list[tuple[str, Batch]]:
        """With ``forward``: the batch on to the next core of its chain, unchanged, before
        this core joins it, as DP-Join passes the pointer on first (§III-C)."""
        self._check_port(port)
        out = self.forward.get(port)
        return [] if out is None else [(out, batch)]

    def _check_port(self, port: str) -> None:
        if port not in self.ports:
            raise ValueError(f"join core has no input port {port!r}; ports: {list(self.ports)}")

    def on_batch(self, port: str, batch: Batch) -> list[tuple[str, PairBatch]]:
        """Join one batch; returns ``[("out", PairBatch)]`` when it produced pairs. What goes
        on along a chain is :meth:`passes_on`'s."""
        self._check_port(port)
        spec = self.spec
        batch = batch.freeze()
        found = []
        # each stream's tuples in key order, once: probing, the in-batch join and the index
        # inserts share it
        views = {x: spec.in_key_order(batch, x) for x in spec.streams}
        in_order = {x: xs[order] for x, (xs, _, order) in views.items()}
        work = self.work
        work.tuples += len(batch)
        for x, (xs, keys, order) in views.items():  # step 1
            part = self.parts[spec.probed(x)]
            work.probe_call(len(xs), part.index)
            found.append(part.probe(batch, x, in_order[x], keys=keys[:, order]))
        if batch.store:
            if not spec.paired:  # step 2
                by_stream = tuple(in_order.values())
                if spec.one_stream:
                    by_stream += (by_stream[0][:0],)
                found.append(spec.join_batch(batch, by_stream))
            for y, (ys, keys, order) in views.items():  # step 3
                self.parts[y].insert(batch, ys, keys=keys, order=order)
                work.inserted += len(ys)
            if len(batch):  # one insert call per stream the batch holds tuples of
                work.part_calls += sum(1 for xs, _, _ in views.values() if len(xs))
        # expire each stream probed by a stream this port carries (see the class docstring)
        for y in {spec.probed(x) for x in self.ports[port]} & set(spec.streams):
            work.expired += self.parts[y].expire(int(batch.horizon[y]))
        out = concat_pairs(found)
        if out is None:
            return []
        work.pairs += len(out)
        if self.ordered:
            out = in_pair_order(out)
        return [("out", out)]

    # -- introspection -----------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes held by this core's stores and indexes."""
        return sum(p.nbytes for p in self.parts.values())

    def warm(self) -> None:
        """Compile (or load from the disk cache) every kernel on a throwaway run: four batches
        are stored, each probing those before it, and the last one's horizon expires half of the
        first (the indexes' delete paths, which a run reaches only once a window is full), under
        the index's ``warm_options`` (e.g. subwindows small enough to fill). Once per process
        for each index, its options and the query's shape
        (:data:`~streamjoin.actors.base.WARMED`).
        """
        for part in self.parts.values():  # the slowest kernels, meanwhile, in a second process
            compile_ahead.start(part.index.compile_ahead())
        WARMED.once(warm_key(self.spec), lambda: self._warm())

    def _warm(self) -> None:
        k, self_join = len(self.query.attrs), self.query.self_join
        options = {**self.spec.index_options, **self.spec.index_cls.warm_options}
        probe = JoinCore(self.query, self.index_name, options)
        n = 512
        per_stream = n if self_join else n // 2
        for b in range(4):  # the fourth probes what the third filled (a merged structure)
            expire = per_stream // 2 if b == 3 else 0
            probe.on_batch("in", warm_batch(k, self_join, n, first=b * per_stream, horizon=expire))


def in_pair_order(pairs: PairBatch) -> PairBatch:
    """``pairs`` sorted by the later tuple's ``seq``, then the earlier's (docs/design.md §1)."""
    r, s = pairs.r, pairs.s
    order = np.lexsort((np.minimum(r, s), np.maximum(r, s)))
    return PairBatch(r[order], s[order], pairs.ingest_ns[order])


def warm_key(spec: JoinSpec) -> tuple:
    """What decides which kernels (and type signatures) a join over ``spec`` reaches: the
    index and its options, self-join or not, the key rows, the predicate's symmetry."""
    q = spec.query
    return (
        "join",
        spec.index_name,
        options_key(spec.index_options),
        q.self_join,
        spec.n_keys,
        q.predicate.symmetric,
        spec.symmetric_keys,
        spec.plan.fallback,
    )


def warm_batch(k: int, self_join: bool, n: int = 512, first: int = 0, horizon: int = 0) -> Batch:
    """A throwaway batch of ``n`` tuples with ``k`` attributes for warming kernels: large
    enough for every kernel a real batch runs (:func:`~streamjoin.indexes.blocks.key_order.
    stable_order` hands batches under 256 keys to numpy), its keys far apart so few pairs
    match. ``k`` attributes: their image rows, then NaN residual rows, as float columns have
    (an exact integer join runs the same kernels, with other values in :class:`~streamjoin.
    actors.join_kernels.Conditions`). Its tuples' ``idx`` count on from ``first`` in each stream, and ``horizon`` (the
    same for both streams) lets the receiving core expire the tuples below it."""
    z = np.zeros(n, dtype=np.int64)
    stream = np.zeros(n, dtype=np.int8) if self_join else (np.arange(n) % 2).astype(np.int8)
    idx = first + (np.arange(n, dtype=np.int64) if self_join else np.arange(n) // 2)
    images = np.repeat(np.arange(n, dtype=np.float64)[None, ::-1] * 1e9, k, axis=0)
    attrs = np.concatenate([images, np.full((k, n), np.nan)])  # float columns' residuals
    return Batch(
        seq=np.arange(n, dtype=np.int64),
        stream=stream,
        idx=idx,
        ts=z.copy(),
        ingest_ns=z.copy(),
        lo_idx=z.copy(),
        attrs=attrs,
        horizon=np.full(2, horizon, dtype=np.int64),
    )
