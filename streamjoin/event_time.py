"""Event time: input out of ``ts`` order under a lateness bound (docs/design.md §1).

With ``Query(..., lateness=L)``, before row *i* (arrival order, both streams together) the
*watermark* is ``max(ts of the rows before i) - L``, and row *i* is *late* if its ``ts`` lies
below it. The result is the join of the rows that are not late, stably sorted by ``ts`` (ties
keep their arrival order), with pairs reported by the rows' original numbers.

Two parts make that so, on every backend and topology:

- :class:`Watermark`, in the driver before any executor sees a row: it finds the late rows
  (an :class:`~streamjoin.validation.InputError` naming the first with ``on_late="error"``, else
  left out and listed), and remembers the ``ts`` of the rows it keeps, from which the run maps
  the join's row numbers back to the input's (:meth:`Watermark.row_numbers`);
- :class:`ReorderBuffer`, in the emitter: it holds rows until the watermark passes them and
  releases them in stable ``ts`` order, each with the time it arrived, so latency counts the
  wait. A row at or below the watermark can be released: every row still to come that is not
  late has a ``ts`` at or above it, and comes later in arrival order.

A quiet input holds rows back until more input moves the watermark, or until the end of input
releases them all (as a watermark does in Flink or Spark; ``max_delay`` bounds only the wait
in an open batch).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from streamjoin.batch import columns_at
from streamjoin.indexes.base import copy_cols
from streamjoin.validation import Columns, InputError

_INT64_MIN = int(np.iinfo(np.int64).min)


def take(cols: Columns, rows: np.ndarray) -> Columns:
    """The rows ``rows`` (indices or a mask) of ``cols``, in that order."""
    return Columns(cols.stream[rows], cols.ts[rows], columns_at(cols.attrs, rows))


@njit(cache=True, nogil=True)
def order_and_max(ts: np.ndarray) -> tuple[bool, int]:
    """Whether ``ts`` (int64, not empty) never decreases, and its largest value: one pass."""
    top = ts[0]
    in_order = True
    for i in range(1, ts.shape[0]):
        if ts[i] < ts[i - 1]:
            in_order = False
        if ts[i] > top:
            top = ts[i]
    return in_order, top


def behind(ahead: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """``ahead - ts`` where ``ahead > ts``, exactly (uint64: the difference of two int64 can
    exceed int64), else 0."""
    gap = ahead.view(np.uint64) - ts.view(np.uint64)  # modulo 2**64: exact when ahead > ts
    return np.where(ahead > ts, gap, np.uint64(0))


class Watermark:
    """Late rows found, chunk by chunk, in arrival order (module docstring).

    Parameters
    ----------
    lateness : int
        ``L``, in ``ts`` units (>= 0).
    on_late : {"error", "drop"}
    keep_order : bool
        Keep the ``ts`` of every row that is not late (8 bytes a row), for
        :meth:`row_numbers`; a run that only counts its pairs needs none.
    """

    def __init__(self, lateness: int, on_late: str = "error", *, keep_order: bool = True) -> None:
        self.lateness = int(lateness)
        self.on_late = on_late
        self.keep_order = keep_order
        self.max_ts = _INT64_MIN  #: the largest ``ts`` so far (the int64 minimum before any)
        self.rows = 0  #: rows seen, late ones included
        self._kept_ts: list[np.ndarray] = []  # what row_numbers() needs (if keep_order)
        self._late: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.n_late = 0  #: rows left out as late

    def late(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each row of a chunk that comes next: whether it is late, and the largest ``ts``
        before it (int64; the int64 minimum before the first row)."""
        before = np.empty(len(ts), dtype=np.int64)
        if len(ts):
            before[0] = self.max_ts
            np.maximum.accumulate(np.maximum(ts[:-1], self.max_ts), out=before[1:])
        bound = np.uint64(min(self.lateness, 2**64 - 1))  # no gap of two int64 exceeds it
        return behind(before, ts) > bound, before

    def split(self, cols: Columns) -> Columns:
        """The rows of the next chunk that are not late; the late ones raise
        (``on_late="error"``: nothing of this chunk is kept) or are recorded."""
        if not len(cols):
            return cols
        in_order, top = order_and_max(cols.ts)
        if in_order and int(cols.ts[0]) >= self.max_ts - self.lateness:  # none can be late
            if self.keep_order:
                self._kept_ts.append(cols.ts)
            self.rows += len(cols)
            self.max_ts = max(self.max_ts, top)
            return cols
        late, before = self.late(cols.ts)
        first = self.rows
        if late.any():
            if self.on_late == "error":
                i = int(np.argmax(late))
                raise InputError(
                    f"row {first + i} is late: its ts {int(cols.ts[i])} lies below the "
                    f"watermark {int(before[i]) - self.lateness} (the largest ts before it, "
                    f"{int(before[i])}, minus lateness {self.lateness}); raise lateness= or "
                    "pass on_late='drop' to leave late rows out and list them"
                )
            rows = np.flatnonzero(late)
            self._late.append((first + rows, cols.stream[rows] & 1, cols.ts[rows]))
            self.n_late += len(rows)
            cols = take(cols, ~late)
        if self.keep_order:
            self._kept_ts.append(cols.ts)
        self.rows = first + len(late)
        if len(cols):
            self.max_ts = max(self.max_ts, int(cols.ts.max()))
        return cols

    def row_numbers(self) -> np.ndarray:
        """The input row number of each row in the order the join saw it (the kept rows
        stably sorted by ``ts``): int64, indexed by the join's row numbers."""
        if not self.keep_order:
            raise RuntimeError("this Watermark was made with keep_order=False")
        kept = np.ones(self.rows, dtype=bool)
        for rows, _, _ in self._late:
            kept[rows] = False
        rows = np.flatnonzero(kept)
        ts = np.concatenate(self._kept_ts) if self._kept_ts else np.empty(0, dtype=np.int64)
        return rows[np.argsort(ts, kind="stable")]

    def late_rows(self) -> pa.Table:
        """The rows left out as late: their input row numbers, ``stream`` and ``ts``."""
        parts = self._late or [(np.empty(0, np.int64), np.empty(0, np.int8), np.empty(0, np.int64))]
        return pa.table(
            {
                "row": np.concatenate([p[0] for p in parts]).astype(np.int64),
                "stream": np.concatenate([p[1] for p in parts]).astype(np.int8),
                "ts": np.concatenate([p[2] for p in parts]).astype(np.int64),
            }
        )


