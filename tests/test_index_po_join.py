"""``po_join`` (SPO-Join): a hypothesis state machine at tiny sizes (merges every few items,
B+-trees of fan-out 3) against a brute-force oracle over two key rows, ``check()`` after
every step; the permutation array and the bit arrays by hand; whole joins against the
reference join."""

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from strategies import predicates, tables, windows

import streamjoin as sj
from streamjoin import indexes
from streamjoin.indexes.spo.bitsets import marked, new_bits, set_positions, unmark
from streamjoin.indexes.spo.ie_runs import RunSet
from streamjoin.indexes.spo.mutable_part import INTERSECTIONS

INF = float("inf")
#: Mostly small integers (many matches, many ties), sometimes zeros of both signs, tiny and
#: huge values
KEYS = st.one_of(
    st.integers(-4, 4).map(float),
    st.integers(-4, 4).map(float),
    st.sampled_from([-0.0, 1e-300, 2.5, 1e15]),
)
BOUNDS = st.sampled_from([-INF, -INF, -2.0, -1.0, -5e-324, 0.0, 5e-324, 0.5, 1.0, 3.0, INF, INF])


@st.composite
def boxes(draw, n_keys: int):
    """``(lo, hi)`` arrays: per row a one-sided inequality, a band or everything."""
    pairs = [sorted((draw(BOUNDS), draw(BOUNDS))) for _ in range(n_keys)]
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


class TwoRowOracle:
    """The live items as arrays in ref order; probes by brute force on every row."""

    def __init__(self, n_keys: int) -> None:
        self.keys = np.empty((n_keys, 0))
        self.refs = np.empty(0, dtype=np.int64)
        self.next_ref = 0
        self.before = 0

    def batch(self, rows) -> tuple[np.ndarray, np.ndarray]:
        k = np.asarray(rows, dtype=np.float64).reshape(-1, self.keys.shape[0]).T.copy()
        r = self.next_ref + np.arange(k.shape[1], dtype=np.int64) * 2  # refs with gaps
        self.next_ref += 2 * k.shape[1]
        self.keys = np.concatenate([self.keys, k], axis=1)
        self.refs = np.concatenate([self.refs, r])
        return k, r

    def expire(self, before: int) -> int:
        self.before = max(self.before, before)
        live = self.refs >= self.before
        self.keys, self.refs = self.keys[:, live], self.refs[live]
        return self.before

    def probe(self, probe_keys, lo, hi) -> list[tuple[int, int]]:
        with np.errstate(over="ignore", invalid="ignore"):
            d = self.keys[:, None, :] - probe_keys[:, :, None]
        ok = np.all((d >= lo[:, None, None]) & (d <= hi[:, None, None]), axis=0)
        i, j = np.nonzero(ok)
        return sorted(zip(i.tolist(), self.refs[j].tolist(), strict=True))


class POJoinMachine(RuleBasedStateMachine):
    @initialize(
        n_keys=st.sampled_from([1, 2, 2]),
        merge_every=st.integers(1, 40),
        subintervals=st.integers(1, 3),
        intersect=st.sampled_from(INTERSECTIONS),
        fanout=st.integers(3, 5),
        leaf_size=st.integers(3, 5),
    )
    def build(self, n_keys, merge_every, subintervals, intersect, fanout, leaf_size):
        self.n_keys = n_keys
        self.oracle = TwoRowOracle(n_keys)
        self.index = indexes.get("po_join")(
            n_keys,
            merge_every=merge_every,
            subintervals=subintervals,
            intersect=intersect,
            fanout=fanout,
            leaf_size=leaf_size,
        )

    @rule(data=st.data())
    def insert(self, data):
        rows = data.draw(st.lists(KEYS, max_size=data.draw(st.sampled_from([3, 14])) * self.n_keys))
        rows = rows[: len(rows) - len(rows) % self.n_keys]
        keys, refs = self.oracle.batch(rows)
        self.index.insert(keys, refs)

    @rule(keep=st.integers(0, 60))
    def expire(self, keep):
        self.index.expire(self.oracle.expire(self.oracle.next_ref - keep))

    @rule()
    def merge(self):
        self.index.merge()

    @rule(data=st.data())
    def probe(self, data):
        m = data.draw(st.integers(1, 5))
        probe_keys = np.array(
            data.draw(st.lists(KEYS, min_size=m * self.n_keys, max_size=m * self.n_keys))
        )
        probe_keys = probe_keys.reshape(self.n_keys, m)
        lo, hi = data.draw(boxes(self.n_keys))
        pos, refs = self.index.probe(probe_keys, lo, hi)
        assert pos.dtype == np.int64 and refs.dtype == np.int64
        got = sorted(zip(pos.tolist(), refs.tolist(), strict=True))
        assert got == self.oracle.probe(probe_keys, lo, hi)

    @invariant()
    def consistent(self):
        if hasattr(self, "index"):
            self.index.check()
            assert len(self.index) >= len(self.oracle.refs)


