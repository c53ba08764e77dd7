"""How long the README's default job (``streamjoin run``) takes from an empty numba cache,
with the slowest late kernel compiled ahead in a second process (``streamjoin.compile_ahead``)
and without (``STREAMJOIN_COMPILE_AHEAD=0``).

    python benchmarks/first_run.py [PAIRS]

Each run is a fresh ``streamjoin run`` process over its own empty ``NUMBA_CACHE_DIR``, timed
from the shell's view (start to exit); the two configurations alternate (A B A B ...) so a
drifting host moves them alike. Prints each one's median seconds and the pairwise ratios
(median, min, max). Takes about 35 s a pair on a 2-core VM.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def cold_run(ahead: bool) -> float:
    cache = tempfile.mkdtemp(prefix="streamjoin-cold-")
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "STREAMJOIN_COMPILE_AHEAD": str(int(ahead))}
    command = [sys.executable, "-m", "streamjoin", "run", "--no-progress", "-o", f"{cache}/out"]
    t0 = time.perf_counter()
    subprocess.run(command, env=env, check=True, capture_output=True)
    took = time.perf_counter() - t0
    time.sleep(5)  # a helper still compiling would share the processors with the next run
    shutil.rmtree(cache, ignore_errors=True)
    return took


def main(pairs: int = 3) -> None:
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(pairs):
        for ahead in (True, False):
            times[ahead].append(cold_run(ahead))
    print(f"load average {os.getloadavg()[0]:.2f}; {pairs} pairs")
    ratios = [a / b for a, b in zip(times[True], times[False], strict=True)]
    for ahead, name in ((True, "compiled ahead"), (False, "all in the run")):
        print(f"{name:<15} median {statistics.median(times[ahead]):6.2f} s  {times[ahead]}")
    print(
        f"ahead / all in the run: median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
