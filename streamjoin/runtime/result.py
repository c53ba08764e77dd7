"""The outcome of a run: result pairs, throughput and latency metrics, summaries and plots."""

from __future__ import annotations

import json
import math
import os
import platform
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from streamjoin import oracle, viz
from streamjoin._version import __version__
from streamjoin.actors.base import RunSettings
from streamjoin.actors.collector import LatencyHistogram
from streamjoin.event_time import Watermark
from streamjoin.query import Query
from streamjoin.runtime.trace import RunTrace
from streamjoin.topologies.base import Topology


def _as_arrow(data) -> pa.Table:
    """An in-memory input as a pyarrow Table (columns as they are, nothing validated)."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, dict):
        return pa.table({k: np.asarray(v) for k, v in data.items()})
    if hasattr(data, "columns") and hasattr(data, "iloc"):  # pandas
        return pa.Table.from_pandas(data, preserve_index=False)
    raise ValueError(
        f"data must be the in-memory input (pyarrow Table, pandas DataFrame or dict of "
        f"arrays), got {type(data).__name__}"
    )


def _ms(ns: float) -> str:
    return "—" if ns != ns else f"{ns / 1e6:,.3f} ms"  # ns != ns: NaN, no pairs


def machine_info() -> dict:
    """What the figures were measured on."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


