"""Outer joins (``Query(how=...)``): each kept tuple without a partner once, as ``(r, -1)`` or
``(-1, s)``. The oracle against DuckDB's SQL outer joins on the same rows, every topology
against the oracle (local with interleavings, sim, Ray), and what the result's forms make of
a missing side."""

import json

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import strategies as st
from layouts import LAYOUTS, every_layout, run_layout
from sql_windows import in_count_window, ranked
from strategies import tables

import streamjoin as sj
from streamjoin.actors import emitter
from streamjoin.cli import main as cli_main

pytestmark = pytest.mark.filterwarnings("ignore::streamjoin.indexes.IndexFallbackWarning")

SQL_JOIN = {"left": "LEFT OUTER JOIN", "right": "RIGHT OUTER JOIN", "full": "FULL OUTER JOIN"}


def _duckdb_pairs(table: pa.Table, how: str, window: int, band: float, kind: str) -> pa.Table:
    """The contract in SQL: an outer join of R and S ON |r.x - s.x| <= band, r.kind = 1 (a
    filter on r's side, SQL ``ON`` semantics) and the earlier of the two among the last
    ``window`` rows of its stream before the later one (``kind="count"``) or at most
    ``window`` behind it in ``ts`` (``"time"``); a missing side is -1."""
    rows = table.append_column("row", pa.array(np.arange(len(table))))  # noqa: F841
    if kind == "count":
        in_window = in_count_window(window)
    else:
        in_window = f"""((s.row > r.row AND r.ts >= s.ts - {window})
            OR (r.row > s.row AND s.ts >= r.ts - {window}))"""
    sql = f"""
        WITH {ranked()},
        rr AS (SELECT * FROM t WHERE stream = 0),
        ss AS (SELECT * FROM t WHERE stream = 1)
        SELECT coalesce(r.row, -1) AS r, coalesce(s.row, -1) AS s
        FROM rr r {SQL_JOIN[how]} ss s
          ON abs(r.x - s.x) <= {band} AND r.kind = 1 AND {in_window}"""
    return duckdb.sql(sql).to_arrow_table()


