"""Event time's parts against their definitions (docs/design.md §1): the watermark's late
rows, the reorder buffer's release order, and the row numbers the result maps back to."""

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.event_time import ReorderBuffer, Watermark
from streamjoin.validation import Columns, InputError

INT64_MIN, INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def _cols(ts) -> Columns:
    ts = np.asarray(ts, dtype=np.int64)
    n = len(ts)
    return Columns(np.arange(n, dtype=np.int8) % 2, ts, np.arange(n, dtype=float)[None, :])


def _late_by_definition(ts, lateness) -> list[bool]:
    """Row i is late iff ts[i] < max(ts[:i]) - lateness, in Python ints."""
    out, top = [], None
    for t in ts:
        out.append(top is not None and int(t) < top - lateness)
        top = int(t) if top is None else max(top, int(t))
    return out


def _chunked(ts, cuts):
    bounds = sorted({0, len(ts), *[c % (len(ts) + 1) for c in cuts]})
    return [ts[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


ts_lists = st.lists(
    st.one_of(
        st.integers(-50, 50),
        st.sampled_from([INT64_MIN, INT64_MIN + 1, INT64_MAX - 1, INT64_MAX]),
    ),
    max_size=60,
)


@settings(max_examples=examples(300), deadline=None)
@given(
    ts=ts_lists,
    lateness=st.sampled_from([0, 1, 7, 2**63, 2**64]),
    cuts=st.lists(st.integers(0, 60)),
)
def test_watermark_drops_exactly_the_late_rows_and_maps_rows_back(ts, lateness, cuts):
    ts = np.array(ts, dtype=np.int64)
    mark = Watermark(lateness, "drop")
    kept = [mark.split(_cols(part)) for part in _chunked(ts, cuts)]
    late = _late_by_definition(ts, min(lateness, 2**64 - 1))
    assert mark.late_rows().column("row").to_pylist() == [i for i, x in enumerate(late) if x]
    assert mark.n_late == sum(late)
    assert sum(len(k) for k in kept) == len(ts) - sum(late)
    on_time = [i for i, x in enumerate(late) if not x]
    expected = sorted(on_time, key=lambda i: int(ts[i]))  # stable: ties in arrival order
    assert mark.row_numbers().tolist() == expected


def test_a_late_row_with_on_late_error_names_the_row_and_the_watermark():
    mark = Watermark(5, "error")
    mark.split(_cols([10, 20]))
    with pytest.raises(InputError, match=r"row 3 is late: its ts 14 lies below the watermark 15"):
        mark.split(_cols([16, 14]))


@settings(max_examples=examples(300), deadline=None)
@given(
    ts=ts_lists,
    lateness=st.sampled_from([0, 1, 7, 40, 2**62, 10**20]),
    cuts=st.lists(st.integers(0, 60)),
)
def test_reorder_buffer_releases_in_stable_ts_order_only_behind_the_watermark(ts, lateness, cuts):
    ts = np.array(ts, dtype=np.int64)
    mark = Watermark(lateness, "drop")
    buffer = ReorderBuffer(lateness)
    released, arrivals = [], []
    for k, part in enumerate(_chunked(ts, cuts)):
        cols = mark.split(_cols(part))
        out = buffer.push(cols, arrived_ns=k)
        if out is not None:
            rows, arrived = out
            # nothing released that a later on-time row could precede
            assert rows.ts.max() <= buffer.max_ts - buffer.lateness  # (clamped to 2**64 - 1)
            released.append(rows.ts)
            arrivals.append(arrived)
    rest = buffer.flush()
    if rest is not None:
        released.append(rest[0].ts)
        arrivals.append(rest[1])
    assert len(buffer) == 0
    got = np.concatenate(released) if released else np.empty(0, np.int64)
    on_time = ts[mark.row_numbers()]  # the on-time rows stably sorted by ts
    assert got.tolist() == on_time.tolist()
    # each row keeps the chunk it arrived in: as many of each arrival as rows it brought
    arrived = np.concatenate(arrivals) if arrivals else np.empty(0, np.int64)
    assert np.all(got[1:] >= got[:-1])
    assert len(arrived) == len(got)


def _release_all(ts, lateness, cuts, whole=1):
    """Push ``ts`` in chunks (each row's attribute its row number, each chunk's arrival its
    number) through a watermark and a reorder buffer that releases rows ``whole`` at a time;
    the released rows' numbers and arrivals, and the watermark."""
    mark = Watermark(lateness, "drop")
    buffer = ReorderBuffer(lateness)
    rows, arrivals, at = [], [], 0
    for k, part in enumerate(_chunked(ts, cuts)):
        cols = _cols(part)
        cols = Columns(cols.stream, cols.ts, cols.attrs + at)
        at += len(part)
        out = buffer.push(mark.split(cols), arrived_ns=k, whole=whole)
        if out is not None:
            assert out[0].ts.max() <= buffer.max_ts - buffer.lateness
            assert len(out[0]) % whole == 0 and buffer.n_ready < whole
            rows.append(out[0].attrs[0])
            arrivals.append(out[1])
    rest = buffer.flush()
    if rest is not None:
        rows.append(rest[0].attrs[0])
        arrivals.append(rest[1])
    assert len(buffer) == 0
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.empty(0, dt)  # noqa: E731
    return cat(rows, np.int64), cat(arrivals, np.int64), mark


@st.composite
def mostly_in_order(draw):
    """``ts`` in order with a few rows displaced (a straggler, a burst out of order), ties."""
    n = draw(st.integers(0, 80))
    ts = np.cumsum(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))).astype(np.int64)
    for _ in range(draw(st.integers(0, 4))):
        if n:
            i = draw(st.integers(0, n - 1))
            ts[i] -= draw(st.integers(1, 12))
    return ts


