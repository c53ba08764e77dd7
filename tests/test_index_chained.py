"""``chained``: random action sequences at tiny node sizes and chain lengths, in both designs
(B-chain and IB-chain, the latter also with compact 8-byte items), against a sorted-array
oracle; whole-subindex expiry and the chain length bound; whole joins against the reference
join."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from budget import examples
from hypothesis import settings
from hypothesis import strategies as st
from window_index_oracle import (
    JOIN_PREDICATES,
    JOIN_WINDOWS,
    join_matches_oracle,
    machine,
    probe_pairs,
    random_actions,
)

from streamjoin import indexes

OPTIONS = (
    st.fixed_dictionaries(
        {
            "chain_length": st.integers(2, 5),
            "archive": st.sampled_from(["css", "bplus"]),
            "fanout": st.integers(3, 5),
            "leaf_size": st.integers(3, 5),
            "css_fanout": st.integers(2, 4),
            "css_leaf_size": st.integers(1, 3),
        }
    )
    .flatmap(
        lambda o: (
            st.just(o)
            if o["archive"] == "bplus"
            else st.sampled_from(["wide", "compact"]).map(lambda layout: {**o, "layout": layout})
        )
    )
    .flatmap(
        lambda o: st.one_of(
            st.just(o),
            st.integers(1, 30).map(lambda s: {**o, "subindex_size": s}),
            st.integers(1, 60).map(lambda w: {**o, "window": w}),
        )
    )
)

TestChainedMachine = machine("chained", OPTIONS, exact_expiry=False).TestCase
TestChainedMachine.settings = settings(
    max_examples=examples(120), stateful_step_count=50, deadline=None
)

TINY = {"fanout": 3, "leaf_size": 3, "css_fanout": 3, "css_leaf_size": 2}


DESIGNS = {
    "bplus": {"archive": "bplus"},
    "css": {"archive": "css"},
    "css_compact": {"archive": "css", "layout": "compact"},
}


@pytest.mark.parametrize("design", list(DESIGNS))
@pytest.mark.parametrize(
    "options", [{"chain_length": 2}, {"chain_length": 5}, {"chain_length": 3, "subindex_size": 17}]
)
def test_random_actions(design, options):
    index = indexes.get("chained")(1, **DESIGNS[design], **options, **TINY)
    random_actions(index, np.random.default_rng(len(str(options))), steps=150, window=600)


@pytest.mark.parametrize("archive", ["css", "bplus"])
@pytest.mark.parametrize("chain_length", [2, 3, 8])
def test_count_window_spans_at_most_l_subindexes(archive, chain_length):
    """With s = w / (L - 1) a count window holds at most L subindexes (§2.2.2, Eq. 3), and a
    subindex leaves the chain whole, once its newest item has expired."""
    w = 60
    index = indexes.get("chained")(1, chain_length=chain_length, window=w, archive=archive, **TINY)
    s = index.subindex_size
    assert s == -(-w // (chain_length - 1))
    values = np.random.default_rng(chain_length).integers(0, 20, 400).astype(np.float64)
    for start in range(0, 400, 7):
        refs = np.arange(start, min(start + 7, 400))
        index.insert(values[None, refs], refs)
        index.expire(refs[-1] + 1 - w)
        index.check()
        assert len(index._chain) + (index._active_n > 0) <= chain_length
        assert all(n == s for n in index._chain_n)
        assert len(index) - w < s, "only part of the oldest subindex is expired"
    assert probe_pairs(index, [5.0], 0, 0) == [
        (0, r) for r in range(400 - w, 400) if values[r] == 5
    ]


def test_subindex_size_follows_the_live_span_by_default():
    """Without ``subindex_size`` or ``window``, s is the live ref span over L - 1 (measured at
    insert time, before the batch's expiry: up to a batch more)."""
    index = indexes.get("chained")(1, chain_length=3, **TINY)
    for start in range(0, 300, 10):
        index.insert(np.zeros((1, 10)), np.arange(start, start + 10))
        index.expire(start + 10 - 100)
    index.check()
    assert 50 <= index._chain_n[-1] <= 55 and len(index._chain) <= 3


def test_designs_agree_and_pickle():
    rng = np.random.default_rng(5)
    b, ib = (
        indexes.get("chained")(1, chain_length=4, subindex_size=13, archive=a, **TINY)
        for a in ("bplus", "css")
    )
    for start in range(0, 500, 25):
        keys, refs = rng.normal(0, 5, (1, 25)).round(1), np.arange(start, start + 25)
        for index in (b, ib):
            index.insert(keys, refs)
            index.expire(start - 40)
        probe = rng.normal(0, 5, 3)
        assert probe_pairs(b, probe, -1, 2) == probe_pairs(ib, probe, -1, 2)
    assert b.nbytes > ib.nbytes, "CSS-trees store archived items more densely"
    for index in (b, ib):  # plain arrays: pickled with the join core
        copy = pickle.loads(pickle.dumps(index))
        copy.check()
        assert probe_pairs(copy, [0.0], -3, 3) == probe_pairs(index, [0.0], -3, 3)


@pytest.mark.parametrize(
    "options",
    [
        {"chain_length": 1},
        {"subindex_size": 0},
        {"window": 0},
        {"archive": "lsm"},
        {"subindex_size": 4, "window": 8},
        {"leaf_size": 2},
        {"css_fanout": 1},
        {"layout": "packed"},
        {"layout": "compact", "archive": "bplus"},
    ],
)
def test_rejects_bad_options(options):
    with pytest.raises(ValueError, match="chained"):
        indexes.get("chained")(1, **options)


@pytest.mark.parametrize("batch_size", [1, 3, 64])
@pytest.mark.parametrize("window", JOIN_WINDOWS)
@pytest.mark.parametrize("predicate", JOIN_PREDICATES)
@pytest.mark.parametrize("self_join", [False, True], ids=["two_way", "self_join"])
@pytest.mark.parametrize("design", list(DESIGNS))
def test_join_matches_oracle(design, predicate, window, self_join, batch_size):
    options = {"chain_length": 3, **DESIGNS[design], **TINY}
    join_matches_oracle("chained", options, predicate, window, self_join, batch_size)


def test_compact_archives_hold_half_the_bytes_and_agree():
    """A compact IB-chain archives 8-byte items: its archived subindexes hold about half the
    bytes of the wide ones, and its probes, refined on the full keys, find the same pairs;
    integer keys and bounds get exact codes (no candidate outside the band)."""
    rng = np.random.default_rng(11)
    wide, compact = (
        indexes.get("chained")(1, chain_length=4, subindex_size=4096, layout=layout)
        for layout in ("wide", "compact")
    )
    for start in range(0, 20_000, 1000):
        keys, refs = (
            rng.integers(0, 50_000, (1, 1000)).astype(float),
            np.arange(start, start + 1000),
        )
        for index in (wide, compact):
            index.insert(keys, refs)
            index.expire(start - 12_000)
    compact.check()
    archived = [sum(a.nbytes for sub in ix._chain for a in sub) for ix in (wide, compact)]
    assert archived[1] < 0.55 * archived[0], archived
    probe = rng.integers(0, 50_000, 64).astype(float)
    assert probe_pairs(compact, probe, -3, 3) == probe_pairs(wide, probe, -3, 3)
