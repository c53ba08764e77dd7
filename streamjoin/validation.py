"""Input validation at the boundary: a table checked against the query, as :class:`Columns`.

Input is one arrival-ordered table (pyarrow Table or RecordBatch, pandas DataFrame, or a dict
of equal-length numpy arrays). Row *g* is the *g*-th arrival. Columns:

- ``stream``: 0 for R, 1 for S (absent, or all 0, for a self-join);
- ``ts``: int64 event time, non-decreasing per stream (required for time windows; for count
  windows it defaults to the row number);
- the query's join attributes (int or float, finite, no nulls); other columns are ignored.
  Integers are compared exactly over the whole int64 range (:mod:`streamjoin.query`); unsigned
  values beyond the int64 maximum are refused.

Everything is checked once, in :func:`validate`, before any work starts; each problem raises
:class:`InputError` naming the column and the first offending row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamjoin import row_filters
from streamjoin.query import Query

#: Integers up to this magnitude compare exactly through their float64 images alone: the
#: difference of two of them is a float64 without rounding. Beyond it the residual rows carry
#: what the image rounded away (:class:`Columns`).
MAX_EXACT_INT = 2**52


class InputError(ValueError):
    """The input table does not fit the query (raised before any work starts)."""


@dataclass(frozen=True)
class Columns:
    """A validated input (or chunk of it): the columns the join needs, as numpy arrays.

    ``attrs`` has shape ``(2 * len(query.attrs), n)``, float64: first one row per distinct
    attribute, its value's *image* (the value itself for a float column; for an integer, the
    nearest float64), then one *residual* row per attribute in the same order: for an
    integer, ``value - image`` exactly (0 up to ``2**53``, at most ``2**9`` in magnitude over
    the int64 range); NaN for a float. Indexes and routes use the images; conditions between
    two integers are decided exactly from image and residual (:func:`~streamjoin.actors.
    join_kernels.theta_oriented`).

    ``stream`` is 0 (R) or 1 (S), plus 2 for a row that fails a filter of its side: it
    joins nothing but keeps its place in its stream (:mod:`~streamjoin.row_filters`).
    """

    stream: np.ndarray  # int8 (n,)
    ts: np.ndarray  # int64 (n,)
    attrs: np.ndarray  # float64 (k, n)

    def __len__(self) -> int:
        return len(self.stream)


def _column_names(data) -> list[str]:
    if type(data).__module__.startswith("pyspark."):  # its .columns would pass for pandas'
        raise InputError(
            f"input is a Spark {type(data).__name__}: stream it with "
            "streamjoin.run(query, streamjoin.spark_bridge.from_dataframe(df), ...), or "
            "collect a small one with df.toArrow()"
        )
    if isinstance(data, dict):
        return list(data)
    if hasattr(data, "column_names"):  # pyarrow Table / RecordBatch
        return list(data.column_names)
    if hasattr(data, "columns"):  # pandas DataFrame
        return [str(c) for c in data.columns]
    raise InputError(
        "input must be a pyarrow Table, a pandas DataFrame or a dict of numpy arrays, "
        f"got {type(data).__name__}"
    )


def _to_numpy(col, name: str) -> np.ndarray:
    """One column (numpy array, list, pandas Series, pyarrow array) as numpy; nulls rejected."""
    if hasattr(col, "null_count"):  # pyarrow Array / ChunkedArray
        if col.null_count:
            raise InputError(f"column {name!r} has {col.null_count} null value(s)")
        arr = col.to_numpy()
    elif hasattr(col, "isna"):  # pandas Series
        na = np.asarray(col.isna())
        if na.any():
            raise InputError(f"column {name!r} has a null (or NaN) value at row {_first_bad(na)}")
        arr = col.to_numpy()
    else:
        arr = np.asarray(col)
        if arr.dtype.kind in "fO" and isinstance(col, list | tuple):
            _refuse_python_ints_beyond_int64(col, name)
    if arr.ndim != 1:
        raise InputError(f"column {name!r} must be one-dimensional, got shape {arr.shape}")
    return arr


def _refuse_python_ints_beyond_int64(values: list | tuple, name: str) -> None:
    """numpy makes a list of Python ints with one beyond int64 a float64 (or object) array,
    which would compare rounded: name the first such value instead."""
    for i, v in enumerate(values):
        if not isinstance(v, int) or isinstance(v, bool):
            return  # floats among them: a float column, as numpy made it
        if not -(2**63) <= v < 2**63:
            raise InputError(
                f"column {name!r} row {i} is {v}, beyond int64; integer values must fit in "
                "int64 (give floats to compare in float64)"
            )


def _column(data, name: str) -> np.ndarray:
    if isinstance(data, dict):
        return _to_numpy(data[name], name)
    if hasattr(data, "column_names"):
        return _to_numpy(data.column(name), name)
    return _to_numpy(data[name], name)


def _n_rows(data, names: list[str]) -> int:
    if isinstance(data, dict):
        lengths = {name: len(data[name]) for name in names}
        if len(set(lengths.values())) > 1:
            detail = ", ".join(f"{k}={v}" for k, v in lengths.items())
            raise InputError(f"columns have different lengths: {detail}")
        return next(iter(lengths.values()), 0)
    return len(data)


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


_INT64_MAX = np.iinfo(np.int64).max


def _refuse_beyond_int64(col: np.ndarray, what: str, row_offset: int, rule: str) -> None:
    """InputError naming the first unsigned value of ``col`` beyond the int64 maximum."""
    big = col > _INT64_MAX
    if big.any():
        i = _first_bad(big)
        raise InputError(
            f"{what} row {row_offset + i} is {col[i]}, beyond the int64 maximum {_INT64_MAX}; "
            f"{rule}"
        )


def _ts_int64(ts: np.ndarray, row_offset: int) -> np.ndarray:
    """The ``ts`` column as int64, exactly: unsigned values beyond the int64 maximum and
    datetimes outside int64 nanoseconds (years 1677 to 2262) are errors, not wrapped."""
    if np.issubdtype(ts.dtype, np.unsignedinteger):
        _refuse_beyond_int64(ts, "column 'ts'", row_offset, "ts must be int64 event time")
    elif np.issubdtype(ts.dtype, np.datetime64):
        return _datetime_ns(ts, row_offset)
    elif not np.issubdtype(ts.dtype, np.integer):
        raise InputError(f"column 'ts' must be int64 event time, got dtype {ts.dtype}")
    return ts.astype(np.int64)


#: Nanoseconds per fixed-length datetime64 unit.
_NS_PER = {"W": 604_800 * 10**9, "D": 86_400 * 10**9, "h": 3_600 * 10**9, "m": 60 * 10**9}
_NS_PER.update({"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1})


def _datetime_ns(ts: np.ndarray, row_offset: int) -> np.ndarray:
    """datetime64 ``ts`` as int64 nanoseconds since 1970, checked in integers (numpy's unit
    conversions wrap silently, and go wrong near the int64 limits)."""
    raw = ts.view(np.int64)
    nat = np.isnat(ts)
    if nat.any():
        raise InputError(
            f"column 'ts' has a null (NaT) value at row {row_offset + _first_bad(nat)}"
        )
    unit, count = np.datetime_data(ts.dtype)
    if unit not in _NS_PER and unit not in ("Y", "M"):  # finer than ns: divides, always fits
        return ts.astype("datetime64[ns]").view(np.int64)
    if unit in ("Y", "M"):  # calendar units: within ±1000 years they convert to days exactly
        limit = (1000 if unit == "Y" else 12_000) // count
        far = (raw > limit) | (raw < -limit)
        if far.any():
            raise _outside_ns(ts, _first_bad(far), row_offset)
        ts = ts.astype("datetime64[D]")
        raw, unit, count = ts.view(np.int64), "D", 1
    per = count * _NS_PER[unit]
    limit = _INT64_MAX // per  # ±: the int64 minimum itself is NaT
    bad = (raw > limit) | (raw < -limit)
    if bad.any():
        raise _outside_ns(ts, _first_bad(bad), row_offset)
    return raw * np.int64(per)


def _outside_ns(ts: np.ndarray, i: int, row_offset: int) -> InputError:
    return InputError(
        f"column 'ts' row {row_offset + i} is {ts[i]}, outside the int64 nanoseconds since 1970 "
        "(1677-09-21 to 2262-04-11); give ts as integers in a coarser unit"
    )


def validate(data, query: Query, *, row_offset: int = 0, check_ts: bool = True) -> Columns:
    """Check ``data`` against ``query`` and return the columns the join needs.

    Parameters
    ----------
    data : pyarrow.Table | pyarrow.RecordBatch | pandas.DataFrame | dict of numpy arrays
    query : Query
    row_offset : int
        Row number of the first row (for chunks of a longer stream), used in messages and as
        the default ``ts`` of count windows.
    check_ts : bool
        Check that ``ts`` is non-decreasing per stream *within* this table (the caller checks
        across chunks), under a time window and unless the query takes out-of-order input
        (``lateness``).

    Raises
    ------
    InputError
        Missing or non-numeric columns, nulls, NaN or infinite join values, integers beyond
        int64 (unsigned, or a list of Python ints), ``stream`` values other than 0/1, ``ts``
        that is not int64 (unsigned beyond ``2**63 - 1``, datetimes beyond int64
        nanoseconds, NaT), decreasing ``ts`` under a time window, columns of different
        lengths.
    """
    names = _column_names(data)
    needed = [*query.attrs]
    filtered = [a for a in query.predicate.filter_attrs if a not in names]
    if filtered:
        f = next(f for f in query.predicate.filters if f.attr == filtered[0])
        raise InputError(
            f"input has no column {filtered[0]!r}, which the filter {f} reads; "
            f"columns present: {names}"
        )
    missing = [a for a in needed if a not in names]
    residual = [f for f in query.predicate.residuals if missing and missing[0] in f.columns]
    if residual and missing[0] not in query.predicate.attrs:
        raise InputError(
            f"input has no column {missing[0]!r}, which the residual function "
            f"{residual[0].name} reads (where(..., columns=...)); columns present: {names}"
        )
    if missing:
        side = next(
            f"r.{c.attr}" if c.attr == missing[0] else f"s.{c.attr_s}"
            for c in query.predicate.flat
            if missing[0] in (c.attr, c.attr_s)
        )
        raise InputError(
            f"input has no column {missing[0]!r}, which the query compares as {side} (the "
            f"query joins on {list(query.attrs)}); columns present: {names}"
        )
    if query.window.kind == "time" and "ts" not in names:
        raise InputError("a time window needs an int64 'ts' column; the input has none")
    if not query.self_join and "stream" not in names:
        raise InputError(
            "a two-way join needs a 'stream' column (0 for R, 1 for S); "
            "for a self-join use Query(..., self_join=True)"
        )
    present = [c for c in ("stream", "ts", *needed) if c in names]
    n = _n_rows(data, present)

    if "stream" in names:
        stream = _column(data, "stream")
        if not (np.issubdtype(stream.dtype, np.integer) or stream.dtype == np.bool_):
            raise InputError(f"column 'stream' must be integer 0/1, got dtype {stream.dtype}")
        bad = (stream != 0) & (stream != 1)
        if bad.any():
            i = _first_bad(bad)
            raise InputError(
                f"column 'stream' must hold 0 (R) or 1 (S); row {row_offset + i} has {stream[i]}"
            )
        if query.self_join and stream.any():
            i = _first_bad(stream != 0)
            raise InputError(
                "a self-join reads one stream, but column 'stream' has 1 at row "
                f"{row_offset + i}; drop the column or use a two-way Query"
            )
        stream = stream.astype(np.int8)
    else:
        stream = np.zeros(n, dtype=np.int8)

    if "ts" in names:
        ts = _ts_int64(_column(data, "ts"), row_offset)
        if check_ts and query.window.kind == "time" and query.lateness is None:
            for s in (0, 1):
                rows = np.flatnonzero(stream == s)
                own = ts[rows]
                dec = own[1:] < own[:-1]  # not np.diff: it wraps for ts near ±2**63
                if dec.any():
                    i = rows[_first_bad(dec) + 1]
                    name = "R" if s == 0 else "S"
                    raise InputError(
                        f"column 'ts' decreases within stream {name} at row {row_offset + i} "
                        f"({ts[rows[_first_bad(dec)]]} then {ts[i]}); a time window needs "
                        "non-decreasing ts per stream"
                    )
    elif query.lateness is not None:
        raise InputError(
            "lateness= needs a 'ts' column: the event time rows may come out of order in"
        )
    else:
        ts = np.arange(row_offset, row_offset + n, dtype=np.int64)

    if query.predicate.filters:  # a row that fails one is marked (streamjoin.row_filters)
        columns = {a: _filter_column(data, a, row_offset) for a in query.predicate.filter_attrs}
        joins = row_filters.passes(query, stream, columns)
        assert joins is not None  # (the query has filters)
        stream = stream + np.int8(row_filters.FILTERED) * ~joins

    k = len(query.attrs)
    attrs = np.empty((2 * k, n), dtype=np.float64)
    for a, name in enumerate(query.attrs):
        col = _column(data, name)
        if col.dtype == np.bool_ or not (
            np.issubdtype(col.dtype, np.integer) or np.issubdtype(col.dtype, np.floating)
        ):
            raise InputError(f"join column {name!r} must be int or float, got dtype {col.dtype}")
        if np.issubdtype(col.dtype, np.integer):
            if np.issubdtype(col.dtype, np.unsignedinteger):
                rule = "integer join values must fit in int64"
                _refuse_beyond_int64(col, f"join column {name!r}", row_offset, rule)
            attrs[a], attrs[k + a] = int_rows(col)
            continue
        attrs[a] = col
        attrs[k + a] = np.nan
        bad = ~np.isfinite(attrs[a])
        if bad.any():
            i = _first_bad(bad)
            raise InputError(
                f"join column {name!r} row {row_offset + i} is {attrs[a, i]}; "
                "join values must be finite (no NaN, no inf)"
            )
    return Columns(stream=stream, ts=ts, attrs=attrs)


def _filter_column(data, name: str, row_offset: int) -> tuple[np.ndarray, np.ndarray | None]:
    """A filter's column: its values (int, float or bool; a missing one as 0) and whether
    each is present (None when all are)."""
    col = data[name] if isinstance(data, dict) or not hasattr(data, "column") else data.column(name)
    valid = None
    if hasattr(col, "null_count"):  # pyarrow
        if col.null_count:
            valid = np.asarray(col.is_valid())
            col = col.fill_null(0)
        values = col.to_numpy()
    elif hasattr(col, "isna"):  # pandas
        na = np.asarray(col.isna())
        if na.any():
            valid = ~na
            col = col.fillna(0)
        values = col.to_numpy()
    else:
        values = np.asarray(col)
    if values.ndim != 1 or values.dtype.kind not in "iufb":
        raise InputError(
            f"filter column {name!r} must be int, float or bool (filters compare numbers), "
            f"got dtype {values.dtype}"
        )
    if values.dtype.kind == "u":
        _refuse_beyond_int64(
            values, f"filter column {name!r}", row_offset, "integers must fit in int64"
        )
    return values, valid


def int_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integers (any numpy integer dtype, values within int64) as their float64 images and
    residuals: ``image`` the nearest float64 (ties to even), ``residual = value - image``
    computed in integers, exactly, as float64 (``|residual| <= 2**9``, half a unit in the last
    place at ``2**63``)."""
    v = values.astype(np.int64, copy=False)
    image = v.astype(np.float64)
    if not len(v) or (v.min() >= -(2**53) and v.max() <= 2**53):  # images exact
        return image, np.zeros(len(v))
    top = image >= 2.0**63  # within 2**9 of the int64 maximum: rounds to 2**63, beyond int64
    back = np.where(top, 0.0, image).astype(np.int64)
    residual = np.where(top, (v - 2**62) - 2**62, v - back)  # (v - 2**62) - 2**62 = v - 2**63
    return image, residual.astype(np.float64)


