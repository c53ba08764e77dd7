"""The fast stable key orders equal numpy's stable argsort, including the runs of keys that tie
in their high bits (sorted by insertion when short, by merges when long) and the radix sort
numba kernels call."""

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.indexes.blocks.key_order import stable_key_order, stable_order, stable_order_into


def _cases():
    rng = np.random.default_rng(7)
    n = 5000
    tiny = 1.0 + rng.integers(0, 64, n) * np.finfo(float).eps  # differ in the low bits only
    special = rng.choice([np.nan, -0.0, 0.0, -np.inf, np.inf, 1.5, -1.5], n)
    return {
        "uniform": rng.uniform(-1e6, 1e6, n),
        "few distinct": rng.integers(0, 7, n).astype(float),  # long runs of equal keys
        "all equal": np.full(n, 3.0),
        "low bits": tiny,
        "specials": special,
        "run of 17": np.concatenate([np.full(17, 2.0), rng.uniform(0, 1, 300)]),
        "run of 33, descending": np.concatenate([np.full(33, 2.0), np.arange(300.0)[::-1]]),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_stable_order_is_numpys_stable_argsort(name):
    keys = _cases()[name]
    assert np.array_equal(stable_order(keys), np.argsort(keys, kind="stable"))
    for n in (0, 1, 255, 256, 257, 1000):  # numpy below 256, the packed path from 256
        part = keys[:n]
        assert np.array_equal(stable_order(part), np.argsort(part, kind="stable"))


def test_stable_key_order_skips_sorted_keys():
    keys = np.arange(300.0)
    assert stable_key_order(keys) is None
    assert np.array_equal(stable_key_order(keys[::-1].copy()), np.arange(300)[::-1])


@pytest.mark.parametrize("name", list(_cases()))
def test_radix_order_is_numpys_stable_argsort(name):
    keys = _cases()[name]
    for n in (0, 1, 2, 64, 1000, len(keys)):
        part = keys[:n]
        order = np.full(len(part), -1, dtype=np.int64)
        stable_order_into(part, order)
        assert np.array_equal(order, np.argsort(part, kind="stable"))


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.floats(allow_nan=True, allow_infinity=True)
        | st.sampled_from([0.0, -0.0, 2.0**53, -(2.0**63), 5e-324])
        | st.integers(-(2**62), 2**62).map(float),
        max_size=300,
    )
)
def test_radix_order_on_any_floats(values):
    keys = np.array(values, dtype=np.float64)
    order = np.empty(len(keys), dtype=np.int64)
    stable_order_into(keys, order)
    assert np.array_equal(order, np.argsort(keys, kind="stable"))
