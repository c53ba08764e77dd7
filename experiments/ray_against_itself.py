"""How closely Ray agrees with itself on this host: the precision ``calibrate --check`` can have.

The check compares the simulator with Ray's figures, each the median of a few Ray runs, and
asks for ``sim / ray`` within 0.80–1.25 on every layout and the layouts' ratios within 15% of
one another. A check's layouts run minutes after its fit, and Ray's figures move on a shared
host meanwhile, so even a model that had matched every layout exactly at the fit would miss
some. This measures by how much: the check's Ray runs (its workloads, modes and pace, each
figure the median of ``--repeat`` runs, in rounds over the layouts) over every layout, then
over every layout again, and the second pass set against the first as a check sets the
simulator against Ray (:func:`streamjoin.runtime.sim.fidelity.ray_against_itself` and
:func:`~streamjoin.runtime.sim.fidelity.noise`).

Writes ``experiments/results/ray_against_itself.md`` and the rows beside it as JSON
(``_quick`` with ``--quick``).

Run: ``python experiments/ray_against_itself.py [--layout NAME ...] [--repeat N]`` (twice a
check's Ray runs: about 9 minutes on 2 cores; ``--quick``: two layouts of 100,000 tuples,
one run a pass). Nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import report

from streamjoin.runtime.sim.fidelity import (
    CHECK_LAYOUTS,
    CHECK_REPEAT,
    CHECK_TUPLES,
    noise,
    noise_lines,
    ray_against_itself,
    self_markdown,
)

QUICK_LAYOUTS = ["single", "split(2)"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_LAYOUTS}, 100,000 tuples")
    ap.add_argument("--layout", action="append", choices=list(CHECK_LAYOUTS))
    ap.add_argument(
        "--repeat", type=int, default=None, help=f"runs a pass, each mode (default {CHECK_REPEAT})"
    )
    args = ap.parse_args()
    names = args.layout or (QUICK_LAYOUTS if args.quick else list(CHECK_LAYOUTS))
    repeat = args.repeat or (1 if args.quick else CHECK_REPEAT)
    tuples = 100_000 if args.quick else CHECK_TUPLES
    prov = report.Provenance()
    t0 = time.perf_counter()

    def progress(step: str) -> None:
        prov.note()
        print(f"{step}: done", flush=True)

    rows = ray_against_itself(layouts=names, tuples=tuples, repeat=repeat, progress=progress)
    text = self_markdown(rows, time.perf_counter() - t0)
    head, _, rest = text.partition("\n\n")
    text = f"{head}\n\n{prov.line()}\n\n{rest}"
    results_dir = report.results_dir()
    os.makedirs(results_dir, exist_ok=True)
    stem = os.path.join(results_dir, "ray_against_itself" + ("_quick" if args.quick else ""))
    with open(stem + ".md", "w") as f:
        f.write(text)
    with open(stem + ".json", "w") as f:
        json.dump(
            {"rows": [dataclasses.asdict(r) for r in rows], "noise": noise(rows)}, f, indent=1
        )
    print("\n".join(noise_lines(rows)))
    print(f"wrote {stem}.md")


if __name__ == "__main__":
    main()
