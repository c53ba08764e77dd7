"""Out-of-order input (``Query.lateness``) on every topology and backend, against the oracle:
the join of the rows that are not late, stably sorted by ``ts``, by input row numbers, and the
late rows listed (docs/design.md §1)."""

import dataclasses

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import strategies as st
from layouts import LAYOUTS as ALL_LAYOUTS
from layouts import every_layout, run_layout
from strategies import tables

import streamjoin as sj
from streamjoin.runtime import sim
from streamjoin.sources import Source

pytestmark = pytest.mark.filterwarnings("ignore::streamjoin.indexes.IndexFallbackWarning")

#: every topology, small (the shared-index core's compact and B+-tree forms and the SPO tree
#: layout are the backend tests')
LAYOUTS = {
    name: build
    for name, build in ALL_LAYOUTS.items()
    if name not in ("shared_compact", "shared_bplus", "spo_tree")
}


@st.composite
def disordered(draw, self_join: bool):
    """A random table (ts ordered per stream), then reordered: each row held up by up to
    ``hold`` ts units, and a few stragglers moved further back."""
    data = draw(tables(self_join, max_rows=50))
    n = len(data["ts"])
    hold = draw(st.sampled_from([0, 1, 3, 10]))
    holds = np.array(draw(st.lists(st.integers(0, hold), min_size=n, max_size=n)), np.int64)
    stragglers = draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=3)) if n else []
    holds[stragglers] += 20
    order = np.argsort(data["ts"] + holds, kind="stable")
    return {k: v[order] for k, v in data.items()}


def _query(predicate, window, self_join, lateness, on_late="drop"):
    return sj.Query(
        predicate, window=window, self_join=self_join, lateness=lateness, on_late=on_late
    )


@every_layout(150, layouts=LAYOUTS, lateness=st.sampled_from([0, 1, 4, 10**6]))
def test_out_of_order_input_equals_the_oracle(
    self_join, data, predicate, window, lateness, layout, backend, batch_size, delivery_seed
):
    table = data.draw(disordered(self_join))
    query = _query(predicate, window, self_join, lateness)
    res = run_layout(query, table, layout, backend, batch_size, delivery_seed)
    if res is None:
        return
    assert res.same_pairs(sj.oracle.join(query, table))
    late = sj.oracle.late_rows(query, table)
    assert res.late.column("row").to_pylist() == late.tolist()
    assert res.metrics["late_tuples"] == len(late)
    if lateness == 10**6:
        assert len(late) == 0


# the reorder buffer sits in the emitter: two layouts by default (a pipelined shared core,
# a grid), the rest with -m slow (every layout meets disorder on local and sim)
@pytest.mark.parametrize(
    "layout",
    [
        "shared",
        "grid",
        pytest.param("spo", marks=pytest.mark.slow),
        pytest.param("handshake_ll", marks=pytest.mark.slow),
    ],
)
def test_out_of_order_input_on_ray(ray_session, layout):
    data = sj.sources.disorder(
        sj.sources.synthetic(3_000, low=0, high=500, attrs=("x", "y"), seed=4), 30, seed=5
    )
    pred = sj.less("x") & sj.greater("y") if layout == "spo" else sj.band("x", 2)
    query = _query(pred, sj.TimeWindow(40), False, 8)
    res = sj.run(query, data, LAYOUTS[layout](), backend="ray", batch_size=64)
    assert res.same_pairs(sj.oracle.join(query, data))
    assert res.metrics["late_tuples"] == len(sj.oracle.late_rows(query, data)) > 0


