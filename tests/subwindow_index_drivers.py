"""Test drivers shared by the PanJoin subwindow indexes (``bisort``, ``rap_table``, ``wib_tree``).

Random action sequences and whole joins on one core reuse :mod:`window_index_oracle`; this
adds the workload it lacks -- keys that keep increasing, like ids or timestamps (PanJoin
§III-B3) -- and joins through the PanJoin topology, which puts an index in every subwindow.
"""

from __future__ import annotations

import numpy as np
from window_index_oracle import JOIN_PREDICATES, JOIN_WINDOWS, SortedOracle, probe_pairs

import streamjoin as sj

EDGES = [-np.inf, -4.0, -1.0, 0.0, 0.5, 3.0, np.inf]


def increasing_actions(index, rng: np.random.Generator, steps: int, window: int) -> None:
    """``steps`` rounds of insert / expire / probe with non-decreasing keys (many equal).

    Probe keys fall around the oldest and the newest live keys; bands are drawn from infinite,
    zero-width and finite ones. ``check()`` runs after every insert and expire, and probes
    must return exactly the live matches.
    """
    oracle = SortedOracle()
    last = 0.0
    for step in range(steps):
        b = int(rng.integers(0, window // 4 + 2))
        values = last + np.cumsum(rng.integers(0, 2, b)) * 0.5
        last = float(values[-1]) if b else last
        index.insert(*oracle.batch(values))
        index.check()
        index.expire(oracle.expire(oracle.next_ref - int(rng.integers(0, 2 * window))))
        index.check()
        oldest = float(oracle.keys[0]) if len(oracle.keys) else last
        probe_keys = np.concatenate(
            [oldest + rng.integers(-3, 4, 2), last + rng.integers(-3, 4, 2)]
        )
        lo, hi = sorted(rng.choice(EDGES, 2))
        if rng.random() < 0.2:
            hi = lo = 0.0
        got = probe_pairs(index, probe_keys, lo, hi, oracle)
        assert got == oracle.probe(probe_keys, lo, hi), step


def panjoin_matches_oracle(index: str, options: dict) -> None:
    """A band join over a count window through the PanJoin topology (2 workers, 3 subwindows),
    with ``index`` in every subwindow, gives the reference pairs."""
    data = sj.sources.synthetic(300, low=0, high=50, seed=7)
    q = sj.Query(JOIN_PREDICATES["band"], window=JOIN_WINDOWS["count"])
    topo = sj.topologies.panjoin(2, 3, index=index, **options)
    assert sj.run(q, data, topo, batch_size=16).same_pairs(sj.oracle.join(q, data))


def compact_twins_agree(make, batches: list[np.ndarray], probes: np.ndarray) -> None:
    """An index made with ``layout="compact"`` and its ``"wide"`` twin (``make(layout)``),
    fed ``batches`` of keys that fill whole subwindows but the last: the full subwindows of
    the compact one are packed, at half the LLAT item bytes of the wide twin's, and both find
    the oracle's pairs for ``probes`` (the compact one's candidates refined on the keys)."""
    compact, wide = make("compact"), make("wide")
    oracle = SortedOracle()
    for b, x in enumerate(batches):
        keys, refs = oracle.batch(x)
        for ix in (compact, wide):
            ix.insert(keys, refs)
            if b < len(batches) - 1:
                ix.check()
    full = len(compact._subwindows) - 1
    assert [s.compact for s in compact._subwindows] == [True] * full + [False]
    assert not any(s.compact for s in wide._subwindows)
    assert not compact.exact and wide.exact
    packed = [  # the LLAT item arrays of the full subwindows (a packed one's refs are its keys)
        sum(
            s._llat.keys.nbytes + (s._llat.refs is not s._llat.keys) * s._llat.refs.nbytes
            for s in list(ix._subwindows)[:-1]
        )
        for ix in (compact, wide)
    ]
    assert packed[0] * 2 == packed[1]
    found = 0
    for lo, hi in [(-0.5, 0.5), (0.0, 0.0), (-3.0, 1.0)]:
        want = oracle.probe(probes, lo, hi)
        assert probe_pairs(compact, probes, lo, hi, oracle) == want
        assert probe_pairs(wide, probes, lo, hi) == want
        found += len(want)
    assert found  # the probes meet stored keys