@settings(max_examples=examples(300), deadline=None)
@given(
    ts=mostly_in_order(),
    lateness=st.sampled_from([0, 1, 5, 20, 2**62]),
    cuts=st.lists(st.integers(0, 80)),
    whole=st.sampled_from([1, 1, 3, 16]),
)
def test_reorder_buffer_releases_each_row_once_in_stable_order_with_its_arrival(
    ts, lateness, cuts, whole
):
    """Input in order but for a few rows, so the buffer goes from its queue (rows held in
    order) to its ring of buckets and back: exactly the on-time rows, stably by ``ts`` (ties in
    arrival order, checked by row number), each with the arrival of its chunk; released
    ``whole`` rows at a time (an emitter's batch) but at the end, so that rows wait ready
    while the pool is compacted and the buffer changes between queue and ring."""
    rows, arrived, mark = _release_all(ts, lateness, cuts, whole)
    assert rows.tolist() == mark.row_numbers().tolist()
    chunk_of = np.concatenate(
        [np.full(len(p), k) for k, p in enumerate(_chunked(ts, cuts))] or [np.empty(0, int)]
    )
    assert arrived.tolist() == chunk_of[rows].tolist()


def test_reorder_buffer_over_many_chunks_merges_runs_and_keeps_the_order():
    """Thousands of small chunks, each row up to 300 behind: the runs merge level by level
    (each row copied a few times, not once per chunk) and the release order stays exact."""
    rng = np.random.default_rng(3)
    ts = np.sort(rng.integers(0, 20_000, 20_000))
    arrival = np.argsort(ts + rng.integers(0, 300, len(ts)), kind="stable")
    ts = ts[arrival]
    buffer = ReorderBuffer(300)
    out, chunk = [], 7
    for a in range(0, len(ts), chunk):
        released = buffer.push(_cols(ts[a : a + chunk]), arrived_ns=a)
        if released is not None:
            out.append(released[0].ts)
    rest = buffer.flush()
    out.append(rest[0].ts if rest is not None else np.empty(0, np.int64))
    got = np.concatenate(out)
    assert got.tolist() == np.sort(ts, kind="stable").tolist()
    assert buffer.copied < 5 * len(ts)


