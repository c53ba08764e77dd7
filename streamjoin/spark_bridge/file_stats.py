"""Bounds on each Spark partition's ``ts`` before Spark reads it, from the files' statistics.

Partition-ordered streaming (:mod:`streamjoin.spark_bridge.partitions`) hands rows to the join
before Spark has read every partition. That is exact only when it knows a lower bound of the
``ts`` of each partition still to come. Parquet files carry one: the footer holds each row
group's minimum and maximum of each column (Spark writes them and skips row groups by them).
:func:`partition_ranges` finds, without running a Spark job,

1. how the output ``ts`` derives from a file column, walking the physical plan from the top:
   through projections (the column itself, or a chain of monotone conversions such as an
   integer cast wider, ``unix_millis`` of a timestamp, ``timestamp_millis`` of a long),
   filters, within-partition sorts and unions, down to Parquet file scans. Any other
   operator (an exchange, a join, an aggregation, a cache, a local table, a Python function)
   leaves the bound unknown;
2. which file splits each partition of the fetched RDD reads, following the RDD's lineage
   down to the scans' ``FileScanRDD`` (one-to-one dependencies and unions only), so the
   bounds belong to the very RDD whose partitions are fetched;
3. the row groups of each split, from the footer (read by pyarrow on the driver): the
   smallest minimum and largest maximum, mapped through the conversions of step 1, and their
   rows (an upper bound: filters only remove rows).

A partition whose bound is unknown is fetched before any row is handed over. The bounds are
checked against the rows as they arrive. Steps 1 and 2 read JVM objects of classic
(non-Connect) PySpark; where those differ, every bound is unknown and the answer is the same.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from streamjoin.spark_bridge.partitions import PartitionRange

#: Operators that pass rows through unchanged (or only drop or reorder them in a partition).
_PASS_THROUGH = frozenset(
    {"WholeStageCodegenExec", "InputAdapter", "ColumnarToRowExec", "FilterExec", "SortExec"}
)
_INT_WIDTH = {"byte": 1, "short": 2, "integer": 4, "long": 8}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_US = 1_000_000
_UTC = frozenset({"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "+00:00"})
_TIMESTAMPS = ("timestamp", "timestamp_ntz")

Convert = Callable[[int], int]


@dataclass(frozen=True)
class TsSource:
    """How one file scan's rows get the output ``ts``: file column ``column`` of Spark type
    ``kind`` (an integer, or a timestamp in microseconds as Spark holds it: an instant, or a
    wall-clock ``timestamp_ntz``) through ``convert``, monotone."""

    column: str
    kind: str
    convert: tuple[Convert, ...]  #: innermost first

    def __call__(self, value: int) -> int:
        for f in self.convert:
            value = f(value)
        return value


def _seq(s) -> list:
    """A Scala ``Seq`` (through py4j) as a list."""
    return [s.apply(k) for k in range(s.size())]


def _name(obj) -> str:
    return obj.getClass().getSimpleName()


def _type(expr) -> str:
    return expr.dataType().typeName()


def _identity(v: int) -> int:
    return v


def _div(k: int) -> Convert:
    return lambda v: v // k


def _mul(k: int) -> Convert:
    return lambda v: v * k


#: Functions of a timestamp (microseconds), and of an integer, that never decrease.
_OF_TIMESTAMP = {"UnixMillis": _div(1000), "UnixMicros": _identity, "UnixSeconds": _div(_US)}
_OF_INTEGER = {"MillisToTimestamp": _mul(1000), "MicrosToTimestamp": _identity}


def _conversion(expr) -> Convert | None:
    """The monotone map from the value of ``expr``'s one child to ``expr``'s value, in
    Spark's units (timestamps in microseconds); None if ``expr`` is not known to be
    monotone non-decreasing."""
    name, out, arg = _name(expr), _type(expr), _type(expr.children().apply(0))
    if name == "Cast" and (arg, out) == ("timestamp_ntz", "timestamp"):
        # wall-clock time read in the session's time zone: the same instant only in UTC
        zone = expr.timeZoneId()
        return _identity if zone.isDefined() and zone.get() in _UTC else None
    if name == "Cast":
        if arg in _INT_WIDTH and out in _INT_WIDTH and _INT_WIDTH[out] >= _INT_WIDTH[arg]:
            return _identity
        if arg == "timestamp" and out == "long":  # seconds, rounded down
            return _div(_US)
        if arg in _INT_WIDTH and out == "timestamp":  # seconds since the epoch
            return _mul(_US)
        return None
    if arg == "timestamp":
        return _OF_TIMESTAMP.get(name)
    return _OF_INTEGER.get(name) if arg in _INT_WIDTH else None


def _trace(expr) -> tuple[int, list[Convert]] | None:
    """The attribute ``expr`` is computed from and the conversions on the way (innermost
    first), or None if ``expr`` is anything else."""
    outer: list[Convert] = []
    while True:
        name = _name(expr)
        if name == "AttributeReference":
            return expr.exprId().id(), outer[::-1]
        if name == "Alias":
            expr = expr.child()
            continue
        if expr.children().size() != 1:
            return None
        convert = _conversion(expr)
        if convert is None:
            return None
        outer.append(convert)
        expr = expr.children().apply(0)


def _output_id(plan, name: str) -> int | None:
    ids = [a.exprId().id() for a in _seq(plan.output()) if a.name() == name]
    return ids[0] if len(ids) == 1 else None


def ts_sources(plan, ts_id: int, convert: tuple = ()) -> dict[int, TsSource] | None:
    """For each Parquet scan below ``plan`` (by the id of its ``FileScanRDD``), where the
    attribute ``ts_id`` of ``plan``'s output comes from; None if any path down is not one of
    those the module doc lists."""
    name = _name(plan)
    if name in _PASS_THROUGH:
        return ts_sources(plan.child(), ts_id, convert)
    if name == "ProjectExec":
        found = [e for e in _seq(plan.projectList()) if e.exprId().id() == ts_id]
        traced = _trace(found[0]) if len(found) == 1 else None
        if traced is None:
            return None
        attr, inner = traced
        return ts_sources(plan.child(), attr, (*inner, *convert))
    if name == "UnionExec":
        ids = [a.exprId().id() for a in _seq(plan.output())]
        if ts_id not in ids:
            return None
        at = ids.index(ts_id)
        out: dict[int, TsSource] = {}
        for child in _seq(plan.children()):
            child_sources = ts_sources(child, _seq(child.output())[at].exprId().id(), convert)
            if child_sources is None:
                return None
            out.update(child_sources)
        return out
    if name == "FileSourceScanExec":
        relation = plan.relation()
        if _name(relation.fileFormat()) != "ParquetFileFormat":
            return None
        attrs = [a for a in _seq(plan.output()) if a.exprId().id() == ts_id]
        if len(attrs) != 1 or attrs[0].name() in list(relation.partitionSchema().fieldNames()):
            return None
        kind = _type(attrs[0])
        if kind not in _INT_WIDTH and kind not in _TIMESTAMPS:
            return None
        source = TsSource(attrs[0].name(), kind, convert)
        return {plan.inputRDD().id(): source}
    return None


def rdd_leaves(rdd, memo: dict | None = None) -> list[list[tuple[int, int]]] | None:
    """For each partition of ``rdd``, the (RDD id, partition) of the lineage's leaves it
    reads; None if a dependency is neither one-to-one nor a union's."""
    memo = {} if memo is None else memo
    key = rdd.id()
    if key in memo:
        return memo[key]
    deps = _seq(rdd.dependencies())
    n = rdd.getNumPartitions()
    out: list[list[tuple[int, int]]] | None
    if not deps:
        out = [[(key, p)] for p in range(n)]
    elif _name(rdd) == "UnionRDD":  # partitions: the parents', one after the other
        parts = [rdd_leaves(d.rdd(), memo) for d in deps]
        known = [p for p in parts if p is not None]
        out = [leaf for p in known for leaf in p] if len(known) == len(parts) else None
    else:
        parts = [
            rdd_leaves(d.rdd(), memo) if _name(d) == "OneToOneDependency" else None for d in deps
        ]
        known = [p for p in parts if p is not None]
        ok = len(known) == len(parts) and all(len(p) == n for p in known)
        out = [[leaf for p in known for leaf in p[k]] for k in range(n)] if ok else None
    if out is not None and len(out) != n:
        out = None
    memo[key] = out
    return out


