"""The query compiled for the join actors: :class:`JoinSpec` (the conditions as the kernels
take them, the index that serves them, the probe boxes) and :class:`JoinWork` (the counters a
join actor keeps, which the simulator charges)."""

from __future__ import annotations

import numpy as np

from streamjoin import indexes
from streamjoin.actors.join_kernels import (
    EITHER,
    R_PROBES,
    S_PROBES,
    Conditions,
    ImageConditions,
    image_slack,
    int_magnitude,
    join_within_batch,
    pairs_within_batch,
    split_bounds,
)
from streamjoin.batch import Batch, PairBatch
from streamjoin.indexes.base import WindowIndex, unique_pairs
from streamjoin.indexes.blocks.key_order import stable_order
from streamjoin.indexes.per_term import PerTermIndex
from streamjoin.query import Query
from streamjoin.validation import MAX_EXACT_INT


class JoinWork:
    """Cumulative counters of a join actor's work (:data:`JOIN_COUNTERS` order), which the
    simulator charges per step (:mod:`streamjoin.actors.base`).

    ``part_calls``: window-part calls (probe, insert, expire, subwindow create/drop);
    ``tuples``: tuples of the messages handled (and those passed on); ``probes``: probing tuples
    that searched a non-empty part; ``scan``: their probes' work units
    (:meth:`~streamjoin.indexes.base.WindowIndex.probe_work`); ``candidates``: items the
    indexes returned; ``pairs``, ``inserted``, ``expired``: tuples; ``merges``: merges of a
    PIM-Tree's T_I into T_S that the actor's thread ran or switched the phases of (its fixed
    cost: a merge every ``m · w`` inserts, so at small windows a large share of the work; the
    items it writes grow with the inserts).
    """

    __slots__ = JOIN_COUNTERS = (
        "part_calls",
        "tuples",
        "probes",
        "scan",
        "candidates",
        "pairs",
        "inserted",
        "expired",
        "merges",
    )
    part_calls: int
    tuples: int
    probes: int
    scan: float
    candidates: int
    pairs: int
    inserted: int
    expired: int
    merges: int

    def __init__(self) -> None:
        for name in self.JOIN_COUNTERS:
            setattr(self, name, 0)
        self.scan = 0.0

    def probe_call(self, n: int, index) -> None:
        """Count a probe of ``n`` tuples into ``index`` (none if it is empty): each tuple's
        descent is ``index.probe_units()`` scan units."""
        if n and len(index):
            self.part_calls += 1
            self.probes += n
            self.scan += n * index.probe_units()

    def as_tuple(self) -> tuple:
        return (
            self.part_calls,
            self.tuples,
            self.probes,
            self.scan,
            self.candidates,
            self.pairs,
            self.inserted,
            self.expired,
            self.merges,
        )


#: Counter names of the join actors' cost group, in :meth:`JoinWork.as_tuple` order.
JOIN_COUNTERS: tuple[str, ...] = JoinWork.JOIN_COUNTERS


