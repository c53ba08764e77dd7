"""The ``streamjoin`` command."""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

from streamjoin.cli_paths import check_out_file, check_out_folder

DESCRIPTION = """\
Exact sliding-window stream joins (band, inequality, equi) with throughput and latency.

`streamjoin run` with no options joins two synthetic streams of 200,000 tuples on
|r.x - s.x| <= eps (eps chosen for 2 matches per probe) over a count window of 4,096
tuples per stream, prints a summary, and writes metrics.json, latency.png and graph.png
to ./streamjoin-out/.
"""

RUN_EXAMPLES = """\
examples:
  streamjoin run                                    # the default band join, in this process
  streamjoin run --backend ray                      # the same as Ray actors
  streamjoin run -n 50000 --window 1000 --check     # small run, checked against the oracle
  streamjoin run --window-kind time --window 500    # time window of 500 ms
  streamjoin run --self-join --distribution gaussian --index nested_loop
  streamjoin run --query "r.a < s.a AND r.b > s.b" --topology spo:2   # SPO-Join's Q1
  streamjoin run --query "r.start <= s.end AND r.end >= s.start" --index po_join
  streamjoin generate -n 1000000 -o data.parquet    # a workload written by Spark
  streamjoin run --source parquet:data.parquet --window-kind time --window 100
"""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, with its errors as the command's other errors are: one line,
    ``streamjoin: error: …``, exit status 2 (no usage block to scroll past)."""

    def error(self, message: str):
        self.exit(2, f"streamjoin: error: {message} (see: {self.prog} -h)\n")


def _number(**bounds):
    """A number option's ``type=``: :func:`streamjoin.checks.cli_number`."""
    from streamjoin.checks import cli_number

    return cli_number(**bounds)


POSITIVE_INT = {"integer": True, "low": 1}
NON_NEGATIVE_INT = {"integer": True, "low": 0}
POSITIVE = {"low": 0, "low_open": True}


