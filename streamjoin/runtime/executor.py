"""The :class:`Executor` protocol every backend implements, and :data:`BACKENDS`, the backends by
name.

An executor drives a topology's actor logic (the same objects on every backend, built by
:meth:`~streamjoin.actors.base.ActorConfig.build`) over a stream of validated input chunks and
returns a :class:`~streamjoin.runtime.trace.RunTrace`; :func:`streamjoin.run` does everything
around it (validation, chunking, pacing, the progress bar, the :class:`Result`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from streamjoin.actors.base import RunSettings
from streamjoin.query import Query
from streamjoin.runtime.pipeline import default_chunk_rows
from streamjoin.runtime.trace import RunTrace
from streamjoin.topologies.base import Topology
from streamjoin.validation import Columns


class RunTimeout(TimeoutError):
    """A run did not end within its ``timeout=``; the message names the actors still busy."""


@dataclass(frozen=True)
class Defaults:
    """What an executor makes of the run arguments whose meaning depends on the backend
    (:meth:`Executor.defaults`).

    Attributes
    ----------
    executor : Executor
        The executor to run with: the one asked, or a copy completed from the arguments (the
        simulator turns ``pace`` into its arrival process).
    chunk_rows : int
        Rows handed over at a time when the run names none.
    wall_pace : float or None
        Hand the input over at this many tuples per second of wall time (None: as fast as the
        join takes it).
    """

    executor: Executor
    chunk_rows: int
    wall_pace: float | None


@runtime_checkable
class Executor(Protocol):
    """A backend: where and how a topology's actors run.

    Implementations are small frozen dataclasses whose fields are the backend's options
    (``sj.run(..., backend="local", delivery_seed=7)`` is ``Local(delivery_seed=7)``):
    :class:`~streamjoin.runtime.local.Local`, :class:`~streamjoin.runtime.ray.executor.Ray`
    and :class:`~streamjoin.runtime.sim.Sim`.
    """

    #: The backend's name in :data:`BACKENDS` and in ``Result.metrics["backend"]``.
    name: ClassVar[str]

    def defaults(self, *, pace: float | None, batch_size: int, cols: Columns | None) -> Defaults:
        """The backend's reading of ``pace`` (tuples/s, or None) and its default chunk size;
        ``cols`` is the validated input when it is in memory (None for a Source)."""
        ...

    def run(
        self,
        query: Query,
        topology: Topology,
        chunks: Iterable[Columns],
        settings: RunSettings,
        progress,
    ) -> RunTrace:
        """Drive ``chunks`` (validated, in arrival order) through ``topology``; call
        ``progress.update(rows)`` for each chunk taken (``progress`` may be None)."""
        ...

    def metrics(self, trace: RunTrace) -> dict:
        """What the backend adds to :attr:`Result.metrics <streamjoin.Result.metrics>`."""
        ...


class WallClock:
    """What a backend that runs in wall-clock time (``local``, ``ray``) shares: the input is
    paced at ``pace`` as it is handed over, one millisecond of it at a time (``batch_size``
    rows unpaced), and the run's metrics need nothing more."""

    def defaults(
        self: Executor, *, pace: float | None, batch_size: int, cols: Columns | None
    ) -> Defaults:  # a mixin of executors: ``self`` is one
        return Defaults(self, default_chunk_rows(pace, batch_size), pace)

    def metrics(self, trace: RunTrace) -> dict:
        return {}


class Backends(Mapping):
    """Executor classes by backend name, each imported on first use.

    Importing ``streamjoin`` must not import Ray or SimPy (docs/design.md §3: only ``runtime/ray*``
    imports Ray), so the registry holds where each class lives and imports it when a run
    asks for it. Iterating gives the names.
    """

    def __init__(self, **paths: str) -> None:
        self._paths = paths  # name -> "module:Class"

    def __getitem__(self, name: str) -> type:
        module, _, cls = self._paths[name].partition(":")
        return getattr(importlib.import_module(module), cls)

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __repr__(self) -> str:
        return f"Backends({', '.join(self._paths)})"

    def options(self, name: str) -> tuple[str, ...]:
        """The options backend ``name`` takes (its executor's constructor arguments)."""
        return tuple(inspect.signature(self[name]).parameters)

    def create(self, backend: str | Executor, options: dict) -> Executor:
        """The executor :func:`streamjoin.run` was asked for: ``backend`` itself if it is an
        executor, else the named backend's executor built from ``options``.

        Raises
        ------
        ValueError
            For an unknown name, options beside an executor instance, or an option the named
            backend does not take.
        """
        if isinstance(backend, Executor):
            if options:
                raise ValueError(
                    f"{_listed(options)} given beside an executor instance (backend "
                    f"{backend.name!r}): pass {'it' if len(options) == 1 else 'them'} to "
                    f"{type(backend).__name__}(...) instead"
                )
            return backend
        if not isinstance(backend, str):
            raise ValueError(
                f"backend must be a name ({', '.join(self)}) or an Executor, "
                f"got {type(backend).__name__}"
            )
        if backend not in self:
            raise ValueError(f"unknown backend {backend!r}; available: {', '.join(self)}")
        takes = self.options(backend)
        unknown = [k for k in options if k not in takes]
        if unknown:
            raise ValueError(
                f"backend {backend!r} takes no option {_listed(unknown)} "
                f"(its options: {', '.join(takes) or 'none'})"
            )
        return self[backend](**options)


def _listed(names) -> str:
    return ", ".join(f"{n}=" for n in names)


#: The backends :func:`streamjoin.run` knows by name.
BACKENDS = Backends(
    local="streamjoin.runtime.local:Local",
    ray="streamjoin.runtime.ray.executor:Ray",
    sim="streamjoin.runtime.sim:Sim",
)
