"""What an executor records while it runs, and how it becomes :class:`Result` metrics."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import numpy as np

from streamjoin.actors.collector import Collector

#: Batch steps whose lags an actor keeps (the last ones, at least this many): enough for a
#: median, bounded on a long run.
LAG_SAMPLES = 4096


def newest_ingest(msg) -> int | None:
    """When the newest tuple of ``msg`` arrived (its ``ingest_ns``), None where it carries no
    tuple (a progress marker, an empty batch)."""
    ingest = getattr(msg, "ingest_ns", None)
    return int(ingest.max()) if ingest is not None and len(ingest) else None


class _Schedstat:
    """The opening thread's ``/proc/thread-self/schedstat``, open while that thread lives (a
    thread's own: :data:`_THREADS` holds one a thread, closed with the thread's locals)."""

    def __init__(self) -> None:
        self.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)

    def waited(self) -> int:
        return int(os.pread(self.fd, 128, 0).split()[1])

    def __del__(self) -> None:
        os.close(self.fd)


_THREADS = threading.local()


def run_queue_reader() -> Callable[[], int] | None:
    """A reader of the calling thread's time so far runnable but waiting for a processor (ns,
    Linux's ``/proc/thread-self/schedstat``: the thread descheduled while others ran), None
    where the system keeps no such count. Read by the thread that made it; one file a
    thread, however many runs ask."""
    stat = getattr(_THREADS, "schedstat", None)
    if stat is None:
        try:
            stat = _Schedstat()
            stat.waited()
        except (OSError, ValueError, IndexError):
            return None
        _THREADS.schedstat = stat
    return stat.waited


@dataclass
class ActorStats:
    role: str
    busy_ns: int = 0
    batches_in: int = 0
    tuples_in: int = 0
    batches_out: int = 0
    tuples_out: int = 0
    peak_queue: int = 0
    #: CPU time of the actor's own process from its first message to its end of stream
    #: (``ray`` hosts: the logic, messaging and Ray's threads meanwhile), None where actors
    #: share a process
    cpu_ns: int | None = None
    #: CPU time in the logic's steps alone, messaging left out (``ray``: the stepping
    #: thread's CPU; ``sim``: the compute its steps were charged), None where not measured
    step_cpu_ns: int | None = None
    #: per step that handled tuples (the last ``LAG_SAMPLES`` or more): when its logic began
    #: and when it ended, ns after the newest tuple it handled arrived (the emitter's steps:
    #: after the chunk's arrival), the CPU its logic took (``ray``, ``local``: the thread's;
    #: ``sim``: its charge), and on ``ray`` how long its thread waited for a processor since
    #: its previous step ended (its sends, its wake-up for this step's message, the step; -1
    #: where not measured): where a batch's latency goes, actor by actor
    lags_ns: list[tuple[int, int, int, int]] = field(default_factory=list)

    def lag(
        self, newest_ns: int | None, start_ns: int, end_ns: int, cpu_ns: int, wait_ns: int = -1
    ) -> None:
        """Keep a step's lags (nothing for a step without tuples: ``newest_ns`` None)."""
        if newest_ns is None:
            return
        if len(self.lags_ns) >= 2 * LAG_SAMPLES:
            del self.lags_ns[:LAG_SAMPLES]
        self.lags_ns.append((start_ns - newest_ns, end_ns - newest_ns, cpu_ns, wait_ns))


@dataclass
class RunTrace:
    """Raw record of one run; ``collector`` is the collector's logic object after EOF."""

    input_tuples: int
    start_ns: int
    end_ns: int
    actors: dict[str, ActorStats] = field(default_factory=dict)
    collector: Collector | None = None

    def actor_metrics(self) -> dict:
        elapsed = max(1, self.end_ns - self.start_ns)
        out = {}
        for name, st in self.actors.items():
            # (shallow: asdict deep-copied every step's lags, 3% of a calibration's time)
            d = {f.name: getattr(st, f.name) for f in fields(st)}
            d["busy_s"] = d.pop("busy_ns") / 1e9
            d["busy_share"] = st.busy_ns / elapsed
            cpu = d.pop("cpu_ns")
            if cpu is not None:
                d["cpu_s"] = cpu / 1e9
            step_cpu = d.pop("step_cpu_ns")
            if step_cpu is not None:
                d["step_cpu_s"] = step_cpu / 1e9
            lags = d.pop("lags_ns")
            if lags:
                a = np.asarray(lags, dtype=np.float64)
                start, end, cpu = np.median(a[:, :3], axis=0) / 1e6
                d["lag_ms"] = {
                    "start_p50": float(start),
                    "end_p50": float(end),
                    # (not end_p50 - start_p50: an actor's steps of two kinds, a chain
                    # core's own batch and what it passes on, begin and end apart)
                    "step_p50": float(np.median(a[:, 1] - a[:, 0]) / 1e6),
                    "cpu_p50": float(cpu),
                    "steps": len(lags),
                }
                if (a[:, 3] >= 0).all():  # the mean: most steps wait for nothing
                    d["lag_ms"]["wait_mean"] = float(a[:, 3].mean() / 1e6)
            out[name] = d
        return out
