"""Synthetic inputs: value distributions, arrival interleaving, the standard workloads.

Every generator is seeded and returns an in-memory pyarrow Table in arrival order with columns
``stream`` (0 = R, 1 = S; omitted for self-join data), ``ts`` (int64 event time in
``ts_per_second`` units, milliseconds by default) and the join attributes. :class:`Stream`
wraps any table as a source that :func:`streamjoin.run` reads chunk by chunk.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pyarrow as pa

from streamjoin.validation import Columns, InputError, check_ts_continues, validate

DISTRIBUTIONS = ("uniform", "gaussian", "gamma", "shifting_gaussian")


class Source:
    """Something :func:`streamjoin.run` reads in chunks instead of a whole in-memory table.

    Subclasses yield tables (anything :func:`streamjoin.validation.validate` accepts) in arrival
    order; ``n_rows`` is the total when known (for progress bars), else None.
    """

    n_rows: int | None = None

    def check(self, query) -> None:
        """Check the source against ``query`` before the job starts (missing columns, nulls);
        raise :class:`streamjoin.InputError` naming the problem. Chunks are still validated
        as they are read; this hook lets a source fail before any work when it can tell."""

    def __iter__(self) -> Iterator:
        raise NotImplementedError


class SourceError(RuntimeError):
    """A :class:`Source` raised while :func:`streamjoin.run` read it.

    The message says which source and after how many rows; ``rows`` holds that number and
    ``__cause__`` the source's own exception. The run ends with it: nothing partial is
    returned.
    """

    def __init__(self, message: str, rows: int) -> None:
        super().__init__(message, rows)  # both in args: copies and pickles rebuild it
        self.rows = rows

    def __str__(self) -> str:
        return self.args[0]


def read_validated(source: Source, query) -> Iterator[Columns]:
    """The chunks of ``source``, each validated as in-memory input is
    (:func:`~streamjoin.validation.validate`, row numbers counted across chunks), and under a time
    window ``ts`` checked to stay non-decreasing per stream from one chunk to the next. So the
    input is checked before any executor sees it, and every backend raises the same
    :class:`~streamjoin.InputError` for the same row.

    Raises
    ------
    InputError
        A chunk that does not fit ``query`` (or the source's own, which already names the
        problem).
    SourceError
        Any other exception of the source while it is read, as its ``__cause__``.
    """
    rows = 0
    last_ts = np.full(2, np.iinfo(np.int64).min, dtype=np.int64)
    chunks = None
    try:
        with _source_errors(source, rows):
            chunks = iter(source)
        while True:
            with _source_errors(source, rows):
                chunk = next(chunks, _END)
            if chunk is _END:
                return
            cols = validate(chunk, query, row_offset=rows)
            if query.window.kind == "time" and query.lateness is None:
                check_ts_continues(cols, last_ts, rows)
            rows += len(cols)
            yield cols
    finally:  # also when the run stops early: let the source release what it holds
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


_END = object()


@contextmanager
def _source_errors(source: Source, rows: int):
    """The source's own exceptions as :class:`SourceError` (an InputError passes: it already
    says what is wrong with the input)."""
    try:
        yield
    except InputError:
        raise
    except Exception as e:
        lines = str(e).strip().splitlines()
        detail = f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__
        raise SourceError(
            f"source {type(source).__name__} failed after {rows:,} rows: {detail}", rows
        ) from e


class Stream(Source):
    """An in-memory table handed over ``chunk_rows`` rows at a time."""

    def __init__(self, data, chunk_rows: int = 65_536) -> None:
        if chunk_rows <= 0:
            raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
        self.data = data
        self.chunk_rows = chunk_rows
        self.n_rows = len(next(iter(data.values()))) if isinstance(data, dict) else len(data)

    def __iter__(self):
        for start in range(0, self.n_rows, self.chunk_rows):
            end = min(start + self.chunk_rows, self.n_rows)
            if isinstance(self.data, dict):
                yield {k: v[start:end] for k, v in self.data.items()}
            elif hasattr(self.data, "iloc"):
                yield self.data.iloc[start:end]
            else:
                yield self.data.slice(start, end - start)


# ---------------------------------------------------------------------------------------------
# Arrivals
# ---------------------------------------------------------------------------------------------


def _arrival_times(rng, n: int, rate: float, process: str) -> np.ndarray:
    """Arrival times in seconds of ``n`` tuples at ``rate`` tuples/s."""
    if process == "constant":
        return np.arange(1, n + 1) / rate
    if process == "poisson":
        return np.cumsum(rng.exponential(1.0 / rate, size=n))
    raise ValueError(f"arrival process must be 'constant' or 'poisson', got {process!r}")


def interleave(
    n: int,
    rate: float,
    rate_s: float | None = None,
    *,
    process: str = "constant",
    ts_per_second: int = 1000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Arrival order of ``n`` tuples from R at ``rate`` and S at ``rate_s`` tuples/s.

    ``rate_s`` defaults to ``rate`` (symmetric streams). Returns ``(stream, ts)``: int8 stream
    ids and int64 event times (``ts_per_second`` units), sorted by arrival; at equal times R
    comes first.
    """
    rate_s = rate if rate_s is None else rate_s
    if rate <= 0 or rate_s <= 0:
        raise ValueError(f"rates must be positive, got R {rate}, S {rate_s}")
    rng = np.random.default_rng(seed)
    # n arrivals of each stream always cover the first n of the merge
    t = np.concatenate(
        [_arrival_times(rng, n, rate, process), _arrival_times(rng, n, rate_s, process)]
    )
    stream = np.repeat(np.array([0, 1], dtype=np.int8), n)
    order = np.lexsort((stream, t))[:n]
    return stream[order], np.floor(t[order] * ts_per_second).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------


