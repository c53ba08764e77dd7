"""Every option of the API, given a careless value, gives a result or a clear ``ValueError``
(an :class:`streamjoin.InputError` among them) before any work: NaN, infinity, zero, negative,
huge, a string, a bool. Absurd sizes (``grid(2, 10**6)``) are refused by name and limit where
the topology is built, instead of hanging in the run; index option values are checked when the
topology is built, not in an actor.
"""

import math
import time

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import streamjoin as sj
from streamjoin.actors.base import MAX_DELAY_S
from streamjoin.checks import MAX_THREADS, cli_number, number

T = sj.topologies
NAN, INF = float("nan"), float("inf")
#: What a careless user types, of every kind.
CARELESS = [NAN, INF, -INF, 0, -1, 0.5, 2.5, 10**12, 2**63, -(2**63), "x", None, True]

BAND = sj.Query(sj.band("x", 2), window=sj.CountWindow(8))
TWO_INEQUALITIES = sj.Query(sj.less("x") & sj.greater("y"), window=sj.CountWindow(8))


def _data(n: int = 48) -> dict:
    rng = np.random.default_rng(7)
    return {
        "stream": np.tile([0, 1], n // 2),
        "ts": np.arange(n),
        "x": rng.integers(0, 20, n).astype(np.float64),
        "y": rng.integers(0, 20, n).astype(np.float64),
    }


DATA = _data()


# --- the one check of a number option ----------------------------------------------------


@pytest.mark.parametrize(
    ("value", "bounds", "message"),
    [
        (NAN, {}, "x must be a finite number, got nan"),
        (INF, {"low": 0}, "x must be a finite number >= 0, got inf"),
        (True, {"integer": True}, "x must be an integer, got True"),
        (2.0, {"integer": True}, "x must be an integer, got 2.0"),
        ("3", {}, "x must be a finite number, got '3'"),
        (0, {"low": 0, "low_open": True}, "x must be a finite number > 0, got 0"),
        (1, {"low": 0, "high": 1, "high_open": True}, r"x must be a finite number in \[0, 1\), "),
        (10**6, {"integer": True, "low": 1, "high": 1024}, r"x must be an integer in \[1, 1024\]"),
        (-1, {"what": "a number of seconds", "low": 0}, "x must be a number of seconds >= 0"),
    ],
)
def test_number_names_the_option_the_rule_and_the_value(value, bounds, message):
    with pytest.raises(ValueError, match=message):
        number("x", value, **bounds)


def test_number_returns_ints_and_floats():
    assert number("x", np.int64(3), integer=True, low=1) == 3
    assert type(number("x", np.int64(3), integer=True)) is int
    assert number("x", 1, low=0, high=1) == 1.0 and type(number("x", 1)) is float


def test_the_command_line_parses_with_the_same_rule():
    import argparse

    parse = cli_number(low=0, what="a number of seconds")
    assert parse("0.5") == 0.5
    for text, said in [("inf", "got inf"), ("nan", "got nan"), ("-1", "got -1"), ("x", "got 'x'")]:
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            parse(text)


# --- run() options -------------------------------------------------------------------------


@pytest.mark.parametrize("value", [INF, -INF, NAN, -1, 10**10, "1", True])
def test_max_delay_out_of_range_is_a_value_error(value):
    with pytest.raises(ValueError, match=r"max_delay must be a number of seconds in \[0, "):
        sj.run(BAND, DATA, max_delay=value)


def test_max_delay_at_its_limit_runs():
    result = sj.run(BAND, DATA, max_delay=MAX_DELAY_S)
    assert result.same_pairs(sj.oracle.join(BAND, DATA))


# --- absurd sizes, refused where the topology is built -------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: T.grid(2, 10**6), r"grid\(2, 1000000\) would have 2,000,002 actors; .* 10,000"),
        (lambda: T.split(10**6), r"split\(1000000\) would have 1,000,002 actors"),
        (lambda: T.handshake(10**6), r"handshake\(1000000\) would have 1,000,002 actors"),
        (lambda: T.panjoin(10**6, 1), r"panjoin\(1000000, 1\) would have 1,000,003 actors"),
        (lambda: T.spo(10**6), r"spo\(1000000\) would have 1,000,003 actors"),
        (lambda: T.panjoin(1, 10**6), r"subwindows must be an integer in \[1, 65536\]"),
        (lambda: T.shared_index(10**6), r"threads must be an integer in \[1, 1024\]"),
        (lambda: T.shared_index(2, task_size=10**12), r"task_size must be an integer in \[1, "),
        (lambda: T.parse("grid:1000x1000"), r"grid\(1000, 1000\) would have 1,000,002 actors"),
    ],
)
def test_absurd_sizes_are_refused_at_once_naming_the_count_and_the_limit(build, message):
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=message):
        build()
    assert time.perf_counter() - t0 < 1  # refused, not built


