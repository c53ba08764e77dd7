"""What an outer join costs the default job (``streamjoin run`` with no options: 200,000
tuples, band join at match rate 2, count window 4,096, one core, ``local``, batches of 1,024,
``collect="count"``).

    python benchmarks/outer_join_cost.py [ROUNDS] [COLLECT]

Runs ``how="inner"``, ``"left"`` and ``"full"`` in turn in one process (A B C A B C ..., so a
drifting host moves them alike), each timed over ``sj.run``'s own throughput (first ingest to
the last pair, which for an outer join is one of its last tuples without a partner, which
leave at the end of input; the others leave by the progress markers as the run goes on), and prints each one's median tuples/s and the pairwise ratios to ``inner`` (median,
min, max over the rounds). COLLECT is ``count`` (the default job's) or ``pairs``.
"""

from __future__ import annotations

import os
import statistics
import sys

import streamjoin as sj


def main(rounds: int = 7, collect: str = "count") -> None:
    data = sj.sources.synthetic(200_000, low=0, high=2_000_000, rate=10_000, seed=1)
    x = data.column("x").to_numpy()
    stream = data.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[stream == 0], x[stream == 1], window=4096)
    hows = ("inner", "left", "full")
    queries = {h: sj.Query(sj.band("x", eps), window=sj.CountWindow(4096), how=h) for h in hows}
    for query in queries.values():  # warm every kernel first, untimed
        sj.run(query, data.slice(0, 20_000), sj.topologies.single(), progress=False)
    rate: dict[str, list[float]] = {h: [] for h in hows}
    alone: dict[str, int] = {}
    for _ in range(rounds):
        for h, query in queries.items():
            res = sj.run(query, data, sj.topologies.single(), collect=collect, progress=False)
            rate[h].append(res.metrics["input_tuples_per_s"])
            alone[h] = res.metrics.get("unmatched_tuples", 0)
    print(f"load average {os.getloadavg()[0]:.2f}; {rounds} rounds; collect={collect}")
    for h in hows:
        ratios = [a / b for a, b in zip(rate[h], rate["inner"], strict=True)]
        print(
            f"{h:<6} {statistics.median(rate[h]):>12,.0f} tuples/s  {alone[h]:>8,} without a "
            f"partner   / inner: median {statistics.median(ratios):.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
        )


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 7, sys.argv[2] if len(sys.argv) > 2 else "count"
    )
