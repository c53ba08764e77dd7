"""``streamjoin warm``: compile the numba kernels of every topology's default join once, ahead
of the first run (numba's disk cache keeps them), e.g. as a step of a Docker image's build."""

from __future__ import annotations

import argparse
import time

#: Each topology spec of :data:`~streamjoin.topologies.SPECS` with small sizes in its
#: placeholders: the kernels a topology compiles do not depend on how many actors it has.
_SMALL = {"MxN": "2x2", "WxS": "2x4", "N": "2", "W": "2"}


def add_warm_command(sub) -> None:
    """The ``warm`` subcommand of ``streamjoin``."""
    from streamjoin import topologies

    warm = sub.add_parser(
        "warm",
        help="compile the kernels of every topology's default join, ahead of the first run",
        description="Run each topology's default join once on a few thousand synthetic rows "
        "(count and time windows, two-way and self-join), so that numba compiles its kernels "
        "into its disk cache and later runs start at once. The cache holds kernels by the "
        "types of their arguments: a join of another shape (more conditions, say) compiles "
        "a few more on its first run.",
    )
    warm.add_argument(
        "--topology",
        action="append",
        metavar="SPEC",
        help=f"warm only these (repeatable; default: every one of {topologies.spec_names()})",
    )


def small_spec(spec: str) -> str:
    """``spec`` (a name of :data:`~streamjoin.topologies.SPECS`) with small sizes."""
    name, *parts = spec.split(":")
    return ":".join([name, *(_SMALL.get(p, p) for p in parts)])


def cmd_warm(args: argparse.Namespace) -> int:
    import streamjoin as sj

    specs = args.topology or [small_spec(name) for name, _ in sj.topologies.SPECS]
    for spec in specs:
        sj.topologies.parse(spec)  # a bad spec is an error before anything compiles
    start = time.perf_counter()
    for spec in specs:
        t0 = time.perf_counter()
        for kind in ("count", "time"):
            for self_join in (False, True):
                _warm_one(spec, kind, self_join)
        print(f"warmed {spec:<16} {time.perf_counter() - t0:6.1f} s", flush=True)
    print(f"every kernel in numba's cache: {time.perf_counter() - start:.1f} s")
    return 0


def _warm_one(spec: str, kind: str, self_join: bool) -> None:
    """The join ``streamjoin run --topology spec`` makes by default (two inequalities for
    SPO-Join, which joins on them), run once on a few thousand rows."""
    import streamjoin as sj

    spo = spec.startswith("spo")
    attrs = ("x", "y") if spo else ("x",)
    data = sj.sources.synthetic(2_000, low=0, high=10_000, attrs=attrs, seed=1)
    if self_join:
        data = data.drop_columns(["stream"])
    predicate = sj.less("x") & sj.greater("y") if spo else sj.band("x", 5.0)
    window = sj.CountWindow(256) if kind == "count" else sj.TimeWindow(50)
    query = sj.Query(predicate, window=window, self_join=self_join)
    if spec.startswith("shared"):
        index = "pim_tree"  # as streamjoin run: the shared core's own default
    else:
        index = sj.indexes.default_for(query.predicate, self_join)
    sj.run(query, data, sj.topologies.parse(spec, index), batch_size=256, progress=False)
