"""Topologies on Ray against the local executor, the Ray runtime issue's speed targets.

Run: ``python -m pytest benchmarks/test_ray_topologies.py --benchmark-enable -o addopts="" -p
no:cacheprovider``. Targets (2-core machine): band join, count window 2^16 per stream, batch
16K, ≥ 1 M input tuples/s end to end on Ray and Ray ≥ 70% of ``local`` for the same
topology; at 50 K tuples/s paced input with 1 ms batches, ``grid(2, 2)`` p50 ≤ 5 ms and
p99 ≤ 50 ms. Each test runs ``local`` and ``ray`` on the same input and records both and their
ratio in ``extra_info`` (the benchmark's own timing is the Ray run).

The machine is shared and a single run swings by ±30%, so each test alternates ``local`` and
``ray`` runs ``RAY_BENCH_REPEAT`` times (default 3) and records the medians (and every run).
``RAY_BENCH_INDEX`` picks the index (default: the one ``streamjoin`` picks for a band,
:func:`streamjoin.indexes.default_for`); ``RAY_BENCH_TUPLES`` the input size.
"""

import os
import statistics

import pytest

import streamjoin as sj

N = int(os.environ.get("RAY_BENCH_TUPLES", 1_000_000))
WINDOW = 2**16
REPEAT = int(os.environ.get("RAY_BENCH_REPEAT", 3))
INDEX = os.environ.get("RAY_BENCH_INDEX") or None  # None: the default index for the band


@pytest.fixture(scope="module")
def ray_up():
    import ray

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def workload():
    data = sj.sources.synthetic(N, low=0, high=10 * N, seed=1)
    x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=WINDOW, match_rate=2)
    return sj.Query(sj.band("x", eps), window=sj.CountWindow(WINDOW)), data


def _alternate(benchmark, query, data, topo, opts):
    """Run ``local`` then ``ray`` ``REPEAT`` times (the benchmark times the Ray runs) and record
    the median of each figure per backend, every run's figures and the load."""
    runs = {"local": [], "ray": []}

    def local_run():
        runs["local"].append(sj.run(query, data, topo, backend="local", **opts))

    def ray_run():
        runs["ray"].append(sj.run(query, data, topo, backend="ray", **opts))

    benchmark.pedantic(ray_run, setup=local_run, rounds=REPEAT, iterations=1)
    info = benchmark.extra_info
    for name, results in runs.items():
        metrics = [r.metrics for r in results]
        rates = [m["input_tuples_per_s"] for m in metrics]
        info[f"{name}_tuples_per_s"] = statistics.median(rates)
        info[f"{name}_tuples_per_s_runs"] = rates
        for q in ("p50", "p99"):
            values = [m["latency_ms"][q] for m in metrics]
            info[f"{name}_{q}_ms"] = statistics.median(values)
            info[f"{name}_{q}_ms_runs"] = values
    info["ray_over_local"] = info["ray_tuples_per_s"] / info["local_tuples_per_s"]
    info["ray_over_local_runs"] = [
        r.metrics["input_tuples_per_s"] / loc.metrics["input_tuples_per_s"]
        for loc, r in zip(runs["local"], runs["ray"], strict=True)
    ]
    info["topology"] = topo.name
    info["index"] = INDEX or sj.indexes.default_for(query.predicate)
    info["load_1min"] = os.getloadavg()[0]  # the machine is shared: say how much
    counts = {r.count for rs in runs.values() for r in rs}
    assert len(counts) == 1  # same pairs counted (exactness is the tests' job)


@pytest.mark.parametrize(
    "layout", ["single", "split:2", "grid:1x2", "grid:2x2", "handshake:2:ll", "panjoin:2x4"]
)
def test_full_speed(benchmark, ray_up, workload, layout):
    query, data = workload
    topo = sj.topologies.parse(layout, INDEX)
    opts = {"batch_size": 16_384, "collect": "count"}
    for backend in ("local", "ray"):  # load the kernels, start the actors' code once
        sj.run(query, data.slice(0, 50_000), topo, backend=backend, **opts)
    _alternate(benchmark, query, data, topo, opts)


@pytest.mark.parametrize("layout", ["single", "grid:2x2"])
def test_paced_latency(benchmark, ray_up, workload, layout):
    query, data = workload
    data = data.slice(0, min(N, 250_000))  # 5 s of input at 50 K tuples/s
    topo = sj.topologies.parse(layout, INDEX)
    opts = {"batch_size": 256, "max_delay": 0.001, "pace": 50_000, "collect": "count"}
    _alternate(benchmark, query, data, topo, opts)