def test_reorder_buffer_keeps_a_bucket_that_outgrows_its_room_in_order():
    """Hundreds of rows in one bucket, a row at a time, then a burst, then a row that moves
    the watermark past them: the bucket's arrays widen while rows sit in them, and the
    release is still every row once, stably by ``ts``."""
    rng = np.random.default_rng(5)
    ts = np.concatenate([rng.integers(0, 8, 700), rng.integers(0, 8, 3000), [10_000_000]])
    buffer = ReorderBuffer(1_000_000)
    out, at = [], 0
    parts = [ts[i : i + 1] for i in range(700)] + [ts[700:3700], ts[3700:]]
    for k, part in enumerate(parts):
        cols = _cols(part)  # each row's attribute its row number
        released = buffer.push(Columns(cols.stream, cols.ts, cols.attrs + at), arrived_ns=k)
        at += len(part)
        if released is not None:
            out.append(released[0].attrs[0])
    assert buffer.places.shape[1] >= 3700
    rest = buffer.flush()
    out.append(rest[0].attrs[0])
    assert np.concatenate(out).tolist() == np.argsort(ts, kind="stable").tolist()


@pytest.mark.parametrize("whole", [1, 1000, 1024])
@pytest.mark.parametrize("lateness", [300, 5_000])
def test_reorder_buffer_in_whole_batches_keeps_ready_rows_through_compactions(whole, lateness):
    """Tens of thousands of rows in chunks of random size, some in order, most up to
    ``lateness`` late, released ``whole`` at a time and now and then all that is ready (an
    emitter's tick): rows wait ready while the pool is compacted many times, and what comes
    out is every row once, stably by ``ts``, each with its chunk's arrival; the oldest ready
    arrival is the one the next release shows."""
    rng = np.random.default_rng(lateness + whole)
    n = 150_000
    ts = np.sort(rng.integers(0, 75_000, n))
    late = rng.random(n) < 0.7  # the rest in order: the queue and the ring both run
    arrival = np.argsort(ts + np.where(late, rng.integers(0, lateness, n), 0), kind="stable")
    ts = ts[arrival]
    buffer = ReorderBuffer(lateness)
    rows, arrivals, at, k, compactions = [], [], 0, 0, 0
    chunk_of = np.empty(n, dtype=np.int64)
    compact = buffer._compact

    def counted(*args):
        nonlocal compactions
        compactions += buffer.n_ready > 0
        compact(*args)

    buffer._compact = counted
    while at < n:
        m = int(rng.integers(1, 3000))
        part = ts[at : at + m]
        chunk_of[at : at + m] = k
        cols = _cols(part)
        out = buffer.push(Columns(cols.stream, cols.ts, cols.attrs + at), arrived_ns=k, whole=whole)
        if out is not None:
            assert len(out[0]) % whole == 0
        if rng.random() < 0.1:  # a tick: whatever is ready goes
            oldest = buffer.oldest_ready_ns()
            rest = buffer.take()
            assert (rest is None) == (oldest is None)
            if rest is not None:
                assert int(rest[1].min()) == oldest
                out = rest if out is None else tuple(_concat_release(out, rest))
        if out is not None:
            rows.append(out[0].attrs[0])
            arrivals.append(out[1])
        at, k = at + len(part), k + 1
    rest = buffer.flush()
    if rest is not None:
        rows.append(rest[0].attrs[0])
        arrivals.append(rest[1])
    got = np.concatenate(rows).astype(np.int64)
    assert got.tolist() == np.argsort(ts, kind="stable").tolist()
    assert np.array_equal(np.concatenate(arrivals), chunk_of[got])
    assert compactions > 1 or whole == 1  # rows were ready while the pool was compacted
    assert buffer.copied < 6 * n


def _concat_release(a, b):
    return (
        Columns(
            np.concatenate([a[0].stream, b[0].stream]),
            np.concatenate([a[0].ts, b[0].ts]),
            np.concatenate([a[0].attrs, b[0].attrs], axis=1),
        ),
        np.concatenate([a[1], b[1]]),
    )
