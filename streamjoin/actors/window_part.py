"""A part of one stream's window — a tuple store plus a window index over it — that batches
probe and fill (:class:`WindowPart`), and the join actors' pair helpers; the query's compiled
form is :mod:`~streamjoin.actors.join_spec`'s."""

from __future__ import annotations

from typing import cast

import numpy as np

from streamjoin.actors.join_kernels import (
    EITHER,
    R_PROBES,
    S_PROBES,
    probe_pairs,
)
from streamjoin.actors.join_spec import JoinSpec, JoinWork, unique_pairs
from streamjoin.actors.store import TupleStore
from streamjoin.batch import Batch, PairBatch
from streamjoin.indexes.base import OrderedInsert


class WindowPart:
    """Tuples of one stream held in one place — a join core's whole window, or one PanJoin
    subwindow — with a window index over them.

    ``probe`` is docs/design.md §2 step 1 against this part; ``insert`` and ``expire`` step 3.
    """

    def __init__(
        self, spec: JoinSpec, work: JoinWork | None = None, items: int | None = None
    ) -> None:
        """``items``: about how many tuples the part will hold, if known (a join core over a
        count window), to size its index (:meth:`JoinSpec.new_index`)."""
        self.spec = spec
        self.store = TupleStore(2 * len(spec.query.attrs))
        self.index = spec.new_index(items)
        self.work = JoinWork() if work is None else work

    def __len__(self) -> int:
        return len(self.store)

    @property
    def nbytes(self) -> int:
        return self.store.nbytes + self.index.nbytes

    def probe(
        self, batch: Batch, x: int, xs: np.ndarray, min_idx: int = 0, keys: np.ndarray | None = None
    ) -> PairBatch:
        """Pairs of the stream-``x`` tuples at ``xs`` with the tuples held here whose
        ``idx >= min_idx``. ``keys``: their index keys, if the caller has them (probing in key
        order is faster for the tree indexes: descents share nodes).

        A candidate is kept iff the earlier of the two is in the later one's window
        (:func:`~streamjoin.actors.join_kernels.probe_pairs`) and θ holds exactly.
        """
        spec, store = self.spec, self.store
        if len(self.index) == 0 or len(xs) == 0:
            return PairBatch.empty()
        spec.observe(batch.attrs)
        if spec.exact:
            store.keep_residuals()
        orient = EITHER if spec.query.self_join else (R_PROBES if x == 0 else S_PROBES)
        keys = spec.keys(batch, xs, x) if keys is None else keys
        found = [self.index.probe(keys, lo, hi) for lo, hi in spec.probe_boxes(orient)]
        if len(found) == 1:
            pos, refs = found[0]
        else:
            pos, refs = unique_pairs(*map(np.concatenate, zip(*found, strict=True)))
        self.work.candidates += len(pos)
        first = spec.n_served if self.index.exact else 0  # refine a coded index's superset
        if orient == EITHER and spec.query.predicate.symmetric:
            orient = S_PROBES  # θ(a, b) ⇔ θ(b, a): one orientation decides
        elif orient == EITHER:
            first = 0  # each box guaranteed only its own orientation
        r, s, ingest = probe_pairs(
            batch.columns(),
            xs[pos],
            store.attrs,
            store.rows,
            refs - store.base,
            spec.conds,
            first,
            orient,
            min_idx,
            x == 0 and not spec.one_stream,
            spec.paired,
        )
        return PairBatch(r, s, ingest)

    def insert(
        self,
        batch: Batch,
        pos: np.ndarray,
        keys: np.ndarray | None = None,
        order: np.ndarray | None = None,
    ) -> None:
        """Store and index the tuples at ``pos`` (all of this part's stream, arrival order).

        ``keys`` (their index keys) and ``order`` (the stable order of ``keys[0]``), if the
        caller has them, save the index from computing them again.
        """
        if len(pos):
            refs = self.store_rows(batch, pos)
            if keys is None:
                keys = self.spec.keys(batch, pos, int(batch.stream[pos[0]]))
            merges = getattr(self.index, "merges", 0)  # (a PIM-Tree merges while inserting)
            if self.index.takes_order:
                cast(OrderedInsert, self.index).insert(keys, refs, order=order)
            else:
                self.index.insert(keys, refs)
            self.work.merges += getattr(self.index, "merges", 0) - merges

    def store_rows(self, batch: Batch, pos: np.ndarray) -> np.ndarray:
        """Store the tuples at ``pos`` (not yet indexed); returns their refs. Every tuple
        stored passes here, so the spec sees its integers (:meth:`JoinSpec.observe`) before
        any probe can meet it."""
        self.spec.observe(batch.attrs)
        if self.spec.exact:
            self.store.keep_residuals()
        return self.store.append(batch, pos)

    def expire(self, idx_bound: int) -> int:
        """Drop tuples with ``idx < idx_bound``; returns how many were dropped."""
        before = len(self.store)
        self.index.expire(self.store.expire(idx_bound))
        return before - len(self.store)
