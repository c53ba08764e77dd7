"""The Spark part of the ``streamjoin`` command: ``--source parquet:PATH`` / ``spark:FORMAT:PATH``
for `run` and `compare`, and ``streamjoin generate``. :mod:`streamjoin.cli` wires these in;
pyspark is imported only when a Spark source is used."""

from __future__ import annotations

import argparse

from streamjoin.checks import cli_number

SOURCE_HELP = (
    "input: 'synthetic' (generated, see the data options), 'parquet:PATH', or "
    "'spark:FORMAT:PATH' (any Spark reader: csv, json, orc, parquet), read through Spark "
    "one partition per file and streamed in (ts, tie-break) order: partition by partition "
    "when the files cover disjoint ts ranges, else after a sort in Spark (default: "
    "%(default)s)"
)


def add_source_options(group) -> None:
    group.add_argument("--source", default="synthetic", help=SOURCE_HELP)
    group.add_argument(
        "--attr", default="x", help="join column of a Spark source (default: %(default)s)"
    )
    group.add_argument(
        "--ts-column",
        default="ts",
        help="event-time column of a Spark source (default: %(default)s)",
    )
    group.add_argument(
        "--tie-break",
        default=None,
        metavar="COLUMN",
        help="Spark source: column ordering rows of equal ts (default: 'seq' if present, "
        "else the files' order)",
    )
    group.add_argument(
        "--eps",
        type=cli_number(low=0),
        default=None,
        help="band width |r.x - s.x| <= EPS (default: from --match-rate)",
    )
    group.add_argument(
        "--spark-master",
        default="local[*]",
        help="Spark master for a Spark source (default: %(default)s)",
    )
    group.add_argument(
        "--read-option",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of Spark's reader for a spark:FORMAT source, repeatable: e.g. "
        "--read-option rowTag=row for xml, --read-option sep=';' for csv",
    )