def test_the_largest_layouts_build():
    assert len(T.split(T.MAX_ACTORS - 2).graph) == T.MAX_ACTORS
    assert T.shared_index(MAX_THREADS).config("core").threads == MAX_THREADS


def test_ray_refuses_more_actors_than_its_cpus_hold(monkeypatch):
    """Each actor asks Ray for at least MIN_CPU_SHARE: beyond what the cluster holds, Ray
    would leave the rest pending and the run would wait forever."""
    from streamjoin.runtime.ray import executor

    monkeypatch.setattr(executor.ray, "cluster_resources", lambda: {"CPU": 2.0})
    fits = T.split(198)  # 198 cores and the collector at 0.01 CPU each: 1.99
    assert sum(executor._cpu_requests(fits.graph, fits.emitter).values()) <= 2.0
    with pytest.raises(ValueError, match="202 actors do not fit this Ray cluster's 2 CPUs"):
        big = T.split(201)
        executor._cpu_requests(big.graph, big.emitter)


def test_ray_refuses_more_attributes_than_its_frames_carry_before_it_starts(monkeypatch):
    """A batch carries two rows per join attribute and a frame at most ``wire.MAX_ATTRS``
    rows: beyond that the first batch used to end the run with a framing error; now the
    run is refused before Ray starts, naming the count, the limit and what to use."""
    from streamjoin.runtime.ray import executor, wire

    monkeypatch.setattr(executor, "_ensure_ray", lambda address: pytest.fail("Ray started"))
    k = wire.MAX_ATTRS // 2 + 1
    names = [f"a{i}" for i in range(k)]
    pred = sj.equal(names[0])
    for name in names[1:]:
        pred = pred & sj.equal(name)
    q = sj.Query(pred, window=sj.CountWindow(4))
    data = {"ts": [0, 1], "stream": [0, 1]} | {n: [1.0, 1.0] for n in names}
    with pytest.raises(ValueError, match=f"joins on {k} attributes; a batch between Ray"):
        sj.run(q, data, T.single("nested_loop"), backend="ray")
    assert sj.run(q, data, T.single("nested_loop")).count == 1  # local takes it


# --- index option values: checked when the topology is built -------------------------------


@pytest.mark.parametrize(
    ("index", "options", "message"),
    [
        ("bplus_tree", {"fanout": "x"}, r"bplus_tree fanout must be an integer in \[3, 65536\]"),
        ("bplus_tree", {"fanout": -1}, r"bplus_tree fanout must be an integer in \[3, 65536\]"),
        ("pim_tree", {"fanout": NAN}, r"pim_tree fanout must be an integer in \[3, 65536\]"),
        ("pim_tree", {"leaf_size": 10**12}, r"pim_tree leaf_size must be an integer in \[3, "),
        ("pim_tree", {"merge_ratio": None}, r"pim_tree merge_ratio must be a finite number in"),
        ("im_tree", {"insertion_depth": 1}, "index 'im_tree' has no option 'insertion_depth'"),
        ("chained", {"chain_length": INF}, r"chained chain_length must be an integer in \[2, "),
        ("css_tree", {"leaf_size": 0}, r"css_tree leaf_size must be an integer in \[1, 65536\]"),
        ("bisort", {"partitions": 10**12}, r"bisort partitions must be an integer in \[1, "),
        ("rap_table", {"sigma": 1e12}, r"rap_table sigma must be a finite number in \(1, 16\]"),
        ("rap_table", {"high": 1}, "index 'rap_table' has no option 'high'"),
        ("wib_tree", {"leaf_width": 2.5}, r"wib_tree leaf_width must be an integer in \[2, "),
    ],
)
def test_a_bad_index_option_value_fails_when_the_topology_is_built(index, options, message):
    for build in (lambda: T.single(index, **options), lambda: T.grid(2, 2, index, **options)):
        with pytest.raises(ValueError, match=message):
            build()