TestPOJoinMachine = POJoinMachine.TestCase
TestPOJoinMachine.settings = settings(
    max_examples=examples(60), stateful_step_count=30, deadline=None
)


@pytest.mark.slow
def test_po_join_machine_long():
    """The state machine ten times longer (``pytest -m slow``)."""
    long = settings(max_examples=examples(600), stateful_step_count=40, deadline=None)
    run_state_machine_as_test(POJoinMachine, settings=long)


def test_permutation_array_by_hand():
    """SPO-Join Alg. 2: P lists, in b-order, each item's position in a-order."""
    runs = RunSet()
    # slots 0..3 with (a, b): (3, 10), (1, 30), (2, 20), (4, 5)
    keys = np.array([[3.0, 1, 2, 4], [10.0, 30, 20, 5]])
    a_slots = np.array([1, 2, 0, 3])  # a = 1, 2, 3, 4
    b_slots = np.array([3, 0, 2, 1])  # b = 5, 10, 20, 30
    assert runs.add(a_slots, b_slots, keys, np.array([0, 1, 2, 3]), 0) == 4
    a = runs.arrays
    assert a.a_keys[:4].tolist() == [1, 2, 3, 4]
    assert a.b_keys[:4].tolist() == [5, 10, 20, 30]
    assert a.perm[:4].tolist() == [3, 2, 1, 0]  # b=5 is item a=4 at a-position 3, …
    runs.check(0)
    # r.a < s.a AND r.b > s.b for a probe r = (a 1.5, b 25): s with a > 1.5 and b < 25
    pos, refs = runs.probe(
        np.array([1.5]),
        np.array([25.0]),
        np.array([0]),
        np.array([0]),
        np.array([5e-324, -INF]),
        np.array([INF, -5e-324]),
        0,
    )
    assert sorted(refs.tolist()) == [0, 2, 3]  # (3, 10), (2, 20), (4, 5)


def test_bit_array_summary_skips_empty_words():
    bits, summary = new_bits(10_000)
    set_positions(bits, summary, 4090, 4100)
    assert marked(bits, summary, 0, 10_000).tolist() == list(range(4090, 4100))
    assert marked(bits, summary, 4095, 4097).tolist() == [4095, 4096]
    for p in range(4090, 4100):
        unmark(bits, summary, p)
    assert not bits.any() and not summary.any()


def test_merge_threshold_and_whole_structure_expiry():
    index = indexes.get("po_join")(2, merge_every=4, subintervals=2)
    keys = np.arange(20.0).reshape(2, 10)
    index.insert(keys, np.arange(10, dtype=np.int64))
    assert index.n_structures == 2 and len(index.mutable) == 0  # 10 items, merged in halves
    index.insert(keys[:, :3], np.arange(10, 13, dtype=np.int64))
    assert len(index.mutable) == 3
    index.expire(5)  # the older half (refs 0-4) leaves whole
    assert index.n_structures == 1 and len(index) == 8
    index.check()