def key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` as ``(key, value)``, both as text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. rowTag=row), got {text!r}")
    return key.strip(), value


#: Spark's types a join column may have (``DataFrame.dtypes`` names).
NUMERIC_TYPES = frozenset({"tinyint", "smallint", "int", "bigint", "float", "double"})


def parse_source(text: str) -> tuple[str, str] | None:
    """``None`` for synthetic input, else ``(format, path)``."""
    if text == "synthetic":
        return None
    kind, _, rest = text.partition(":")
    if kind == "parquet" and rest:
        return "parquet", rest
    if kind == "spark":
        fmt, _, path = rest.partition(":")
        if fmt and path:
            return fmt, path
    raise ValueError(
        f"--source must be 'synthetic', 'parquet:PATH' or 'spark:FORMAT:PATH', got {text!r}"
    )


def spark_source(args):
    """The bridge source for ``args.source``, and a sample of its join values per stream
    (``r``, ``s``; ``s`` None for a self-join) for choosing eps (both None with ``--eps``).

    Raises :class:`~streamjoin.InputError` naming the file or column for what the user can
    fix: an unreadable path (:mod:`streamjoin.spark_bridge.errors`), a missing column, nulls
    in the sample that eps would be chosen from.
    """
    from streamjoin import InputError, spark_bridge
    from streamjoin.spark_bridge.errors import input_file_errors

    fmt, path = parse_source(args.source)
    spark = spark_bridge.session(args.spark_master)
    # the command reports input errors in one line; Spark's own log of a failed task would
    # print the Java trace around it
    spark.sparkContext.setLogLevel("FATAL")
    # one partition per file: files written in arrival order (as `streamjoin generate` does)
    # then stream partition by partition, with no global sort in Spark
    options = {"header": True, "inferSchema": True} if fmt == "csv" else {}
    options.update(args.read_option)  # the user's options over these
    df = spark_bridge.read_files(spark, path, format=fmt, **options)
    if args.attr not in df.columns:
        raise InputError(f"{args.source} has no column {args.attr!r}; columns: {df.columns}")
    kind = dict(df.dtypes)[args.attr]
    if kind not in NUMERIC_TYPES:
        raise InputError(
            f"{args.source}: column {args.attr!r} is {kind}; a join column must be an integer "
            "or floating-point type (--attr names the join column)"
        )
    if not args.self_join and "stream" not in df.columns:
        raise InputError(
            f"{args.source} has no column 'stream' (0 for R, 1 for S) for a two-way join; "
            f"columns: {df.columns} (one stream: --self-join)"
        )
    # a self-join reads a 'stream' column too, so that the source rejects S rows in it
    stream = "stream" if "stream" in df.columns else None
    tie = args.tie_break or ("seq" if "seq" in df.columns else None)
    src = spark_bridge.from_dataframe(df, ts=args.ts_column, stream=stream, tie_break=tie)
    if args.eps is not None:
        return src, None, None
    cols = [args.attr] + ([] if args.self_join else ["stream"])
    with input_file_errors(path):
        sample = df.select(*cols).limit(200_000).toArrow()
    if sample.column(args.attr).null_count:
        raise InputError(
            f"{args.source}: column {args.attr!r} has null values (files with different "
            "columns?); a join column must have none"
        )
    x = sample.column(args.attr).to_numpy()
    if args.self_join:
        return src, x, None
    stream_ids = sample.column("stream").to_numpy()
    return src, x[stream_ids == 0], x[stream_ids == 1]


def add_generate_command(sub) -> None:
    from streamjoin import sources

    gen = sub.add_parser(
        "generate",
        help="generate a synthetic workload with Spark and write it as Parquet",
        description="Generate the synthetic workloads of streamjoin.sources at scale, one "
        "Spark task per part, and write them as Parquet (columns seq, stream, ts and the "
        "join attributes; seq orders rows in arrival order). Run it with "
        "`streamjoin run --source parquet:PATH`.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gen.add_argument(
        "-n",
        "--tuples",
        type=cli_number(integer=True, low=0),
        default=10_000_000,
        help="rows, both streams together (default: %(default)s)",
    )
    gen.add_argument(
        "--distribution",
        choices=[*sources.DISTRIBUTIONS, "handshake"],
        default="uniform",
        help="attribute values (default: %(default)s)",
    )
    gen.add_argument(
        "--rate",
        type=cli_number(low=0, low_open=True, what="a rate in tuples/s"),
        default=10_000,
        help="event-time rate of R, tuples/s (default: %(default)s)",
    )
    gen.add_argument(
        "--rate-s",
        type=cli_number(low=0, low_open=True, what="a rate in tuples/s"),
        default=None,
        help="event-time rate of S (default: --rate)",
    )
    gen.add_argument(
        "--process",
        choices=("constant", "poisson"),
        default="constant",
        help="arrival process (default: %(default)s)",
    )
    gen.add_argument("--self-join", action="store_true", help="one stream, no stream column")
    gen.add_argument(
        "--seed",
        type=cli_number(integer=True, low=0),
        default=1,
        help="random seed (default: %(default)s)",
    )
    gen.add_argument(
        "--parts",
        type=cli_number(integer=True, low=1),
        default=None,
        help="Spark tasks / files (default: one per million rows)",
    )
    gen.add_argument(
        "--spark-master", default="local[*]", help="Spark master (default: %(default)s)"
    )
    gen.add_argument("--overwrite", action="store_true", help="replace an existing PATH")
    gen.add_argument("-o", "--out", required=True, metavar="PATH", help="Parquet folder")


def cmd_generate(args) -> int:
    import time

    from streamjoin import spark_bridge

    params = {}
    if args.distribution == "uniform":
        params = {"low": 0, "high": 10 * max(args.tuples, 1)}
    spark = spark_bridge.session(args.spark_master)
    t0 = time.perf_counter()
    df = spark_bridge.generate(
        spark,
        args.tuples,
        args.out,
        args.distribution,
        parts=args.parts,
        rate=args.rate,
        rate_s=args.rate_s,
        process=args.process,
        self_join=args.self_join,
        seed=args.seed,
        mode="overwrite" if args.overwrite else "error",
        **params,
    )
    rows = df.count()
    print(f"wrote {rows:,} rows to {args.out} in {time.perf_counter() - t0:.1f} s")
    return 0