def values(
    n: int,
    distribution: str = "uniform",
    *,
    seed: int | Sequence[int] = 0,
    scale: float = 1.0,
    start: int = 0,
    total: int | None = None,
    **params,
) -> np.ndarray:
    """``n`` join-attribute values from a PIM-Tree §5 distribution.

    ``start`` and ``total`` place these values at rows ``[start, start + n)`` of a sequence of
    ``total`` rows (default: the ``n`` rows alone); only ``shifting_gaussian`` depends on the
    position, the other distributions are independent draws.

    - ``uniform``: integers in ``[low, high]`` (defaults ``0`` and ``2**31 - 1``);
    - ``gaussian``: ``N(mean, std)``, defaults 0.5 and 0.125, times ``scale``;
    - ``gamma``: shape ``k`` and scale ``theta``, defaults 3 and 3, times ``scale``;
    - ``shifting_gaussian``: three phases (PIM-Tree §5, Fig. 13): ``N(0.5, std)`` for
      ``phases[0]`` of the values, a mean moving linearly to ``r + 0.5`` over ``phases[1]``,
      then ``N(r + 0.5, std)``; ``phases`` defaults to (4, 10, 4) (relative lengths), ``r`` to
      0.5; times ``scale``.
    """
    rng = np.random.default_rng(seed)
    out: np.ndarray
    match distribution:
        case "uniform":
            low, high = int(params.pop("low", 0)), int(params.pop("high", 2**31 - 1))
            if low > high:
                raise ValueError(f"uniform needs low <= high, got {low} > {high}")
            out = rng.integers(low, high, size=n, endpoint=True)
        case "gaussian":
            out = rng.normal(params.pop("mean", 0.5), params.pop("std", 0.125), size=n) * scale
        case "gamma":
            out = rng.gamma(params.pop("k", 3.0), params.pop("theta", 3.0), size=n) * scale
        case "shifting_gaussian":
            r = params.pop("r", 0.5)
            std = params.pop("std", 0.125)
            phases = np.asarray(params.pop("phases", (4, 10, 4)), dtype=np.float64)
            total = n if total is None else total
            cut = np.floor(np.cumsum(phases) / phases.sum() * total).astype(np.int64)
            pos = np.arange(start, start + n)
            progress = np.clip((pos - cut[0]) / max(1, cut[1] - cut[0]), 0.0, 1.0)
            out = (rng.normal(0.0, std, size=n) + 0.5 + r * progress) * scale
        case _:
            raise ValueError(
                f"unknown distribution {distribution!r}; choose from {', '.join(DISTRIBUTIONS)}"
            )
    if params:
        raise ValueError(f"unknown parameters for {distribution}: {sorted(params)}")
    return out