def _index_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` as ``(key, value)``: the value an int, a float, true/false/none, or the
    text as it is (``layout=compact``)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. layout=compact), got {text!r}")
    words = {"true": True, "false": False, "none": None}
    for kind in (int, float):
        try:
            return key.strip(), kind(raw)
        except ValueError:
            pass
    return key.strip(), words.get(raw.strip().lower(), raw.strip())


def _add_job_options(parser: argparse.ArgumentParser, backend: str) -> None:
    """The options of the `run` job (also taken by `compare`); ``backend`` is the default."""
    from streamjoin import indexes, sources, topologies
    from streamjoin.actors.base import MAX_DELAY_S
    from streamjoin.cli_sim import add_sim_options
    from streamjoin.cli_spark import add_source_options
    from streamjoin.runtime import BACKENDS

    data = parser.add_argument_group("data")
    add_source_options(data)
    data.add_argument(
        "-n",
        "--tuples",
        type=_number(**POSITIVE_INT),
        default=200_000,
        help="input tuples, both streams together (default: %(default)s)",
    )
    data.add_argument(
        "--distribution",
        choices=sources.DISTRIBUTIONS,
        default="uniform",
        help="join attribute values (default: %(default)s)",
    )
    data.add_argument(
        "--rate",
        type=_number(**POSITIVE, what="a rate in tuples/s"),
        default=10_000,
        help="event-time rate per stream, tuples/s; sets ts (default: %(default)s)",
    )
    data.add_argument("--self-join", action="store_true", help="join one stream with itself")
    data.add_argument(
        "--disorder",
        type=_number(**NON_NEGATIVE_INT),
        default=0,
        metavar="MS",
        help="synthetic data out of order: each row arrives up to MS ms of event time late "
        "(uniformly; its ts unchanged); join it exactly with --lateness MS (default: in order)",
    )
    data.add_argument(
        "--seed",
        type=_number(**NON_NEGATIVE_INT),
        default=1,
        help="random seed (default: %(default)s)",
    )
    query = parser.add_argument_group("query")
    query.add_argument(
        "--window",
        type=_number(**POSITIVE_INT),
        default=4096,
        help="window size: tuples (count) or ms (time) (default: %(default)s)",
    )
    query.add_argument(
        "--window-kind",
        choices=("count", "time"),
        default="count",
        help="count- or time-based window (default: %(default)s)",
    )
    query.add_argument(
        "--query",
        default=None,
        metavar="TEXT",
        help="the join predicate, e.g. 'r.a < s.a AND r.b > s.b' or 'a<a,b>b' (r.a < s.a, "
        "r.b > s.b), '|r.x - s.y| <= 5', 'r.start <= s.end, r.end >= s.start', "
        "'(r.a < s.a AND r.b > s.b) OR r.k = s.k' (OR binds looser than AND), "
        "'r.k + s.k < 10' (arithmetic without brackets: checked on the pairs found); synthetic "
        "data then has the attributes it names, correlated for two inequalities (about "
        "--match-rate matches per probe) (default: the band |r.x - s.x| <= eps)",
    )
    query.add_argument(
        "--lateness",
        type=_number(**NON_NEGATIVE_INT),
        default=None,
        metavar="L",
        help="take input out of ts order: a row more than L ts units (ms) behind the largest "
        "ts before it is late; the rest are joined exactly, in ts order, after the watermark "
        "passes them (default: input in ts order per stream)",
    )
    query.add_argument(
        "--on-late",
        choices=("error", "drop"),
        default="error",
        help="with --lateness: a late row stops the run naming it (error), or is left out "
        "and counted (drop) (default: %(default)s)",
    )
    query.add_argument(
        "--how",
        choices=("inner", "left", "right", "full"),
        default="inner",
        help="an outer join also returns each R (left), S (right) or any (full) tuple that "
        "met no partner, once, as (r, -1) or (-1, s), once the other stream's window has "
        "passed it; a self-join "
        "takes left (default: %(default)s)",
    )
    query.add_argument(
        "--match-rate",
        type=_number(**POSITIVE),
        default=2.0,
        help="average matches per probe; sets eps (default: %(default)s)",
    )
    execution = parser.add_argument_group("execution")
    execution.add_argument(
        "--topology",
        default="single",
        help=f"actor layout: {topologies.spec_names()} (default: %(default)s)",
    )
    execution.add_argument(
        "--pace",
        type=_number(**POSITIVE, what="a rate in tuples/s"),
        default=None,
        metavar="TUPLES_PER_S",
        help="hand input over at this wall-clock rate (default: as fast as possible)",
    )
    execution.add_argument(
        "--backend",
        choices=list(BACKENDS),
        default=backend,
        help="run as one Ray actor per node (a local Ray instance is started unless one is "
        "running), in this process, or on simulated cores under a virtual clock "
        "(default: %(default)s)",
    )
    add_sim_options(execution)
    execution.add_argument(
        "--index",
        choices=["auto", *indexes.names()],
        default="auto",
        help="window index of the join core; auto picks hash for an equality, bisort for a "
        "band, po_join for two inequalities, nested_loop for one (default: %(default)s)",
    )
    execution.add_argument(
        "--index-option",
        type=_index_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the index, repeatable: e.g. --index pim_tree --index-option "
        "layout=compact (8-byte items), --index-option merge_ratio=0.25; the index's "
        "docstring lists them (python -c 'import streamjoin; help(streamjoin.indexes.get(NAME))')",
    )
    execution.add_argument(
        "--batch-size",
        type=_number(**POSITIVE_INT),
        default=1024,
        help="tuples per batch (default: %(default)s)",
    )
    execution.add_argument(
        "--max-delay",
        type=_number(low=0, high=MAX_DELAY_S, what="a number of seconds"),
        default=None,
        metavar="SECONDS",
        help="close a batch after this wait (default: size only)",
    )
    execution.add_argument(
        "--collect",
        choices=("count", "pairs"),
        default="count",
        help="keep every pair or only count them (default: %(default)s)",
    )
    execution.add_argument(
        "--check",
        action="store_true",
        help="compare the result with the oracle (slow beyond ~20,000 tuples)",
    )
    output = parser.add_argument_group("output")
    output.add_argument(
        "-o",
        "--out",
        default="streamjoin-out",
        help="folder for metrics.json, latency.png, graph.png, created if absent; a run "
        "replaces the files of an earlier run in it (default: %(default)s)",
    )
    output.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def build_parser() -> argparse.ArgumentParser:
    from streamjoin import topologies
    from streamjoin.cli_paths import FORCE_HELP
    from streamjoin.cli_sim import add_calibrate_command
    from streamjoin.cli_spark import add_generate_command
    from streamjoin.cli_warm import add_warm_command

    parser = _Parser(
        prog="streamjoin",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run a synthetic band join and report throughput and latency",
        description="Run a band join |r.x - s.x| <= eps on synthetic streams, print a "
        "summary and write metrics.json, latency.png and graph.png.",
        epilog=RUN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_job_options(run, backend="local")

    sub.add_parser("indexes", help="list the window indexes")
    add_calibrate_command(sub)
    add_generate_command(sub)
    add_warm_command(sub)

    draw = sub.add_parser(
        "draw",
        help="draw a topology's actor graph",
        description="Draw the actor graph of a topology (PNG, SVG or PDF).",
    )
    draw.add_argument("topology", help=f"one of: {topologies.spec_names()}")
    draw.add_argument(
        "-o",
        "--out",
        default="graph.png",
        help="file, in a folder that exists (default: %(default)s)",
    )
    draw.add_argument("--force", action="store_true", help=FORCE_HELP)
    draw.add_argument("--dot", action="store_true", help="print Graphviz DOT text as well")

    compare = sub.add_parser(
        "compare",
        help="run several layouts on the same data; plot throughput and latency per layout",
        description="Run the `run` job once per layout on the same input and write "
        "compare.csv and compare.png (throughput and latency vs layout, DP-Join Fig. 6/7).",
    )
    _add_job_options(compare, backend="local")
    compare.add_argument(
        "--layouts", default="1x4,2x2,4x1", help="comma-separated topologies (default: %(default)s)"
    )
    for command in sub.choices.values():  # after the command too: `streamjoin run ... --debug`
        command.add_argument("--debug", action="store_true", default=SUPPRESS, help=DEBUG_HELP)
    return parser


DEBUG_HELP = "on an error, show the whole traceback (and Spark's Java trace), not one line"
#: A subcommand's ``--debug`` leaves the top level's value when absent (argparse would put the
#: subcommand's default over it).
SUPPRESS = argparse.SUPPRESS


def _make_data(args):
    from streamjoin import sources

    params = {"low": 0, "high": 10 * args.tuples} if args.distribution == "uniform" else {}
    return sources.synthetic(
        args.tuples,
        args.distribution,
        rate=args.rate,
        self_join=args.self_join,
        seed=args.seed,
        **params,
    )


def _query_options(args) -> dict:
    """``Query`` options beside the predicate and window: out-of-order input
    (``--lateness``, ``--on-late``) and outer joins (``--how``)."""
    options = {"how": args.how}
    if args.lateness is None:
        if args.on_late != "error":
            raise ValueError("--on-late needs --lateness")
        return options
    return {**options, "lateness": args.lateness, "on_late": args.on_late}


def _query_data(args, predicate):
    """Synthetic data for a ``--query`` predicate: its attributes, correlated pairs for two
    inequalities (``sources.inequality_workload``), else uniform ones."""
    from streamjoin import sources

    names = list(dict.fromkeys(predicate.attrs))
    residual = [c for c in predicate.residual_columns if c not in names]
    one_sided = [c for c in predicate.flat if math.isinf(c.lo) != math.isinf(c.hi)]
    per_window = args.window if args.window_kind == "count" else args.rate * args.window / 1000
    if len(one_sided) >= 2 and len(names) == 2:
        data = sources.inequality_workload(
            args.tuples,
            max(1, int(per_window)),
            args.match_rate,
            attrs=tuple(names),
            self_join=args.self_join,
            rate=args.rate,
            seed=args.seed,
        )
        # the columns only a residual function reads: uniform integers beside them
        import numpy as np
        import pyarrow as pa

        rng = np.random.default_rng(args.seed + 1)
        for name in residual:
            data = data.append_column(name, pa.array(rng.integers(0, 10 * args.tuples, len(data))))
        return data
    params = {"low": 0, "high": 10 * args.tuples} if args.distribution == "uniform" else {}
    return sources.synthetic(
        args.tuples,
        args.distribution,
        rate=args.rate,
        attrs=tuple(names + residual),
        self_join=args.self_join,
        seed=args.seed,
        **params,
    )


def _run_job(args):
    """The `run` job: data, query and topology from ``args``, run. Returns what it made."""
    import streamjoin as sj
    from streamjoin.cli_sim import sim_run_kwargs
    from streamjoin.cli_spark import parse_source, spark_source
    from streamjoin.query_text import parse_predicate
    from streamjoin.runtime.pipeline import compile_notice

    # settings first: a bad one fails before any data is made or Spark starts
    window = (sj.CountWindow if args.window_kind == "count" else sj.TimeWindow)(args.window)
    predicate = parse_predicate(args.query) if args.query else None
    sim_options = sim_run_kwargs(args)
    sj.topologies.parse(args.topology)  # its size checked; built again below for the index
    if predicate is not None and parse_source(args.source) is None:
        data = _query_data(args, predicate)
        described = f"{args.tuples:,} tuples, {args.distribution}"
        query = sj.Query(predicate, window=window, self_join=args.self_join, **_query_options(args))
    elif predicate is not None:  # no eps to choose: no sample of the join values
        first = predicate.flat[0].attr
        data = spark_source(argparse.Namespace(**{**vars(args), "attr": first, "eps": 0.0}))[0]
        described = args.source
        query = sj.Query(predicate, window=window, self_join=args.self_join, **_query_options(args))
    else:
        query, data, described = _band_query(args, window)
    if args.disorder:
        if parse_source(args.source) is not None:
            raise ValueError("--disorder reorders synthetic data; a --source comes as it is")
        data = sj.sources.disorder(data, args.disorder, seed=args.seed)
        described += f", up to {args.disorder} ms out of order"
    index = (
        sj.indexes.default_for(query.predicate, query.self_join)
        if args.index == "auto"
        else args.index
    )
    if args.index == "auto" and args.topology.strip().lower().startswith("shared:"):
        index = "pim_tree"  # the shared core's own default: auto's pick may not be shareable
    options = dict(args.index_option)
    if options:  # a bad option name or value is an error before anything runs
        try:
            sj.indexes.check_options(index, options)
        except ValueError as e:
            raise ValueError(f"--index-option for {index}: {e}") from None
    topology = sj.topologies.parse(args.topology, index, options or None)
    print(f"{query}  ({described}, {topology.name})", flush=True)
    t0 = time.perf_counter()
    with compile_notice():
        result = sj.run(
            query,
            data,
            topology,
            backend=args.backend,
            batch_size=args.batch_size,
            max_delay=args.max_delay,
            pace=args.pace,
            collect="pairs" if args.check else args.collect,
            progress=False if args.no_progress else None,
            **sim_options,
        )
    print(result.summary())
    if getattr(data, "order_used", None):  # a Spark source: how it streamed the rows
        how = {"partitions": "partition by partition", "sort": "after a global sort in Spark"}
        print(f"input read {how.get(data.order_used, data.order_used)}")
    print(f"wall time {time.perf_counter() - t0:.1f} s (includes starting actors, loading kernels)")
    return result, topology, query, data


def _band_query(args, window):
    """The default query: ``|r.x - s.x| <= eps``, eps for ``--match-rate`` unless ``--eps``."""
    import streamjoin as sj
    from streamjoin.cli_spark import parse_source, spark_source

    if parse_source(args.source) is None:
        data, attr = _make_data(args), "x"
        x = data.column("x").to_numpy()
        if args.self_join:
            r, s = x, None
        else:
            stream = data.column("stream").to_numpy()
            r, s = x[stream == 0], x[stream == 1]
        described = f"{args.tuples:,} tuples, {args.distribution}"
    else:
        (data, r, s), attr = spark_source(args), args.attr
        described = args.source
    eps = args.eps
    if eps is None:
        # tuples per window: the count, or rate × time (ts is in ms)
        per_window = args.window if args.window_kind == "count" else args.rate * args.window / 1000
        try:
            eps = sj.sources.band_for_match_rate(
                r, s, window=max(1, int(per_window)), match_rate=args.match_rate
            )
        except ValueError as e:
            raise ValueError(
                f"{described}: cannot choose eps for --match-rate: {e}; pass --eps"
            ) from e
    query = sj.Query(
        sj.band(attr, eps), window=window, self_join=args.self_join, **_query_options(args)
    )
    return query, data, described


def cmd_run(args) -> int:
    import streamjoin as sj

    check_out_folder(args.out)
    result, topology, query, data = _run_job(args)
    if args.check:
        if isinstance(data, sj.sources.Source):  # a Spark source: its rows in arrival order
            from streamjoin.spark_bridge.source import SparkSource  # loaded: data is one

            assert isinstance(data, SparkSource)
            assert data.columns is not None  # (set when the run checked the source)
            data = data.ordered.select(*data.columns).toArrow()
        cmp = result.same_pairs(sj.oracle.join(query, data))
        print(f"oracle: {cmp}")
        if not cmp:
            return 1
    _write_outputs(result, topology, args.out)
    return 0


def _write_outputs(result, topology, out: str) -> None:
    """Write all files into a temporary folder first, then move them: all or nothing."""
    os.makedirs(out, exist_ok=True)
    names = ("metrics.json", "latency.png", "graph.png")
    with tempfile.TemporaryDirectory(dir=out, prefix=".tmp-") as tmp:
        result.write_metrics(os.path.join(tmp, names[0]))
        result.plot_latency(os.path.join(tmp, names[1]))
        topology.draw(os.path.join(tmp, names[2]))
        for name in names:
            os.replace(os.path.join(tmp, name), os.path.join(out, name))
    print("wrote " + ", ".join(os.path.join(out, n) for n in names))


def cmd_draw(args) -> int:
    from streamjoin import topologies

    topo = topologies.parse(args.topology)
    check_out_file(args.out, args.force)
    topo.draw(args.out)
    if args.dot:
        print(topo.to_dot())
    print(f"wrote {args.out}")
    return 0


def cmd_compare(args) -> int:
    import csv
    import io

    from streamjoin import viz

    check_out_folder(args.out)
    rows = []
    for layout in args.layouts.split(","):
        args.topology = layout
        result = _run_job(args)[0]
        m = result.metrics
        rows.append(
            {
                "layout": layout,
                "topology": m["topology"],
                "backend": m["backend"],
                "input_tuples_per_s": m["input_tuples_per_s"],
                **{f"latency_{k}_ms": v for k, v in m["latency_ms"].items()},
            }
        )
    os.makedirs(args.out, exist_ok=True)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    with tempfile.NamedTemporaryFile("w", dir=args.out, delete=False, suffix=".csv") as f:
        f.write(text.getvalue())
    os.chmod(f.name, 0o644)
    os.replace(f.name, os.path.join(args.out, "compare.csv"))
    viz.plot_layouts(rows, os.path.join(args.out, "compare.png"))
    print(f"{'layout':<18}{'tuples/s':>14}{'p50 ms':>10}{'p99 ms':>10}")
    for r in rows:
        print(
            f"{r['layout']:<18}{r['input_tuples_per_s']:>14,.0f}"
            f"{r['latency_p50_ms']:>10.2f}{r['latency_p99_ms']:>10.2f}"
        )
    print(f"wrote {os.path.join(args.out, 'compare.csv')}, {os.path.join(args.out, 'compare.png')}")
    return 0


def cmd_indexes(args) -> int:
    from streamjoin import indexes

    for name in indexes.names():
        doc = (indexes.get(name).__doc__ or "").strip().splitlines()[0]
        print(f"{name:<14}{doc}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        from streamjoin.cli_sim import cmd_calibrate
        from streamjoin.cli_spark import cmd_generate
        from streamjoin.cli_warm import cmd_warm

        commands = {
            "run": cmd_run,
            "indexes": cmd_indexes,
            "draw": cmd_draw,
            "compare": cmd_compare,
            "calibrate": cmd_calibrate,
            "generate": cmd_generate,
            "warm": cmd_warm,
        }
        return commands[args.command](args)
    except Exception as e:
        line = None if args.debug else error_line(e)
        if line is None:  # not a problem of the input or settings: the whole traceback
            raise
        print(f"streamjoin: error: {line}", file=sys.stderr)
        return 2


def error_line(error: Exception) -> str | None:
    """The one line the command prints for ``error``, or None to let it raise.

    Bad input or settings (``ValueError``, :class:`~streamjoin.InputError` among them), a
    file that cannot be read or written (``OSError``, naming it), Java missing, a source that
    failed while read, and a Spark or Java failure (summarised to its cause: the whole trace
    with ``--debug``). Anything else is a bug of streamjoin's, and keeps its traceback.
    """
    from streamjoin.sources import SourceError
    from streamjoin.spark_bridge.session import SparkSetupError

    spark = None
    if "pyspark" in sys.modules:  # a Spark error is possible only once pyspark is loaded
        from streamjoin.spark_bridge.errors import summary

        cause = error.__cause__ if isinstance(error, SourceError) else error
        spark = summary(cause) if isinstance(cause, Exception) else None
    if isinstance(error, SourceError):
        where = str(error).partition(": ")[0]  # "source … failed after N rows"
        return f"{where}: {spark} (--debug: Spark's trace)" if spark else str(error)
    if spark is not None:
        return f"{spark} (--debug: Spark's trace)"
    if isinstance(error, ValueError | SparkSetupError):
        return str(error).strip().replace("\n", " ")
    if isinstance(error, OSError):
        if error.filename is not None and error.strerror:
            return f"{error.filename}: {error.strerror}"
        return str(error)
    return None
