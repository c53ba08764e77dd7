"""Message costs of the ``ray`` executor for a machine profile
(:func:`~streamjoin.runtime.sim.calibrate.calibrate`).

Kept apart, in a module whose name starts with ``ray``, so that only ``runtime/ray*`` modules
import Ray (docs/design.md §3); calibration imports it only when it times messages.

The ``ray`` executor (:mod:`streamjoin.runtime.ray.executor`) passes batches over one TCP
connection per graph edge (:mod:`streamjoin.runtime.ray.channels`); Ray only places and starts
the actors. The costs are measured where a join core stands in it: between a sender and a
receiver that sends on. The driver writes real :class:`~streamjoin.batch.Batch` es of a few
batch sizes to a relay actor, which writes each on to a sink actor, over ``channels``
connections, sealed or not as the executor's edges are here: plain on loopback when every Ray
node is this machine, sealed between machines (:mod:`~streamjoin.runtime.ray.sealing`). The
two differ by more than the model's other errors: sealing a batch of 1,024 tuples (50 KB)
costs its sender and its receiver some 15–40 µs each on a 2-core EPYC VM, where the whole
plain receive is about 60 µs.

The relay and the sink are built like the executor's host for an acyclic graph (every layout
but the handshake chain): one thread waits on its incoming connection, reads the frames that
are ready (up to ``INBOX`` messages; the socket buffers hold the rest, and then the sender
blocks: backpressure), takes the oldest and writes it on. A host of a cyclic graph reads in a
second thread; that hand-over between threads is not timed here. Every per-message cost thus
falls in one thread, in order — the wake-up on a ready socket, ``channels.recv`` and the
building of the :class:`Batch`, then ``channels.payload`` / ``frame`` / ``send`` — as the
simulator charges a core: the receive, then the step, then the sends.
"""

from __future__ import annotations

import os
import selectors
import threading
import time
from collections import deque

import numpy as np
import ray

from streamjoin.batch import Batch
from streamjoin.runtime.coalesce import INBOX
from streamjoin.runtime.ray import channels
from streamjoin.runtime.ray.executor import one_machine
from streamjoin.runtime.sim.profile import MessageCosts, message_nbytes

#: Batch sizes (tuples) of the payloads timed: one tuple up to a large batch (~800 KB).
BATCH_SIZES = (1, 256, 1024, 16384)
#: Share of each pipelined run left out of its period at the start (the pipeline filling).
WARM_SHARE = 0.1


def _batch(n: int) -> Batch:
    z = np.arange(n, dtype=np.int64)
    return Batch(
        seq=z,
        stream=(z % 2).astype(np.int8),
        idx=z.copy(),
        ts=z.copy(),
        ingest_ns=z.copy(),
        lo_idx=z.copy(),
        attrs=np.zeros((1, n)),
    )


@ray.remote(max_restarts=0)
class _Station:
    """A relay (with a destination) or a sink (without), built like the executor's host of an
    acyclic graph: one thread reads what is ready, up to ``INBOX`` messages, and passes the
    oldest on.

    Per message it logs ``(woke, taken, sent)`` in monotonic ns (one clock host-wide): when
    the frame's socket was found ready (the time a message waited in the socket buffer
    behind others is not in it), when the thread had read it and took it from the inbox,
    and when it had written it on (``taken`` again for a sink).
    """

    def __init__(self, loopback: bool, sealed: bool) -> None:
        self.sealed = sealed
        self.server = channels.listen("127.0.0.1" if loopback else ray.util.get_node_ip_address())
        self.log: list = []
        self.sealed_edges: list[bool] = []
        self.want = 0  # drain() waits for this many log entries
        self.logged = threading.Event()
        self.cpu0 = time.process_time_ns()

    def address(self) -> tuple[str, int]:
        return self.server.getsockname()[:2]

    def sealed(self) -> list[bool]:
        """Whether its incoming edge, then its outgoing one (a relay), seal their frames."""
        return self.sealed_edges

    def start(self, dest: tuple[str, int] | None, sender: str, secret: bytes) -> None:
        """Connect to ``dest`` (None: a sink) and start reading the one incoming edge, from
        ``sender``; both ends prove ``secret``."""
        acceptor = channels.Acceptor(self.server, secret, [sender], sealed=self.sealed)
        self.out = (
            channels.connect(dest, "relay", secret, sealed=self.sealed)
            if dest is not None
            else None
        )
        threading.Thread(target=self._work, args=(acceptor, sender), daemon=True).start()

    def _work(self, acceptor: channels.Acceptor, sender: str) -> None:
        sock = acceptor.result()[sender]
        self.sealed_edges = [sock.sealed] + ([self.out.sealed] if self.out is not None else [])
        self.server.close()
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ)
        inbox: deque = deque()
        while True:
            block = not inbox
            while len(inbox) < INBOX and selector.select(None if block else 0):
                woke = time.monotonic_ns()
                inbox.append((woke, channels.recv(sock)))
                block = False
            woke, frame = inbox.popleft()
            taken = time.monotonic_ns()
            if frame is channels.END:
                if self.out is not None:
                    channels.send(self.out, [channels.end_frame()])
                return
            if self.out is not None:
                port, msg = frame
                channels.send(self.out, [channels.frame(port, channels.payload(msg))])
            self.log.append((woke, taken, time.monotonic_ns()))
            if len(self.log) == self.want:  # wake drain() once, not per message
                self.logged.set()

    def drain(self, n: int) -> tuple[list, int]:
        """Wait until ``n`` messages are logged; the log and the process CPU time (ns) since
        the last drain."""
        self.logged.clear()
        self.want = n
        while len(self.log) < n:
            self.logged.wait(0.01)
        log, self.log = self.log, []
        cpu, self.cpu0 = time.process_time_ns() - self.cpu0, time.process_time_ns()
        return log, cpu


