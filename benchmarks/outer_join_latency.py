"""When an outer join's tuples without a partner leave: their latency (arrival to leaving),
with the progress markers that let them go once no later tuple can reach them, and without
(every one at the end of input, as runs without markers do).

    python benchmarks/outer_join_latency.py [BACKEND] [TUPLES]

A full outer join, band join at about one partner per ten tuples, count window of 100 per
stream, input paced at 10,000 tuples/s (BACKEND ``sim``: virtual time, deterministic; ``local``:
wall time), batches of 16, on ``single``, ``grid(2, 2)``, ``panjoin(2, 4)``, ``spo(2)``, a
pipelined ``shared_index(2)`` and both handshake chains of 3 (the original with its default
segments: a count window spread over the chain). Prints, per layout, p50 and p99 of the unmatched tuples'
latency and of the pairs', markers on (the default) and off (``MARKER_ROWS`` and
``MARKER_NS`` out of reach), and the run's input span.
"""

from __future__ import annotations

import sys

import numpy as np

import streamjoin as sj
from streamjoin.actors import emitter

LAYOUTS = {
    "single": lambda: sj.topologies.single(),
    "grid(2, 2)": lambda: sj.topologies.grid(2, 2),
    "panjoin(2, 4)": lambda: sj.topologies.panjoin(2, 4),
    "spo(2)": lambda: sj.topologies.spo(2),
    "shared_index(2)": lambda: sj.topologies.shared_index(2, pipelined=True),
    "handshake(3)": lambda: sj.topologies.handshake(3),
    "handshake(3, ll)": lambda: sj.topologies.handshake(3, low_latency=True),
}


def main(backend: str = "sim", n: int = 20_000) -> None:
    data = sj.sources.synthetic(n, low=0, high=2 * n, attrs=("x",), seed=3)
    query = sj.Query(sj.band("x", 1.0), window=sj.CountWindow(100), how="full")
    print(f"{backend}, {n:,} tuples at 10,000/s ({n / 10_000:.1f} s of input), window 100")
    print(f"{'layout':<16} {'markers':<8} {'unmatched p50':>14} {'p99':>9} {'pairs p50':>10}")
    rows, ns = emitter.MARKER_ROWS, emitter.MARKER_NS
    for name, make in LAYOUTS.items():
        for markers in (True, False):
            emitter.MARKER_ROWS, emitter.MARKER_NS = (rows, ns) if markers else (2**62, 2**62)
            try:
                res = sj.run(
                    query, data, make(), backend=backend, pace=10_000, batch_size=16, progress=False
                )
            finally:
                emitter.MARKER_ROWS, emitter.MARKER_NS = rows, ns
            r, s = res.pairs.column("r").to_numpy(), res.pairs.column("s").to_numpy()
            lat = res.pairs.column("latency_ns").to_numpy() / 1e6
            alone = (r < 0) | (s < 0)
            a50, a99 = np.percentile(lat[alone], [50, 99])
            print(
                f"{name:<16} {'on' if markers else 'off':<8} {a50:11.1f} ms {a99:6.1f} ms "
                f"{np.percentile(lat[~alone], 50):7.2f} ms"
            )


if __name__ == "__main__":
    main(
        sys.argv[1] if len(sys.argv) > 1 else "sim",
        int(sys.argv[2]) if len(sys.argv) > 2 else 20_000,
    )