def _stat_value(value, kind: str) -> int | None:
    """A footer's min or max as Spark holds a column of type ``kind``: an int, or
    microseconds for a timestamp (time-zone aware in the footer, as Parquet's instants are,
    for ``timestamp``; naive, a wall-clock time, for ``timestamp_ntz``)."""
    if kind not in _TIMESTAMPS:
        return value if isinstance(value, int) else None
    if not isinstance(value, datetime.datetime) or (value.tzinfo is None) != (kind != "timestamp"):
        return None
    if hasattr(value, "value"):  # a pandas Timestamp: nanoseconds
        return value.value // 1000
    instant = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    return (instant - _EPOCH) // datetime.timedelta(microseconds=1)


class _Footers:
    """Parquet footers read once per file, through pyarrow's filesystems."""

    def __init__(self) -> None:
        self.meta: dict[str, pq.FileMetaData | None] = {}
        self.systems: dict[str, pafs.FileSystem] = {}

    def get(self, uri: str) -> pq.FileMetaData | None:
        if uri not in self.meta:
            try:
                fs, path = pafs.FileSystem.from_uri(uri)
                self.meta[uri] = pq.read_metadata(path, filesystem=fs)
            except (OSError, ValueError, pa.ArrowException):
                self.meta[uri] = None
        return self.meta[uri]