def test_a_probe_is_charged_a_search_per_structure_it_visits():
    """The simulator's scan units of a po_join probe: log2(items + 1) for each structure of
    the linked set and for the mutable part, and for the structures visible alone when a
    worker probes some of them (a late piece)."""
    index = indexes.get("po_join")(2, merge_every=4, subintervals=2)
    keys = np.arange(20.0).reshape(2, 10)
    index.insert(keys, np.arange(10, dtype=np.int64))  # two structures of 5
    index.insert(keys[:, :3], np.arange(10, 13, dtype=np.int64))  # 3 in the mutable part
    assert index.probe_units() == pytest.approx(2 * np.log2(6) + np.log2(4))
    with index.only_structures(1, 2):
        assert index.probe_units() == pytest.approx(np.log2(6))
    single = indexes.get("bplus_tree")(1)
    single.insert(np.arange(7.0).reshape(1, 7), np.arange(7, dtype=np.int64))
    assert single.probe_units() == pytest.approx(3.0)  # log2(7 + 1): one tree


@pytest.mark.parametrize("intersect", INTERSECTIONS)
def test_mutable_part_intersections_on_a_large_part(intersect):
    """Thousands of slots in random key orders: prefix rows every g > 8 ranks, hash sets
    with collisions, probes matching up to half the part."""
    rng = np.random.default_rng(7)
    oracle = TwoRowOracle(2)
    index = indexes.get("po_join")(2, merge_every=10**6, intersect=intersect)
    for _ in range(3):
        index.insert(*oracle.batch(rng.integers(0, 300, (700, 2)).astype(float).ravel()))
    index.check()
    probe_keys = rng.integers(0, 300, (2, 40)).astype(float)
    for lo, hi in (([5e-324, -INF], [INF, -5e-324]), ([-20.0, -INF], [20.0, 0.0])):
        lo, hi = np.array(lo), np.array(hi)
        pos, refs = index.probe(probe_keys, lo, hi)
        got = sorted(zip(pos.tolist(), refs.tolist(), strict=True))
        assert got == oracle.probe(probe_keys, lo, hi)


def test_bad_options():
    make = indexes.get("po_join")
    with pytest.raises(ValueError, match="merge_every must be a positive integer"):
        make(2, merge_every=0)
    with pytest.raises(ValueError, match="intersect must be one of"):
        make(2, intersect="sets")
    with pytest.raises(ValueError, match="at most 2 key rows"):
        make(3)


Q1 = sj.less("a") & sj.greater("b")


@settings(max_examples=examples(25), deadline=None)
@given(st.data())
def test_single_po_join_equals_oracle(data):
    """Two-inequality, cross-attribute and band queries, two-way and self-joins, count and
    time windows, merges every few tuples."""
    self_join = data.draw(st.booleans())
    table = data.draw(tables(self_join, max_rows=80))
    two_inequalities = [
        sj.less("x") & sj.greater("y"),  # Q1's shape
        sj.less_equal("x", "y") & sj.greater_equal("y", "x"),  # an interval overlap
    ]
    pred = data.draw(st.one_of(st.sampled_from(two_inequalities), predicates()))
    query = sj.Query(pred, window=data.draw(windows()), self_join=self_join)
    expected = sj.oracle.join(query, table)
    options = {
        "merge_every": data.draw(st.integers(1, 12)),
        "subintervals": data.draw(st.integers(1, 2)),
    }
    options["intersect"] = data.draw(st.sampled_from(INTERSECTIONS))
    for batch_size in (1, 5, 64):
        res = sj.run(
            query, table, sj.topologies.single("po_join", **options), batch_size=batch_size
        )
        assert res.same_pairs(expected), f"{query}, {options}, batch {batch_size}"