def _table(rng, n: int) -> pa.Table:
    return pa.table(
        {
            "stream": rng.integers(0, 2, n).astype(np.int8),
            "ts": np.sort(rng.integers(0, n // 2, n)),
            "x": rng.integers(0, 60, n),
            "kind": rng.integers(0, 3, n),
        }
    )


@pytest.mark.parametrize("how", ["left", "right", "full"])
@pytest.mark.parametrize("kind", ["count", "time"])
def test_oracle_equals_duckdb(how, kind):
    table = _table(np.random.default_rng(len(how)), 400)
    window = sj.CountWindow(12) if kind == "count" else sj.TimeWindow(6)
    query = sj.Query(sj.band("x", 1.0) & (sj.r.kind == 1), window=window, how=how)
    expected = _duckdb_pairs(table, how, 12 if kind == "count" else 6, 1.0, kind)
    got = sj.oracle.join(query, table)
    unmatched = np.asarray(got.column("s" if how == "left" else "r")) == -1
    assert 0 < unmatched.sum() < len(got)
    assert sj.oracle.same_pairs(got, expected)


def test_a_self_join_keeps_each_tuple_that_met_no_other():
    rng = np.random.default_rng(3)
    table = pa.table({"ts": np.arange(200), "x": rng.integers(0, 100, 200)})
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(10), self_join=True, how="left")
    rows = table.append_column("row", pa.array(np.arange(200)))  # noqa: F841
    alone = duckdb.sql(
        """SELECT a.row AS r, -1 AS s FROM rows a WHERE NOT EXISTS (SELECT 1 FROM rows b
           WHERE b.row <> a.row AND abs(a.row - b.row) <= 10 AND abs(a.x - b.x) <= 1)"""
    ).to_arrow_table()
    inner = sj.oracle.join(sj.Query(query.predicate, query.window, self_join=True), table)
    expected = pa.concat_tables([inner, alone.cast(inner.schema)])
    assert len(alone) > 0
    assert sj.oracle.same_pairs(sj.oracle.join(query, table), expected)
    res = sj.run(query, table, sj.topologies.split(2), batch_size=16, progress=False)
    assert res.same_pairs(expected)


@every_layout(
    60,
    lateness=st.sampled_from([None, None, 0, 3]),
    how=st.sampled_from(["left", "right", "full"]),
    with_filter=st.booleans(),
    marker_rows=st.sampled_from([1, 16, emitter.MARKER_ROWS]),
)
def test_every_layout_equals_the_oracle(
    self_join,
    data,
    predicate,
    window,
    layout,
    backend,
    batch_size,
    delivery_seed,
    lateness,
    how,
    with_filter,
    marker_rows,
):
    """Also with progress markers after every row or few (the kept rows leave as they go
    out of reach, in any interleaving of the markers with the pairs), or as by default."""
    table = data.draw(tables(self_join))
    if self_join:
        how = "left"
    if with_filter:
        predicate = predicate & (sj.r.y > 0)
    on_late = "error" if lateness is None else "drop"
    query = sj.Query(
        predicate, window=window, self_join=self_join, lateness=lateness, on_late=on_late, how=how
    )
    res = run_layout(query, table, layout, backend, batch_size, delivery_seed, marker_rows)
    if res is None:
        return
    expected = sj.oracle.join(query, table)
    assert res.same_pairs(expected)
    alone = int(
        np.sum((expected.column("r").to_numpy() < 0) | (expected.column("s").to_numpy() < 0))
    )
    assert res.metrics["unmatched_tuples"] == alone


def _unmatched_latency_ms(res) -> np.ndarray:
    r, s = res.pairs.column("r").to_numpy(), res.pairs.column("s").to_numpy()
    return res.pairs.column("latency_ns").to_numpy()[(r < 0) | (s < 0)] / 1e6


@pytest.mark.parametrize(
    "layout",
    ["single", "grid", "panjoin", "spo", "spo_tree", "shared", "handshake", "handshake_ll"],
)
def test_a_tuple_without_a_partner_leaves_once_it_is_out_of_reach(layout):
    """Progress markers: 10,000 tuples at 10,000 a second (1 s of virtual time), a window of
    100 per stream (about 20 ms): a tuple without a partner leaves about that long after its
    arrival, plus a marker's interval (8,192 rows or 100 ms), not when the input ends."""
    data = sj.sources.synthetic(10_000, low=0, high=40_000, attrs=("x",), seed=3)
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(100), how="full")
    topo = LAYOUTS[layout]()
    assert topo.marks_progress(query)
    res = sj.run(query, data, topo, backend="sim", pace=10_000, batch_size=16, progress=False)
    assert res.same_pairs(sj.oracle.join(query, data))
    lat = _unmatched_latency_ms(res)
    assert len(lat) > 5_000
    assert np.percentile(lat, 99) < 250, np.percentile(lat, [50, 99])


@pytest.mark.parametrize("merge_every, window, high", [(5, 7, 100), (8, 9, 300), (10, 12, 300)])
def test_a_combining_tree_sends_its_late_pairs_ahead_of_the_marker(
    merge_every, window, high, monkeypatch
):
    """SPO's combining tree under markers: a piece that reaches a worker after the batches
    that probe it finds pairs once the worker has reported those batches; they must reach the
    collector before the marker that releases their rows as unmatched. Merges every few
    tuples into a window a little longer, so those rows leave reach soon after; a marker after
    every batch. (Without the worker sending them up with the marker, 11 of these 60 runs
    returned a row as unmatched beside its pair.)"""
    monkeypatch.setattr(emitter, "MARKER_ROWS", 1)
    topo = sj.topologies.spo(4, merge_every=merge_every, subintervals=2, relay=2, combine=2)
    query = sj.Query(sj.less("x") & sj.greater("y"), window=sj.CountWindow(window), how="full")
    assert topo.marks_progress(query)
    for seed in range(20):
        data = sj.sources.synthetic(200, low=0, high=high, attrs=("x", "y"), seed=seed)
        res = sj.run(query, data, topo, batch_size=8, delivery_seed=seed, progress=False)
        assert res.same_pairs(sj.oracle.join(query, data)), seed