#: Buckets a reorder buffer's ring spans the lateness with, at least: a bucket holds ``ts``
#: of one range ``(lateness + 1) // BUCKETS`` wide rounded down to a power of two (at least
#: 1), so a release sorts at most about ``2 * held / BUCKETS`` rows at a time.
BUCKETS = 32


class ReorderBuffer:
    """Rows held until the watermark passes them, released in stable ``ts`` order with the
    time each arrived (module docstring). The rows it is given are never late (the
    :class:`Watermark` in the driver took those out), so the largest ``ts`` it has seen is the
    input's.

    A calendar queue: held rows' columns sit in a pool, in arrival order, and each row's place
    and ``ts`` are appended, in arrival order, to the bucket of its ``ts`` in a ring of buckets
    (two 2-d arrays, a row per bucket, widened when a bucket outgrows them) that spans the
    lateness (:data:`BUCKETS` of them, and a few more). Every row held lies above the
    watermark and at most ``lateness`` below the largest ``ts``, so the ring holds them all. A
    release walks the buckets the watermark has passed, sorts each one's rows by ``ts`` (a
    stable sort of a bucket's rows keeps arrival order among equal ``ts``), splits the
    watermark's own bucket, merges in the chunk's rows that are already behind the watermark,
    and appends the released rows' places to a queue of rows *ready* to go. One numba call a
    chunk. The ready rows leave in multiples of ``whole`` rows (:meth:`push`; the emitter's
    batch size), gathered from the pool in one copy: a batch is then never glued together
    from the pieces that chunks released. A row is copied into the pool, out of it, and in a
    compaction of the pool now and then. A chunk in order that the watermark passes whole,
    with nothing held or ready (``lateness=0`` on input in order), goes on as it is.

    Input in ``ts`` order skips the ring: while every row held came in ``ts`` order, the held
    rows are the pool's ``[start, used)`` in that order, a queue, and a release is its prefix
    up to the watermark (a binary search). The first row out of order puts the queue's rows
    into their buckets, in arrival order, and the ring takes over until it is empty again. So a
    lateness that in-order input never needs costs a copy in and out.
    """

    def __init__(self, lateness: int) -> None:
        # no two int64 lie further apart: a larger bound releases nothing sooner or later
        self.lateness = min(int(lateness), 2**64 - 1)
        self.max_ts = _INT64_MIN
        # ts units a bucket spans, and buckets in the ring: powers of two, so that a row's
        # bucket and its slot in the ring are a shift and a mask (a division a row cost the
        # push most of its time)
        self.shift = max(0, ((self.lateness + 1) // BUCKETS).bit_length() - 1)
        self.width = 1 << self.shift
        self.ring = 1 << ((self.lateness >> self.shift) + 3 - 1).bit_length()
        self.base = _INT64_MIN // self.width  # absolute bucket of the ring's first
        # each bucket's rows, in arrival order: their pool places and their ts side by side
        # (a release reads a bucket as two runs, not a list through the pool: a list's hops
        # were dependent misses once the join had the cache)
        self.places = np.empty((self.ring, 64), dtype=np.int64)
        self.keys = np.empty((self.ring, 64), dtype=np.int64)
        self.size = np.zeros(self.ring, dtype=np.int64)  # rows in each bucket
        self.held = 0
        #: the places of the rows released and not taken yet, in release order
        self._ready = np.empty(4096, dtype=np.int64)
        self.n_ready = 0
        self._ready_run = True  # the ready places are consecutive (the queue released them)
        self._pool: Columns | None = None  # held and ready rows' columns (and leftovers)
        self._arrived = np.empty(0, dtype=np.int64)
        self._used = 0
        #: the rows held came in ts order: they are the pool's [_start, _used), the ring empty
        self._queue = True
        self._start = 0
        self.copied = 0  #: rows copied by sorts and gathers (the simulator's charge)

    def __len__(self) -> int:
        """Rows held for the watermark (not those released and not taken yet)."""
        return self.held

    def push(
        self, cols: Columns, arrived_ns: int, whole: int = 1
    ) -> tuple[Columns, np.ndarray] | None:
        """Take a chunk that arrived at ``arrived_ns``; return the rows ready to go, in stable
        ``ts`` order, as many as a multiple of ``whole`` allows (the rest wait for the next
        push, :meth:`take` or :meth:`flush`), and the time each arrived; None when none go."""
        n = len(cols)
        if not n:
            return None
        in_order, top = order_and_max(cols.ts)
        self.max_ts = max(self.max_ts, top)
        bound = self.max_ts - self.lateness
        if (
            not self.held
            and not self.n_ready
            and in_order
            and bound >= int(cols.ts[-1])
            and n % whole == 0
        ):  # all go, as they are
            self.base = max(self.base, bound // self.width)
            return cols, np.full(n, arrived_ns, dtype=np.int64)
        can = bound >= _INT64_MIN  # else no row is behind the watermark yet
        watermark = bound if can else _INT64_MIN
        if self._queue:
            pool = self._pool  # (None until the first rows are held)
            if in_order and (
                pool is None or not self.held or pool.ts[self._used - 1] <= cols.ts[0]
            ):
                self._push_queue(cols, arrived_ns, watermark, can)
                return self.take(whole)
            self._to_ring()
        first = self._append(cols)  # (the kernel writes the rest of each row)
        pool = self._pool
        assert pool is not None  # (_append made it)
        (
            self._ready,
            self.n_ready,
            self.base,
            n_drained,
            n_now,
            self.places,
            self.keys,
            out,
        ) = reorder_push(
            pool.stream,
            pool.ts,
            pool.attrs,
            self._arrived,
            cols.stream,
            cols.ts,
            arrived_ns,
            first,
            n,
            self.places,
            self.keys,
            self.size,
            self._ready,
            self.n_ready,
            self.base,
            self.shift,
            watermark,
            can,
            whole,
        )
        self.held += n - n_drained - n_now
        if n_drained or n_now:
            self._ready_run = False
        if not self.held:  # the ring is empty: in-order input may use the queue again
            self._queue, self._start = True, self._used
        stream, ts, attrs, arrived = out
        if not len(ts):
            return None
        self.copied += len(ts)
        if not self.n_ready:
            self._ready_run = True
        return Columns(stream, ts, attrs), arrived

    def take(self, whole: int = 1) -> tuple[Columns, np.ndarray] | None:
        """The rows ready to go, as many as a multiple of ``whole`` allows, and the time each
        arrived; None when none go."""
        m = self.n_ready - self.n_ready % whole
        if not m:
            return None
        pool = self._pool
        assert pool is not None
        self.copied += m
        if self._ready_run:  # slices: a copy each
            a, b = int(self._ready[0]), int(self._ready[0]) + m
            cols = Columns(pool.stream[a:b].copy(), pool.ts[a:b].copy(), pool.attrs[:, a:b].copy())
            arrived = self._arrived[a:b].copy()
        else:
            stream, ts, attrs, arrived = gather_rows(
                self._ready[:m], pool.stream, pool.ts, pool.attrs, self._arrived
            )
            cols = Columns(stream, ts, attrs)
        rest = self.n_ready - m
        if rest:
            self._ready[:rest] = self._ready[m : self.n_ready].copy()
        else:
            self._ready_run = True
        self.n_ready = rest
        return cols, arrived

    def oldest_ready_ns(self) -> int | None:
        """When the ready row that has waited longest arrived; None if none is ready."""
        if not self.n_ready:
            return None
        return int(self._arrived[self._ready[: self.n_ready]].min())

    def _push_queue(self, cols: Columns, arrived_ns: int, watermark: int, can: bool) -> None:
        """A chunk in ``ts`` order after held rows in ``ts`` order: queued; the queue's prefix
        at or below the watermark made ready."""
        self._append(cols, arrived_ns)
        pool = self._pool
        assert pool is not None
        start, end = self._start, self._used
        if can:
            self.base = max(self.base, watermark // self.width)
            stop = start + int(np.searchsorted(pool.ts[start:end], watermark, side="right"))
        else:
            stop = start
        self._start, self.held = stop, end - stop
        self._ready_range(start, stop)

    def _ready_range(self, start: int, stop: int) -> None:
        """The pool's rows ``[start, stop)`` ready to go, after those ready now."""
        if stop > start:
            run = self._ready_run and (
                not self.n_ready or self._ready[self.n_ready - 1] + 1 == start
            )
            self._make_ready(np.arange(start, stop, dtype=np.int64))
            self._ready_run = run

    def _make_ready(self, places: np.ndarray) -> None:
        """The rows at ``places`` ready to go, after those ready now."""
        k = len(places)
        if self.n_ready + k > len(self._ready):
            grown = np.empty(2 * (self.n_ready + k), dtype=np.int64)
            grown[: self.n_ready] = self._ready[: self.n_ready]
            self._ready = grown
        self._ready[self.n_ready : self.n_ready + k] = places
        self.n_ready += k
        self._ready_run = False  # (unless _ready_range says otherwise)

    def _to_ring(self) -> None:
        """The queue's rows into their buckets (in arrival order: ``ts`` order), for a chunk
        out of order."""
        self._queue = False
        if self.held:
            assert self._pool is not None
            pool = self._pool
            *_, self.places, self.keys, _ = reorder_push(
                pool.stream,
                pool.ts,
                pool.attrs,
                self._arrived,
                pool.stream[:0],
                pool.ts[:0],
                0,
                self._start,
                self.held,
                self.places,
                self.keys,
                self.size,
                self._ready,
                self.n_ready,
                self.base,
                self.shift,
                _INT64_MIN,
                False,
                self.n_ready + 1,  # (nothing gathered)
            )

    def flush(self) -> tuple[Columns, np.ndarray] | None:
        """Every row still ready or held (the end of input), in stable ``ts`` order; None if
        none."""
        if self.held and self._pool is not None:
            if self._queue:
                start, end = self._start, self._used
                self._start = end
                self._ready_range(start, end)
            else:
                self._make_ready(
                    reorder_flush(self.places, self.keys, self.size, self.base, self.shift)
                )
                self._queue, self._start = True, self._used
            self.held = 0
        return self.take()

    def _append(self, cols: Columns, arrived_ns: int | None = None) -> int:
        """Room for a chunk's rows in the pool (compacting or growing it first if full) and
        their attributes written, their other columns too with ``arrived_ns`` (else the ring's
        kernel writes them); the place of its first row."""
        n = len(cols)
        if self._pool is None or self._used + n > len(self._pool):
            self._compact(n, cols)
        pool = self._pool
        assert pool is not None
        first, self._used = self._used, self._used + n
        self.copied += n
        # (numpy writes the attributes: a chunk's come as views of either layout, and each
        # would be a specialisation of the kernel of its own, compiled on a first run)
        pool.attrs[:, first : first + n] = cols.attrs
        if arrived_ns is not None:
            pool.stream[first : first + n] = cols.stream
            pool.ts[first : first + n] = cols.ts
            self._arrived[first : first + n] = arrived_ns
        return first

    def _compact(self, n: int, like: Columns) -> None:
        """Room for ``n`` more rows: the ready rows, then the held rows, moved to the pool's
        front (held ones bucket by bucket) and renumbered, in place while the pool has room for
        twice them and ``n``, else into a new pool four times that (a compaction moves every
        row ready or held, so room for many chunks makes compactions rare when chunks are far
        smaller than the rows held, and reusing the pool spares fresh arrays their page
        faults)."""
        r = self.n_ready
        need = r + self.held + n
        pool = self._pool
        if pool is None or len(pool) < 2 * need:
            cap = max(4 * need, 4096)
            pool = Columns(
                np.empty(cap, dtype=like.stream.dtype),
                np.empty(cap, dtype=np.int64),
                np.empty((like.attrs.shape[0], cap), dtype=like.attrs.dtype),
            )
            arrived = np.empty(cap, dtype=np.int64)
        else:
            arrived = self._arrived
        if r or self.held:
            old = self._pool
            assert old is not None
            live = self._ready[:r].copy()
            if self._queue:  # the queue's rows follow the ready ones
                held = np.arange(self._start, self._start + self.held, dtype=np.int64)
            else:  # old places; the buckets' now r, r + 1, … in bucket order
                held = renumber(self.places, self.size, r)
            live = np.concatenate([live, held])
            m = len(live)
            # (the right-hand sides are gathered first: in place is safe)
            pool.stream[:m] = old.stream[live]
            pool.ts[:m] = old.ts[live]
            pool.attrs[:, :m] = np.take(old.attrs, live, axis=1)
            arrived[:m] = self._arrived[live]
            self._ready[:r] = np.arange(r, dtype=np.int64)
            self._ready_run = True
            self.copied += m
        self._pool, self._arrived, self._used = pool, arrived, r + self.held
        self._start = r


@njit(cache=True, nogil=True)
def gather_rows(at, stream, ts, attrs, arrived):
    """The rows at places ``at`` of the pool's columns, in one pass (four numpy gathers cost
    more than the rows at a chunk of a batch)."""
    m, k = at.shape[0], attrs.shape[0]
    s_out = np.empty(m, dtype=stream.dtype)
    t_out = np.empty(m, dtype=np.int64)
    a_out = np.empty((k, m), dtype=attrs.dtype)
    r_out = np.empty(m, dtype=np.int64)
    for j in range(m):
        p = at[j]
        s_out[j] = stream[p]
        t_out[j] = ts[p]
        r_out[j] = arrived[p]
    for a in range(k):
        row = attrs[a]
        for j in range(m):
            a_out[a, j] = row[at[j]]
    return s_out, t_out, a_out, r_out


@njit(cache=True, nogil=True)
def _stable_order(keys, low, width):
    """The stable order of ``keys``, all in ``[low, low + width)``: a counting sort when the
    range is small beside their number, else a merge sort."""
    m = keys.shape[0]
    if width > 4 * m + 64:
        return np.argsort(keys, kind="mergesort")
    starts = np.zeros(width + 1, dtype=np.int64)
    for i in range(m):
        starts[keys[i] - low + 1] += 1
    for v in range(width):
        starts[v + 1] += starts[v]
    order = np.empty(m, dtype=np.int64)
    for i in range(m):
        v = keys[i] - low
        order[starts[v]] = i
        starts[v] += 1
    return order


@njit(cache=True, nogil=True)
def _drain(places, keys, size, k, shift, watermark, whole, out, n_out):
    """Bucket ``k``'s rows (absolute bucket; ``k % ring`` in the ring) at or below
    ``watermark`` (all of them if ``whole``) appended to ``out`` sorted by ``ts`` (stable: a
    bucket is in arrival order); the rest stay, at the bucket's front in ``ts`` order (equal
    ``ts`` in arrival order, before any row that comes later). Returns the new ``n_out``."""
    slot = k & (places.shape[0] - 1)
    m = size[slot]
    if m == 0:
        return n_out
    order = _stable_order(keys[slot, :m], k << shift, 1 << shift)
    kept = np.empty(m, dtype=np.int64)  # (a sort's order reads the places it overwrites)
    kept_keys = np.empty(m, dtype=np.int64)
    n_kept = 0
    for i in range(m):
        j = order[i]
        if whole or keys[slot, j] <= watermark:
            out[n_out] = places[slot, j]
            n_out += 1
        else:
            kept[n_kept] = places[slot, j]
            kept_keys[n_kept] = keys[slot, j]
            n_kept += 1
    for i in range(n_kept):
        places[slot, i] = kept[i]
        keys[slot, i] = kept_keys[i]
    size[slot] = n_kept
    return n_out


@njit(cache=True, nogil=True)
def _grown(a, width):
    """``a`` with rows ``width`` wide, its entries kept."""
    b = np.empty((a.shape[0], width), dtype=a.dtype)
    copy_cols(b, 0, a, 0, a.shape[1])
    return b


@njit(cache=True, nogil=True)
def _link(ts, places, keys, size, first, n, shift, watermark, can, now):
    """Rows ``first`` to ``first + n`` appended to their buckets (which have room), those
    behind the watermark (if ``can``) to ``now`` instead; returns how many went there."""
    mask = places.shape[0] - 1
    n_now = 0
    for i in range(first, first + n):
        if can and ts[i] <= watermark:
            now[n_now] = i
            n_now += 1
        else:
            slot = (ts[i] >> shift) & mask
            at = size[slot]
            places[slot, at] = i
            keys[slot, at] = ts[i]
            size[slot] = at + 1
    return n_now


@njit(cache=True, nogil=True)
def reorder_push(
    stream,
    ts,
    attrs,
    arrived,
    c_stream,
    c_ts,
    arrived_ns,
    first,
    n,
    places,
    keys,
    size,
    ready,
    n_ready,
    base,
    shift,
    watermark,
    can,
    whole,
):
    """A chunk's rows written to the pool (its columns ``stream``, ``ts`` and ``arrived``; the
    caller writes ``attrs``) at places ``first`` to ``first + n`` (none written when the
    chunk's arrays are empty: rows already there) and put into the ring, after the buckets
    the watermark passed were drained; the released places appended to ``ready`` (after its
    ``n_ready``) in stable ``ts`` order (the drained rows first at equal ``ts``: they came
    earlier); then the ready rows, as many as a multiple of ``whole`` allows, gathered
    (:func:`gather_rows`) and taken off ``ready``. One call a chunk. Returns ``ready`` (grown
    if it lacked room) and its new count, the ring's new base bucket, how many of the released
    rows were held before and came with the chunk, the buckets' arrays (grown if a bucket
    outgrew them), and the rows gathered."""
    for i in range(c_ts.shape[0]):
        stream[first + i] = c_stream[i]
        ts[first + i] = c_ts[i]
        arrived[first + i] = arrived_ns
    ring = places.shape[0]
    last = watermark >> shift  # the watermark's own bucket (if ``can``)
    stop = min(last, base + ring - 1)  # rows held before this chunk: the buckets it reached
    count = 0
    if can:
        for k in range(base, stop + 1):
            count += size[k & (ring - 1)]
    # room first (widened arrays: one the loops below could replace would cost them reference
    # counting at every row)
    if n_ready + count + n > ready.shape[0]:
        grown = np.empty(2 * (n_ready + count + n), dtype=np.int64)
        grown[:n_ready] = ready[:n_ready]
        ready = grown
    most = 0
    for slot in range(ring):
        most = max(most, size[slot])
    if most + n > places.shape[1]:
        places = _grown(places, max(most + n, 2 * places.shape[1]))
        keys = _grown(keys, places.shape[1])
    n_out = n_ready
    if can:
        for k in range(base, stop + 1):
            n_out = _drain(places, keys, size, k, shift, watermark, k < last, ready, n_out)
        base = max(base, last)
    n_drained = n_out - n_ready
    # this chunk: rows behind the watermark go now (stable by ts), the rest into their buckets
    now = np.empty(n, dtype=np.int64)
    n_now = _link(ts, places, keys, size, first, n, shift, watermark, can, now)
    if n_now:  # merged from the back, in place: drained (older) first at equal ts
        order = np.argsort(ts[now[:n_now]], kind="mergesort")
        i, j = n_out - 1, n_now - 1
        for k in range(n_out + n_now - 1, n_ready - 1, -1):
            if j < 0:
                break  # the drained rows left are in place
            if i >= n_ready and ts[ready[i]] > ts[now[order[j]]]:
                ready[k] = ready[i]
                i -= 1
            else:
                ready[k] = now[order[j]]
                j -= 1
    n_ready = n_out + n_now
    m = n_ready - n_ready % whole
    out = gather_rows(ready[:m], stream, ts, attrs, arrived)
    for k in range(n_ready - m):  # (forward: the rest moves down)
        ready[k] = ready[m + k]
    return ready, n_ready - m, base, n_drained, n_now, places, keys, out


@njit(cache=True, nogil=True)
def reorder_flush(places, keys, size, base, shift):
    """Every held row's place, in stable ``ts`` order (the ring emptied)."""
    out = np.empty(size.sum(), dtype=np.int64)
    n_out = 0
    for k in range(base, base + places.shape[0]):
        n_out = _drain(places, keys, size, k, shift, 0, True, out, n_out)
    return out[:n_out]


@njit(cache=True, nogil=True)
def renumber(places, size, first):
    """The held rows' old places, bucket by bucket in bucket order, and each bucket's entries
    renumbered to their new places (``first``, ``first + 1``, … in that order): a compaction
    of the pool."""
    live = np.empty(size.sum(), dtype=np.int64)
    n = 0
    for slot in range(places.shape[0]):
        for j in range(size[slot]):
            live[n] = places[slot, j]
            places[slot, j] = first + n
            n += 1
    return live