def values_of(image: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """A column's values from its rows of ``attrs`` (:func:`validate`): int64, exactly, for an
    integer column (a residual that is not NaN: :func:`int_rows` inverted), else the float64
    image itself (and for a column that was integer in some chunks and float in others)."""
    if np.isnan(residual).any():
        return image
    top = image >= 2.0**63
    back = np.where(top, 0.0, image).astype(np.int64)
    res = residual.astype(np.int64)
    return np.where(top, (res + 2**62) + 2**62, back + res)


def check_ts_continues(cols: Columns, last_ts: np.ndarray, row_offset: int) -> None:
    """Check that each stream's ``ts`` in ``cols`` starts at or after ``last_ts`` (int64
    ``(2,)``, the last ``ts`` of each stream in earlier chunks; the int64 minimum before the
    first), then advance ``last_ts`` in place. :func:`validate` checks within a chunk; this
    checks across chunks of a stream that arrives in pieces (time windows).

    Raises
    ------
    InputError
        Naming the first row whose ``ts`` is below its stream's last one.
    """
    for s in (0, 1):
        rows = np.flatnonzero((cols.stream & 1) == s)  # (a filtered row too)
        if len(rows) and cols.ts[rows[0]] < last_ts[s]:
            name = "R" if s == 0 else "S"
            raise InputError(
                f"column 'ts' decreases within stream {name} at row {row_offset + rows[0]} "
                f"({last_ts[s]} then {cols.ts[rows[0]]}); a time window needs "
                "non-decreasing ts per stream"
            )
    for s in (0, 1):  # only once the whole chunk passed
        rows = np.flatnonzero((cols.stream & 1) == s)
        if len(rows):
            last_ts[s] = cols.ts[rows[-1]]