def _send(sock, msg) -> int:
    """Write ``msg`` as the executor's nodes do; the monotonic ns once the kernel took it."""
    channels.send(sock, [channels.frame("in", channels.payload(msg))])
    return time.monotonic_ns()


def _pipelined(sock, relay, sink, msg, calls: int) -> dict:
    """``calls`` messages back to back (the driver blocks once the buffers are full): the
    period at which they leave the relay, the relay's send time, and each process's CPU
    time per message."""
    for _ in range(calls):
        _send(sock, msg)
    (relay_log, relay_cpu), (sink_log, sink_cpu) = ray.get(
        [relay.drain.remote(calls), sink.drain.remote(calls)]
    )
    warm = int(calls * WARM_SHARE)
    sent = np.array([s for _, _, s in relay_log[warm:]], dtype=np.float64)
    return {
        "period_ns": (sent[-1] - sent[0]) / (len(sent) - 1),
        "send_ns": float(np.median([s - t for _, t, s in relay_log[warm:]])),
        "relay_cpu_ns": relay_cpu / calls,
        "sink_cpu_ns": sink_cpu / calls,
    }


def _idle(sock, relay, sink, msg, calls: int, gap_s: float) -> dict:
    """One message at a time, ``gap_s`` apart, so every station sleeps when a frame reaches it:
    the one-way time of a hop from the start of the sender's write to the receiver having read
    the message (on loopback a sender's write can return after the receiver has read, so its
    end is no reference), the receiver's part of it from waking on the ready socket, and the
    driver's write time."""
    starts, writes = [], []
    for _ in range(calls):
        time.sleep(gap_s)
        t0 = time.monotonic_ns()
        writes.append(_send(sock, msg) - t0)
        starts.append(t0)
    (relay_log, _), (sink_log, _) = ray.get([relay.drain.remote(calls), sink.drain.remote(calls)])
    starts += [r[1] for r in relay_log]  # the relay starts writing once it took the message
    read = relay_log + sink_log
    return {
        "one_way_ns": float(np.median([r[1] - t for r, t in zip(read, starts, strict=True)])),
        "idle_recv_ns": float(np.median([r[1] - r[0] for r in read])),
        "driver_send_ns": float(np.median(writes)),
    }


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """``(intercept, slope)`` of a least-squares line, each clipped at 0."""
    slope, intercept = np.polyfit(x, y, 1)
    slope = max(0.0, float(slope))
    if slope == 0.0:
        return max(0.0, float(np.mean(y))), 0.0
    return max(0.0, float(intercept)), slope


