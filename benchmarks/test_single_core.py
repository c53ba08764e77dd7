"""Single join core throughput with ``nested_loop`` and ``hash``, with exact int64 keys, and
with the join core refining candidates (pytest-benchmark).

Run: ``python -m pytest benchmarks --benchmark-enable -o addopts="" -p no:cacheprovider``.
Each round joins the same input; throughput = input tuples / round time. Kernels are warmed
by a first untimed run.
"""

import numpy as np
import pytest

import streamjoin as sj
from streamjoin.indexes import traffic
from streamjoin.roofline import Roofline

N = 200_000


def _throughput(benchmark, query, data, index, batch_size):
    topo = sj.topologies.single(index)
    sj.run(query, data, topo, batch_size=batch_size, collect="count")  # warm
    result = benchmark.pedantic(
        sj.run,
        args=(query, data, topo),
        kwargs={"batch_size": batch_size, "collect": "count"},
        rounds=3,
        iterations=1,
    )
    benchmark.extra_info["input_tuples_per_s"] = N / benchmark.stats.stats.mean
    benchmark.extra_info["output_pairs"] = result.count
    benchmark.extra_info["latency_p50_ms"] = result.metrics["latency_ms"]["p50"]
    return result


@pytest.mark.parametrize("window", [1024, 4096, 16384])
def test_nested_loop_band(benchmark, window):
    data = sj.sources.synthetic(N, low=0, high=10 * N, seed=1)
    x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=window, match_rate=2)
    q = sj.Query(sj.band("x", eps), window=sj.CountWindow(window))
    _throughput(benchmark, q, data, "nested_loop", 1024)
    benchmark.extra_info["comparisons_per_s"] = N * window / benchmark.stats.stats.mean


def test_nested_loop_handshake_two_bands(benchmark):
    data = sj.sources.handshake_workload(N, rate=2_000, seed=1)
    q = sj.Query(sj.band("x", 10) & sj.band("y", 10), window=sj.CountWindow(4096))
    _throughput(benchmark, q, data, "nested_loop", 1024)
    benchmark.extra_info["comparisons_per_s"] = N * 4096 / benchmark.stats.stats.mean


@pytest.fixture(scope="module")
def roofline():
    """This machine's copy bandwidth and dependent-miss latency, measured in this process."""
    return Roofline.measure()


@pytest.mark.parametrize("window", [4096, 2**16, 2**20])
def test_hash_equi(benchmark, window, roofline):
    data = sj.sources.synthetic(N, low=0, high=window // 2, seed=1)  # about 2 matches per probe
    q = sj.Query(sj.equal("x"), window=sj.CountWindow(window))
    result = _throughput(benchmark, q, data, "hash", 1024)
    assert result.count > 0
    # the whole join against the hash table's own traffic (indexes.traffic.hash_table) at the
    # items a stream's table holds here (the largest window never fills with N tuples)
    held = min(window, N // 2)
    model = traffic.hash_table(held, match_rate=result.count / N)
    per_s = benchmark.extra_info["input_tuples_per_s"]
    benchmark.extra_info["roofline"] = str(roofline)
    benchmark.extra_info["model_bytes_per_tuple"] = model["total_bytes"]
    benchmark.extra_info["roofline_fraction"] = roofline.fraction(per_s, model["total_bytes"])
    benchmark.extra_info["dependent_multiple"] = roofline.fraction(
        per_s, misses_per_tuple=model["cold_lines"]
    )


def test_nested_loop_matches_oracle_on_benchmark_shape():
    """The benchmark's configuration is exact (small slice of it)."""
    data = sj.sources.handshake_workload(3000, rate=2_000, seed=1)
    q = sj.Query(sj.band("x", 10) & sj.band("y", 10), window=sj.CountWindow(4096))
    assert sj.run(q, data, batch_size=1024).same_pairs(sj.oracle.join(q, data))
    assert np.isfinite(sj.run(q, data, collect="count").metrics["input_tuples_per_s"])


def _keys(kind: str, n: int, window: int) -> tuple[dict, float]:
    """A band join's input with ``x`` as floats, as small int64s, or as int64s near 2**62
    (where images round, so the join decides on exact integers), and the band for about two
    matches per probe."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 2**31, n)
    x = {"float": x.astype(np.float64), "int": x, "wide": x + 2**62 - 2**30}[kind]
    data = {"stream": rng.integers(0, 2, n).astype(np.int8), "x": x}
    return data, 2**31 / window


@pytest.mark.parametrize("kind", ["float", "int", "wide"])
def test_pim_tree_band_float_int_and_wide_int_keys(benchmark, kind):
    """What exact int64 keys cost: the same join on floats, small integers and integers
    beyond 2**52 (compare the three rows' ``input_tuples_per_s``)."""
    window = 2**16
    data, eps = _keys(kind, 4 * N, window)
    q = sj.Query(sj.band("x", eps), window=sj.CountWindow(window))
    topo = sj.topologies.single("pim_tree")
    sj.run(q, data, topo, collect="count")  # warm
    result = benchmark.pedantic(
        sj.run, args=(q, data, topo), kwargs={"collect": "count"}, rounds=3, iterations=1
    )
    benchmark.extra_info["input_tuples_per_s"] = 4 * N / benchmark.stats.stats.mean
    benchmark.extra_info["output_pairs"] = result.count


def test_wide_int_benchmark_shape_matches_oracle():
    data, eps = _keys("wide", 4000, 512)
    q = sj.Query(sj.band("x", eps), window=sj.CountWindow(512))
    assert sj.run(q, data, sj.topologies.single("pim_tree")).same_pairs(sj.oracle.join(q, data))


@pytest.mark.parametrize(
    "case", ["pim_tree", "pim_tree compact", "bisort", "bisort compact", "pim_tree residual"]
)
def test_refinement_against_the_index_alone(benchmark, case):
    """What the join core's θ test per candidate costs: the same band join where the index
    decides every pair alone (``pim_tree``, ``bisort``: 16-byte items), where the core refines
    each candidate on the stored key (``compact``: 8-byte coded items, a superset), and with a
    second, residual condition the index does not serve (``residual``). Compare the rows'
    ``input_tuples_per_s``; a refining row far below its plain one means the per-candidate
    test has become expensive (it once cost ~115 ns of numba reference counting a
    candidate: 0.66x for ``bisort compact``)."""
    window = 2**16
    index, *mode = case.split()
    data = sj.sources.synthetic(4 * N, low=0, high=1.5 * window, seed=1, attrs=("x", "y"))
    q = sj.band("x", 1.0)
    if mode == ["residual"]:
        q = q & sj.band("y", 0.75 * window)
    query = sj.Query(q, window=sj.CountWindow(window))
    topo = sj.topologies.single(index, **({"layout": "compact"} if mode == ["compact"] else {}))
    sj.run(query, data, topo, collect="count")  # warm
    result = benchmark.pedantic(
        sj.run, args=(query, data, topo), kwargs={"collect": "count"}, rounds=3, iterations=1
    )
    benchmark.extra_info["input_tuples_per_s"] = 4 * N / benchmark.stats.stats.mean
    benchmark.extra_info["output_pairs"] = result.count
