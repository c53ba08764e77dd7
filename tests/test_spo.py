"""The ``spo`` topology (SPO-Join): exact against the oracle under random per-edge
interleavings, merge plans, pieces that reach a worker before or after the batches they
serve, and the drawing."""

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import predicates, tables, windows

import streamjoin as sj
from streamjoin.actors.emitter import Emitter
from streamjoin.actors.spo import MergePlan, MergeSettings, SPOMutableStage, SPOWorker
from streamjoin.validation import validate

TWO_INEQUALITIES = [
    sj.less("x") & sj.greater("y"),  # SPO-Join's Q1 shape
    sj.greater("x") & sj.less("y"),  # Q2's
    sj.less_equal("x", "y") & sj.greater_equal("y", "x"),  # an interval overlap
]


@pytest.mark.filterwarnings("ignore::streamjoin.indexes.IndexFallbackWarning")
@settings(max_examples=examples(30), deadline=None)
@given(data=st.data())
def test_spo_equals_oracle_under_any_interleaving(data):
    self_join = data.draw(st.booleans(), label="self_join")
    table = data.draw(tables(self_join, max_rows=80))
    pred = data.draw(st.one_of(st.sampled_from(TWO_INEQUALITIES), predicates()))
    query = sj.Query(pred, window=data.draw(windows()), self_join=self_join)
    workers = data.draw(st.integers(1, 5), label="workers")
    if data.draw(st.booleans(), label="time merge"):
        merge = {"merge_after": data.draw(st.integers(1, 6)), "merge_every": None}
    else:
        merge = {"merge_every": data.draw(st.integers(1, 12))}
    relay = data.draw(st.sampled_from([None, 0, 1, 2, 3]), label="relay")
    combine = data.draw(st.sampled_from([None, 0, 1, 2, 3]), label="combine")
    topo = sj.topologies.spo(
        workers,
        subintervals=data.draw(st.integers(1, 3)),
        relay=relay,
        combine=combine,
        **merge,
    )
    expected = sj.oracle.join(query, table)
    for batch_size in (1, 4, 64):
        for seed in (None, data.draw(st.integers(0, 2**16), label="delivery_seed")):
            res = sj.run(query, table, topo, batch_size=batch_size, delivery_seed=seed)
            assert res.same_pairs(expected), f"{topo.name}, batch {batch_size}, seed {seed}"


@pytest.mark.parametrize("self_join", [False, True])
def test_spo_on_a_q1_workload_with_many_merges(self_join):
    data = sj.sources.inequality_workload(4000, 500, self_join=self_join, seed=3)
    q = sj.Query(sj.less("a") & sj.greater("b"), sj.CountWindow(500), self_join=self_join)
    expected = sj.oracle.join(q, data)
    assert len(expected) > 2000
    for seed in (None, 7):
        topo = sj.topologies.spo(3, merge_every=60, subintervals=2)
        res = sj.run(q, data, topo, batch_size=50, delivery_seed=seed)
        assert res.same_pairs(expected)
    workers = [a for a in res.metrics["actors"].values() if a["role"] == "spo_worker"]
    assert len(workers) == 3 and all(w["batches_out"] > 0 for w in workers)


def test_merge_plan_counts_time_and_deals_pieces_round_robin():
    q = sj.Query(sj.less("x"), window=sj.TimeWindow(100))
    em = Emitter(q, batch_size=4)
    data = {"stream": [0, 1, 0, 0, 1, 1, 0, 0], "ts": [0, 0, 1, 2, 3, 10, 11, 12], "x": [0.0] * 8}
    batches = [b for _, b in em.on_chunk(validate(data, q))]
    plan = MergePlan((0, 1), 3, MergeSettings(every=3, after=9, subintervals=2))
    # batch 0: R has 3 stored tuples -> merge R into pieces 0, 1 (workers 0, 1)
    assert plan.step(batches[0]) == [(0, [(0, 0), (1, 1)])]
    # batch 1: S reaches 3 (count); R holds 2 tuples since ts 11, not 9 old yet
    assert plan.step(batches[1]) == [(1, [(2, 2), (3, 0)])]
    with pytest.raises(ValueError, match="merge_every or merge_after"):
        MergeSettings(every=None)
    with pytest.raises(ValueError, match="subintervals must be a positive integer"):
        sj.topologies.spo(2, subintervals=0)
    with pytest.raises(ValueError, match="to spo\\(\\) itself"):
        sj.topologies.spo(2, index_options={"merge_every": 5})


