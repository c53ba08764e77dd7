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

Flink SQL and Pathway run in ``peers.py``'s environment (PyFlink pins an older pyarrow than
PySpark 4 needs: ``--peers-python``, by default ``.venv-peers/bin/python``; skipped with a note
when it is missing), each run a process of its own through ``peers.run_once`` and
``peers.py``'s runners, over the same rows written as one CSV file per stream in arrival order
(``peers.write_inputs``):

- **Flink SQL** (``peers.run_flink``, bucket key, parallelism 2): the interval join with
  ``WATERMARK FOR t AS t - bound`` on each source, D and D/4. Flink's watermark generator
  emits when its watermark has moved more than ``pipeline.auto-watermark-interval`` (200, the
  default, kept; compared with ms of event time) past the last one it emitted, and otherwise
  every 200 ms of wall time; the
  join's watermark is the smaller of its two inputs'. (On this unpaced input the first rule
  rules: the watermark trails the bound by up to 200 ms of event time.) Its interval join drops no row for being
  late: a row behind the watermark still joins the rows of the other side that are still in
  its state (cleaned as the watermark passes their time plus W) and is kept if rows of the other
  side may still match it; the pairs lost are those whose partner was already cleaned. It
  counts nothing as late (``–``). On a 20,000-tuple check (all displaced, bound 250 ms) a
  1 ms interval changed little: 23,079 against 23,350 of 24,131 pairs.
- **Pathway** (``peers.run_pathway_stream``): ``interval_join`` with the bucket key as its
  ``on`` condition, the rows fed in arrival order (both streams through one Python connector,
  1,024 rows a commit, at most 1,024 queued), with ``behavior=common_behavior(cutoff=c)``:
  each side ignores a row whose ``ts`` is at most the largest ``ts`` it has seen (in earlier
  commits) minus ``c``, and forgets its stored rows as old, so one number bounds both lateness
  and how long a row waits for partners. With ``c`` = the bound (D, D/4) it loses pairs on
  in-order input too (a row forgotten before its partners up to W later arrive: 6,204 of
  24,131 pairs of 20,000 in-order tuples at ``c`` = 1 s); with ``c`` = W + bound it keeps every
  pair of in-order input and takes rows up to W + bound late. It reports no row as ignored
  (``–``).

Not run: Bytewax (``peers.py``), whose watermark advances with system time, so no bound in
``ts`` units can be set to D.

