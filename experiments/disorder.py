"""Out-of-order streams: what each system returns when rows arrive late.

The band join of ``spark_vs_bridge.py`` and ``peers.py`` (R and S, Poisson arrivals of 2,000
tuples/s of event time each, ``|r.x - s.x| <= eps`` and ``|r.ts - s.ts| <= W``, W = 2 s, about
1.5 matches per probe), its rows put out of order in two ways, with a delay bound D (1 s by
default):

- **stragglers**: 1% of the rows arrive up to D of event time late (uniformly), the rest in
  order;
- **all displaced**: every row arrives a uniform amount in [0, D] of event time late.

(:func:`streamjoin.sources.disorder`: a row arrives at its ``ts`` plus its hold-up; ``ts`` is
unchanged.) The pairs of this join do not depend on arrival order (``|r.ts - s.ts| <= W`` is
symmetric and inclusive), so one exact reference serves every run: DuckDB over the files
(``spark_vs_bridge.reference``, checked against the oracle on a prefix there).

Systems, one after the other in one process:

- **streamjoin**, one join core (``single``) on ``local`` over the arrival-ordered table, with
  ``lateness=D`` (every row within the bound: exact, nothing late) and with ``lateness=D/4``
  (``on_late="drop"``: exact on the rows it kept, the late ones listed in ``Result.late``);
- **Spark Structured Streaming**: ``spark_vs_bridge.spark_join`` over the files cut in arrival
  order (one micro-batch a file pair, ``--micro-batch-ms`` of event time each, 100 ms by
  default), with its watermark at D and at D/4. Spark moves its watermark between
  micro-batches only, so a row is dropped when it lies behind the watermark of the micro-batch
  before it: with micro-batches as long as D or longer it drops almost nothing, whatever its
  bound.

Flink SQL and Pathway (``peers.py``) need an environment of their own (PyFlink pins an older
pyarrow); this script does not run them.

Measured: pairs returned, missing, extra and duplicated against the reference; rows the system
reports as late (streamjoin's ``late_tuples``, Spark's ``numRowsDroppedByWatermark``, which
counts rows its state dropped, not pairs); input tuples/s (streamjoin: first ingest to last
pair; Spark: from starting the query to the last micro-batch's pairs on the driver); latency
p50/p99 (streamjoin: per pair from the later tuple's arrival, so the wait for the watermark
counts; Spark: from the micro-batch's start to its pairs on the driver, which does not count
a row's wait in earlier micro-batches).

Writes ``experiments/results/disorder.{csv,md,png}`` (``_quick`` and 40,000 tuples with
``--quick``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import report  # noqa: E402
import spark_vs_bridge as svb  # noqa: E402

import streamjoin as sj  # noqa: E402
from streamjoin import spark_bridge as sb  # noqa: E402

RESULTS = report.results_dir()
PATTERNS = {"stragglers": 0.01, "all displaced": 1.0}  #: share of rows held up


def workload(n: int) -> tuple[float, pa.Table]:
    """``eps`` and the rows in ``ts`` order (``seq``, ``stream``, ``ts``, ``x``), as
    ``peers.make_data`` generates them (no Spark needed)."""
    parts = max(2, -(-n // 1_000_000))
    generated = pa.concat_tables(
        sj.sources.synthetic_part(
            n, k, parts, "uniform", rate=svb.RATE, process="poisson", seed=svb.SEED
        )
        for k in range(parts)
    )
    return svb.arrival_table(generated)


def run_streamjoin(
    table: pa.Table, eps: float, lateness: int, ref: pa.Table, seqs: np.ndarray
) -> dict:
    query = sj.Query(
        sj.band("x", eps), window=sj.TimeWindow(svb.WINDOW_MS), lateness=lateness, on_late="drop"
    )
    data = table.select(["stream", "ts", "x"])
    sj.run(query, data.slice(0, 20_000), sj.topologies.single())  # kernels loaded, untimed
    res = sj.run(query, data, sj.topologies.single(), batch_size=svb.BATCH)
    seq = table.column("seq").to_numpy()  # row -> seq -> its rank among seqs (the reference's)
    pairs = pa.table(
        {k: np.searchsorted(seqs, seq[res.pairs.column(k).to_numpy()]) for k in ("r", "s")}
    )
    # every pair missed has a row listed as late: nothing else is lost
    late = np.searchsorted(seqs, seq[res.late.column("row").to_numpy()])
    missing = sj.oracle.same_pairs(pairs, ref).missing
    unexplained = ~(np.isin(missing[:, 0], late) | np.isin(missing[:, 1], late))
    return {
        "system": "streamjoin",
        "missing_without_a_late_row": int(unexplained.sum()),
        "config": f"single, lateness {lateness} ms",
        "bound_ms": lateness,
        "tuples": table.num_rows,
        "input_tuples_per_s": res.metrics["input_tuples_per_s"],
        "latency_p50_ms": res.metrics["latency_ms"]["p50"],
        "latency_p99_ms": res.metrics["latency_ms"]["p99"],
        "late_rows": res.metrics["late_tuples"],
        **svb.exactness(pairs, ref),
    }


def run_spark(spark, folder: str, eps: float, bound: int, ref: pa.Table, seqs: np.ndarray) -> dict:
    row = svb.spark_join(spark, folder, eps, f"{bound} milliseconds", seqs, ref)
    shutil.rmtree(os.path.join(folder, "checkpoint-spark"), ignore_errors=True)
    return {
        "system": svb.SPARK,
        "config": f"watermark {bound} ms",
        "bound_ms": bound,
        "tuples": row["tuples"],
        "input_tuples_per_s": row["input_tuples_per_s"],
        "latency_p50_ms": row["latency_p50_ms"],
        "latency_p99_ms": row["latency_p99_ms"],
        "late_rows": row["rows_dropped_by_watermark"],
        **{k: row[k] for k in ("pairs", "expected_pairs", "missing", "extra", "duplicates")},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tuples", type=int, default=200_000)
    ap.add_argument("--delay-ms", type=int, default=1000, help="D (default: %(default)s)")
    ap.add_argument(
        "--micro-batch-ms",
        type=int,
        default=100,
        help="event time a Spark micro-batch (file pair) spans (default: %(default)s)",
    )
    ap.add_argument("--quick", action="store_true", help="40,000 tuples")
    args = ap.parse_args()
    if args.quick:
        args.tuples = 40_000
    prov = report.Provenance()
    eps, ordered = workload(args.tuples)
    delay = args.delay_ms
    spark = sb.session(  # every micro-batch's progress kept (Spark keeps the last 100)
        "local[2]",
        spark_sql_shuffle_partitions=2,
        spark_sql_streaming_numRecentProgressUpdates=100_000,
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for pattern, fraction in PATTERNS.items():
            table = sj.sources.disorder(ordered, delay, fraction=fraction, seed=svb.SEED + 1)
            folder = os.path.join(tmp, pattern.replace(" ", "_"))
            span_ms = 1000 * args.tuples / (2 * svb.RATE)
            files = max(1, round(span_ms / args.micro_batch_ms))
            svb.write_files(table, svb.files_in_order(table.num_rows, files), folder)
            # pairs by the rank of their rows' seq (what the reference maps pairs to)
            seqs = np.sort(table.column("seq").to_numpy())
            ref = svb.reference(folder, eps, seqs)
            for bound in (delay, delay // 4):
                for row in (
                    run_streamjoin(table, eps, bound, ref, seqs),
                    run_spark(spark, folder, eps, bound, ref, seqs),
                ):
                    row = {"pattern": pattern, "delay_ms": delay, **row}
                    prov.note()
                    print({k: row[k] for k in ("pattern", "system", "config", "missing")})
                    rows.append(row)
    write(rows, prov, eps, "_quick" if args.quick else "")


def write(rows: list[dict], prov: report.Provenance, eps: float, suffix: str) -> None:
    base = os.path.join(RESULTS, "disorder" + suffix)
    report.save_rows([{**r, **prov.fields()} for r in rows], base + ".csv")
    n, delay = rows[0]["tuples"], rows[0]["delay_ms"]
    lines = [
        "# Out-of-order streams: pairs each system returns",
        "",
        f"Band join, time window W = {svb.WINDOW_MS} ms, eps = {eps:.0f}, {n:,} tuples, "
        f"rows held up by up to D = {delay} ms of event time: 1% of them (stragglers) or all "
        "(all displaced). Reference: DuckDB over the same files. See the docstring of "
        "`experiments/disorder.py`.",
        "",
        prov.line(),
        "",
        f"![disorder](disorder{suffix}.png)",
        "",
        "| rows late by up to D | system | bound | pairs | missing | extra | rows late or "
        "dropped | tuples/s | p50 ms | p99 ms |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['pattern']} | {r['system']} | {r['config']} | {r['pairs']:,} | "
            f"{r['missing']:,} | {r['extra']:,} | {r['late_rows']:,} | "
            f"{r['input_tuples_per_s']:,.0f} | {r['latency_p50_ms']:.1f} | "
            f"{r['latency_p99_ms']:.1f} |"
        )
    lines += [
        "",
        "streamjoin with lateness D returns every pair; with D/4 every pair it misses has a "
        "row it lists as late in `Result.late` (pairs missed without one: "
        f"{sum(r.get('missing_without_a_late_row', 0) for r in rows)}). Spark drops rows "
        "behind its watermark from its state without saying which; its count of dropped rows "
        "is its state's, not the input's. Both run unpaced (the input as fast as the system "
        "takes it), so a row's wait for the watermark costs as much wall time as reading the "
        "input that moves it: at the input's own rate (2 x 2,000 tuples/s) streamjoin's "
        "latency would grow by about the bound.",
        "",
        "Not run here: Flink SQL and Pathway (`peers.py`, an environment of their own).",
    ]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    plot(rows, base + ".png")
    print(f"wrote {base}.csv, .md, .png")


def plot(rows: list[dict], path: str) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    labels = [f"{r['system'].split()[0]}\n{r['config'].split(', ')[-1]}" for r in rows[:4]]
    x = np.arange(len(labels))
    for k, pattern in enumerate(PATTERNS):
        part = [r for r in rows if r["pattern"] == pattern]
        share = [100 * r["missing"] / max(1, r["expected_pairs"]) for r in part]
        axes[0].bar(x + 0.4 * k - 0.2, share, 0.4, label=pattern)
        axes[1].bar(x + 0.4 * k - 0.2, [r["input_tuples_per_s"] / 1e3 for r in part], 0.4)
    axes[1].set_yscale("log")  # Spark's micro-batches run a thousand times slower
    for ax, title in zip(axes, ("pairs missing (%)", "input K tuples/s (log)"), strict=True):
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"out-of-order input, rows late by up to {int(rows[0]['delay_ms'])} ms")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
