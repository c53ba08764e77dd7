"""Topologies on Ray against the local executor, the Ray runtime issue's speed targets.

Run: ``python -m pytest benchmarks/test_ray_topologies.py --benchmark-enable -o addopts="" -p
no:cacheprovider``. Targets (2-core machine): band join, count window 2^16 per stream, batch
16K, ≥ 1 M input tuples/s end to end on Ray and Ray ≥ 70% of ``local`` for the same
topology; at 50 K tuples/s paced input with 1 ms batches, ``grid(2, 2)`` p50 ≤ 5 ms and
p99 ≤ 50 ms. Each test runs ``local`` and ``ray`` on the same input and records both and their
ratio in ``extra_info`` (the benchmark's own timing is the Ray run).
"""

import os

import pytest

import streamjoin as sj

N = int(os.environ.get("RAY_BENCH_TUPLES", 1_000_000))
WINDOW = 2**16
INDEX = os.environ.get("RAY_BENCH_INDEX", "bplus_tree")  # a fast tree index at 2^16


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


def _record(benchmark, local, ray):
    for name, res in (("local", local), ("ray", ray)):
        m = res.metrics
        benchmark.extra_info[f"{name}_tuples_per_s"] = m["input_tuples_per_s"]
        benchmark.extra_info[f"{name}_p50_ms"] = m["latency_ms"]["p50"]
        benchmark.extra_info[f"{name}_p99_ms"] = m["latency_ms"]["p99"]
    benchmark.extra_info["ray_over_local"] = (
        ray.metrics["input_tuples_per_s"] / local.metrics["input_tuples_per_s"]
    )
    benchmark.extra_info["load_1min"] = os.getloadavg()[0]  # the machine is shared: say how much
    assert ray.count == local.count  # same pairs counted (exactness is the tests' job)


@pytest.mark.parametrize("layout", ["single", "split:2", "grid:1x2", "grid:2x2", "handshake:2:ll",
                                    "panjoin:2x4"])  # fmt: skip
def test_full_speed(benchmark, ray_up, workload, layout):
    query, data = workload
    topo = sj.topologies.parse(layout, INDEX)
    opts = {"batch_size": 16_384, "collect": "count"}
    sj.run(query, data.slice(0, 50_000), topo, backend="local", **opts)  # load the kernels
    local = sj.run(query, data, topo, backend="local", **opts)
    ray = benchmark.pedantic(sj.run, args=(query, data, topo), kwargs={"backend": "ray", **opts},
                             rounds=1, iterations=1)  # fmt: skip
    _record(benchmark, local, ray)


@pytest.mark.parametrize("layout", ["single", "grid:2x2"])
def test_paced_latency(benchmark, ray_up, workload, layout):
    query, data = workload
    data = data.slice(0, min(N, 250_000))  # 5 s of input at 50 K tuples/s
    topo = sj.topologies.parse(layout, INDEX)
    opts = {"batch_size": 256, "max_delay": 0.001, "pace": 50_000, "collect": "count"}
    local = sj.run(query, data, topo, backend="local", **opts)
    ray = benchmark.pedantic(sj.run, args=(query, data, topo), kwargs={"backend": "ray", **opts},
                             rounds=1, iterations=1)  # fmt: skip
    _record(benchmark, local, ray)