Measured: pairs returned, missing, extra and duplicated against the reference; rows the system
reports as late (streamjoin's ``late_tuples``, Spark's ``numRowsDroppedByWatermark``, which
counts rows its state dropped, not pairs); input tuples/s (streamjoin: first ingest to last
pair; Spark: from starting the query to the last micro-batch's pairs on the driver; Flink:
from submitting the ``INSERT`` to the job's end, the pairs on disk; Pathway: from building the
dataflow to ``pw.run`` returning, reading the Parquet file into Python included); latency
p50/p99 per pair (streamjoin: from the later tuple's arrival, so the wait for the watermark
counts; Spark: from the micro-batch's start to its pairs on the driver, which does not count
a row's wait in earlier micro-batches; Flink: from the later row leaving its source's chain
(``CURRENT_TIMESTAMP`` there) to the pair leaving the join (another), ms resolution, so the
exchange between them and Flink's network buffers count, the file read before does not;
Pathway: from the commit of the batch holding the later row to the pair reaching
``pw.io.subscribe``'s callback). Every system reads as fast as it can (unpaced), so latency
includes the queues of a system behind its input.

Writes ``experiments/results/disorder.{csv,md,png}`` (``_quick`` and 40,000 tuples with
``--quick``; ``--skip spark,flink,pathway`` leaves systems out).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from functools import partial

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import peers  # noqa: E402
import pyarrow as pa  # noqa: E402
import report  # noqa: E402
import spark_vs_bridge as svb  # noqa: E402

import streamjoin as sj  # noqa: E402
from streamjoin import spark_bridge as sb  # noqa: E402

RESULTS = report.results_dir()
PATTERNS = {"stragglers": 0.01, "all displaced": 1.0}  #: share of rows held up
PEERS_PYTHON = os.path.join(peers.HERE, "..", ".venv-peers", "bin", "python")
FLINK, PATHWAY = "Flink SQL", "Pathway"


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


def run_peer(system: str, folder: str, bound: int, python: str, setting: int | None = None) -> dict:
    """Flink SQL with its watermark ``bound`` behind, or Pathway with cutoff ``setting``
    (default: ``bound``), in a process of its own."""
    name = "flink_bucket" if system == FLINK else "pathway_stream"
    setting = bound if setting is None else setting
    (row,) = peers.run_once(name, folder, python, "--bound-ms", str(setting), "--timed")
    config = f"watermark {bound} ms" if system == FLINK else f"cutoff {setting} ms"
    if setting != bound:
        config += " (W + bound)"
    out = {"system": system, "config": config, "bound_ms": bound, "setting_ms": setting}
    if "error" in row:
        return {**out, "error": row["error"]}
    keep = ("tuples", "input_tuples_per_s", "latency_p50_ms", "latency_p99_ms")
    checked = ("pairs", "expected_pairs", "missing", "extra", "duplicates")
    return {
        **out,
        **{k: row.get(k) for k in keep},
        "late_rows": None,  # neither reports the rows it left out
        **{k: row[k] for k in checked},
        "process_s": row["process_s"],
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
    ap.add_argument(
        "--peers-python",
        default=PEERS_PYTHON,
        help="the Python of peers.py's environment, which runs Flink SQL and Pathway "
        "(default: %(default)s)",
    )
    ap.add_argument("--skip", default="", help="comma-separated, of spark, flink, pathway")
    args = ap.parse_args()
    if args.quick:
        args.tuples = 40_000
    skip = set(filter(None, args.skip.split(",")))
    if not os.path.exists(args.peers_python) and not {"flink", "pathway"} <= skip:
        print(f"skipping Flink SQL and Pathway: no {args.peers_python} (see peers.py)")
        skip |= {"flink", "pathway"}
    prov = report.Provenance()
    eps, ordered = workload(args.tuples)
    delay = args.delay_ms
    spark = None
    if "spark" not in skip:
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
            peer_folder = os.path.join(folder, "peers")
            peers.write_inputs(peer_folder, table, eps, ref)
            for bound in (delay, delay // 4):
                runs = [partial(run_streamjoin, table, eps, bound, ref, seqs)]
                if spark is not None:
                    runs.append(partial(run_spark, spark, folder, eps, bound, ref, seqs))
                if "flink" not in skip:
                    runs.append(partial(run_peer, FLINK, peer_folder, bound, args.peers_python))
                if "pathway" not in skip:  # cutoff at the bound, and at W + the bound
                    for c in (bound, svb.WINDOW_MS + bound):
                        py = args.peers_python
                        runs.append(partial(run_peer, PATHWAY, peer_folder, bound, py, c))
                for run in runs:
                    row = {"pattern": pattern, "delay_ms": delay, **run()}
                    prov.note()
                    print({k: row.get(k) for k in ("pattern", "system", "config", "missing")})
                    rows.append(row)
    write(rows, prov, eps, "_quick" if args.quick else "", skip)


def _num(value, fmt: str) -> str:
    """``value`` formatted, ``–`` where the system does not say (or could not be measured)."""
    return "–" if value is None or value != value else format(value, fmt)


def write(
    rows: list[dict], prov: report.Provenance, eps: float, suffix: str, skip: set[str]
) -> None:
    base = os.path.join(RESULTS, "disorder" + suffix)
    report.save_rows([{**r, **prov.fields()} for r in rows], base + ".csv")
    ok = [r for r in rows if "error" not in r]
    n, delay = ok[0]["tuples"], ok[0]["delay_ms"]
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
        "| rows late by up to D | system | bound | pairs | missing | extra + dup. | rows late "
        "or dropped | tuples/s | p50 ms | p99 ms |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in ok:
        lines.append(
            f"| {r['pattern']} | {r['system']} | {r['config']} | {r['pairs']:,} | "
            f"{r['missing']:,} | {r['extra'] + r['duplicates']:,} | {_num(r['late_rows'], ',')} "
            f"| {r['input_tuples_per_s']:,.0f} | {_num(r['latency_p50_ms'], '.1f')} | "
            f"{_num(r['latency_p99_ms'], '.1f')} |"
        )
    failed = [r for r in rows if "error" in r]
    if failed:
        lines += ["", "Runs that failed (the system's last words):", ""]
        lines += [f"- {r['pattern']}, {r['system']}, {r['config']}: `{r['error']}`" for r in failed]
    lines += [
        "",
        "streamjoin with lateness D returns every pair; with D/4 every pair it misses has a "
        "row it lists as late in `Result.late` (pairs missed without one: "
        f"{sum(r.get('missing_without_a_late_row', 0) for r in ok)}). Spark drops rows "
        "behind its watermark from its state without saying which; its count of dropped rows "
        "is its state's, not the input's. Flink's interval join drops no row for being late: "
        "a late row still meets the rows of the other side not yet cleaned from its state, so "
        "it loses only the pairs whose partner the watermark (D or D/4 behind, plus up to "
        "200 ms, the smaller of the two inputs') had already cleaned, and says nothing. "
        "Pathway's cutoff both ignores late rows and forgets stored ones, each side by its own "
        "largest time: at the bound it forgets rows before partners up to W later arrive, at "
        "W + the bound it takes rows that late; it says nothing either. Every system runs "
        "unpaced (the input as fast as it takes it), so a row's wait for the watermark costs "
        "as much wall time as reading the input that moves it: at the input's own rate "
        "(2 x 2,000 tuples/s) streamjoin's latency would grow by about the bound.",
    ]
    not_run = ["Bytewax (its watermark follows system time, so no bound in event time to set)"]
    if {"flink", "pathway"} & skip:
        not_run.insert(0, f"{', '.join(sorted({'flink', 'pathway'} & skip))} (skipped)")
    if "spark" in skip:
        not_run.insert(0, "Spark (skipped)")
    lines += ["", f"Not run here: {'; '.join(not_run)}."]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    plot(ok, base + ".png")
    print(f"wrote {base}.csv, .md, .png")


def _label(row: dict) -> str:
    kind = {"streamjoin": "lateness", FLINK: "wm", PATHWAY: "cutoff"}.get(row["system"], "wm")
    return f"{row['system'].split()[0]}\n{kind} {row.get('setting_ms') or row['bound_ms']}"


def plot(rows: list[dict], path: str) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    labels = list(dict.fromkeys(_label(r) for r in rows))
    x = np.arange(len(labels))
    for k, pattern in enumerate(PATTERNS):
        part = {_label(r): r for r in rows if r["pattern"] == pattern}
        at = np.array([labels.index(lab) for lab in part]) + 0.4 * k - 0.2
        runs = list(part.values())
        share = [100 * r["missing"] / max(1, r["expected_pairs"]) for r in runs]
        axes[0].bar(at, share, 0.4, label=pattern)
        axes[1].bar(at, [r["input_tuples_per_s"] / 1e3 for r in runs], 0.4)
        p99 = [np.nan if r["latency_p99_ms"] is None else r["latency_p99_ms"] for r in runs]
        axes[2].bar(at, p99, 0.4)
    axes[1].set_yscale("log")  # Spark's micro-batches run a thousand times slower
    axes[2].set_yscale("log")
    titles = ("pairs missing (%)", "input K tuples/s (log)", "p99 latency, ms (log)")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xticks(x, labels, fontsize=7, rotation=90)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"out-of-order input, rows late by up to {int(rows[0]['delay_ms'])} ms")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