@pytest.mark.parametrize("index", ["pim_tree", "im_tree", "bplus_tree"])
def test_a_shared_index_checks_its_option_values_when_built(index):
    with pytest.raises(ValueError, match=rf"{index} fanout must be an integer in \[3, 65536\]"):
        T.shared_index(2, index, fanout="x")
    with pytest.raises(ValueError, match="index 'bisort' has no option 'bogus'"):
        T.shared_index(1, "bisort", bogus=1)  # one thread, a plain core


def test_spo_checks_the_values_of_its_po_join_options():
    with pytest.raises(ValueError, match=r"po_join fanout must be an integer in \[3, 65536\]"):
        T.spo(2, fanout=1)


def test_an_option_of_the_index_chosen_at_run_time_is_checked_before_the_run():
    topology = T.single(partitions=0)  # the band's index, bisort, is chosen when run
    with pytest.raises(ValueError, match=r"bisort partitions must be an integer in \[1, "):
        sj.run(BAND, DATA, topology)


# --- a hypothesis test over every public builder and run() option --------------------------

#: Each public builder, with one of its number options as the drawn value; the query it runs.
BUILDERS = {
    "split(n)": (lambda v: T.split(v), BAND),
    "grid(m, 2)": (lambda v: T.grid(v, 2), BAND),
    "grid(2, n)": (lambda v: T.grid(2, v, forward="direct"), BAND),
    "handshake(n)": (lambda v: T.handshake(v), BAND),
    "handshake(2, segment)": (lambda v: T.handshake(2, segment=v), BAND),
    "handshake(n, low_latency)": (lambda v: T.handshake(v, low_latency=True), BAND),
    "panjoin(workers)": (lambda v: T.panjoin(v), BAND),
    "panjoin(2, subwindows)": (lambda v: T.panjoin(2, v), BAND),
    "panjoin(2, subwindow_size)": (lambda v: T.panjoin(2, subwindow_size=v), BAND),
    "shared_index(threads)": (lambda v: T.shared_index(v), BAND),
    "shared_index(2, task_size)": (lambda v: T.shared_index(2, task_size=v), BAND),
    "shared_index(2, fanout)": (lambda v: T.shared_index(2, fanout=v), BAND),
    "spo(workers)": (lambda v: T.spo(v), TWO_INEQUALITIES),
    "spo(merge_every)": (lambda v: T.spo(2, merge_every=v), TWO_INEQUALITIES),
    "spo(merge_after)": (lambda v: T.spo(2, merge_after=v), TWO_INEQUALITIES),
    "spo(subintervals)": (lambda v: T.spo(2, subintervals=v), TWO_INEQUALITIES),
    "spo(relay)": (lambda v: T.spo(3, relay=v), TWO_INEQUALITIES),
    "spo(combine)": (lambda v: T.spo(3, combine=v), TWO_INEQUALITIES),
    "spo(fanout)": (lambda v: T.spo(2, fanout=v), TWO_INEQUALITIES),
    "single(bplus_tree, fanout)": (lambda v: T.single("bplus_tree", fanout=v), BAND),
    "single(pim_tree, merge_ratio)": (lambda v: T.single("pim_tree", merge_ratio=v), BAND),
    "single(pim_tree, insertion_depth)": (lambda v: T.single("pim_tree", insertion_depth=v), BAND),
    "single(chained, chain_length)": (lambda v: T.single("chained", chain_length=v), BAND),
    "single(bisort, partitions)": (lambda v: T.single("bisort", partitions=v), BAND),
    "single(bisort, subwindow_size)": (lambda v: T.single("bisort", subwindow_size=v), BAND),
    "single(rap_table, sigma)": (lambda v: T.single("rap_table", sigma=v), BAND),
    "single(wib_tree, leaf_width)": (lambda v: T.single("wib_tree", leaf_width=v), BAND),
    "band(eps)": (lambda v: (sj.Query(sj.band("x", v), window=sj.CountWindow(8)), None), None),
    "less(shift)": (
        lambda v: (sj.Query(sj.less("x", shift=v), window=sj.CountWindow(8)), None),
        None,
    ),
    "CountWindow(size)": (
        lambda v: (sj.Query(sj.band("x", 2), window=sj.CountWindow(v)), None),
        None,
    ),
    "TimeWindow(length)": (
        lambda v: (sj.Query(sj.band("x", 2), window=sj.TimeWindow(v)), None),
        None,
    ),
    "Query(lateness)": (
        lambda v: (sj.Query(sj.band("x", 2), window=sj.TimeWindow(8), lateness=v), None),
        None,
    ),
}

