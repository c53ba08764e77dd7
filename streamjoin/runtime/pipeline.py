"""The run pipeline's parts between the input and an executor: cutting the input into chunks,
validating a source's chunks as they are read, pacing them in wall-clock time, and the
progress bar. :func:`streamjoin.run` strings them together; anything that drives an executor
itself (e.g. :func:`~streamjoin.runtime.sim.max_sustainable_rate`) uses the same parts."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable, Iterator

from streamjoin.checks import positive_int, positive_number
from streamjoin.query import Query
from streamjoin.sources import Source, read_validated
from streamjoin.validation import Columns

__all__ = [
    "Progress",
    "compile_notice",
    "default_chunk_rows",
    "paced",
    "positive_int",
    "positive_number",
    "slices",
    "validated_chunks",
]


def slices(cols: Columns, rows: int) -> Iterator[Columns]:
    """``cols`` in consecutive pieces of ``rows`` rows (the last may be shorter); views, no
    copies."""
    for a in range(0, len(cols), rows):
        b = a + rows
        yield Columns(cols.stream[a:b], cols.ts[a:b], cols.attrs[:, a:b])


def validated_chunks(source: Source, query: Query, rows: int) -> Iterator[Columns]:
    """The source's chunks, each validated as it is read (``ts`` order across chunks too; the
    source's own errors as :class:`~streamjoin.sources.SourceError`) and handed over at most
    ``rows`` at a time (as in-memory input is)."""
    for cols in read_validated(source, query):
        yield from slices(cols, rows) if len(cols) > rows else (cols,)


def paced(chunks: Iterable[Columns], rate: float) -> Iterator[Columns]:
    """Hand chunks over no faster than ``rate`` tuples per second of wall time."""
    start = time.perf_counter()
    sent = 0
    for cols in chunks:
        wait = start + sent / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        yield cols
        sent += len(cols)


#: A default chunk holds at most this many batches: a millisecond of input at a rate far above
#: what any layout takes (``pace=1e12`` as "unpaced") would otherwise be the whole input in one
#: chunk, which the emitter turns into batches in one step before the first leaves, so the
#: join could not start until the emitter had finished (measured on the simulator: the
#: emitter's and the join core's times added up instead of overlapping).
MAX_CHUNK_BATCHES = 16


def default_chunk_rows(rate: float | None, batch_size: int) -> int:
    """Rows to hand over at a time when a run names none: one millisecond of input at ``rate``
    tuples/s (so the input's own chunking adds about a millisecond to latency), at most
    :data:`MAX_CHUNK_BATCHES` batches, or ``batch_size`` when the input comes as fast as the
    join takes it (``rate`` None)."""
    if rate is None:
        return batch_size
    return max(1, min(int(rate // 1000), MAX_CHUNK_BATCHES * batch_size))


class Progress:
    """A tqdm bar over input rows that appears only on runs longer than ``delay`` seconds.

    ``enabled`` None: when stderr is a terminal. Executors call :meth:`update` with the rows
    of each chunk they take.
    """

    def __init__(self, total: int | None, enabled: bool | None, delay: float = 2.0) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.bar = None
        self._notice = contextlib.ExitStack()
        if enabled:
            from tqdm.auto import tqdm  # imported only when a bar is shown

            self.bar = tqdm(
                total=total,
                unit=" tuples",
                unit_scale=True,
                delay=delay,
                desc="joining",
                leave=False,
            )
            # a first run waits for numba before the bar moves: say so
            self._notice.enter_context(compile_notice())

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        self._notice.close()
        if self.bar is not None:
            self.bar.close()


#: How many :func:`compile_notice` contexts are open (the outermost one listens).
_notices = [0]


@contextlib.contextmanager
def compile_notice():
    """Say once, on stderr, that numba is compiling, when it starts to: the kernels are not in
    numba's disk cache yet (the first run after an install or an upgrade) and the run waits
    for them. Silent when every kernel loads from the cache; nested, only the outermost
    listens (the CLI's and a progress bar's)."""
    from numba.core import event

    class Notice(event.Listener):
        said = False

        def on_start(self, ev) -> None:
            if not self.said:
                self.said = True
                print("compiling numba kernels (first run only)…", file=sys.stderr, flush=True)

        def on_end(self, ev) -> None:
            pass

    notice = Notice() if _notices[0] == 0 else None
    if notice is not None:
        event.register("numba:compile", notice)
    _notices[0] += 1  # not thread-safe: at worst a second run's notice is missed
    try:
        yield
    finally:
        _notices[0] -= 1
        if notice is not None:
            event.unregister("numba:compile", notice)
