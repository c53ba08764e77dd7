"""Ray messaging costs for a machine profile (:func:`cost_model.calibrate`).

Kept apart so that only ``runtime/ray*`` modules import Ray (DESIGN §3).

The costs are measured where a join core stands in the ``ray`` executor
(:mod:`streamjoin.runtime.ray_executor`): between a sender and a receiver that sends on. A
relay actor takes batches from the driver and forwards each to a sink actor, every sender
keeping at most ``IN_FLIGHT`` calls outstanding, as the executor's actors do; the payloads
are real :class:`~streamjoin.batch.Batch` es of a few batch sizes.
"""

from __future__ import annotations

import os
import time

import numpy as np
import ray

from streamjoin.batch import Batch
from streamjoin.runtime.cost_model import MessageCosts, message_nbytes

#: Batch sizes (tuples) of the payloads timed: one tuple up to Ray's inline-argument limit.
BATCH_SIZES = (1, 256, 1024, 2048)
#: Calls a sender keeps outstanding to one destination (``ray_executor.PIPELINE``).
IN_FLIGHT = 2


def _batch(n: int) -> Batch:
    z = np.arange(n, dtype=np.int64)
    return Batch(seq=z, stream=(z % 2).astype(np.int8), idx=z.copy(), ts=z.copy(),
                 ingest_ns=z.copy(), lo_idx=z.copy(), attrs=np.zeros((1, n)))  # fmt: skip


def _bounded(pending: list) -> list:
    """Wait until at most ``IN_FLIGHT`` calls are outstanding."""
    if len(pending) > IN_FLIGHT:
        done, pending = ray.wait(pending, num_returns=len(pending) - IN_FLIGHT)
        ray.get(done)
    return pending


@ray.remote
class _Sink:
    """Receives and records when each call started (monotonic ns, one clock host-wide)."""

    def __init__(self) -> None:
        self.log: list = []
        self.cpu0 = time.process_time_ns()

    def take(self, i: int, msgs) -> None:
        self.log.append((i, time.monotonic_ns()))

    def drain(self) -> tuple[list, int]:
        """The log so far and the process CPU time since the last drain."""
        log, self.log = self.log, []
        cpu, self.cpu0 = time.process_time_ns() - self.cpu0, time.process_time_ns()
        return log, cpu


@ray.remote
class _Relay:
    """Receives a batch and sends it on to the sink, as a join core sends its output."""

    def __init__(self, sink) -> None:
        self.sink, self.pending, self.log = sink, [], []
        self.cpu0 = time.process_time_ns()

    def take(self, i: int, msgs) -> None:
        t0 = time.monotonic_ns()
        self.pending.append(self.sink.take.remote(i, msgs))
        self.log.append((i, t0, time.monotonic_ns()))
        self.pending = _bounded(self.pending)

    def drain(self) -> tuple[list, int]:
        ray.get(self.pending)
        self.pending = []
        log, self.log = self.log, []
        cpu, self.cpu0 = time.process_time_ns() - self.cpu0, time.process_time_ns()
        return log, cpu


def _pipelined(relay, sink, msg, calls: int) -> dict:
    """Back-to-back calls: wall and CPU ns per message, and the driver's time per send."""
    ray.get([relay.drain.remote(), sink.drain.remote()])
    sends = np.empty(calls)
    pending: list = []
    t0 = time.perf_counter_ns()
    for i in range(calls):
        s0 = time.perf_counter_ns()
        pending.append(relay.take.remote(i, [("in", msg)]))
        sends[i] = time.perf_counter_ns() - s0
        pending = _bounded(pending)
    ray.get(pending)
    (_, relay_cpu), (_, sink_cpu) = ray.get(relay.drain.remote()), ray.get(sink.drain.remote())
    return {"period_ns": (time.perf_counter_ns() - t0) / calls,
            "send_ns": float(np.median(sends)),
            "relay_cpu_ns": relay_cpu / calls, "sink_cpu_ns": sink_cpu / calls}  # fmt: skip