def synthetic(
    n: int,
    distribution: str = "uniform",
    *,
    rate: float = 10_000,
    rate_s: float | None = None,
    attrs: tuple[str, ...] = ("x",),
    self_join: bool = False,
    process: str = "constant",
    ts_per_second: int = 1000,
    seed: int = 0,
    **params,
) -> pa.Table:
    """``n`` arrivals with attributes drawn from ``distribution`` (see :func:`values`).

    Two streams interleaved by rate (see :func:`interleave`), or one stream at ``rate`` for
    ``self_join=True`` (no ``stream`` column).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if self_join:
        rng = np.random.default_rng(seed)
        ts = np.floor(_arrival_times(rng, n, rate, process) * ts_per_second).astype(np.int64)
        cols = {"ts": ts}
    else:
        stream, ts = interleave(
            n, rate, rate_s, process=process, ts_per_second=ts_per_second, seed=seed
        )
        cols = {"stream": stream, "ts": ts}
    for k, name in enumerate(attrs):
        cols[name] = values(n, distribution, seed=seed + 1 + k, **dict(params))
    return pa.table(cols)


def synthetic_part(
    n: int,
    part: int,
    parts: int,
    distribution: str = "uniform",
    *,
    rate: float = 10_000,
    rate_s: float | None = None,
    attrs: tuple[str, ...] = ("x",),
    self_join: bool = False,
    process: str = "constant",
    ts_per_second: int = 1000,
    seed: int = 0,
    **params,
) -> pa.Table:
    """Part ``part`` of ``parts`` of an ``n``-row workload, generated independently of the rest.

    For generating at scale, one part per task (:func:`streamjoin.spark_bridge.generate`): the
    workload's duration ``n / (rate + rate_s)`` seconds is cut into ``parts`` equal spans of
    event time and each part holds the arrivals of its span, so the parts in order form one
    arrival-ordered input of about ``n`` rows (exactly the arrivals of the whole span). Constant
    arrivals are those of :func:`interleave` (R's k-th at ``k / rate`` s); Poisson arrivals are a
    Poisson process per span, which is the same process. Values are independent draws seeded
    by ``(seed, part, attribute)``; ``shifting_gaussian`` follows the row's position in the
    whole workload. ``distribution="handshake"`` gives the two attributes of
    :func:`handshake_workload`. A ``seq`` column numbers the rows in arrival order (not
    contiguous across parts: ``part * 2**40 + i``), the tie-break that keeps the order when the
    parts are read back in any order.
    """
    if not 0 <= part < parts:
        raise ValueError(f"part must be in [0, {parts}), got {part}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rate_s = rate if rate_s is None else rate_s
    if rate <= 0 or rate_s <= 0:
        raise ValueError(f"rates must be positive, got R {rate}, S {rate_s}")
    rates = (rate,) if self_join else (rate, rate_s)
    span = n / sum(rates) / parts
    t0, t1 = part * span, (part + 1) * span
    rng = np.random.default_rng([seed, part])
    times, streams = [], []
    for y, lam in enumerate(rates):
        if process == "constant":  # arrivals nth / lam, nth = 1, 2, ...: those in (t0, t1]
            nth = np.arange(np.floor(t0 * lam) + 1, np.floor(t1 * lam) + 1)
            t = nth / lam
        elif process == "poisson":
            t = np.sort(rng.uniform(t0, t1, size=rng.poisson(lam * (t1 - t0))))
        else:
            raise ValueError(f"arrival process must be 'constant' or 'poisson', got {process!r}")
        times.append(t)
        streams.append(np.full(len(t), y, dtype=np.int8))
    t, stream = np.concatenate(times), np.concatenate(streams)
    order = np.lexsort((stream, t))
    t, stream = t[order], stream[order]
    m = len(t)
    cols: dict[str, np.ndarray] = {"seq": part * 2**40 + np.arange(m, dtype=np.int64)}
    if not self_join:
        cols["stream"] = stream
    cols["ts"] = np.floor(t * ts_per_second).astype(np.int64)
    start = int(round(t0 * sum(rates)))  # rows before this part, for position-dependent values
    if distribution == "handshake":
        if params:
            raise ValueError(f"unknown parameters for handshake: {sorted(params)}")
        cols["x"] = rng.integers(1, 10_000, size=m, endpoint=True)
        cols["y"] = rng.uniform(1.0, 10_000.0, size=m)
    else:
        for k, name in enumerate(attrs):
            cols[name] = values(
                m, distribution, seed=[seed, part, k + 1], start=start, total=n, **dict(params)
            )
    return pa.table(cols)


def handshake_workload(
    n: int,
    rate: float = 2_000,
    *,
    rate_s: float | None = None,
    seed: int = 0,
    ts_per_second: int = 1000,
) -> pa.Table:
    """The handshake-join benchmark (Teubner & Mueller): R = (x int, y float), S likewise.

    All values uniform in [1, 10000]; the query is ``band("x", 10) & band("y", 10)`` over a
    time window (5–15 minutes in the papers). Timestamps follow ``rate`` (per stream).
    """
    stream, ts = interleave(n, rate, rate_s, ts_per_second=ts_per_second, seed=seed)
    rng = np.random.default_rng(seed + 1)
    return pa.table(
        {
            "stream": stream,
            "ts": ts,
            "x": rng.integers(1, 10_000, size=n, endpoint=True),
            "y": rng.uniform(1.0, 10_000.0, size=n),
        }
    )


def inequality_workload(
    n: int,
    window: int,
    match_rate: float = 2.0,
    *,
    attrs: tuple[str, str] = ("a", "b"),
    self_join: bool = False,
    rate: float = 10_000,
    seed: int = 0,
) -> pa.Table:
    """Two correlated attributes for the two-inequality join ``r.a < s.a AND r.b > s.b``
    (SPO-Join's Q1 shape; ``sj.less("a") & sj.greater("b")``), named ``attrs``.

    ``a`` is uniform in [0, 1) and ``b = a + noise``, gaussian with the width ``σ`` that gives
    about ``match_rate`` matches per probe into a full count window of ``window`` tuples: a
    probe r matches s iff ``0 < s.a - r.a < r.noise - s.noise``, which happens with probability
    ``σ / √π`` per window tuple (twice that for a self-join, which takes either order). Each
    condition alone matches about half the window.
    """
    if window <= 0:
        raise ValueError(f"window must be positive, got {window}")
    if match_rate <= 0:
        raise ValueError(f"match_rate must be positive, got {match_rate}")
    sigma = match_rate * np.sqrt(np.pi) / window / (2 if self_join else 1)
    table = synthetic(n, attrs=(), self_join=self_join, rate=rate, seed=seed)
    rng = np.random.default_rng(seed + 1)
    a = rng.uniform(0.0, 1.0, n)
    return table.append_column(attrs[0], pa.array(a)).append_column(
        attrs[1], pa.array(a + rng.normal(0.0, sigma, n))
    )


def disorder(data, delay: int, *, fraction: float = 1.0, seed: int = 0) -> pa.Table:
    """``data`` (in ``ts`` order) as it arrives when a ``fraction`` of its rows are held up by
    a uniform amount in ``[0, delay]`` of ``ts`` units: each row arrives at ``ts`` plus its
    hold-up, rows in order of arrival (ties keep the input's order). The ``ts`` column is
    unchanged, so every row is at most ``delay`` behind the largest ``ts`` before it, and
    ``Query(..., lateness=delay)`` joins it exactly as the ordered input.

    ``fraction=1.0`` displaces every row (``ts`` uniformly behind its arrival position);
    ``fraction=0.01``, stragglers."""
    if isinstance(delay, bool) or not isinstance(delay, int | np.integer) or delay < 0:
        raise ValueError(f"delay must be an int >= 0 (ts units), got {delay!r}")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must lie in [0, 1], got {fraction!r}")
    if isinstance(data, pa.Table):
        table = data
    elif isinstance(data, dict):
        table = pa.table(data)
    else:  # pandas
        table = pa.Table.from_pandas(data, preserve_index=False)
    if "ts" not in table.column_names:
        raise ValueError("disorder needs a 'ts' column")
    ts = table.column("ts").to_numpy().astype(np.int64)
    rng = np.random.default_rng(seed)
    held = rng.random(len(ts)) < fraction
    hold_up = np.where(held, rng.integers(0, delay, len(ts), endpoint=True), 0)
    top = np.iinfo(np.int64).max
    arrival = np.minimum(ts, top - hold_up) + hold_up  # saturating: no wrap near 2**63
    order = np.argsort(arrival, kind="stable")
    return table.take(pa.array(order))


def band_for_match_rate(
    r_values: np.ndarray,
    s_values: np.ndarray | None = None,
    *,
    window: int,
    match_rate: float = 2.0,
    integer: bool | None = None,
) -> float:
    """Band width ``eps`` giving about ``match_rate`` matches per probe (PIM-Tree §5).

    With ``window`` tuples per stream window and selectivity ``σ(eps) = P(|r - s| <= eps)``,
    the match rate is ``σ_s = window · σ``. ``σ`` is estimated on (a sample of) the values and
    ``eps`` found by bisection. ``integer`` (default: whether the values are integers) rounds
    ``eps`` down to a whole number, as PIM-Tree uses for integer keys.
    """
    if window <= 0:
        raise ValueError(f"window must be positive, got {window}")
    if match_rate <= 0:
        raise ValueError(f"match_rate must be positive, got {match_rate}")
    r = np.asarray(r_values)
    s = r if s_values is None else np.asarray(s_values)
    if not (len(r) and len(s)):
        raise ValueError(
            f"choosing eps needs join values of both streams, got {len(r)} of R and {len(s)} of S"
        )
    if not (np.isfinite(r).all() and np.isfinite(s).all()):
        raise ValueError("choosing eps needs finite join values, got NaN or inf (or nulls)")
    if integer is None:
        integer = np.issubdtype(r.dtype, np.integer) and np.issubdtype(s.dtype, np.integer)
    rng = np.random.default_rng(0)
    # the probes sorted: numpy's searchsorted starts each search where the last one ended
    r = np.sort(rng.choice(r, size=min(len(r), 20_000), replace=False).astype(np.float64))
    s = np.sort(rng.choice(s, size=min(len(s), 200_000), replace=False).astype(np.float64))
    target = match_rate / window

    def selectivity(eps: float) -> float:
        hits = np.searchsorted(s, r + eps, "right") - np.searchsorted(s, r - eps, "left")
        return float(hits.mean()) / len(s)

    lo, hi = 0.0, float(s[-1] - s[0]) + 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if mid in (lo, hi):  # as close as floats get: the rest would change nothing
            break
        if selectivity(mid) < target:
            lo = mid
        else:
            hi = mid
    return float(np.floor(hi)) if integer else hi