@pytest.mark.parametrize("backend", ["local", "sim"])
def test_a_paced_run_sends_the_rows_ready_in_part_batches_when_they_have_waited(backend):
    """Paced input with ``max_delay``: released rows wait in the reorder buffer for a whole
    batch, and the emitter's tick sends what is ready once the oldest has waited (a part of
    a batch, many times here): exact, and more batches than whole ones would make."""
    data = sj.sources.disorder(
        sj.sources.synthetic(2_000, low=0, high=300, rate=20_000, seed=3), 20, seed=4
    )
    query = _query(sj.band("x", 2), sj.CountWindow(50), False, 20)
    res = sj.run(
        query,
        data,
        sj.topologies.single(),
        backend=backend,
        batch_size=256,
        pace=20_000,
        max_delay=0.002,
    )
    assert res.same_pairs(sj.oracle.join(query, data))
    assert res.metrics["actors"]["emitter"]["batches_out"] > 3 * (2_000 // 256)


def test_lateness_covering_the_disorder_gives_the_ordered_answer():
    """Every row displaced by at most D and lateness=D: nothing is late, and the pairs are
    those of the input in order (the same rows, renumbered)."""
    ordered = sj.sources.synthetic(4_000, seed=6)
    ordered = ordered.append_column("id", pa.array(np.arange(4_000)))
    shuffled = sj.sources.disorder(ordered, 50, seed=7)
    query = _query(sj.band("x", 1e6), sj.TimeWindow(200), False, 50, on_late="error")
    res = sj.run(query, shuffled, sj.topologies.split(2))
    assert len(res.late) == 0
    original = shuffled.column("id").to_numpy()  # a disordered row's place in the input
    back = {(original[r], original[s]) for r, s in zip(*_rs(res), strict=True)}
    plain = sj.Query(sj.band("x", 1e6), window=sj.TimeWindow(200))
    expected = sj.oracle.join(plain, ordered)
    assert back == set(zip(*_rs(expected), strict=True))


def _rs(pairs):
    table = pairs.pairs if hasattr(pairs, "pairs") else pairs
    return table.column("r").to_numpy(), table.column("s").to_numpy()


def test_a_late_row_refused_before_anything_runs():
    data = {"stream": np.array([0, 1, 0, 1]), "ts": np.array([10, 20, 30, 5]), "x": np.zeros(4)}
    query = _query(sj.band("x", 1), sj.TimeWindow(50), False, 10, on_late="error")
    with pytest.raises(sj.InputError, match=r"row 3 is late: its ts 5 lies below the watermark 20"):
        sj.run(query, data)
    with pytest.raises(sj.InputError, match="row 3 is late"):
        sj.oracle.join(query, data)


class _Chunks(Source):
    def __init__(self, parts):
        self.parts = parts

    def __iter__(self):
        yield from self.parts


@pytest.mark.parametrize("backend", ["local", "sim"])
def test_a_late_row_in_a_source_ends_the_run_with_its_error(backend):
    """The late row comes in the third chunk: the run raises, and returns nothing."""
    parts = [[1, 2, 3], [9, 4], [12, 1]]
    source = _Chunks([{"ts": np.array(ts), "x": np.zeros(len(ts))} for ts in parts])
    query = _query(sj.band("x", 1), sj.CountWindow(5), True, 5, on_late="error")
    with pytest.raises(sj.InputError, match=r"row 6 is late: its ts 1 lies below the watermark 7"):
        sj.run(query, source, backend=backend)


def test_counting_run_lists_late_rows_too():
    data = sj.sources.disorder(sj.sources.synthetic(2_000, seed=8), 40, fraction=0.1, seed=9)
    query = _query(sj.band("x", 1e6), sj.CountWindow(100), False, 5)
    res = sj.run(query, data, collect="count")
    assert res.count == sj.oracle.join(query, data).num_rows
    assert len(res.late) == len(sj.oracle.late_rows(query, data)) > 0


def test_query_checks_its_event_time_options():
    with pytest.raises(ValueError, match="lateness must be >= 0"):
        sj.Query(sj.band("x", 1), window=sj.CountWindow(3), lateness=-1)
    with pytest.raises(ValueError, match="lateness must be an int"):
        sj.Query(sj.band("x", 1), window=sj.CountWindow(3), lateness=1.5)
    with pytest.raises(ValueError, match="on_late must be"):
        sj.Query(sj.band("x", 1), window=sj.CountWindow(3), lateness=1, on_late="keep")
    with pytest.raises(ValueError, match="on_late='drop' needs lateness="):
        sj.Query(sj.band("x", 1), window=sj.CountWindow(3), on_late="drop")
    with pytest.raises(sj.InputError, match="needs a 'ts' column"):
        sj.run(_query(sj.band("x", 1), sj.CountWindow(3), True, 2), {"x": np.zeros(3)})


def test_waiting_for_the_watermark_shows_in_latency():
    """Rows wait for the watermark: on the simulator replaying ``ts`` as arrival times, every
    row waits until input 20 ms later arrives, and the latency shows it (it counts from
    arrival)."""
    data = sj.sources.synthetic(4_000, rate=20_000, seed=10)  # ts in ms: 200 ms of input
    plain = sj.Query(sj.band("x", 1e6), window=sj.TimeWindow(50))
    late = sj.Query(sj.band("x", 1e6), window=sj.TimeWindow(50), lateness=20)
    kw = {"backend": "sim", "batch_size": 64}
    p50_plain = sj.run(plain, data, **kw).metrics["latency_ms"]["p50"]
    p50_late = sj.run(late, data, **kw).metrics["latency_ms"]["p50"]
    assert p50_plain + 18 <= p50_late <= p50_plain + 25  # the 20 ms the watermark trails by


def test_the_simulator_charges_the_reorder_buffer():
    """The emitter's sorts and gathers are charged as copied rows (the profile's ``copied``
    cost): with that cost zeroed, holding the input for the watermark costs the emitter at
    least two copies a row less (each row is copied into the buffer and out of it)."""
    data = sj.sources.synthetic(20_000, rate=5_000, seed=11)
    query = sj.Query(sj.band("x", 1e6), window=sj.CountWindow(500), lateness=200)
    profile = sim.default_profile()
    free = dataclasses.replace(
        profile, roles={**profile.roles, "emitter": {**profile.roles["emitter"], "copied": 0.0}}
    )
    busy = [
        sj.run(query, data, backend=sim.Sim(machine), batch_size=256).metrics["actors"]["emitter"][
            "busy_s"
        ]
        for machine in (profile, free)
    ]
    copy_s = profile.roles["emitter"]["copied"] * 1e-9
    assert busy[0] - busy[1] >= 2 * copy_s * 20_000
