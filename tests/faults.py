"""Faults injected into one actor of a Ray run: its logic raises, or its process dies.

:class:`Faulty` wraps a node's typed config; the logic it builds is the wrapped node's own,
with a fault that fires after ``after`` input tuples, at one of these points:

- ``"probe"``: inside the first window probe after that (the middle of a batch: probes done
  before it, inserts not), or at the end of that batch if it probes nothing;
- ``"eof"``: in the node's end-of-stream step;
- ``"merged"``: on the first batch after that which the executor coalesced from several
  emitter batches (its tuples span two of the emitter's ``batch_size`` rows: with the input
  handed over as one chunk, the emitter cuts batches at multiples of ``batch_size``).

``fault="raise"`` raises ``RuntimeError("injected fault")``; ``"kill"`` sends the process
SIGKILL (what the OOM killer does); ``"stall"`` sleeps for an hour (alive, not progressing);
``"pause"`` sleeps :data:`PAUSE_S` once before the batch and goes on (a core that falls behind
for a moment, so that what arrives meanwhile waits). With ``once`` (a file path), the fault
fires only if the file is absent and creates it first, so a restarted actor does not fail
again.

The module is pickled by value (:func:`ship`): Ray's workers do not have ``tests/`` on their
path.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass

from ray import cloudpickle

from streamjoin.actors.base import ActorConfig

#: seconds a ``"pause"`` fault sleeps
PAUSE_S = 0.5


def ship() -> None:
    """Let Ray's workers unpickle this module's classes (they are sent by value)."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


@dataclass(frozen=True)
class Faulty(ActorConfig):
    inner: ActorConfig
    fault: str = "raise"
    at: str = "probe"
    after: int = 0
    once: str | None = None

    @property
    def role(self) -> str:
        return self.inner.role

    @property
    def index(self) -> str | None:
        return self.inner.index

    def check(self, query) -> None:
        self.inner.check(query)

    def build(self, query, settings, clock):
        return _FaultyLogic(self, self.inner.build(query, settings, clock), settings.batch_size)


def inject(topology, node: str, **fault):
    """``topology`` with ``node``'s config wrapped in :class:`Faulty` (``fault``: its fields)."""
    ship()
    data = topology.graph.nodes[node]
    data["config"] = Faulty(data["config"], **fault)
    return topology


class _FaultyLogic:
    def __init__(self, config: Faulty, inner, batch_size: int) -> None:
        self._config = config
        self._batch_size = batch_size
        self._inner = inner
        self._seen = 0
        self._armed = True

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def _fire(self) -> None:
        self._armed = False
        once = self._config.once
        if once is not None:
            with open(once, "w"):
                pass
        if self._config.fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self._config.fault == "stall":
            time.sleep(3600)
        raise RuntimeError("injected fault")

    def _due(self) -> bool:
        if self._armed and self._config.once is not None and os.path.exists(self._config.once):
            self._armed = False  # fired in an earlier life of this actor
        return self._armed and self._seen >= self._config.after

    def passes_on(self, port, message):
        fn = getattr(self._inner, "passes_on", None)
        return [] if fn is None else fn(port, message)

    def on_batch(self, port, message):
        due = self._due()
        self._seen += len(message)
        if due and self._config.fault == "pause":
            self._armed = False
            time.sleep(PAUSE_S)
            return self._inner.on_batch(port, message)
        at = self._config.at
        size = self._batch_size
        if due and at == "merged" and message.seq[0] // size != message.seq[-1] // size:
            self._fire()
        if not (due and at == "probe"):
            return self._inner.on_batch(port, message)
        parts = list(getattr(self._inner, "parts", {}).values())
        originals = [p.probe for p in parts]

        def probe(*args, **kwargs):
            self._fire()

        for p in parts:
            p.probe = probe
        try:
            out = self._inner.on_batch(port, message)
        finally:
            for p, original in zip(parts, originals, strict=True):
                p.probe = original
        self._fire()  # it probed nothing
        return out

    def on_eof(self):
        if self._config.at == "eof" and self._due():
            self._fire()
        return self._inner.on_eof()


def host_pids() -> list[int]:
    """Processes of Ray actors hosting topology nodes (Ray titles them ``ray::Host…``)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if f.read().startswith(b"ray::Host"):
                        pids.append(int(entry))
            except OSError:
                continue
    return pids
