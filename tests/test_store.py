"""The join core's tuple store: refs stay addressable through appends, expiry, in-place
compaction and growth, checked against a plain list of the tuples appended."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.actors.store import IDX, INGEST_NS, LO_IDX, ROW_FIELDS, SEQ, TupleStore
from streamjoin.batch import Batch


def make_batch(start: int, n: int, rng: np.random.Generator) -> Batch:
    """``n`` tuples of one stream with idx ``start, start + 1, …`` and random other fields."""
    idx = np.arange(start, start + n, dtype=np.int64)
    return Batch(
        seq=2 * idx + 1,
        stream=np.ones(n, dtype=np.int8),
        idx=idx,
        ts=rng.integers(0, 1000, n),
        ingest_ns=rng.integers(0, 10**9, n),
        lo_idx=rng.integers(0, 50, n),
        attrs=rng.normal(size=(2, n)),
    )


def assert_holds(store: TupleStore, appended: list[Batch], first_idx: int) -> None:
    """Every live ref's row holds the tuple appended under it; nothing else is live."""
    assert store.rows.ctypes.data % 64 == 0, "rows start on a cache line"
    want = {name: np.concatenate([getattr(b, name) for b in appended]) for name in ROW_FIELDS}
    ts = np.concatenate([b.ts for b in appended])
    attrs = np.concatenate([b.attrs for b in appended], axis=1)
    live = np.arange(first_idx, len(want["seq"]))
    assert len(store) == len(live)
    rows = np.arange(store.head, store.tail)
    assert np.array_equal(store.rows[rows, IDX], want["idx"][live])
    assert np.array_equal(store.rows[rows, SEQ], want["seq"][live])
    assert np.array_equal(store.rows[rows, LO_IDX], want["lo_idx"][live])
    assert np.array_equal(store.rows[rows, INGEST_NS], want["ingest_ns"][live])
    assert np.array_equal(store.ts[rows], ts[live])
    assert np.array_equal(store.attrs_of(store.head, store.tail), attrs[:, live], equal_nan=True)


@settings(max_examples=examples(60), deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 60)), max_size=40))
def test_refs_survive_compaction_and_growth(steps):
    """Random append / expire sequences: refs returned by ``append`` keep addressing their
    tuple (row ``ref - base``) however the arrays were compacted or grown."""
    rng = np.random.default_rng(len(steps))
    store, appended, n, first = TupleStore(2), [], 0, 0
    refs_of = {}
    for b, keep in steps:
        batch = make_batch(n, b, rng)
        pos = np.arange(b)
        refs = store.append(batch, pos)
        assert np.array_equal(refs, np.arange(n, n + b)), "refs are consecutive, never reused"
        refs_of.update(zip(batch.idx.tolist(), refs.tolist(), strict=True))
        appended.append(batch)
        n += b
        first = max(first, n - keep)
        assert store.expire(first) == store.base + store.head
        assert_holds(store, appended, first)
        for i in range(first, n):
            assert store.rows[refs_of[i] - store.base, IDX] == i


def test_steady_window_compacts_in_place():
    """A window of constant size stops growing: after the first growth past it, appends
    compact into the same arrays."""
    rng = np.random.default_rng(0)
    store, n = TupleStore(1), 0
    window, b = 1000, 64
    caps = []
    for _ in range(200):
        store.append(make_batch(n, b, rng), np.arange(b))
        n += b
        store.expire(n - window)
        caps.append(len(store.ts))
    assert caps[-1] == caps[len(caps) // 2] <= 4 * window
    rows = store.rows
    for _ in range(100):
        store.append(make_batch(n, b, rng), np.arange(b))
        n += b
        store.expire(n - window)
    assert store.rows is rows, "no new arrays once the window is steady"


def test_append_takes_positions_and_batch_copies_rows():
    rng = np.random.default_rng(1)
    store = TupleStore(2)
    batch = make_batch(0, 10, rng)
    pos = np.array([1, 4, 5, 9])
    refs = store.append(batch, pos)
    assert np.array_equal(store.rows[refs - store.base, IDX], batch.idx[pos])
    assert store.rows_from(5) == store.head + 2
    out = store.batch(1, 3, 1)
    assert np.array_equal(out.idx, [4, 5]) and np.array_equal(out.seq, batch.seq[[4, 5]])
    assert np.array_equal(out.ts, batch.ts[[4, 5]])
    assert np.array_equal(out.attrs, batch.attrs[:, [4, 5]])
    out.idx[0] = -1  # a copy, not a view
    assert store.rows[1, IDX] == 4


@pytest.mark.parametrize("bound", [0, 3, 10])
def test_expire_on_an_empty_or_exhausted_store(bound):
    store = TupleStore(1)
    assert store.expire(bound) == 0 and len(store) == 0
    store.append(make_batch(0, 3, np.random.default_rng(2)), np.arange(3))
    store.expire(bound)
    assert len(store) == max(0, 3 - bound)


@pytest.mark.parametrize("exact_at", [None, 0, 3, 7])
def test_residual_rows_are_written_out_only_when_they_differ(exact_at):
    """A residual row stays unwritten while all its tuples share one value (NaN for floats,
    0 for small integers), and holds every tuple's own value once one differs or the join
    starts reading residuals (``keep_residuals``), through compaction and growth."""
    rng = np.random.default_rng(3)
    store, appended, n = TupleStore(4), [], 0
    for step in range(12):
        batch = make_batch(n, 50, rng)
        residuals = np.full((2, 50), np.nan)  # attribute 0: floats throughout
        if step >= 5:  # attribute 1: floats, then integers (0), then one beyond 2**52
            residuals[1] = 0.0
        if step == 9:
            residuals[1, 7] = -3.0
        batch.attrs = np.concatenate([batch.attrs, residuals])
        if step == exact_at:
            store.keep_residuals()
        store.append(batch, np.arange(50))
        appended.append(batch)
        n += 50
        store.expire(n - 180)
        assert_holds(store, appended, max(0, n - 180))
    assert store._kept.tolist() == [True, True, exact_at is not None, True]