@dataclass
class Result:
    """What :func:`streamjoin.run` returns.

    Attributes
    ----------
    pairs : pyarrow.Table or None
        Columns ``r``, ``s`` (input row numbers; for a self-join ``r`` is the older row) and
        ``latency_ns``; an outer join's tuples without a partner are ``(r, -1)`` and ``(-1,
        s)`` (``Query.how``). None when the run used ``collect="count"``.
    count : int
        Number of result pairs (with an outer join's tuples without a partner).
    metrics : dict
        ``input_tuples``, ``output_pairs``, ``elapsed_s`` (first ingest to last result) and
        ``window_ns``, those two instants on the run's clock (``time.monotonic_ns`` on
        ``local`` and ``ray``, to line other measurements up with the run; virtual on ``sim``),
        ``input_tuples_per_s``, ``output_pairs_per_s``, ``latency_ms`` (p50, p95, p99, max, mean),
        ``actors`` (per-actor busy time, batches and tuples in/out, and ``lag_ms``: when its
        steps began and when their logic ended, ms after the newest tuple each handled
        arrived, the medians over its last steps: where a batch's latency goes), the run's
        settings and
        the machine; ``late_tuples`` with ``Query.lateness``; ``unmatched_tuples`` (of
        ``output_pairs``) with an outer join; ``markers``, the progress markers that reached
        the collector from every edge, with an outer join or residual functions (0 on a
        layout that sends none: there such tuples leave, and the columns go, at the end).
    late : pyarrow.Table or None
        With ``Query.lateness``: the rows left out as late (``on_late="drop"``), their input
        row numbers ``row``, ``stream`` and ``ts``; None otherwise.
    """

    pairs: pa.Table | None
    count: int
    metrics: dict
    histogram: LatencyHistogram = field(repr=False)
    late: pa.Table | None = None

    def in_input_rows(self, mark: Watermark) -> Result:
        """This result of a run over out-of-order input (``Query.lateness``), its pairs
        renumbered from the order the join saw the rows (stably sorted by ``ts``) to the
        input's rows, with the rows left out as late (:mod:`streamjoin.event_time`)."""
        pairs = self.pairs
        if pairs is not None:
            rows = mark.row_numbers()
            for at, side in enumerate(("r", "s")):
                seq = pairs.column(side).to_numpy()
                # an outer join's -1 (no row on that side) stays -1
                renumbered = np.where(seq >= 0, rows[np.maximum(seq, 0)], -1)
                pairs = pairs.set_column(at, side, pa.array(renumbered, type=pa.int64()))
        metrics = {**self.metrics, "late_tuples": mark.n_late}
        return replace(self, pairs=pairs, metrics=metrics, late=mark.late_rows())

    @classmethod
    def from_trace(
        cls,
        trace: RunTrace,
        query: Query,
        topology: Topology,
        settings: RunSettings,
        *,
        backend: str,
        pace: float | None = None,
        extra: dict | None = None,
    ) -> Result:
        """The result of a run from what its executor recorded.

        Throughput counts from the first ingest to the last pair the collector received (or
        the end of the run if there were none); latency percentiles come from every pair's
        latency with ``collect="pairs"``, else from the collector's histogram. ``extra`` is
        what the backend adds to :attr:`metrics` (``Executor.metrics``).
        """
        col = trace.collector
        assert col is not None  # every executor's trace of a finished run has it
        end = col.last_ns if col.last_ns is not None else trace.end_ns
        elapsed_s = max(end - trace.start_ns, 1) / 1e9
        hist = col.histogram
        pairs = None
        if settings.collect == "pairs":
            r, s, lat = col.arrays(ordered=settings.ordered)
            pairs = pa.table({"r": r, "s": s, "latency_ns": lat})
            q = np.percentile(lat, [50, 95, 99]) / 1e6 if len(lat) else [math.nan] * 3
            latency = {
                "p50": q[0],
                "p95": q[1],
                "p99": q[2],
                "max": lat.max() / 1e6 if len(lat) else math.nan,
                "mean": lat.mean() / 1e6 if len(lat) else math.nan,
            }
        else:
            latency = {f"p{p}": hist.percentile(p) / 1e6 for p in (50, 95, 99)}
            latency["max"] = hist.max / 1e6 if hist.total else math.nan
            latency["mean"] = hist.mean() / 1e6
        max_delay_ns = settings.max_delay_ns
        metrics = {
            "query": str(query),
            "topology": topology.name,
            "backend": backend,
            "settings": {
                "batch_size": settings.batch_size,
                "max_delay_s": None if max_delay_ns is None else max_delay_ns / 1e9,
                "collect": settings.collect,
                "ordered": settings.ordered,
                "pace": pace,
            },
            "input_tuples": trace.input_tuples,
            "output_pairs": col.count,
            **({"unmatched_tuples": col.unmatched} if query.how != "inner" else {}),
            **(
                {"markers": col.markers}
                if query.how != "inner" or query.predicate.residuals
                else {}
            ),
            "elapsed_s": elapsed_s,
            "window_ns": [trace.start_ns, max(end, trace.start_ns + 1)],
            "input_tuples_per_s": trace.input_tuples / elapsed_s,
            "output_pairs_per_s": col.count / elapsed_s,
            "latency_ms": {k: float(v) for k, v in latency.items()},
            "actors": trace.actor_metrics(),
            "machine": machine_info(),
            "version": __version__,
            **(extra or {}),
        }
        return cls(pairs=pairs, count=col.count, metrics=metrics, histogram=hist)

    def same_pairs(self, other) -> oracle.PairComparison:
        """Compare with another result or pair table as sets (see :func:`oracle.same_pairs`)."""
        return oracle.same_pairs(self, other)

    def pairs_with(self, data, columns: Sequence[str] | None = None):
        """The pairs with their rows' columns, as Arrow: ``r``, ``s``, ``latency_ns``, then
        ``r_<col>`` and ``s_<col>`` for each of ``columns`` (default: every column of
        ``data`` but ``stream``).

        ``data`` is the input the run joined, whose row numbers the pairs hold: a pyarrow
        Table, pandas DataFrame or dict of arrays; or the run's Spark source
        (:func:`streamjoin.spark_bridge.from_dataframe`), which gives a Spark DataFrame of
        the same columns, joined in Spark
        (:meth:`~streamjoin.spark_bridge.SparkSource.pairs_with_columns`). A row number of
        -1 (an outer join's missing side) gives nulls.
        """
        if self.pairs is None:
            raise ValueError("this run used collect='count' and kept no pairs")
        if hasattr(data, "pairs_with_columns"):  # a Spark source: joined where its rows are
            return data.pairs_with_columns(self, columns)
        table = _as_arrow(data)
        if columns is None:
            columns = [c for c in table.column_names if c != "stream"]
        missing = [c for c in columns if c not in table.column_names]
        if missing:
            raise ValueError(
                f"no column {missing[0]!r} in the input; present: {table.column_names}"
            )
        out = {name: self.pairs.column(name) for name in ("r", "s", "latency_ns")}
        for side in ("r", "s"):
            rows = self.pairs.column(side).to_numpy()
            if len(rows) and rows.max() >= table.num_rows:
                raise ValueError(
                    f"pair rows reach {rows.max()}, beyond the {table.num_rows} rows of data: "
                    "pass the input this result was joined from"
                )
            index = pa.array(rows, mask=rows < 0)
            for c in columns:
                out[f"{side}_{c}"] = table.column(c).take(index)
        order = ["r", "s", "latency_ns"] + [f"{x}_{c}" for c in columns for x in ("r", "s")]
        return pa.table({k: out[k] for k in order})

    def to_spark(self, spark):
        """The pairs as a Spark DataFrame (``r``, ``s``, ``latency_ns``), handed over as Arrow;
        an outer join's missing side (-1 in :attr:`pairs`) is null.

        ``spark`` is a SparkSession; for the joined rows' columns see
        :meth:`streamjoin.spark_bridge.SparkSource.pairs_with_columns`.
        """
        if self.pairs is None:
            raise ValueError("this run used collect='count' and kept no pairs")
        return spark.createDataFrame(_nulls_for_missing(self.pairs))

    def latency_ns(self) -> np.ndarray | None:
        return None if self.pairs is None else self.pairs.column("latency_ns").to_numpy()

    def summary(self) -> str:
        """A table of throughput, latency and per-actor load."""
        m = self.metrics
        lat = m["latency_ms"]
        cpu = any("cpu_s" in a for a in m["actors"].values())
        lag = any("lag_ms" in a for a in m["actors"].values())
        lines = [
            f"query      {m['query']}",
            f"topology   {m['topology']} on {m['backend']}, batch {m['settings']['batch_size']}",
            f"input      {m['input_tuples']:,} tuples in {m['elapsed_s']:.3f} s "
            f"= {m['input_tuples_per_s']:,.0f} tuples/s",
            f"output     {m['output_pairs']:,} pairs = {m['output_pairs_per_s']:,.0f} pairs/s",
            "latency    " + "  ".join(f"{k} {_ms(v * 1e6)}" for k, v in lat.items()),
        ]
        if "unmatched_tuples" in m:
            lines.append(f"unmatched  {m['unmatched_tuples']:,} of them tuples without a partner")
        if "late_tuples" in m:
            lines.append(
                f"late       {m['late_tuples']:,} tuples left out (Result.late lists them)"
            )
        lines += [
            "",
            f"{'actor':<16}{'role':<12}{'busy s':>9}{'busy %':>8}{'batches in':>12}"
            f"{'tuples in':>12}{'batches out':>13}{'peak queue':>12}"
            + (f"{'cpu s':>9}" if cpu else "")
            + (f"{'begins ms':>11}{'ends ms':>9}" if lag else ""),
        ]
        for name, a in m["actors"].items():
            lines.append(
                f"{name:<16}{a['role']:<12}{a['busy_s']:>9.3f}{100 * a['busy_share']:>7.1f}%"
                f"{a['batches_in']:>12,}{a['tuples_in']:>12,}{a['batches_out']:>13,}"
                f"{a['peak_queue']:>12,}"
                + (f"{a['cpu_s']:>9.3f}" if "cpu_s" in a else (" " * 9 if cpu else ""))
                + _lag_columns(a.get("lag_ms"), lag)
            )
        if cpu:
            lines.append(
                "busy: time in the actor's logic; cpu: its whole process (logic, "
                "messaging, Ray's threads)"
            )
        lines.append("peak queue: most messages waiting for the actor at once")
        if lag:
            lines.append(
                "begins / ends: its steps' median start and end, after the newest tuple each "
                "handled arrived"
            )
        return "\n".join(lines)

    def plot_latency(self, path: str | os.PathLike) -> None:
        """Write the CDF of per-pair latency to ``path`` (PNG, SVG or PDF)."""
        h = self.histogram
        edges = 2.0 ** ((np.arange(len(h.counts)) + 1) / h.PER_OCTAVE)
        viz.plot_latency_cdf(
            self.latency_ns(),
            path,
            title=f"{self.metrics['topology']}: latency per output pair",
            histogram=(edges, h.counts),
        )

    def write_metrics(self, path: str | os.PathLike) -> None:
        """Write :attr:`metrics` as JSON, atomically."""
        path = os.fspath(path)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".tmp-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.metrics, f, indent=2, default=float)
            os.chmod(tmp, 0o644)  # mkstemp creates 0600
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise

    def __repr__(self) -> str:
        m = self.metrics
        return (
            f"Result({self.count:,} pairs, {m['input_tuples_per_s']:,.0f} tuples/s, "
            f"p50 {_ms(m['latency_ms']['p50'] * 1e6)})"
        )


def _nulls_for_missing(pairs: pa.Table) -> pa.Table:
    """``pairs`` with each -1 in ``r`` or ``s`` (an outer join's missing side) a null."""
    for at, side in enumerate(("r", "s")):
        rows = pairs.column(side).to_numpy()
        if len(rows) and rows.min() < 0:
            pairs = pairs.set_column(at, side, pa.array(rows, mask=rows < 0))
    return pairs


def _lag_columns(lag: dict | None, shown: bool) -> str:
    """An actor's ``begins ms`` and ``ends ms`` columns of :meth:`Result.summary`."""
    if not shown:
        return ""
    if lag is None:
        return f"{'–':>11}{'–':>9}"
    return f"{lag['start_p50']:>11.3f}{lag['end_p50']:>9.3f}"
