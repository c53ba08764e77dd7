"""A worker process of :func:`~streamjoin.runtime.sim.calibrate.calibrate`: times the
calibration workloads of each index named on a line of its input and answers each with a
line of JSON (:func:`~streamjoin.runtime.sim.calibrate.index_rows`), so that several
indexes' kernels are timed at once, one processor each.

``python -m streamjoin.runtime.sim.calibrate_worker QUICK SEED REPEATS`` (QUICK 0 or 1);
it ends when its input does.
"""

from __future__ import annotations

import sys

from streamjoin.runtime.sim.calibrate import index_rows, rows_to_json, speed_probe


def main(argv: list[str]) -> None:
    quick, seed, repeats = bool(int(argv[0])), int(argv[1]), int(argv[2])
    speed_probe(1)  # loads the probe's kernels
    for line in sys.stdin:
        index = line.strip()
        if index:
            print(rows_to_json(*index_rows(index, quick, seed, repeats)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
