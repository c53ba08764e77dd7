"""Small layouts of every topology, shared by the tests that run each on every backend, and
the hypothesis set-up of the tests that run random queries on every one of them."""

from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import predicates, windows

import streamjoin as sj
from streamjoin.actors import emitter

LAYOUTS = {
    "single": lambda: sj.topologies.single(),
    "split": lambda: sj.topologies.split(2),
    "grid": lambda: sj.topologies.grid(2, 2),
    "grid_direct": lambda: sj.topologies.grid(1, 2, forward="direct"),
    "panjoin": lambda: sj.topologies.panjoin(2, 4),
    "handshake": lambda: sj.topologies.handshake(3, segment=10),
    "handshake_ll": lambda: sj.topologies.handshake(3, low_latency=True),
    # pipelined: a batch's pairs leave with the next one, or when the core is idle
    "shared": lambda: sj.topologies.shared_index(
        2, task_size=3, window=8, fanout=3, pipelined=True
    ),
    "shared_compact": lambda: sj.topologies.shared_index(
        2, task_size=3, window=8, fanout=3, layout="compact"
    ),
    "shared_bplus": lambda: sj.topologies.shared_index(3, "bplus_tree", merge="blocking"),
    "spo": lambda: sj.topologies.spo(2, merge_every=25, subintervals=2),
    # worker 3 combines the pairs of two workers below it, worker 2 of one
    "spo_tree": lambda: sj.topologies.spo(4, merge_every=25, subintervals=2, relay=2, combine=2),
}


def run_layout(
    query,
    table,
    layout: str,
    backend: str,
    batch_size: int,
    delivery_seed: int,
    marker_rows: int | None = None,
):
    """``sj.run`` of ``query`` over ``table`` on layout ``layout`` (a key of :data:`LAYOUTS`)
    and ``backend`` (``local`` with ``delivery_seed``'s interleavings), with a progress marker
    after every ``marker_rows`` rows if given (else the emitter's default); None when the
    layout cannot serve the query (it says so by a ``ValueError``: another layout does)."""
    topo = LAYOUTS[layout]()
    try:
        topo.check(query)
    except ValueError:
        return None
    options = {"delivery_seed": delivery_seed} if backend == "local" else {}
    default = emitter.MARKER_ROWS
    emitter.MARKER_ROWS = marker_rows or default
    try:
        return sj.run(query, table, topo, backend=backend, batch_size=batch_size, **options)
    finally:
        emitter.MARKER_ROWS = default


def every_layout(max_examples: int, predicate=None, layouts=None, **more):
    """The hypothesis settings and draws of a test that runs a random query on every layout
    (on ``local`` with ``delivery_seed``'s interleavings, and on ``sim``) against the oracle:
    ``self_join``, ``data`` (draw the table from it), ``predicate`` (``predicates()`` unless
    given), ``window``, ``layout`` (one of ``layouts``, default every one), ``backend``,
    ``batch_size``, ``delivery_seed``, and the test's own draws ``more``."""
    draws = {
        "self_join": st.booleans(),
        "data": st.data(),
        "predicate": predicates() if predicate is None else predicate,
        "window": windows(),
        "layout": st.sampled_from(sorted(LAYOUTS if layouts is None else layouts)),
        "backend": st.sampled_from(["local", "sim"]),
        "batch_size": st.sampled_from([1, 3, 16]),
        "delivery_seed": st.integers(0, 3),
        **more,
    }
    checks = [HealthCheck.too_slow, HealthCheck.data_too_large]

    def wrap(test):
        run = settings(
            max_examples=examples(max_examples), deadline=None, suppress_health_check=checks
        )
        return run(given(**draws)(test))

    return wrap
