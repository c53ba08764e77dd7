"""An OR of two indexed terms, ``band("x", eps) | band("y", eps)``, at a count window of 2^16:
an index per term (:class:`~streamjoin.indexes.per_term.PerTermIndex`) against the scan
(``nested_loop``) on the same input (pytest-benchmark).

Run: ``python -m pytest benchmarks/test_disjunction.py --benchmark-enable -o addopts="" -p
no:cacheprovider``. The scan takes minutes (it hands every tuple in the window to the θ check);
each index runs one round after an untimed warm run over the input's first rows.
"""

import warnings

import pytest

import streamjoin as sj

N = 100_000
WINDOW = 2**16


@pytest.fixture(scope="module")
def or_query():
    data = sj.sources.synthetic(N, low=0, high=10 * N, attrs=("x", "y"), seed=1)
    x, s = data.column("x").to_numpy(), data.column("stream").to_numpy()
    eps = sj.sources.band_for_match_rate(x[s == 0], x[s == 1], window=WINDOW, match_rate=1)
    query = sj.Query(sj.band("x", eps) | sj.band("y", eps), window=sj.CountWindow(WINDOW))
    return query, data


@pytest.mark.parametrize("index", ["bisort", "pim_tree", "nested_loop"])
def test_or_of_two_bands(benchmark, or_query, index):
    query, data = or_query
    topo = sj.topologies.single(index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sj.indexes.IndexFallbackWarning)  # the scan's note
        sj.run(query, data.slice(0, 5_000), topo, batch_size=1024, collect="count")  # warm
        result = benchmark.pedantic(
            sj.run,
            args=(query, data, topo),
            kwargs={"batch_size": 1024, "collect": "count"},
            rounds=1,
            iterations=1,
        )
    benchmark.extra_info["input_tuples_per_s"] = N / benchmark.stats.stats.mean
    benchmark.extra_info["output_pairs"] = result.count
    benchmark.extra_info["per_term"] = bool(sj.indexes.plan(index, query.predicate).terms)