@pytest.mark.parametrize("piece_first", [True, False])
def test_a_piece_before_or_after_the_batches_it_serves(piece_first):
    """Worker 0 gets the merge of batch 0 before batch 0 itself (early) or after batch 1 (which
    must wait for it): batch 1's pairs with batch 0's tuples are found once either way."""
    q = sj.Query(sj.less("x"), window=sj.CountWindow(10))
    em = Emitter(q, batch_size=2)
    data = {"stream": [0, 0, 1, 1], "x": [1.0, 2.0, 3.0, 0.0]}
    b0, b1 = (b for _, b in em.on_chunk(validate(data, q)))
    merge = MergeSettings(every=2)
    stage, worker = SPOMutableStage(q, 1, merge), SPOWorker(q, 0, 1, merge)
    out = stage.on_batch("in", b0)
    ((port, piece),) = [(p, m) for p, m in out if p != "out"]
    assert port == "w0" and len(piece) == 2
    out = stage.on_batch("in", b1)  # no pairs here: R's mutable part is empty; S merges
    assert [p for p, _ in out] == ["w0"]
    if piece_first:
        assert worker.on_batch("runs", piece) == []
        worker.on_batch("in", b0)
        ((_, pairs),) = worker.on_batch("in", b1)
    else:
        assert worker.on_batch("in", b0) == []
        assert worker.on_batch("in", b1) == []  # the piece is on its way: b1 waits
        ((_, pairs),) = worker.on_batch("runs", piece)
    assert worker.on_batch("runs", out[0][1]) == []
    # r0 (1.0) < s2 (3.0), r1 (2.0) < s2; s3 (0.0) matches nothing
    assert sorted(zip(pairs.r.tolist(), pairs.s.tolist(), strict=True)) == [(0, 2), (1, 2)]
    assert not worker.waiting and not worker.early and not worker.planned


def test_spo_draws_and_parses(tmp_path):
    topo = sj.topologies.spo(3, merge_every=100)
    assert topo.nodes("spo_worker") == ["worker0", "worker1", "worker2"]
    assert topo.nodes("spo_mutable") == ["mutable"]
    assert {(u, v) for u, v in topo.graph.edges() if u == "mutable"} >= {
        ("mutable", f"worker{k}") for k in range(3)
    }
    topo.draw(tmp_path / "spo.png")
    assert (tmp_path / "spo.png").read_bytes()[:4] == b"\x89PNG"
    assert sj.topologies.parse("spo:4").name.startswith("spo(4 workers")


INEQUALITIES = ["less", "less_equal", "greater", "greater_equal"]


@pytest.mark.parametrize("self_join", [False, True], ids=["two_way", "self_join"])
@pytest.mark.parametrize("second", INEQUALITIES)
@pytest.mark.parametrize("first", INEQUALITIES)
def test_spo_every_pair_of_inequalities(first, second, self_join):
    """The 16 pairs of <, <=, >, >= on (x, y) through spo(2), few key values, equal
    timestamps, pieces delivered in a shuffled order."""
    rng = np.random.default_rng(len(first) * 7 + len(second))
    n = 240
    data = {
        "ts": np.cumsum(rng.integers(0, 2, n)),
        "x": rng.integers(0, 6, n).astype(np.float64),
        "y": rng.integers(0, 6, n),
    }
    if not self_join:
        data["stream"] = rng.integers(0, 2, n).astype(np.int8)
    pred = getattr(sj, first)("x") & getattr(sj, second)("y")
    query = sj.Query(pred, window=sj.CountWindow(40), self_join=self_join)
    expected = sj.oracle.join(query, data)
    assert len(expected) > 0
    topo = sj.topologies.spo(2, merge_every=7, subintervals=2)
    for batch_size, seed in ((1, None), (8, 3), (32, 11)):
        res = sj.run(query, data, topo, batch_size=batch_size, delivery_seed=seed)
        assert res.same_pairs(expected), f"{query}, batch {batch_size}, seed {seed}"


