"""The join core: the batch algorithm of DESIGN §2 over any registered window index."""

from __future__ import annotations

import numpy as np

from streamjoin import indexes
from streamjoin.actors.join_kernels import (
    EITHER,
    R_PROBES,
    S_PROBES,
    filter_candidates,
    join_within_batch,
)
from streamjoin.actors.store import TupleStore
from streamjoin.batch import Batch, PairBatch
from streamjoin.query import Query


def _unique_pairs(pos: np.ndarray, refs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((refs, pos))
    pos, refs = pos[order], refs[order]
    first = np.ones(len(pos), dtype=bool)
    first[1:] = (pos[1:] != pos[:-1]) | (refs[1:] != refs[:-1])
    return pos[first], refs[first]


class JoinCore:
    """Joins batches of both streams exactly as tuple-at-a-time probe → insert → expire would.

    For a batch (tuples of both streams in ``seq`` order), DESIGN §2:

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

    Parameters
    ----------
    query : Query
    index : str, optional
        Registry name of the window index (default: ``hash`` for equi-joins, else
        ``nested_loop``).
    index_options : dict, optional
        Keyword arguments for the index constructor (fan-out, chain length, …).
    ports : dict, optional
        Input port -> streams it carries (default: one port ``"in"`` with both).
    forward : bool
        Send every input batch on, unchanged, on port ``"<in port>_next"`` (chain layouts).
    """

    def __init__(
        self,
        query: Query,
        index: str | None = None,
        index_options: dict | None = None,
        ports: dict[str, tuple[int, ...]] | None = None,
        forward: bool = False,
    ):
        self.query = query
        self.index_name = index or indexes.default_for(query.predicate)
        cls = indexes.check_supports(self.index_name, query.predicate)
        self.n_keys = len(query.predicate) if cls.multi_attribute else 1
        self.streams = (0,) if query.self_join else (0, 1)
        options = dict(index_options or {})
        self.index_options = options
        self.stores = {y: TupleStore(len(query.attrs)) for y in self.streams}
        self.indexes = {y: cls(self.n_keys, **options) for y in self.streams}
        self.ports = {"in": (0, 1)} if ports is None else {p: tuple(v) for p, v in ports.items()}
        self.forward = forward
        self.cond_attr = query.condition_attr_index
        self.lo, self.hi = query.predicate.bounds
        self.stats = {"probes": 0, "candidates": 0, "pairs": 0, "inserted": 0, "expired": 0}

    # -- one batch ---------------------------------------------------------------------------

    def on_batch(self, port: str, batch: Batch) -> list[tuple[str, PairBatch]]:
        """Join one batch; returns ``[("out", PairBatch)]`` when it produced pairs (preceded by
        the batch itself on ``"<port>_next"`` when forwarding)."""
        if port not in self.ports:
            raise ValueError(f"join core has no input port {port!r}; ports: {list(self.ports)}")
        sent = [(f"{port}_next", batch)] if self.forward else []
        parts = [self._probe_stored(batch, x) for x in self.streams]
        if batch.store:
            parts.append(self._join_batch(batch))
            self._insert(batch)
        self._expire(batch, self.ports[port])
        pairs = [p for p in parts if len(p)]
        if not pairs:
            return sent
        out = pairs[0] if len(pairs) == 1 else PairBatch(
            *(np.concatenate([getattr(p, f) for p in pairs]) for f in ("r", "s", "ingest_ns"))
        )  # fmt: skip
        self.stats["pairs"] += len(out)
        return [*sent, ("out", out)]

    def on_eof(self) -> list[tuple[str, PairBatch]]:
        return []

    def _probe_bounds(self, orient: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Index probe boxes (``item - key`` intervals) for probing tuples of one orientation."""
        lo, hi = self.lo[: self.n_keys], self.hi[: self.n_keys]
        if orient == R_PROBES:  # stored items are s: s - r in [lo, hi]
            return [(lo, hi)]
        stored_r = (-hi, -lo)  # stored items are r: r - s in [-hi, -lo]
        if orient == S_PROBES or self.query.predicate.symmetric:
            return [stored_r]
        # self-join, asymmetric: stored a may be r (θ(a, b)) or s (θ(b, a))
        if self.n_keys == 1 and max(lo[0], -hi[0]) <= min(hi[0], -lo[0]):  # intervals overlap
            return [(np.minimum(lo, -hi), np.maximum(hi, -lo))]
        return [stored_r, (lo, hi)]

    def _probe_stored(self, batch: Batch, x: int) -> PairBatch:
        """Step 1: tuples of stream ``x`` probe the opposite stream's index."""
        y = x if self.query.self_join else 1 - x
        index, store = self.indexes[y], self.stores[y]
        xs = np.flatnonzero(batch.stream == x)
        if len(index) == 0 or len(xs) == 0:
            return PairBatch.empty()
        orient = EITHER if self.query.self_join else (R_PROBES if x == 0 else S_PROBES)
        keys = np.ascontiguousarray(batch.attrs[self.cond_attr[: self.n_keys]][:, xs])
        boxes = self._probe_bounds(orient)
        found = [index.probe(keys, lo, hi) for lo, hi in boxes]
        pos, refs = (
            found[0]
            if len(found) == 1
            else _unique_pairs(*map(np.concatenate, zip(*found, strict=True)))
        )
        self.stats["probes"] += len(xs)
        self.stats["candidates"] += len(pos)
        first = self.n_keys
        if orient == EITHER and self.query.predicate.symmetric:
            orient = S_PROBES  # θ(a, b) ⇔ θ(b, a): one orientation decides
        elif orient == EITHER:
            first = 0  # each box guaranteed only its own orientation
        rows = refs - store.base
        bpos = xs[pos]
        keep = filter_candidates(
            batch.attrs, batch.seq, batch.idx, batch.lo_idx, bpos,
            store.attrs, store.seq, store.idx, store.lo_idx, rows,
            self.cond_attr, self.lo, self.hi, first, orient,
        )  # fmt: skip
        later, earlier = bpos[keep], rows[keep]
        return self._pairs(x, batch.seq[later], store.seq[earlier],
                           np.maximum(batch.ingest_ns[later], store.ingest_ns[earlier]))  # fmt: skip

    def _join_batch(self, batch: Batch) -> PairBatch:
        """Step 2: pairs whose earlier tuple is in the same batch."""
        if len(batch) < 2:
            return PairBatch.empty()
        i, j = join_within_batch(
            batch.stream, batch.idx, batch.lo_idx, batch.attrs,
            self.cond_attr, self.lo, self.hi, self.query.self_join,
        )  # fmt: skip
        if len(i) == 0:
            return PairBatch.empty()
        ingest = np.maximum(batch.ingest_ns[i], batch.ingest_ns[j])
        if self.query.self_join:
            return PairBatch(batch.seq[j], batch.seq[i], ingest)
        later_is_r = batch.stream[i] == 0
        r = np.where(later_is_r, batch.seq[i], batch.seq[j])
        s = np.where(later_is_r, batch.seq[j], batch.seq[i])
        return PairBatch(r, s, ingest)

    def _pairs(self, x: int, later: np.ndarray, earlier: np.ndarray, ingest: np.ndarray):
        if self.query.self_join or x == 1:  # earlier is r (older, for a self-join)
            return PairBatch(earlier, later, ingest)
        return PairBatch(later, earlier, ingest)

    def _insert(self, batch: Batch) -> None:
        """Step 3a: store and index the batch's tuples."""
        for y in self.streams:
            ys = np.flatnonzero(batch.stream == y)
            if len(ys):
                refs = self.stores[y].append(batch, ys)
                keys = np.ascontiguousarray(batch.attrs[self.cond_attr[: self.n_keys]][:, ys])
                self.indexes[y].insert(keys, refs)
                self.stats["inserted"] += len(ys)

    def _expire(self, batch: Batch, carried: tuple[int, ...]) -> None:
        """Step 3b: expire each stream probed by a stream this batch's port carries."""
        probed = {x if self.query.self_join else 1 - x for x in carried}
        for y in probed & set(self.streams):
            store = self.stores[y]
            before = len(store)
            first_live = store.expire(int(batch.horizon[y]))
            self.stats["expired"] += before - len(store)
            self.indexes[y].expire(first_live)

    # -- introspection -----------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes held by this core's stores and indexes."""
        return sum(s.nbytes for s in self.stores.values()) + sum(
            i.nbytes for i in self.indexes.values()
        )

    def warm(self) -> None:
        """Compile (or load from the disk cache) every kernel on a throwaway two-tuple run."""
        probe = JoinCore(self.query, self.index_name, self.index_options)
        k = len(self.query.attrs)
        for _ in range(2):  # the second batch probes what the first stored
            probe.on_batch("in", _warm_batch(k, self.query.self_join))


def _warm_batch(k: int, self_join: bool, n: int = 2) -> Batch:
    z = np.zeros(n, dtype=np.int64)
    stream = np.zeros(n, dtype=np.int8) if self_join else (np.arange(n) % 2).astype(np.int8)
    return Batch(
        seq=np.arange(n, dtype=np.int64), stream=stream, idx=z.copy(), ts=z.copy(),
        ingest_ns=z.copy(), lo_idx=z.copy(), attrs=np.zeros((k, n)),
    )  # fmt: skip
