"""What out-of-order input costs the default job (``streamjoin run`` with no options: 200,000
tuples, band join at match rate 2, count window 4,096, one core, ``local``, batches of 1,024).

    python benchmarks/event_time_cost.py [ROUNDS] [DELAY_MS]

Four configurations, run in turn in one process (A B C D A B C D ..., so a drifting host moves
them alike), each timed over ``sj.run``'s own throughput (first ingest to last pair):

- ``in order``: the input in ``ts`` order, ``lateness=None`` (today's contract);
- ``lateness 0``: the same input through the watermark and the reorder buffer, with nothing
  held back (every row is at the watermark);
- ``in order, L``: the same input with ``lateness=DELAY_MS`` (every row waits for the
  watermark: the buffer holds DELAY_MS of input);
- ``out of order, L``: the input with each row up to DELAY_MS late
  (``sj.sources.disorder``) and ``lateness=DELAY_MS``: exact, nothing late.

Prints each configuration's median tuples/s and p50 latency, and the pairwise ratios of each
to ``in order`` (median, min, max over the rounds). DELAY_MS defaults to 1,000 (one second of
event time: 20,000 rows at the default rate).
"""

from __future__ import annotations

import os
import statistics
import sys

import streamjoin as sj


def workload(delay: int = 1000) -> dict:
    """The four configurations of the module docstring: ``{name: (query, data)}``."""
    ordered = sj.sources.synthetic(200_000, low=0, high=2_000_000, rate=10_000, seed=1)
    shuffled = sj.sources.disorder(ordered, delay, seed=2)
    x = ordered.column("x").to_numpy()
    stream = ordered.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[stream == 0], x[stream == 1], window=4096)
    window = sj.CountWindow(4096)
    return {
        "in order": (sj.Query(sj.band("x", eps), window=window), ordered),
        "lateness 0": (sj.Query(sj.band("x", eps), window=window, lateness=0), ordered),
        "in order, L": (sj.Query(sj.band("x", eps), window=window, lateness=delay), ordered),
        "out of order, L": (sj.Query(sj.band("x", eps), window=window, lateness=delay), shuffled),
    }


def main(rounds: int = 7, delay: int = 1000) -> None:
    configs = workload(delay)
    rate: dict[str, list[float]] = {k: [] for k in configs}
    p50: dict[str, list[float]] = {k: [] for k in configs}
    for query, data in configs.values():  # warm every kernel first, untimed
        sj.run(query, data.slice(0, 20_000), sj.topologies.single(), progress=False)
    for _ in range(rounds):
        for k, (query, data) in configs.items():
            res = sj.run(query, data, sj.topologies.single(), collect="count", progress=False)
            assert res.metrics.get("late_tuples", 0) == 0
            rate[k].append(res.metrics["input_tuples_per_s"])
            p50[k].append(res.metrics["latency_ms"]["p50"])
    print(f"load average {os.getloadavg()[0]:.2f}; {rounds} rounds; DELAY_MS {delay}")
    base = rate["in order"]
    for k in configs:
        ratios = [a / b for a, b in zip(rate[k], base, strict=True)]
        print(
            f"{k:<18} {statistics.median(rate[k]):>12,.0f} tuples/s   p50 "
            f"{statistics.median(p50[k]):8.3f} ms   / in order: median "
            f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})"
        )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