@pytest.mark.parametrize("workers", [1, 2, 5, 8, 16])
@pytest.mark.parametrize("fanout", [1, 2, 3])
def test_spo_trees_reach_every_worker_once_and_stay_acyclic(workers, fanout):
    """Every worker hears each batch on exactly one path from the emitter and sends its pairs
    on exactly one path to the collector; no worker passes on to, or combines the pairs of,
    more than ``fanout`` others."""
    import networkx as nx

    g = sj.topologies.spo(workers, relay=fanout, combine=fanout).graph
    assert nx.is_directed_acyclic_graph(g)
    batches = nx.DiGraph(
        (u, v) for u, v, d in g.edges(data=True) if d["dst_port"] == "in" and v != "collector"
    )
    pairs = nx.DiGraph((u, v) for u, v, d in g.edges(data=True) if d["src_port"] == "out")
    for k in range(workers):
        w = f"worker{k}"
        assert batches.in_degree(w) == 1 and batches.out_degree(w) <= fanout
        assert len(list(nx.all_simple_paths(batches, "emitter", w))) == 1 or w == "worker0"
        assert pairs.out_degree(w) == 1 and pairs.in_degree(w) <= fanout
        assert nx.has_path(pairs, w, "collector")
    # the collector hears the workers through one of them, and the emitter feeds one
    assert sum(1 for u, _ in g.in_edges("collector") if u.startswith("worker")) == 1
    assert sum(1 for _, v in g.out_edges("emitter") if v.startswith("worker")) == 1


def test_spo_feeds_few_workers_directly_and_many_through_trees():
    direct = sj.topologies.spo(12).graph
    assert sum(1 for _, v in direct.out_edges("emitter") if v.startswith("worker")) == 12
    tree = sj.topologies.spo(13).graph
    assert sum(1 for _, v in tree.out_edges("emitter") if v.startswith("worker")) == 1
    forced = sj.topologies.spo(8, relay=0, combine=0).graph
    assert sum(1 for _, v in forced.out_edges("emitter") if v.startswith("worker")) == 8
    assert sum(1 for u, _ in forced.in_edges("collector") if u.startswith("worker")) == 8
    one_tree = sj.topologies.spo(8, relay=0, combine=2).graph
    assert sum(1 for _, v in one_tree.out_edges("emitter") if v.startswith("worker")) == 8
    assert sum(1 for u, _ in one_tree.in_edges("collector") if u.startswith("worker")) == 1
    with pytest.raises(ValueError, match="relay must be a non-negative integer"):
        sj.topologies.spo(4, relay=-1)
    # the mutable part's B+-tree fanout is still an index option
    opts = sj.topologies.spo(2, fanout=16).graph.nodes["mutable"]["config"].index_options
    assert opts["fanout"] == 16


def test_a_report_out_of_order_names_the_worker_and_the_batch():
    from streamjoin.actors.spo import SubtreePairs, TreePlace
    from streamjoin.batch import PairBatch

    q = sj.Query(sj.less("x") & sj.greater("y"), window=sj.CountWindow(8))
    worker = SPOWorker(q, 3, 4, MergeSettings(every=4), TreePlace(0, 2, False))
    worker.on_batch("sub1", SubtreePairs(0, PairBatch.empty()))
    with pytest.raises(ValueError, match="worker 3 expected the report of batch 1 .* sub1"):
        worker.on_batch("sub1", SubtreePairs(2, PairBatch.empty()))
    with pytest.raises(ValueError, match="no input port 'sub2'"):
        worker.on_batch("sub2", SubtreePairs(0, PairBatch.empty()))
