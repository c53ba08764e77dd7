"""Every registered index against a plain-array model: random insert / expire / probe
sequences with check() after every step (tiny capacities so growth and compaction happen)."""

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin import indexes

KEYS = st.sampled_from([-3.0, -1.0, -0.0, 0.0, 0.5, 1.0, 2.0, 7.0, 1e15, -1e-300])
BOUNDS = st.sampled_from([-np.inf, -2.0, -1.0, -0.5, 0.0, 5e-324, 0.5, 1.0, 3.0, np.inf])


def equality_only(name):
    from streamjoin.query import Predicate, band

    return indexes.get(name).unsupported(Predicate((band("x", 1),))) is not None


#: Options besides the defaults under which an index's other item layout is reached within a
#: test's few hundred items (compact items past small subwindows and buffers).
OTHER_LAYOUT = {
    "bisort": {"subwindow_size": 16, "buffer_size": 4, "layout": "compact"},
    "rap_table": {"subwindow_size": 16, "partitions": 4, "layout": "compact"},
    "pim_tree": {"layout": "compact", "css_leaf_size": 2, "css_fanout": 3},
    "im_tree": {"layout": "compact"},
    "css_tree": {"layout": "compact", "fanout": 3, "leaf_size": 2},
    "chained": {"layout": "compact", "subindex_size": 16, "css_fanout": 3, "css_leaf_size": 2},
    "wib_tree": {"subwindow_size": 16, "leaf_width": 3, "fanout": 3, "layout": "compact"},
}


@pytest.mark.parametrize("name", indexes.names())
@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_random_actions_against_model(name, data):
    cls = indexes.get(name)
    n_keys = data.draw(st.integers(1, 2)) if cls.multi_attribute else 1
    options = data.draw(st.sampled_from([{}, OTHER_LAYOUT[name]])) if name in OTHER_LAYOUT else {}
    index = cls(n_keys, **options)
    model_keys = np.empty((n_keys, 0))
    model_refs = np.empty(0, dtype=np.int64)
    expired_before = 0
    next_ref = 0
    for _ in range(data.draw(st.integers(1, 25))):
        action = data.draw(st.sampled_from(["insert", "insert", "expire", "probe"]))
        if action == "insert":
            n = data.draw(st.integers(0, 40))
            keys = np.array(data.draw(st.lists(KEYS, min_size=n * n_keys, max_size=n * n_keys)))
            keys = keys.reshape(n_keys, n)
            refs = next_ref + np.cumsum(
                data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)), dtype=np.int64
            )
            next_ref = int(refs[-1]) + 1 if n else next_ref
            index.insert(keys, refs)
            model_keys = np.concatenate([model_keys, keys], axis=1)
            model_refs = np.concatenate([model_refs, refs])
        elif action == "expire":
            expired_before = max(expired_before, data.draw(st.integers(0, next_ref + 1)))
            index.expire(expired_before)
        else:
            m = data.draw(st.integers(0, 6))
            probe = np.array(data.draw(st.lists(KEYS, min_size=m * n_keys, max_size=m * n_keys)))
            probe = probe.reshape(n_keys, m)
            if equality_only(name):
                lo = hi = np.zeros(n_keys)
            else:
                b = [sorted(data.draw(st.tuples(BOUNDS, BOUNDS))) for _ in range(n_keys)]
                lo, hi = np.array([x[0] for x in b]), np.array([x[1] for x in b])
            pos, refs = index.probe(probe, lo, hi)
            got = sorted(zip(pos.tolist(), refs.tolist(), strict=True))
            assert len(got) == len(set(got)), "no item returned twice for one probe key"
            if not index.exact:  # coded keys: a superset, refined on the full keys
                at = np.searchsorted(model_refs, refs)
                d = model_keys[:, at] - probe[:, pos]
                keep = np.all((d >= lo[:, None]) & (d <= hi[:, None]), axis=0)
                got = sorted(zip(pos[keep].tolist(), refs[keep].tolist(), strict=True))
            d = model_keys[:, None, :] - probe[:, :, None]  # (k, m, items)
            match = np.all((d >= lo[:, None, None]) & (d <= hi[:, None, None]), axis=0)
            pi, ii = np.nonzero(match)
            every = {(int(p), int(model_refs[i])) for p, i in zip(pi, ii, strict=True)}
            live = {(p, r) for p, r in every if r >= expired_before}
            assert live <= set(got) <= every, "probe must return all live matches, nothing else"
        index.check()
        live_count = int(np.sum(model_refs >= expired_before))
        assert live_count <= len(index) <= len(model_refs)
        assert index.nbytes > 0


def test_registry_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown index 'btree'.*available"):
        indexes.get("btree")
    from streamjoin.query import Predicate, band

    with pytest.raises(ValueError, match="hash serves equi-joins only"):
        indexes.check_supports("hash", Predicate((band("x", 1),)))


@pytest.mark.parametrize("name", ["bplus_tree", "pim_tree", "im_tree"])
def test_check_accepts_infinite_keys(name):
    """check()'s bounds lie beyond every item, +inf keys included (its top bound was (+inf,
    the smallest ref), below any (+inf, ref) item)."""
    index = indexes.get(name)(1)
    index.insert(np.array([[np.inf, -np.inf, 1.0, np.inf]]), np.arange(4))
    index.check()
    pos, refs = index.probe(np.array([[0.0]]), np.array([-np.inf]), np.array([np.inf]))
    assert sorted(refs.tolist()) == [0, 1, 2, 3]