class JoinSpec:
    """The query in the form kernels use, and the index that serves it.

    The index serves the conditions :func:`~streamjoin.indexes.plan` picks (one key row each:
    a stored tuple's key is its own side's attribute, ``attr`` for R and ``attr_s`` for S);
    the rest are residual filters. Conditions are kept in that order — served ones first, then
    the other conjuncts, then an OR's terms (:attr:`~streamjoin.query.Predicate.flat`) — in
    :attr:`conds`. The index serves conjuncts, which every term implies; when it serves none
    but a condition of every OR term (``plan.terms``), each window part holds an index per
    term (:class:`PerTermIndex`, key rows in :attr:`groups`), whose candidates are merged and
    checked against all of θ. When it can serve nothing (:attr:`scans`) the parts hold the
    ``fallback`` index (``nested_loop``) over one constant key row, probed with an unbounded
    box, and every condition is residual: slow, never wrong.

    Integers beyond ``2**52`` (query.py: compared exactly) switch the conditions, the first
    time an actor's :meth:`observe` sees one, to widened probe bounds and an exact check of
    every candidate (:meth:`_set_conditions`); until then nothing costs more than for floats.

    Parameters
    ----------
    query : Query
    index : str, optional
        Registry name (default: :func:`~streamjoin.indexes.default_for` the predicate).
    index_options : dict, optional
        Keyword arguments for each index instance.
    paired : bool
        For a self-join: run it as a two-way join of the stream with itself, as layouts that
        route R and S apart do (a DP-Join grid, the original handshake join). Every tuple comes
        twice, as an R copy (``stream`` 0) and an S copy (``stream`` 1), numbered alike (its
        rank in the one stream, ``lo_idx`` its own window's bound); the layout's two-way
        algorithm brings every R copy together with every S copy exactly once, and of these
        meetings only those whose R copy arrived strictly first count, under the closure
        θ(r, s) ∨ θ(s, r). The pair (a, b), a older, is thus kept once: where a's R copy meets
        b's S copy; (b's R copy, a's S copy) and a tuple with itself are dropped. Ignored for a
        two-way join.
    fallback : str
        The index that scans everything when ``index`` can serve no condition.
    """

    def __init__(
        self,
        query: Query,
        index: str | None = None,
        index_options: dict | None = None,
        paired: bool = False,
        fallback: str = "nested_loop",
    ):
        self.query = query
        asked = index or indexes.default_for(query.predicate, query.self_join)
        self.plan = indexes.plan(asked, query.predicate, query.self_join, fallback)
        self.index_name = self.plan.index
        self.index_cls = indexes.get(self.index_name)
        # a fallback index gets none of the options meant for another index
        fell_back = self.plan.fallback and self.index_name != asked
        self.index_options = {} if fell_back else dict(index_options or {})
        #: conjuncts the index serves, first in :attr:`conds` (none with an index per term)
        self.n_served = len(self.plan.keys)
        #: key rows of each OR term's index (:class:`PerTermIndex`), or () for one index
        self.groups = tuple(len(t) for t in self.plan.terms)
        #: no condition is served: probes scan the window under an unbounded box
        self.scans = self.plan.fallback and not self.groups
        key_pos = list(self.plan.keys) or [c for t in self.plan.terms for c in t]
        self._key_pos = np.array(key_pos, dtype=np.int64)
        self.n_keys = max(1, len(key_pos))
        r_rows, s_rows = query.condition_rows
        #: for R and for S tuples, the ``attrs`` row of each index key row (:meth:`keys`)
        self.key_rows = (r_rows[self._key_pos], s_rows[self._key_pos])
        self.paired = query.self_join and paired
        self.one_stream = query.self_join and not paired
        self.streams = (0,) if self.one_stream else (0, 1)
        n_conj, n_flat = len(query.predicate.conjuncts), len(query.predicate.flat)
        self._order = [
            *self.plan.keys,
            *(c for c in range(n_conj) if c not in self.plan.keys),
            *range(n_conj, n_flat),  # an OR's terms, in order, after every conjunct
        ]
        #: how many of :attr:`conds` are conjuncts (``AND_ALL``) before the served ones again
        self._n_conj = n_conj
        #: the largest magnitude of an integer value seen (:meth:`observe`); beyond
        #: ``MAX_EXACT_INT`` the conditions are decided on exact integers
        self.int_magnitude = 0.0
        #: bumped whenever :attr:`conds` or the probe bounds change (:meth:`observe`)
        self.version = 0
        self._seen: np.ndarray | None = None
        self.conds: Conditions | ImageConditions
        self._set_conditions(exact=False)

    def _set_conditions(self, exact: bool, widen: float = 0.0) -> None:
        """:attr:`conds` and the index's probe bounds (``key_lo``/``key_hi``).

        Before any integer beyond ``MAX_EXACT_INT`` (``exact`` False): the query's conditions,
        served ones first, each decided on the float64 images, which is exact then. After
        (``exact``): the served conditions on the images with their bounds widened by
        ``widen`` (more than the images' rounding can move a difference), so the index returns
        a superset, then every condition decided exactly between integers (their residual
        rows), the served ones again; floats are decided on their images as before.
        """
        q, order = self.query, self._order
        r_row, s_row = q.condition_rows
        lo, hi = q.predicate.bounds
        r_row, s_row, lo, hi = r_row[order], s_row[order], lo[order], hi[order]
        neg = q.negated[order]
        link = np.array(q.predicate.links, dtype=np.int64)[order]
        if exact:
            served, n_conj = self.n_served, self._n_conj
            # the served ones again, exactly, among the conjuncts: before an OR's terms,
            # which decide θ as soon as one holds
            keep = [*range(n_conj), *range(served), *range(n_conj, len(order))]
            r_row, s_row, neg, link = r_row[keep], s_row[keep], neg[keep], link[keep]
            lo, hi = lo[keep], hi[keep]
            ints = np.arange(len(keep)) >= served
            band = (lo[:served] != hi[:served]) | (lo[:served] != 0.0)  # equal images: no widening
            lo[:served] = np.where(band, lo[:served] - widen, lo[:served])
            hi[:served] = np.where(band, hi[:served] + widen, hi[:served])
            k = len(q.attrs)
            slack = np.where(ints, widen, 0.0)
            self.conds = Conditions(
                r_row,
                s_row,
                lo,
                hi,
                neg,
                link,
                ints,
                r_row + k,
                s_row + k,
                split_bounds(lo, hi),
                slack,
            )
        else:  # its kernels hold no integer code (ImageConditions): ~115 ns less per θ tested
            self.conds = ImageConditions(r_row, s_row, lo, hi, neg, link)
        if self.scans:
            self.key_lo, self.key_hi = np.array([-np.inf]), np.array([np.inf])
        elif self.groups:  # each term's served conditions, widened as the served ones above
            lo, hi = q.predicate.bounds
            lo, hi = lo[self._key_pos], hi[self._key_pos]
            if exact:
                band = (lo != hi) | (lo != 0.0)
                lo, hi = np.where(band, lo - widen, lo), np.where(band, hi + widen, hi)
            self.key_lo, self.key_hi = lo, hi
        else:
            self.key_lo, self.key_hi = self.conds.lo[: self.n_keys], self.conds.hi[: self.n_keys]
        #: conditions are decided on exact integers: kernels read the residual rows
        self.exact = exact
        self.version += 1

    def observe(self, attrs: np.ndarray) -> None:
        """Note the integer values of a batch about to be probed or stored (``attrs`` as in
        :class:`~streamjoin.validation.Columns`). The first integer beyond ``MAX_EXACT_INT`` in
        magnitude switches :attr:`conds` to exact integer refinement for good, and each larger
        one widens the served bounds to cover the images' rounding at its magnitude. Cheap
        when nothing changes; once per batch (the last one seen is remembered)."""
        if attrs is self._seen:
            return
        self._seen = attrs
        m = int_magnitude(attrs)
        if m <= self.int_magnitude:
            return
        self.int_magnitude = m
        if m > MAX_EXACT_INT:
            self._set_conditions(exact=True, widen=image_slack(m))

    def probed(self, x: int) -> int:
        """The stream that tuples of stream ``x`` probe."""
        return x if self.one_stream else 1 - x

    def keys(self, batch: Batch, pos: np.ndarray, x: int) -> np.ndarray:
        """Index key rows of the stream-``x`` tuples at ``pos``: float64
        ``(n_keys, len(pos))``, each tuple's own side of the served conditions (zeros when
        none is served)."""
        if self.scans:
            return np.zeros((1, len(pos)))
        return np.ascontiguousarray(batch.attrs[self.key_rows[x]][:, pos])

    def new_index(self, items: int | None = None) -> WindowIndex:
        """An empty window index as the plan says: one of :attr:`index_cls`, or one per OR
        term (:class:`PerTermIndex`). ``items``: about how many tuples it will hold (a count
        window's size), for the index's :meth:`~streamjoin.indexes.base.WindowIndex.
        window_options` where the user set none of them."""
        options = self.index_options
        if items is not None:
            fit = self.index_cls.window_options(items)
            if not set(fit) & set(options):
                options = {**fit, **options}
        if self.groups:
            return PerTermIndex(self.index_cls, self.groups, **options)
        return self.index_cls(self.n_keys, **options)

    def in_key_order(self, batch: Batch, x: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(xs, keys, order)`` of the batch's stream-``x`` tuples: their positions in arrival
        order, their index keys (:meth:`keys`) and the stable order of those keys on the
        first served condition, which the join core computes once per batch and shares between
        probing, the in-batch join and the index insert."""
        xs = np.flatnonzero(batch.stream == x)
        keys = self.keys(batch, xs, x)
        return xs, keys, stable_order(keys[0])

    def probe_boxes(self, orient: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Index probe boxes (``item - key`` intervals) for probing tuples of one orientation."""
        lo, hi = self.key_lo, self.key_hi
        if orient == R_PROBES:  # stored items are s: s - r in [lo, hi]
            return [(lo, hi)]
        stored_r = (-hi, -lo)  # stored items are r: r - s in [-hi, -lo]
        if orient == S_PROBES or self.symmetric_keys:
            return [stored_r]
        # self-join, asymmetric: stored a may be r (θ(a, b)) or s (θ(b, a))
        if self.n_keys == 1 and max(lo[0], -hi[0]) <= min(hi[0], -lo[0]):  # intervals overlap
            return [(np.minimum(lo, -hi), np.maximum(hi, -lo))]
        return [stored_r, (lo, hi)]

    @property
    def symmetric_keys(self) -> bool:
        """The served conditions' boxes are symmetric around 0 (one box serves both
        orientations of a self-join)."""
        return bool(np.all(self.key_lo == -self.key_hi))

    def join_batch(self, batch: Batch, by_stream: tuple | None = None) -> PairBatch:
        """docs/design.md §2 step 2: pairs of a seq-ordered batch whose earlier tuple is in it too.

        ``by_stream``: for each stream (R, S), the positions of its tuples in the batch in
        order of the first served condition's key, if the caller has them; else they are
        sorted here (:meth:`in_key_order`). Not for a ``paired`` self-join: there the two
        copies of a batch find each other by probing, where they meet.
        """
        if self.paired:
            raise ValueError("a paired self-join finds in-batch pairs by probing, not here")
        if len(batch) < 2:
            return PairBatch.empty()
        self.observe(batch.attrs)
        if self.groups:
            i, j = self._join_batch_per_term(batch)
        elif self.index_cls.batch_join_options is not None and self.n_served > 1:
            i, j = self._join_batch_by_index(batch)
        else:
            if by_stream is None:
                views = (self.in_key_order(batch, x) for x in (0, 1))
                by_stream = tuple(xs[order] for xs, _, order in views)
            key_r, key_s = self._batch_keys(batch)
            i, j = join_within_batch(
                batch.columns(),
                key_r,
                key_s,
                self.key_lo[0],
                self.key_hi[0],
                self.conds,
                self.query.self_join,
                *by_stream,
            )
        if len(i) == 0:
            return PairBatch.empty()
        ingest = np.maximum(batch.ingest_ns[i], batch.ingest_ns[j])
        if self.query.self_join:
            return PairBatch(batch.seq[j], batch.seq[i], ingest)
        later_is_r = batch.stream[i] == 0
        r = np.where(later_is_r, batch.seq[i], batch.seq[j])
        s = np.where(later_is_r, batch.seq[j], batch.seq[i])
        return PairBatch(r, s, ingest)

    def _join_batch_by_index(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """The in-batch join through a fresh index over each probed stream's tuples of the
        batch (``index_cls.batch_join_options``): ``(i, j)`` batch positions, ``j < i``."""
        batch_options = self.index_cls.batch_join_options
        assert batch_options is not None  # (only then is a batch joined by index)
        options = {**self.index_options, **batch_options}
        found_i, found_j = [], []
        for x in self.streams:
            y = self.probed(x)
            xs, ys = np.flatnonzero(batch.stream == x), np.flatnonzero(batch.stream == y)
            if len(xs) == 0 or len(ys) == 0:
                continue
            index = self.index_cls(self.n_keys, **options)
            index.insert(self.keys(batch, ys, y), ys)  # positions in the batch as refs
            orient = EITHER if self.query.self_join else (R_PROBES if x == 0 else S_PROBES)
            keys = self.keys(batch, xs, x)
            boxes = self.probe_boxes(orient)
            pos, cand = map(
                np.concatenate, zip(*(index.probe(keys, lo, hi) for lo, hi in boxes), strict=True)
            )
            if len(boxes) > 1:
                pos, cand = unique_pairs(pos, cand)
            first = self.n_served if index.exact else 0
            if orient == EITHER and self.query.predicate.symmetric:
                orient = S_PROBES
            elif orient == EITHER:
                first = 0
            i, j = pairs_within_batch(
                batch.idx, batch.lo_idx, batch.attrs, xs[pos], cand, self.conds, first, orient
            )
            found_i.append(i)
            found_j.append(j)
        if not found_i:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        return np.concatenate(found_i), np.concatenate(found_j)

    def _join_batch_per_term(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """The in-batch join with an index per OR term: the sweep once per term, on its
        first served condition's key (a pair that joins satisfies some term, so that term's
        sweep meets it; each checks all of θ), and the pairs merged, each once."""
        found = []
        columns = batch.columns()
        for row in np.cumsum((0, *self.groups[:-1])):
            key = (batch.attrs[self.key_rows[0][row]], batch.attrs[self.key_rows[1][row]])
            by_stream = []
            for x in (0, 1):
                xs = np.flatnonzero(batch.stream == x)
                by_stream.append(xs[stable_order(np.ascontiguousarray(key[x][xs]))])
            found.append(
                join_within_batch(
                    columns,
                    *key,
                    self.key_lo[row],
                    self.key_hi[row],
                    self.conds,
                    self.query.self_join,
                    *by_stream,
                )
            )
        return unique_pairs(*map(np.concatenate, zip(*found, strict=True)))

    def _batch_keys(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """Every tuple's key on the first served condition as an R tuple and as an S tuple."""
        if self.scans:
            zero = np.zeros(len(batch))
            return zero, zero
        return batch.attrs[self.conds.r_row[0]], batch.attrs[self.conds.s_row[0]]
