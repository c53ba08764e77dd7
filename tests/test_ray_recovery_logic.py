"""The argument of :mod:`streamjoin.runtime.ray.recovery`, without Ray: a core of a split or
grid layout is lost at a random point, rebuilt from what the driver kept (trimmed by the
progress the collector had), and its pairs together with the other cores' are the
oracle's, each once."""

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import predicates, tables, windows

import streamjoin as sj
from streamjoin.actors.base import RunSettings
from streamjoin.batch import Batch
from streamjoin.runtime.ray.recovery import Retention, feeds
from streamjoin.validation import validate


def _upto(upto: list[int], batch: Batch, self_join: bool) -> None:
    for y in (0,) if self_join else (0, 1):
        seqs = batch.seq[batch.stream == y]
        if len(seqs):
            upto[y] = max(upto[y], int(seqs[-1]))
    if self_join:
        upto[1] = upto[0]


def _pairs(out) -> set:
    return {(int(r), int(s)) for _, p in out for r, s in zip(p.r, p.s, strict=True)}


@settings(max_examples=examples(100), deadline=None)
@given(data=st.data())
def test_a_core_rebuilt_from_the_kept_batches_gives_the_exact_answer(data):
    layout = data.draw(st.sampled_from(["split", "grid"]))
    self_join = layout == "split" and data.draw(st.booleans())
    table = data.draw(tables(self_join, max_rows=100))
    query = sj.Query(data.draw(predicates()), window=data.draw(windows()), self_join=self_join)
    topo = sj.topologies.split(2) if layout == "split" else sj.topologies.grid(2, 2)
    emitter = topo.config(topo.emitter).build(query, RunSettings(batch_size=3), None)
    cols = validate(table, query)
    sent = emitter.on_chunk(cols) + emitter.on_eof()
    fed = feeds(topo)
    arrivals = [  # (core, port, batch) in the order the emitter sent them
        (core, port, batch) for out, batch in sent for core, port in fed.get(out, [])
    ]
    cores = {n: topo.config(n).build(query, RunSettings(), None) for n in topo.nodes("join_core")}
    lost = data.draw(st.sampled_from(sorted(cores)))
    mine = [(p, b) for c, p, b in arrivals if c == lost]
    died_at = data.draw(st.integers(0, len(mine)))  # batches the lost core handled
    # ... whose pairs reached the collector: all but the last few
    delivered_at = data.draw(st.integers(max(0, died_at - 3), died_at))
    ahead = data.draw(st.integers(0, len(sent)))  # batches the driver had sent by then

    found = set()
    for core, port, batch in arrivals:
        if core != lost:
            found |= _pairs(cores[core].on_batch(port, batch))
    retention = Retention(fed, self_join)
    upto, delivered = [-1, -1], (-1, -1)
    for k, (port, batch) in enumerate(mine[:died_at]):
        pairs = _pairs(cores[lost].on_batch(port, batch))
        _upto(upto, batch, self_join)
        if k < delivered_at:
            found |= pairs
            delivered = tuple(upto)
    kept = max(died_at, min(len(sent), ahead))
    for out, batch in sent[:kept]:
        retention.add(out, batch)
        if data.draw(st.booleans()):
            retention.trim({lost: delivered})
    retention.trim({lost: delivered})

    core = topo.config(lost).build(query, RunSettings(), None)
    last: dict[str, int] = {}
    rebuilt = set()
    for port, batch in retention.replay(lost) + mine:
        fresh = np.flatnonzero(batch.seq > last.get(port, -1))
        if not len(fresh):
            continue
        batch = batch.take(fresh)
        last[port] = int(batch.seq[-1])
        rebuilt |= {
            (r, s)
            for r, s in _pairs(core.on_batch(port, batch))
            if r > delivered[0] or s > delivered[1]
        }
    assert not rebuilt & found
    expected = sj.oracle.join(query, table)
    assert found | rebuilt == set(
        zip(expected.column("r").to_pylist(), expected.column("s").to_pylist(), strict=True)
    )
