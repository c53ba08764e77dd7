"""Shared test drivers for window indexes: a sorted-array oracle, random action sequences and
a whole-join check against the reference join.

Each driver inserts batches, expires prefixes of refs and probes random bands, calls the
index's ``check()`` after every step and compares probe results, as sorted ``(probe_pos, ref)``
pairs, with the oracle over the live items (indexes with lazy expiry filter at probe time or
drop items exactly, so both must return exactly the live matches).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import streamjoin as sj
from streamjoin import indexes

INF = float("inf")

#: Small integers (many duplicates) or floats over a wide range.
keys = st.one_of(
    st.integers(-8, 8).map(float),
    st.floats(-1e6, 1e6, allow_nan=False),
    st.floats(allow_nan=False, allow_infinity=False),
)
bound = st.one_of(st.sampled_from([-INF, INF, 0.0]), st.integers(-4, 4).map(float), keys)


@st.composite
def bands(draw) -> tuple[float, float]:
    """``(lo, hi)`` with ``lo <= hi``: infinite, zero-width or random."""
    lo, hi = sorted((draw(bound), draw(bound)))
    return (lo, lo) if draw(st.booleans()) and np.isfinite(lo) else (lo, hi)


class SortedOracle:
    """The live window as arrays in ref order; probes by brute force."""

    def __init__(self) -> None:
        self.keys = np.empty(0)
        self.refs = np.empty(0, dtype=np.int64)
        self.next_ref = 0
        self.before = 0
        self.history = np.empty(0)  # every key inserted, by ref (refs count from 0)

    def batch(self, values) -> tuple[np.ndarray, np.ndarray]:
        """Record a batch of keys; returns the ``(keys (1, b), refs (b,))`` to insert."""
        k = np.asarray(values, dtype=np.float64)
        r = np.arange(self.next_ref, self.next_ref + len(k), dtype=np.int64)
        self.next_ref += len(k)
        self.keys, self.refs = np.concatenate([self.keys, k]), np.concatenate([self.refs, r])
        self.history = np.concatenate([self.history, k])
        return k[None, :], r

    def expire(self, before: int) -> int:
        self.before = max(self.before, before)
        live = self.refs >= self.before
        self.keys, self.refs = self.keys[live], self.refs[live]
        return self.before

    def probe(self, probe_keys, lo: float, hi: float) -> list[tuple[int, int]]:
        with np.errstate(over="ignore"):  # huge keys: the index computes the same inf
            d = self.keys[None, :] - np.asarray(probe_keys, dtype=np.float64)[:, None]
        i, j = np.nonzero((d >= lo) & (d <= hi))
        return sorted(zip(i.tolist(), self.refs[j].tolist(), strict=True))


def probe_pairs(
    index, probe_keys, lo: float, hi: float, oracle: SortedOracle | None = None
) -> list[tuple[int, int]]:
    """``index.probe`` as sorted ``(probe_pos, ref)`` pairs, with the protocol's types checked.

    An index that is not ``exact`` (coded keys) returns a superset: with ``oracle`` its
    candidates are refined on the full keys, ``oracle.history`` by ref, as the join core refines
    them on its store's; without, they are returned as they are (so a test of integer keys and
    bounds also checks that their codes are exact: no candidate outside the band).
    """
    probe_keys = np.asarray(probe_keys, dtype=np.float64)
    pos, refs = index.probe(probe_keys[None, :], np.array([lo]), np.array([hi]))
    assert pos.dtype == np.int64 and refs.dtype == np.int64 and pos.shape == refs.shape
    if not index.exact and oracle is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            d = oracle.history[refs] - probe_keys[pos]
        keep = (d >= lo) & (d <= hi)
        pos, refs = pos[keep], refs[keep]
    return sorted(zip(pos.tolist(), refs.tolist(), strict=True))


def machine(name: str, options: st.SearchStrategy, exact_expiry: bool) -> type:
    """A hypothesis state machine driving index ``name`` built with drawn ``options``."""

    class Machine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.oracle = SortedOracle()

        @initialize(opts=options)
        def build(self, opts) -> None:
            self.index = indexes.get(name)(1, **opts)

        @rule(values=st.lists(keys, max_size=24))
        def insert(self, values) -> None:
            self.index.insert(*self.oracle.batch(values))

        @rule(keep=st.integers(0, 80))
        def expire(self, keep) -> None:
            self.index.expire(self.oracle.expire(self.oracle.next_ref - keep))

        @rule(probe_keys=st.lists(keys, min_size=1, max_size=4), band=bands())
        def probe(self, probe_keys, band) -> None:
            lo, hi = band
            assert probe_pairs(self.index, probe_keys, lo, hi, self.oracle) == self.oracle.probe(
                probe_keys, lo, hi
            )

        @invariant()
        def consistent(self) -> None:
            self.index.check()
            live = len(self.oracle.refs)
            assert len(self.index) == live if exact_expiry else len(self.index) >= live

    Machine.__name__ = f"{name}_machine"
    return Machine


def random_actions(index, rng: np.random.Generator, steps: int, window: int) -> None:
    """``steps`` rounds of insert / expire / probe on ``index`` with about ``window`` live items.

    Keys alternate between small integers (duplicates) and gaussian floats; probe bands are
    drawn from infinite, zero-width and finite ones.
    """
    oracle = SortedOracle()
    edges = [-INF, -3.0, -1.0, 0.0, 0.5, 2.5, INF]
    for step in range(steps):
        b = int(rng.integers(0, 2 * window // 20 + 2))
        values = rng.integers(0, 60, b) if step % 2 else rng.normal(30, 20, b)
        index.insert(*oracle.batch(values))
        index.check()
        index.expire(oracle.expire(oracle.next_ref - int(rng.integers(0, 2 * window))))
        index.check()
        probe_keys = rng.normal(30, 25, 4).round(int(rng.integers(0, 2)))
        lo, hi = sorted(rng.choice(edges, 2))
        got = probe_pairs(index, probe_keys, lo, hi, oracle)
        assert got == oracle.probe(probe_keys, lo, hi), step


#: Predicates and windows of the join-level tests: a band, an equi-join and an inequality,
#: over count and time windows.
JOIN_PREDICATES = {"band": sj.band("x", 3), "equal": sj.equal("x"), "less": sj.less("x")}
JOIN_WINDOWS = {"count": sj.CountWindow(40), "time": sj.TimeWindow(4)}


def join_matches_oracle(
    index: str, options: dict, predicate: str, window: str, self_join: bool, batch_size: int
) -> None:
    """A whole join on one core with ``index`` built with ``options`` gives the reference pairs.

    ``predicate``/``window`` name entries of :data:`JOIN_PREDICATES` / :data:`JOIN_WINDOWS`;
    300 tuples with values in [0, 50], two streams or one (``self_join``).
    """
    data = sj.sources.synthetic(300, low=0, high=50, seed=batch_size, self_join=self_join)
    q = sj.Query(JOIN_PREDICATES[predicate], window=JOIN_WINDOWS[window], self_join=self_join)
    res = sj.run(q, data, sj.topologies.single(index, **options), batch_size=batch_size)
    assert res.same_pairs(sj.oracle.join(q, data))
