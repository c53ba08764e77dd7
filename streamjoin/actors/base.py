"""The contract between actor logic and the executors that drive it.

A topology node carries an :class:`ActorConfig`: a frozen dataclass saying what the node is
(its ``role``) and how it is set up. ``config.build(query, settings, clock)`` returns the node's
logic: a plain object implementing :class:`ActorLogic`, warmed (its numba kernels compiled or
loaded from the disk cache) so that no run compiles inside its timed part. Every executor
(``local``, ``ray``, ``sim``) drives the same logic object the same way, and unit tests drive it
with no executor at all (Bytewax's config → logic split).

Step counters
-------------
Every logic keeps cumulative counters of the work its steps did (``COUNTERS`` names them, in
the order :meth:`ActorLogic.counters` returns them). The simulator charges a step
``calls + coefficients · (counters after − counters before)``, one code path for every role,
with the coefficients of the logic's ``cost_group`` (and, for join work, of its window index:
``cost_key``). A new actor is charged correctly as soon as it counts its work.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

from streamjoin.checks import number
from streamjoin.modes import Collect
from streamjoin.query import Query

#: Clock an actor reads for ingest and arrival times: int nanoseconds (wall or virtual).
Clock = Callable[[], int]

#: The largest ``max_delay`` in seconds (about 32 years; int64 nanoseconds hold 292).
MAX_DELAY_S = 10**9


def max_delay_ns(max_delay: float | None) -> int | None:
    """``max_delay`` (seconds, or None for none) as :attr:`RunSettings.max_delay_ns`, after
    checking it is a finite number from 0 to :data:`MAX_DELAY_S`."""
    if max_delay is None:
        return None
    number("max_delay", max_delay, low=0, high=MAX_DELAY_S, what="a number of seconds")
    return int(max_delay * 1e9)


@dataclass(frozen=True)
class RunSettings:
    """Settings of one run that every actor of it shares.

    Attributes
    ----------
    batch_size : int
        Tuples per batch the emitter closes.
    max_delay_ns : int, optional
        Nanoseconds a tuple may wait in an open batch before the batch closes.
    collect : {"pairs", "count"}
        Keep every result pair or only count them.
    ordered : bool
        Return pairs in order of the later tuple's arrival.
    timeout : float, optional
        Seconds the run may take; then the executor ends it with
        :class:`~streamjoin.runtime.executor.RunTimeout` (None: no limit).
    markers : bool
        The emitter sends progress markers (:class:`~streamjoin.batch.Marker`), by which an
        outer join's rows without a partner leave while the run goes on
        (:meth:`~streamjoin.topologies.base.Topology.marks_progress`).
    """

    batch_size: int = 1024
    max_delay_ns: int | None = None
    collect: Collect = "pairs"
    ordered: bool = False
    timeout: float | None = None
    markers: bool = False


@runtime_checkable
class ActorLogic(Protocol):
    """What an executor calls on a node's logic.

    ``on_batch(port, message)`` handles one message arriving on an input port and returns the
    messages it sends, ``[(out_port, message), …]``; ``on_eof()`` runs once every input has
    ended; ``on_idle()`` when no message waits and ``held_batches`` is not 0 (it returns the
    output of the batches handled that has not left yet); ``passes_on(port, message)`` lists
    what the logic sends on *unchanged* before its step (a chain core passing a batch to its
    neighbour: every executor sends those first, as DP-Join passes the pointer on before
    joining, §III-C); ``warm()`` compiles or loads every kernel the logic will run;
    ``counters()`` the cumulative step counters (module docstring).
    """

    #: Cost group of the simulator's model: ``emitter``, ``join``, ``manager``, ``collector``.
    cost_group: ClassVar[str]
    #: Names of :meth:`counters`, in order.
    COUNTERS: ClassVar[tuple[str, ...]]
    #: Whether two consecutive batches of one port may reach ``on_batch`` as their
    #: concatenation without changing the answer (executors coalesce waiting batches).
    merges_batches: ClassVar[bool]

    @property
    def cost_key(self) -> str | None:
        """What the coefficients depend on besides the group: the window index, or None."""

    def on_batch(self, port: str, message) -> Sequence[tuple[str, object]]: ...

    def on_eof(self) -> Sequence[tuple[str, object]]: ...

    def on_idle(self) -> Sequence[tuple[str, object]]: ...

    def on_marker(self, marker) -> Sequence[tuple[str, object]]: ...

    @property
    def held_batches(self) -> int: ...

    def passes_on(self, port: str, message) -> Sequence[tuple[str, object]]: ...

    def warm(self) -> None: ...

    def counters(self) -> tuple[float, ...]: ...


class Logic:
    """Defaults of :class:`ActorLogic` for logic classes to inherit: nothing passed on,
    nothing to do at end of input, no coalescing, no index."""

    cost_group: ClassVar[str]
    COUNTERS: ClassVar[tuple[str, ...]] = ()
    merges_batches: ClassVar[bool] = False

    @property
    def cost_key(self) -> str | None:
        return None

    def passes_on(self, port: str, message) -> Sequence[tuple[str, object]]:
        return []

    def on_eof(self) -> Sequence[tuple[str, object]]:
        return []

    @property
    def held_batches(self) -> int:
        """Batches handled whose output has not left yet (a logic that overlaps a step with
        the executor's work between batches): while it is not 0, an executor calls
        :meth:`on_idle` when no message waits for the logic."""
        return 0

    def on_idle(self) -> Sequence[tuple[str, object]]:
        """No message waits: the output of the batches held (``held_batches``)."""
        return []

    def on_marker(self, marker) -> Sequence[tuple[str, object]]:
        """A progress marker (:class:`~streamjoin.batch.Marker`) has come on every incoming
        edge, after everything before it was handled: what to send before the executor passes
        it on (default: nothing). A logic that keeps pairs of those batches beyond their steps
        (and beyond :meth:`on_idle`) sends them here, so that the marker follows every pair
        of the batches before it (an SPO worker in a combining tree)."""
        return []

    def warm(self) -> None:
        pass


@dataclass(frozen=True)
class ActorConfig:
    """A topology node's typed configuration: what the node is, and how to build its logic.

    Subclasses set ``role`` (shown in drawings and per-actor metrics) and implement
    :meth:`build`; :meth:`check` raises ``ValueError`` before a run if the node cannot serve
    the query.

    ``passes_markers``: the node's logic passes progress markers
    (:class:`~streamjoin.batch.Marker`) on itself. Executors then hand it each marker as a
    message (``on_batch`` with the port it came on) instead of gating it
    (:mod:`streamjoin.runtime.markers`), and send a marker it returns on the port it names, as
    any message; what passing a marker promises is the logic's to keep (a handshake chain,
    whose graph has cycles that a gate would wait on for ever).

    ``reports_logic``: an executor that runs the node in a process of its own hands its
    logic object back at the end of a run (the collector's pairs and counts).
    """

    role: ClassVar[str]
    passes_markers: ClassVar[bool] = False
    reports_logic: ClassVar[bool] = False

    def build(self, query: Query, settings: RunSettings, clock: Clock | None) -> ActorLogic:
        raise NotImplementedError

    def check(self, query: Query) -> None:
        """Raise ``ValueError`` if this node cannot run ``query`` (default: it can)."""

    @property
    def index(self) -> str | None:
        """The window index the node holds, if any (drawings label nodes with it)."""
        return None


def options_key(options: dict) -> Hashable:
    """A hashable form of keyword options (values that are not hashable by their repr)."""
    out = []
    for k, v in sorted(options.items()):
        try:
            hash(v)
        except TypeError:
            v = repr(v)
        out.append((k, v))
    return tuple(out)


@dataclass
class WarmCache:
    """What this process has warmed already: kernels are compiled (or loaded) once per process,
    so a second actor of the same kind and shape need not run its throwaway warm-up again."""

    done: set = field(default_factory=set)

    def once(self, key: Hashable, warm: Callable[[], None]) -> None:
        """Run ``warm`` unless a warm-up under ``key`` already ran in this process."""
        if key not in self.done:
            warm()
            self.done.add(key)


#: The process-wide record of warm-ups (one per process: numba's dispatchers are too).
WARMED = WarmCache()