def _split_range(
    meta, start: int, end: int, source: TsSource
) -> tuple[int, int | None, int | None] | None:
    """Rows, and the converted ``ts`` minimum and maximum, of the row groups that overlap
    bytes ``[start, end)`` of the file (a superset of those Spark reads for that split); the
    bounds are None if no row group overlaps them."""
    names = [meta.schema.column(k).path for k in range(meta.num_columns)]
    matches = [k for k, n in enumerate(names) if n == source.column]
    if not matches:
        matches = [k for k, n in enumerate(names) if n.lower() == source.column.lower()]
    if len(matches) != 1:
        return None
    found = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        chunks = [group.column(k) for k in range(group.num_columns)]
        first = min(
            c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
            for c in chunks
        )
        last = max(c.data_page_offset + c.total_compressed_size for c in chunks)
        if last <= start or first >= end or not group.num_rows:
            continue
        stats = chunks[matches[0]].statistics
        if stats is None or not stats.has_min_max:
            return None
        a, b = _stat_value(stats.min, source.kind), _stat_value(stats.max, source.kind)
        if a is None or b is None:
            return None
        found.append((group.num_rows, source(a), source(b)))
    return _combine(found)


def partition_ranges(plan, rdd, ts: str = "ts") -> list[PartitionRange]:
    """A :class:`PartitionRange` per partition of ``rdd``, the Arrow RDD that ``plan``
    executes to: ``ts`` bounds and rows from the footers where the module doc's steps
    succeed (partitions found empty are left out), else ``ts_min``/``ts_max`` None and
    ``rows`` 0 (unknown).

    Runtime complexity: a few JVM calls per plan node and per file split, one footer read per
    file.
    """
    n = rdd.getNumPartitions()
    ts_id = _output_id(plan, ts)
    sources = None if ts_id is None else ts_sources(plan, ts_id)
    leaves = rdd_leaves(rdd) if sources else None
    if not sources or not leaves:
        return [PartitionRange(p, 0, None, None) for p in range(n)]
    splits: dict[int, list] = {}  # scan RDD id: its partitions' files
    footers = _Footers()

    def known(reads: list[tuple[int, int]]) -> tuple[int, int | None, int | None] | None:
        found = []
        for rdd_id, q in reads:
            if rdd_id not in sources:
                return None
            if rdd_id not in splits:
                scan = _scan_rdd(rdd, rdd_id)
                splits[rdd_id] = [list(part.files()) for part in scan.partitions()]
            found += [_file_range(f, sources[rdd_id], footers) for f in splits[rdd_id][q]]
        return _combine(found)

    out = []
    for p, reads in enumerate(leaves):
        bounds = known(reads)
        if bounds is None:
            out.append(PartitionRange(p, 0, None, None))
        elif bounds[0]:  # known to be empty: left out
            out.append(PartitionRange(p, *bounds))
    return out


def _combine(ranges: list) -> tuple[int, int | None, int | None] | None:
    """Rows, minimum and maximum over ``ranges`` (None if any is None; bounds None if no
    rows)."""
    if None in ranges:
        return None
    full = [r for r in ranges if r[0]]
    if not full:
        return 0, None, None
    return sum(r[0] for r in full), min(r[1] for r in full), max(r[2] for r in full)


def _scan_rdd(rdd, rdd_id: int):
    """The RDD of id ``rdd_id`` in ``rdd``'s lineage."""
    todo = [rdd]
    while todo:
        r = todo.pop()
        if r.id() == rdd_id:
            return r
        todo += [d.rdd() for d in _seq(r.dependencies())]
    raise LookupError(f"RDD {rdd_id} is not in the lineage")


def _file_range(split, source: TsSource, footers: _Footers) -> tuple | None:
    """Rows and ``ts`` bounds of one file split (a ``PartitionedFile``), or None."""
    meta = footers.get(split.filePath().toString())
    if meta is None:
        return None
    return _split_range(meta, split.start(), split.start() + split.length(), source)