@pytest.mark.parametrize("self_join", [False, True])
def test_q1_shape_with_many_structures(self_join):
    rng = np.random.default_rng(5)
    n = 3000
    a = rng.uniform(0, 1000, n)
    data = {"a": a, "b": a + rng.normal(0, 30, n), "ts": np.arange(n)}
    if not self_join:
        data["stream"] = rng.integers(0, 2, n)
    q = sj.Query(Q1, window=sj.CountWindow(400), self_join=self_join)
    expected = sj.oracle.join(q, data)
    assert len(expected) > 1000
    topo = sj.topologies.single("po_join", merge_every=64)
    res = sj.run(q, data, topo, batch_size=100)
    assert res.same_pairs(expected)


INEQUALITIES = ["less", "less_equal", "greater", "greater_equal"]


def _ties(n: int, self_join: bool, seed: int) -> dict:
    """Few key values (many duplicates), runs of equal timestamps."""
    rng = np.random.default_rng(seed)
    data = {
        "ts": np.cumsum(rng.integers(0, 2, n)),
        "x": rng.integers(0, 6, n).astype(np.float64),
        "y": rng.integers(0, 6, n),
    }
    if not self_join:
        data["stream"] = rng.integers(0, 2, n).astype(np.int8)
    return data


@pytest.mark.parametrize("self_join", [False, True], ids=["two_way", "self_join"])
@pytest.mark.parametrize("second", INEQUALITIES)
@pytest.mark.parametrize("first", INEQUALITIES)
def test_every_pair_of_inequalities(first, second, self_join):
    """Each of the 16 pairs of <, <=, >, >= on (x, y), and on (x vs s.y, y vs s.x) for two-way
    joins, with ties everywhere, in count and time windows, merges every few tuples."""
    data = _ties(240, self_join, seed=len(first) * 7 + len(second))
    preds = [getattr(sj, first)("x") & getattr(sj, second)("y")]
    if not self_join:
        preds.append(getattr(sj, first)("x", "y") & getattr(sj, second)("y", "x"))
    for pred in preds:
        for window in (sj.CountWindow(40), sj.TimeWindow(9, 4)):
            query = sj.Query(pred, window=window, self_join=self_join)
            expected = sj.oracle.join(query, data)
            assert len(expected) > 0
            for batch_size, merge_every in ((1, 5), (16, 7), (64, 64)):
                topo = sj.topologies.single("po_join", merge_every=merge_every, subintervals=2)
                res = sj.run(query, data, topo, batch_size=batch_size)
                assert res.same_pairs(expected), f"{query}, batch {batch_size}"


@pytest.mark.parametrize("self_join", [False, True], ids=["two_way", "self_join"])
def test_edges_duplicates_equal_ts_empty_and_windows_of_one(self_join):
    """All keys equal and all timestamps equal; windows of one tuple or one time unit; no
    input at all; in a two-way join, one stream empty."""
    n = 50
    same = {"ts": np.zeros(n, np.int64), "x": np.ones(n), "y": np.full(n, 2)}
    if not self_join:
        same["stream"] = np.arange(n, dtype=np.int8) % 2
    cases = [same, {k: v[:0] for k, v in same.items()}]  # and no input
    if not self_join:
        cases.append({**same, "stream": np.zeros(n, np.int8)})  # S empty
    pred = sj.less_equal("x") & sj.greater_equal("y")
    for data in cases:
        for window in (sj.CountWindow(1), sj.TimeWindow(1), sj.CountWindow(n), sj.TimeWindow(3)):
            query = sj.Query(pred, window=window, self_join=self_join)
            expected = sj.oracle.join(query, data)
            for topo in (
                sj.topologies.single("po_join", merge_every=3),
                sj.topologies.spo(2, merge_every=3),
            ):
                for batch_size in (1, 8):
                    res = sj.run(query, data, topo, batch_size=batch_size)
                    assert res.same_pairs(expected), f"{query}, {topo.name}, {len(data['ts'])}"
