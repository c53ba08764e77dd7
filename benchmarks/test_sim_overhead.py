"""The simulator's own overhead: ``sim`` against ``local`` on the same 4x4 grid (pytest-benchmark).

Run: ``python -m pytest benchmarks/test_sim_overhead.py --benchmark-enable -o addopts=""
-p no:cacheprovider``.

Both backends run the same actor logic on the same input; ``sim`` adds the virtual clock, the
cost model and the event bookkeeping. The target: at most 25% wall time beyond ``local``
on a 16-worker grid. Each round runs ``local`` (in the benchmark's untimed setup, timed here)
and then ``sim`` (the benchmark's target), so every ratio compares two runs made back to back;
``extra_info`` holds the per-round wall and CPU (process) times of both and the median
overhead ``sim / local - 1``. CPU time is the steadier figure on a shared machine.

Workloads:

- ``tuple``: DP-Join's setting, tuple at a time (batch 1, one row per chunk), the handshake
  workload ``band(x, 50) & band(y, 50)`` over a 2 s time window, 6,000 tuples: many cheap steps,
  the worst case for per-step bookkeeping;
- ``batched``: a band join at match rate 2 over a count window of 4,096, batches of 256,
  200,000 tuples: fewer, heavier steps.
"""

import os
import time

import numpy as np
import pytest

import streamjoin as sj
from streamjoin.runtime import sim

ROUNDS = 3


def _tuple_at_a_time():
    data = sj.sources.handshake_workload(6_000, rate=1_000, seed=1)
    query = sj.Query(sj.band("x", 50) & sj.band("y", 50), window=sj.TimeWindow(2_000))
    return query, data, {"batch_size": 1, "chunk_rows": 1}


def _batched():
    data = sj.sources.synthetic(200_000, low=0, high=2_000_000, seed=1)
    x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=4096, match_rate=2)
    query = sj.Query(sj.band("x", eps), window=sj.CountWindow(4096))
    return query, data, {"batch_size": 256, "chunk_rows": 256}


WORKLOADS = {"tuple": _tuple_at_a_time, "batched": _batched}


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_sim_overhead_grid_4x4(benchmark, workload):
    query, data, kw = WORKLOADS[workload]()
    topo = sj.topologies.grid(4, 4, "nested_loop")
    arrival = sim.Arrival.poisson(2_000, seed=1)
    kw = {**kw, "collect": "count", "progress": False}
    warm = data.slice(0, 500)
    sj.run(query, warm, topo, backend="local", **kw)
    sj.run(query, warm, topo, backend="sim", arrival=arrival, **kw)
    local, simulated, counts = [], [], []

    def run_local():
        c0, w0 = time.process_time(), time.perf_counter()
        counts.append(sj.run(query, data, topo, backend="local", **kw).count)
        local.append((time.perf_counter() - w0, time.process_time() - c0))

    def run_sim():
        c0, w0 = time.process_time(), time.perf_counter()
        res = sj.run(query, data, topo, backend="sim", arrival=arrival, **kw)
        simulated.append((time.perf_counter() - w0, time.process_time() - c0))
        return res

    res = benchmark.pedantic(run_sim, setup=run_local, rounds=ROUNDS, iterations=1)
    assert counts == [res.count] * ROUNDS
    pairs = list(zip(local, simulated, strict=True))
    wall = np.array([s[0] / lo[0] - 1 for lo, s in pairs])
    cpu = np.array([s[1] / lo[1] - 1 for lo, s in pairs])
    benchmark.extra_info.update(
        local_wall_s=[round(t[0], 3) for t in local],
        local_cpu_s=[round(t[1], 3) for t in local],
        sim_wall_s=[round(t[0], 3) for t in simulated],
        sim_cpu_s=[round(t[1], 3) for t in simulated],
        overhead_wall=round(float(np.median(wall)), 3),
        overhead_cpu=round(float(np.median(cpu)), 3),
        sim_steps=res.metrics["sim"]["steps"],
        load_avg_1min=round(os.getloadavg()[0], 2),
    )