def test_the_collector_forgets_rows_no_pair_can_hold_any_more():
    """With progress markers, the collector's byte per row covers the rows still within
    reach (about two windows and a marker interval), not the whole run."""
    from streamjoin.actors.base import RunSettings
    from streamjoin.runtime.local import Local
    from streamjoin.runtime.pipeline import slices
    from streamjoin.validation import validate

    n, window = 40_000, 500
    data = sj.sources.synthetic(n, low=0, high=2 * n, attrs=("x",), seed=4)
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(window), how="full")
    topo = sj.topologies.single().for_query(query)
    settings = RunSettings(batch_size=256, markers=topo.marks_progress(query))
    trace = Local().run(query, topo, slices(validate(data, query), 256), settings, None)
    held = trace.collector._matched
    assert held.base > n - 4 * emitter.MARKER_ROWS
    assert len(held.flags) < 4 * emitter.MARKER_ROWS
    res = sj.run(query, data, sj.topologies.single(), batch_size=256, progress=False)
    assert res.same_pairs(sj.oracle.join(query, data))


@pytest.mark.parametrize("low_latency", [False, True])
@pytest.mark.parametrize("n, segment", [(1, None), (2, 3), (3, 5)])
def test_a_handshake_chain_passes_markers_behind_the_tuples_before_them(
    low_latency, n, segment, monkeypatch
):
    """The chain's cores pass markers themselves, one lane per stream (its cycles would hold
    a gate for ever): a marker must not reach the collector before a pair of the tuples ahead
    of it. Original chains with small segments (tuples cross cores a few at a time), the
    low-latency chain, a marker after every batch, count and time windows, self-joins, in
    random interleavings of the deliveries."""
    monkeypatch.setattr(emitter, "MARKER_ROWS", 1)
    topo = sj.topologies.handshake(
        n, segment=None if low_latency else segment, low_latency=low_latency
    )
    for seed in range(12):
        self_join = seed % 3 == 2
        window = sj.CountWindow(9) if seed % 2 else sj.TimeWindow(6)
        how = "left" if self_join else ("left", "right", "full")[seed % 3]
        query = sj.Query(sj.band("x", 2.0), window=window, self_join=self_join, how=how)
        assert topo.marks_progress(query)
        data = sj.sources.synthetic(
            300, low=0, high=60, attrs=("x",), seed=seed, self_join=self_join
        )
        res = sj.run(query, data, topo, batch_size=4, delivery_seed=seed, progress=False)
        assert res.same_pairs(sj.oracle.join(query, data)), seed
        assert res.metrics["markers"] > 10, seed


def test_markers_reach_a_chain_on_every_port_and_other_nodes_once():
    """A node that passes markers itself tells the streams' markers apart by port: the
    emitter sends it one on each port its edges feed (a chain of one: both ends); any other
    successor gets one, on one of its ports."""
    routes = sj.topologies.handshake(1).marker_routes()
    assert sorted(routes["emitter"]) == [("core0", "r_in"), ("core0", "s_in")]
    assert routes["core0"] == [("collector", "in")]
    grid = sj.topologies.grid(2, 2).for_query(
        sj.Query(sj.band("x", 1.0), window=sj.CountWindow(9), how="left")
    )
    for node, dests in grid.marker_routes().items():
        assert len(dests) == len({d for d, _ in dests}), node


def test_an_inner_join_sends_no_markers():
    inner = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(100))
    for layout in ("single", "handshake", "handshake_ll", "spo_tree"):
        assert not LAYOUTS[layout]().marks_progress(inner)


def _synthetic(n=2_000, seed=5):
    return sj.sources.synthetic(n, low=0, high=2 * n, attrs=("x",), seed=seed)