def measure_messages(
    repeat: int = 300,
    sizes: tuple[int, ...] = BATCH_SIZES,
    rounds: int = 3,
    idle_calls: int = 40,
    idle_gap_s: float = 0.005,
    sealed: bool | None = None,
) -> tuple[MessageCosts, dict]:
    """Time the executor's messages through a relay and turn them into :class:`MessageCosts`.

    For each batch size in ``sizes`` (tuples), ``rounds`` times, the sizes interleaved (the
    host is shared: each figure is the median over rounds):

    - *pipelined*: ``repeat`` batches driver → relay → sink back to back. The relay is the
      busiest station (per message it receives one batch and sends one; the sink only
      receives), so the period at which batches leave it (the first ``WARM_SHARE`` left out)
      is its time per message. Its time from taking a message to having written it on is the
      send cost; the rest of the period is what receiving costs it (``select``, ``recv``,
      building the batch);
    - *idle*: ``idle_calls`` batches ``idle_gap_s`` apart, so every station sleeps when a
      frame reaches it. The one-way time from the start of the sender's write to the
      receiver having read the message, less those send and receive costs, is what a
      message waits beyond the two ends' own work: waking the receiving process.

    The send and receive at each size are kept as measured (``MessageCosts.measured``,
    interpolated between the sizes), and ``send_*`` and ``recv_*`` are lines fitted to them
    over the payload bytes (clipped at 0): the summary, and the growth beyond the largest.
    ``hop_ns`` is the median of that wait over the batch sizes (clipped at 0), with no
    per-byte part: a wake-up does not grow with the payload, and for a large batch the
    sender's write and the receiver's read overlap (the bytes stream through the socket
    while both run), so their sum exceeds the one-way time and the wait comes out negative.
    Wall times, not CPU times: on a host shared with Ray's own threads and other work, what a
    message costs is the time it holds the pipeline up. The raw figures come back as the
    second value: ns per message by batch size, with the relay's and the sink's process CPU
    time per message of the pipelined runs, the idle receiver's time from waking on the
    ready socket to having read the frame and the driver's write time for comparison, and
    the load average at the start and the end.

    Starts Ray with this host's CPUs and no dashboard if it is not running, and stops it again
    then. When every Ray node is this machine, the stations listen on loopback, else on their
    node's IP; the edges are sealed where ``sealed`` says, by default as the executor's are
    (on loopback not, else sealed), and the raw figures say which. The connections are
    authenticated as the executor's are, with a secret of this call's.
    """
    started = not ray.is_initialized()
    if started:
        ray.init(
            num_cpus=os.cpu_count(),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    load0 = os.getloadavg()[0]
    try:
        secret = channels.new_secret()
        loopback = one_machine()
        if sealed is None:
            sealed = not loopback
        sink = _Station.options(num_cpus=0.25).remote(loopback, sealed)  # type: ignore[attr-defined]  # a ray.remote class (mypy skips class decorators)
        relay = _Station.options(num_cpus=0.25).remote(loopback, sealed)  # type: ignore[attr-defined]  # as sink
        sink_at, relay_at = ray.get([sink.address.remote(), relay.address.remote()])
        ray.get(
            [
                sink.start.remote(None, "relay", secret),
                relay.start.remote(sink_at, "driver", secret),
            ]
        )
        sock = channels.connect(relay_at, "driver", secret, sealed=sealed)
        try:
            _pipelined(sock, relay, sink, _batch(256), 200)  # warm threads and connections
            runs: dict = {n: [] for n in sizes}
            for _ in range(rounds):
                for n in sizes:
                    msg = _batch(n)
                    runs[n].append(
                        {
                            **_pipelined(sock, relay, sink, msg, repeat),
                            **_idle(sock, relay, sink, msg, idle_calls, idle_gap_s),
                        }
                    )
            channels.send(sock, [channels.end_frame()])
        finally:
            sock.close()
        edges = ray.get(relay.sealed.remote()) + ray.get(sink.sealed.remote())
        assert len(set(edges)) == 1, edges  # (every edge was opened with the same sealing)
        ray.kill(relay)
        ray.kill(sink)
    finally:
        if started:
            ray.shutdown()
    raw = {
        n: {
            "bytes": message_nbytes(_batch(n)),
            **{k: float(np.median([r[k] for r in runs[n]])) for k in runs[n][0]},
        }
        for n in sizes
    }
    nbytes = np.array([raw[n]["bytes"] for n in sizes], dtype=np.float64)
    send = np.array([raw[n]["send_ns"] for n in sizes])
    recv = np.array([raw[n]["period_ns"] for n in sizes]) - send
    send_ns, send_per_byte = _fit(nbytes, send)
    recv_ns, recv_per_byte = _fit(nbytes, recv)
    own = send + recv  # what the simulator charges the two ends at these sizes
    waits = np.array([raw[n]["one_way_ns"] for n in sizes]) - own
    costs = MessageCosts(
        send_ns=send_ns,
        send_per_byte_ns=send_per_byte,
        hop_ns=max(0.0, float(np.median(waits))),
        recv_ns=recv_ns,
        recv_per_byte_ns=recv_per_byte,
        measured=np.column_stack([nbytes, send, recv]).tolist(),
    )
    loads = (round(load0, 2), round(os.getloadavg()[0], 2))
    return costs, {
        "by_batch_size": {str(n): {k: round(v, 1) for k, v in raw[n].items()} for n in sizes},
        "sealed": edges[0],
        "load_1min": loads[1],
        "load_1min_start_end": loads,
    }