#: Careless values, and ordinary ones of the size each option takes.
VALUES = st.one_of(
    st.sampled_from(CARELESS),
    st.integers(-2, 12),
    st.floats(-2, 12, allow_nan=False),
)


def _result_or_value_error(run) -> None:
    """``run()`` gives the oracle's pairs, or raises ValueError (InputError is one)."""
    try:
        query, result = run()
    except ValueError:
        return
    assert result.same_pairs(sj.oracle.join(query, DATA))


def _build_and_run(name: str, value):
    build, query = BUILDERS[name]

    def run():
        made = build(value)
        q, topology = made if query is None else (query, made)
        return q, sj.run(q, DATA, topology, batch_size=5, timeout=60)

    _result_or_value_error(run)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_careless_value_of_every_builder_gives_a_result_or_a_value_error(name):
    for value in CARELESS:
        _build_and_run(name, value)


@settings(max_examples=examples(120), deadline=None)
@given(name=st.sampled_from(sorted(BUILDERS)), value=VALUES)
def test_every_builder_gives_a_result_or_a_value_error(name, value):
    _build_and_run(name, value)


#: Each run() option with careless values and ordinary ones of its size (a small pace or
#: timeout would only make a run slow, or end it with RunTimeout, as asked).
RUN_OPTIONS = {
    "batch_size": st.integers(1, 64),
    "chunk_rows": st.integers(1, 64),
    "max_delay": st.floats(0, 10),
    "pace": st.floats(1e4, 1e9),
    "timeout": st.floats(30, 1e6),
}


def _careless(option: str) -> list:
    """CARELESS, less the small positive numbers for ``pace`` and ``timeout`` (a slow run, or
    a RunTimeout, as asked)."""
    if option not in ("pace", "timeout"):
        return CARELESS
    return [v for v in CARELESS if not (isinstance(v, float) and 0 < v < 10)]


def _run_with(option: str, value, backend: str) -> None:
    if backend == "sim" and option == "timeout":
        backend = "local"  # sim refuses timeout= whatever its value (tested in test_sim)
    _result_or_value_error(lambda: (BAND, sj.run(BAND, DATA, backend=backend, **{option: value})))


@pytest.mark.parametrize("backend", ["local", "sim"])
@pytest.mark.parametrize("option", sorted(RUN_OPTIONS))
def test_every_careless_value_of_every_run_option_gives_a_result_or_a_value_error(option, backend):
    for value in _careless(option):
        _run_with(option, value, backend)


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_every_run_option_gives_a_result_or_a_value_error(data):
    option = data.draw(st.sampled_from(sorted(RUN_OPTIONS)))
    value = data.draw(st.one_of(st.sampled_from(_careless(option)), RUN_OPTIONS[option]))
    _run_with(option, value, data.draw(st.sampled_from(["local", "sim"])))


def test_careless_values_are_in_the_draw():
    """The hypothesis tests above can fail: the values they draw include ones that raised
    raw errors (or hung) before these checks."""
    assert any(isinstance(v, float) and math.isinf(v) for v in CARELESS)
    assert 10**12 in CARELESS and any(isinstance(v, float) and math.isnan(v) for v in CARELESS)


# --- the Spark bridge's doors that need no Spark session -----------------------------------


def test_from_dataframe_of_a_pandas_frame_says_what_to_call():
    import pandas as pd

    from streamjoin.spark_bridge import from_dataframe

    with pytest.raises(ValueError) as info:
        from_dataframe(pd.DataFrame(DATA))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("from_dataframe takes a Spark DataFrame, got pandas.DataFrame")
    assert "to streamjoin.run(query, table, ...) itself" in message


@pytest.mark.parametrize("batch_id", [-1, -5, "abc", 1.5, None, True])
def test_join_sink_refuses_batch_ids_spark_never_gives(batch_id):
    from streamjoin.spark_bridge import JoinSink

    sink = JoinSink(BAND)
    with pytest.raises(ValueError, match=r"batch_id must be an integer >= 0, got "):
        sink(None, batch_id)  # refused before the micro-batch is read
    assert sink.close(timeout=60).count == 0