def test_counts_ordered_output_and_the_summary():
    data = _synthetic()
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(100), how="full")
    expected = sj.oracle.join(query, data)
    counted = sj.run(query, data, sj.topologies.grid(2, 2), collect="count", progress=False)
    assert counted.count == len(expected)
    ordered = sj.run(query, data, sj.topologies.single(), ordered=True, progress=False)
    assert ordered.same_pairs(expected)
    r, s = ordered.pairs.column("r").to_numpy(), ordered.pairs.column("s").to_numpy()
    later = np.maximum(r, s)
    assert (np.diff(later) >= 0).all()  # in order of the later (or only) tuple
    assert "tuples without a partner" in ordered.summary()
    assert "full outer join" in ordered.metrics["query"]
    # a tuple without a partner leaves when the input ends: its latency is counted to then
    lat = ordered.pairs.column("latency_ns").to_numpy()
    assert (lat >= 0).all()


def test_a_missing_side_is_null_in_the_rows_columns_and_stays_minus_one_under_lateness():
    rng = np.random.default_rng(9)
    n = 300
    table = pa.table(
        {
            "stream": rng.integers(0, 2, n).astype(np.int8),
            "ts": np.arange(n) + rng.integers(-5, 6, n),  # out of order by up to 10
            "x": rng.integers(0, 200, n),
        }
    )
    query = sj.Query(
        sj.band("x", 1.0), window=sj.TimeWindow(20), lateness=4, on_late="drop", how="left"
    )
    res = sj.run(query, table, sj.topologies.split(2), batch_size=8, progress=False)
    assert len(res.late) > 0
    assert res.same_pairs(sj.oracle.join(query, table))
    s = res.pairs.column("s").to_numpy()
    assert (s == -1).any() and (res.pairs.column("r").to_numpy() >= 0).all()
    late = set(res.late.column("row").to_pylist())
    assert late.isdisjoint(res.pairs.column("r").to_pylist())  # a late row is in .late only
    wide = res.pairs_with(table, columns=["x"])
    assert wide.column("s_x").null_count == int((s == -1).sum())
    assert wide.column("r_x").null_count == 0


def test_bad_how_is_a_clear_error():
    with pytest.raises(ValueError, match="how must be one of 'inner', 'left', 'right', 'full'"):
        sj.Query(sj.band("x", 1.0), sj.CountWindow(4), how="outer")
    with pytest.raises(ValueError, match="a self-join takes how='inner' or how='left'"):
        sj.Query(sj.band("x", 1.0), sj.CountWindow(4), self_join=True, how="full")


def test_the_cli_takes_how(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["run", "--no-progress", "--tuples", "3000", "--how", "full", "--check", "-o", str(out)]
    assert cli_main(args) == 0
    printed = capsys.readouterr().out
    assert "oracle: same pairs" in printed and "tuples without a partner" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["unmatched_tuples"] > 0


def test_a_handshake_chain_passes_markers_on_ray(ray_session, monkeypatch):
    """The chain's cores take progress markers as messages on Ray too (their own routes, by
    port): a left outer join on the original chain with small segments, a marker after every
    256 rows, exact, and the markers reach the collector."""
    monkeypatch.setattr(emitter, "MARKER_ROWS", 256)
    data = _synthetic(4_000, seed=12)
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(200), how="left")
    res = sj.run(query, data, LAYOUTS["handshake"](), backend="ray", batch_size=64)
    assert res.same_pairs(sj.oracle.join(query, data))
    assert res.metrics["unmatched_tuples"] > 0
    assert res.metrics["markers"] >= 4_000 // 256 - 1  # one is due after every 256 rows


# -m slow: the default run meets outer joins on Ray in a grid (a left outer join with a
# residual function, test_where) and a killed and rebuilt pipelined shared core (a full outer
# join, test_ray_failures)
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["grid", "shared", "handshake", "handshake_ll"])
def test_outer_joins_on_ray(ray_session, layout):
    data = _synthetic(3_000, seed=11)
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(300), how="full")
    res = sj.run(query, data, LAYOUTS[layout](), backend="ray", batch_size=64)
    expected = sj.oracle.join(query, data)
    assert res.same_pairs(expected)
    assert res.metrics["unmatched_tuples"] > 0
