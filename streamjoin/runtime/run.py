"""``run()``: validate everything at the boundary, hand the input to an executor, return a
:class:`Result`."""

from __future__ import annotations

from streamjoin.actors.base import RunSettings, max_delay_ns
from streamjoin.checks import positive_int, positive_number
from streamjoin.event_time import Watermark
from streamjoin.modes import COLLECTS, Collect
from streamjoin.query import Query
from streamjoin.runtime.executor import BACKENDS, Executor
from streamjoin.runtime.pipeline import Progress, paced, slices, validated_chunks
from streamjoin.runtime.result import Result
from streamjoin.sources import Source
from streamjoin.topologies import Topology, single
from streamjoin.validation import validate


def run(
    query: Query,
    data,
    topology: Topology | None = None,
    backend: str | Executor = "local",
    *,
    batch_size: int = 1024,
    max_delay: float | None = None,
    collect: Collect = "pairs",
    ordered: bool = False,
    chunk_rows: int | None = None,
    pace: float | None = None,
    progress: bool | None = None,
    timeout: float | None = None,
    **options,
) -> Result:
    """Run ``query`` over ``data`` on ``topology`` and return the exact result with metrics.

    Parameters
    ----------
    query : Query
    data : pyarrow.Table | pandas.DataFrame | dict of numpy arrays | streamjoin.sources.Source
        In-memory input is validated whole before anything runs; a Source is validated chunk
        by chunk as it is read.
    topology : Topology, optional
        Default: ``topologies.single()`` with the index chosen from the predicate.
    backend : {"local", "ray", "sim"} or Executor
        Where the actors run (a name in :data:`streamjoin.runtime.BACKENDS`, or an executor
        instance): in this process with deterministic FIFO delivery
        (:class:`~streamjoin.runtime.local.Local`), one Ray actor per node
        (:class:`~streamjoin.runtime.ray.executor.Ray`: ``ray.init()`` locally unless Ray is
        already initialised or ``address`` names a cluster), or on simulated cores under a
        virtual clock (:class:`~streamjoin.runtime.sim.Sim`: latency and throughput of a
        modelled machine).
    batch_size : int
        Tuples per batch the emitter sends (a batch also closes after ``max_delay``).
    max_delay : float, optional
        Seconds a tuple may wait in an open batch before the batch closes: finite, 0 up to
        :data:`~streamjoin.actors.base.MAX_DELAY_S`.
    collect : {"pairs", "count"}
        Keep every pair (``Result.pairs``) or only count them (large runs).
    ordered : bool
        Return pairs in order of the later tuple's row (as tuple-at-a-time processing emits).
    chunk_rows : int, optional
        Rows handed to the emitter at a time (default: ``batch_size``; a Source's larger
        chunks are cut to this size).
        All rows of a chunk share one ingest time, so latency counts from the chunk hand-over.
        With ``pace`` (or a ``sim`` arrival rate) the default is one millisecond of input.
    pace : float, optional
        Hand the input over at this many tuples per second of wall time (default: as fast as
        the join takes it), to measure latency at a given input rate. On ``sim``: a constant
        arrival rate in virtual time.
    progress : bool, optional
        Show a progress bar on runs longer than two seconds (default: when stderr is a tty).
    timeout : float, optional
        Seconds the run may take: then it ends with :class:`~streamjoin.runtime.RunTimeout`
        naming the actors still busy (``ray``: every actor is stopped; ``local``: checked
        between steps, so a step that never returns is not cut short; ``sim``: not taken).
    **options
        With a backend name, the options of its executor: ``delivery_seed`` (``local``: a
        seeded random delivery order that keeps each edge FIFO, to test a topology against
        the interleavings of a real parallel backend), ``address`` (``ray``: a cluster's
        address), ``machine`` and ``arrival`` (``sim``: the machine profile, default the
        shipped one, and the arrival process, default ``pace`` as a constant rate, else a
        replay of ``ts``).
    """
    if not isinstance(query, Query):
        raise ValueError(f"query must be a streamjoin.Query, got {type(query).__name__}")
    executor = BACKENDS.create(backend, options)
    batch_size = positive_int("batch_size", batch_size)
    if pace is not None:
        positive_number("pace", pace, "rate in tuples/s")
    if chunk_rows is not None:
        chunk_rows = positive_int("chunk_rows", chunk_rows)
    delay_ns = max_delay_ns(max_delay)
    if timeout is not None:
        positive_number("timeout", timeout, "seconds")
        if executor.name == "sim":
            raise ValueError("timeout= is for wall-clock backends (local, ray), not sim")
    if collect not in COLLECTS:
        raise ValueError(f"collect must be 'pairs' or 'count', got {collect!r}")
    if ordered and collect == "count":
        raise ValueError("ordered=True needs collect='pairs' (a count has no order)")
    topology = single() if topology is None else topology
    if not isinstance(topology, Topology):
        raise ValueError(
            f"topology must be built by streamjoin.topologies, got {type(topology).__name__}"
        )
    topology.check(query)
    topology = topology.for_query(query)
    settings = RunSettings(
        batch_size=batch_size,
        max_delay_ns=delay_ns,
        collect=collect,
        ordered=ordered,
        timeout=timeout,
        markers=topology.marks_progress(query),
    )

    # out-of-order input: late rows found (or refused) here, before any executor sees a row
    mark = None
    if query.lateness is not None:
        mark = Watermark(query.lateness, query.on_late, keep_order=collect == "pairs")
    if isinstance(data, Source):
        data.check(query)
        cols, total = None, data.n_rows
    else:
        cols = validate(data, query)
        if mark is not None:
            cols = mark.split(cols)
        total = len(cols)
    defaults = executor.defaults(pace=pace, batch_size=batch_size, cols=cols)
    executor, rows = defaults.executor, chunk_rows or defaults.chunk_rows
    if cols is not None:
        chunks = slices(cols, rows)
    else:
        chunks = validated_chunks(data, query, rows)
        if mark is not None:
            chunks = map(mark.split, chunks)
    if defaults.wall_pace is not None:
        chunks = paced(chunks, defaults.wall_pace)
    bar = Progress(total, progress)
    try:
        trace = executor.run(query, topology, chunks, settings, bar)
    finally:
        bar.close()
    result = Result.from_trace(
        trace,
        query,
        topology,
        settings,
        backend=executor.name,
        pace=pace,
        extra=executor.metrics(trace),
    )
    return result if mark is None else result.in_input_rows(mark)