def _idle(relay, sink, msg, calls: int, gap_s: float) -> dict:
    """One call at a time, ``gap_s`` apart: the one-way latency of a hop into an idle actor,
    from the end of the sender's ``.remote()`` to the start of the receiving method."""
    sent = []
    for i in range(calls):
        time.sleep(gap_s)
        ref = relay.take.remote(i, [("in", msg)])
        sent.append((i, time.monotonic_ns()))
        ray.get(ref)
    time.sleep(gap_s)
    (relay_log, _), (sink_log, _) = ray.get(relay.drain.remote()), ray.get(sink.drain.remote())
    got = {i: (t_in, t_out) for i, t_in, t_out in relay_log}
    into_sink = dict(sink_log)
    hops = [got[i][0] - t for i, t in sent] + [into_sink[i] - got[i][1] for i, _ in sent]
    return {"hop_ns": float(np.median(hops))}


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """``(intercept, slope)`` of a least-squares line, each clipped at 0."""
    slope, intercept = np.polyfit(x, y, 1)
    slope = max(0.0, float(slope))
    if slope == 0.0:
        return max(0.0, float(np.mean(y))), 0.0
    return max(0.0, float(intercept)), slope


def measure_messages(repeat: int = 150, sizes: tuple[int, ...] = BATCH_SIZES, rounds: int = 3,
                     idle_calls: int = 30, idle_gap_s: float = 0.005) -> tuple[MessageCosts, dict]:  # fmt: skip
    """Time Ray messaging through a relay and turn it into :class:`MessageCosts`.

    For each batch size in ``sizes`` (tuples), ``rounds`` times, the sizes interleaved (the
    host is shared: each figure is the median over rounds):

    - *pipelined*: ``repeat`` batches driver → relay → sink back to back. The relay is the
      busiest actor and per message it receives one batch and sends one, so its time per
      message (the pipeline's period) less the driver's time per ``.remote()`` is what a
      receive costs;
    - *idle*: ``idle_calls`` batches ``idle_gap_s`` apart, so every actor sleeps when a batch
      reaches it; the one-way latency from the end of the sender's ``.remote()`` to the start
      of the receiving method, less that receive cost, is the hop latency: what a message
      waits beyond the receiver's own work (e.g. waking the receiving process on a busy host).

    ``send_*``, ``recv_*`` and ``hop_*`` are lines fitted to these over the payload bytes
    (clipped at 0). Wall times, not CPU times: on a host the actors share with Ray's own
    threads and other work, what a message costs is the time it holds the pipeline up. The
    raw figures come back as the second value (ns per message by batch size, with the relay's
    and the sink's process CPU time per message of the pipelined runs for comparison).

    Starts Ray with this host's CPUs and no dashboard if it is not running, and stops it again
    then.
    """
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
                 configure_logging=False)  # fmt: skip
    try:
        sink = _Sink.options(num_cpus=0.25).remote()
        relay = _Relay.options(num_cpus=0.25).remote(sink)
        _pipelined(relay, sink, _batch(1), 50)  # warm the workers and the connections
        runs: dict = {n: [] for n in sizes}
        for _ in range(rounds):
            for n in sizes:
                msg = _batch(n)
                runs[n].append({**_pipelined(relay, sink, msg, repeat),
                                **_idle(relay, sink, msg, idle_calls, idle_gap_s)})  # fmt: skip
        ray.kill(relay)
        ray.kill(sink)
    finally:
        if started:
            ray.shutdown()
    raw = {n: {"bytes": message_nbytes(_batch(n)),
               **{k: float(np.median([r[k] for r in runs[n]])) for k in runs[n][0]}}
           for n in sizes}  # fmt: skip
    nbytes = np.array([raw[n]["bytes"] for n in sizes], dtype=np.float64)
    send = np.array([raw[n]["send_ns"] for n in sizes])
    recv = np.array([raw[n]["period_ns"] for n in sizes]) - send
    send_ns, send_per_byte = _fit(nbytes, send)
    recv_ns, recv_per_byte = _fit(nbytes, recv)
    model_recv = recv_ns + recv_per_byte * nbytes
    hop_ns, hop_per_byte = _fit(nbytes, np.array([raw[n]["hop_ns"] for n in sizes]) - model_recv)
    costs = MessageCosts(send_ns=send_ns, send_per_byte_ns=send_per_byte, hop_ns=hop_ns,
                         hop_per_byte_ns=hop_per_byte, recv_ns=recv_ns,
                         recv_per_byte_ns=recv_per_byte)  # fmt: skip
    return costs, {"by_batch_size": {str(n): {k: round(v, 1) for k, v in raw[n].items()}
                                     for n in sizes}, "load_1min": os.getloadavg()[0]}  # fmt: skip
