"""Message costs of the ``ray`` executor for a machine profile
(:func:`~streamjoin.runtime.sim.calibrate.calibrate`).

Kept apart, in a module whose name starts with ``ray``, so that only ``runtime/ray*`` modules
import Ray (docs/design.md §3); calibration imports it only when it times messages.

The ``ray`` executor (:mod:`streamjoin.runtime.ray.executor`) passes batches over one TCP
connection per graph edge (:mod:`streamjoin.runtime.ray.channels`); Ray only places and starts
the actors. The costs are measured where a join core stands in it, through the executor's own
host code (:class:`~streamjoin.runtime.ray.host.Host`): the driver writes real
:class:`~streamjoin.batch.Batch` es of a few batch sizes to a relay host, whose logic hands
each on to a sink host, over the executor's edges, sealed or not as its runs' edges are here:
plain on loopback when every Ray node is this machine, sealed between machines
(:mod:`~streamjoin.runtime.ray.sealing`). The two differ by more than the model's other
errors: a sealed frame costs both ends about half as much again as a plain one
(``experiments/results/calibrate_check.md``).

The relay and the sink are hosts of an acyclic graph (every layout but the handshake chain), and
again hosts of a cyclic one, which read their edges in a second thread and hand each frame to
the stepping thread: what that costs a message more is ``cyclic_recv_ns``. Their logics stamp
each step with the monotonic clock, their process's CPU time and their stepping thread's, then
do a join core's work on as many tuples (timed, and left out). Between two steps a host's
process spent, besides that work, what a message costs it: waking on a ready socket where it
had slept, reading the frame and building the batch, the host's bookkeeping around the step,
and the relay's writing it on; besides, what Ray's threads in the process use meanwhile, which
the stepping thread's own CPU leaves out. (A hand-built copy of
the host's loop, timed here before, cost a good deal less than the host does per message.)
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
import ray

from streamjoin import indexes
from streamjoin.actors.base import ActorConfig, Logic, RunSettings
from streamjoin.batch import Batch
from streamjoin.query import CountWindow, Query, band
from streamjoin.roofline import TICK_KINDS, processor_ticks
from streamjoin.runtime.coalesce import merge
from streamjoin.runtime.ray import channels
from streamjoin.runtime.ray.executor import one_machine
from streamjoin.runtime.ray.host import Host, Wiring
from streamjoin.runtime.sim.profile import MessageCosts, message_nbytes
from streamjoin.runtime.sim.variability import spread_table

#: Batch sizes (tuples) of the payloads timed: one tuple up to a large batch (~800 KB).
BATCH_SIZES = (1, 256, 1024, 16384)
#: Share of each run's steps left out at its start (the pipeline filling, the process waking).
WARM_SHARE = 0.1
#: The join work the calibration's hosts do between their messages (:class:`_JoinWork`): a
#: count window of this many tuples per stream (the check's), keys uniform on ``[0,
#: WORK_KEYS)``.
WORK_WINDOW = 8192
WORK_KEYS = 1e9
#: Gaps (s) between the messages of the idle runs: what waking costs a host that slept is
#: measured after each (``MessageCosts.wake_after``: it grows with the gap).
IDLE_GAPS_S = (0.002, 0.008)
#: Batches past this many tuples are sent back to back fewer times, in proportion (at least
#: :data:`MIN_PIPELINED`): a 16,384-tuple batch takes the pair some 7-10 ms, and 300 of them,
#: on both pairs in three rounds, took about a third of the message phase for one mean each.
PIPELINED_TUPLES = 1024
MIN_PIPELINED = 100
#: Batch sizes (tuples, inclusive) whose join work between idle messages gives the spread of a
#: step's compute (``Variability.step``): a paced run's batches; a one-tuple step is mostly
#: the clock's own granularity, and a long one averages its spread away.
STEP_SPREAD_SIZES = (256, 4096)


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


class _JoinWork:
    """What a join core does between its messages, for the hosts to do between theirs: a band
    join of uniform keys over a count window of :data:`WORK_WINDOW` per stream in two
    B+-trees, each batch's keys probed against the other stream's tree, inserted into their
    own, and the oldest expired. Its own keys: the messages' are not looked at."""

    def __init__(self) -> None:
        self.trees = [indexes.get("bplus_tree")(1) for _ in range(2)]
        self.rng = np.random.default_rng(0)
        self.eps = np.array([WORK_KEYS / WORK_WINDOW])  # about 2 matches a probe
        self.next_ref = 0
        for _ in range(2 * WORK_WINDOW // 1024):
            self(1024)

    def __call__(self, n: int) -> None:
        """Join ``n`` new tuples, half of each stream (at least one)."""
        for y, m in enumerate((max(1, n - n // 2), n // 2)):
            if not m:
                continue
            keys = np.sort(self.rng.uniform(0, WORK_KEYS, (1, m)))
            refs = np.arange(self.next_ref, self.next_ref + m)
            self.next_ref += m
            self.trees[1 - y].probe(keys, -self.eps, self.eps)
            self.trees[y].insert(keys, refs)
            self.trees[y].expire(self.next_ref - 2 * WORK_WINDOW)


class _Stamps(Logic):
    """A relay's logic (``forward``: it hands each batch on) or a sink's: each step logs
    ``(monotonic ns, process CPU ns, the stepping thread's CPU ns, the thread's CPU in join
    work so far, the thread's CPU in merges so far)`` on entry. With ``work``, each step then
    joins as many tuples as the batch holds (:class:`_JoinWork`), as a join core's steps
    would between its messages: they leave the host's code and data colder for the next
    message. A relay also times merging the batch with itself, as a host merges two
    batches waiting for a core (``coalesce.merge``), and drops the copy."""

    cost_group = "relay"  # (no simulated actor: never charged)

    def __init__(self, forward: bool, work: bool) -> None:
        self.forward = forward
        self.work = _JoinWork() if work else None
        self.work_ns = self.merge_ns = 0
        self.log: list[tuple[int, int, int, int, int]] = []

    def on_batch(self, port: str, message) -> list:
        self.log.append(
            (
                time.monotonic_ns(),
                time.process_time_ns(),
                time.thread_time_ns(),
                self.work_ns,
                self.merge_ns,
            )
        )
        c0 = time.thread_time_ns()
        if self.work is not None:
            self.work(len(message))
        c1 = time.thread_time_ns()
        self.work_ns += c1 - c0
        if self.forward:
            merge([message, message])
            self.merge_ns += time.thread_time_ns() - c1
        return [("out", message)] if self.forward else []

    def counters(self) -> tuple[float, ...]:
        return ()


@dataclass(frozen=True)
class _StampsConfig(ActorConfig):
    role = "relay"
    reports_logic = True  # the host hands the logic, with its log, back
    forward: bool = True
    work: bool = True

    def build(self, query, settings, clock) -> _Stamps:
        return _Stamps(self.forward, self.work)


def _log(host) -> np.ndarray:
    """The host's step stamps so far, as an ``(n, 5)`` int64 array."""
    return np.array(ray.get(host.report.remote())[1].log, dtype=np.int64).reshape(-1, 5)


def _wait_handled(host, n: int) -> None:
    """Wait until ``host`` has handled ``n`` frames in all (polling after the sends, so the
    polls land after the steps timed)."""
    time.sleep(0.02)
    while ray.get(host.settle.remote())[1] < n:
        time.sleep(0.02)


def _steady(stamps: np.ndarray, column: int = 1) -> np.ndarray:
    """Per step after the first ``WARM_SHARE``: the CPU the process (``column`` 1) or the
    stepping thread (2) used since the step before (ns), less the step's join work and
    merge (:class:`_Stamps`)."""
    return _per_step(stamps, column) - _per_step(stamps, 3) - _per_step(stamps, 4)


def _per_step(stamps: np.ndarray, column: int) -> np.ndarray:
    """Per step after the first ``WARM_SHARE``: what ``column`` of the stamps grew by."""
    cpu = np.diff(stamps[:, column])
    return cpu[int(len(cpu) * WARM_SHARE) :]


def _send(sock, msg) -> None:
    """Write ``msg`` as the executor's nodes do."""
    channels.send(sock, [channels.frame("in", channels.payload(msg))])


class _Pair:
    """A relay host feeding a sink host, and the driver's edge to the relay; ``sent`` counts
    the driver's frames (each becomes one step of each host, in order). ``cyclic``: hosts as a
    cyclic graph's are (a reader thread besides the stepping one)."""

    def __init__(
        self, loopback: bool, sealed: bool, cyclic: bool = False, work: bool = True
    ) -> None:
        query, settings = Query(band("x", 0.0), window=CountWindow(1)), RunSettings()
        self.relay, self.sink = (
            Host.options(num_cpus=0.25).remote(name, _StampsConfig(forward, work), query, settings)  # type: ignore[attr-defined]  # a ray.remote class (mypy skips class decorators)
            for name, forward in (("relay", True), ("sink", False))
        )
        relay_at, sink_at = ray.get([h.listen.remote(loopback) for h in (self.relay, self.sink)])
        secret = channels.new_secret()

        def wiring(sender: str, routes: dict, addresses: dict) -> Wiring:
            return Wiring(
                routes=routes,
                addresses=addresses,
                senders=[sender],
                bounded=[sender],
                cyclic=cyclic,
                secret=secret,
                inputs={sender: frozenset({"in"})},
                sealed=sealed,
            )

        ray.get(
            [
                self.sink.start.remote(wiring("relay", {}, {})),
                self.relay.start.remote(
                    wiring("driver", {"out": [("sink", "in")]}, {"sink": tuple(sink_at[:2])})
                ),
            ]
        )
        self.sock = channels.connect(tuple(relay_at[:2]), "driver", secret, sealed=sealed)
        self.sealed = self.sock.sealed
        self.sent = 0

    def run(
        self, msg, calls: int, gap_s: float = 0.0, spin: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Send ``calls`` messages, back to back or ``gap_s`` apart (the driver asleep
        meanwhile, or with ``spin`` busy in a loop); the relay's and the sink's stamps of their
        steps, and the driver's thread CPU for each send (ns)."""
        sends = np.empty(calls, dtype=np.int64)
        for i in range(calls):
            if gap_s and spin:
                until = time.perf_counter() + gap_s
                while time.perf_counter() < until:
                    pass
            elif gap_s:
                time.sleep(gap_s)
            c0 = time.thread_time_ns()
            _send(self.sock, msg)
            sends[i] = time.thread_time_ns() - c0
        self.sent += calls
        _wait_handled(self.sink, self.sent)
        relay, sink = _log(self.relay), _log(self.sink)
        return relay[self.sent - calls :], sink[self.sent - calls :], sends

    def close(self) -> None:
        self.sock.close()
        ray.kill(self.relay)
        ray.kill(self.sink)


def _pipelined_calls(repeat: int, n: int) -> int:
    """How many ``n``-tuple batches a pipelined run sends: ``repeat``, fewer in proportion
    past :data:`PIPELINED_TUPLES` tuples, at least :data:`MIN_PIPELINED` (or ``repeat``)."""
    if n <= PIPELINED_TUPLES:
        return repeat
    return min(repeat, max(MIN_PIPELINED, repeat * PIPELINED_TUPLES // n))


def _pipelined(pair: _Pair, msg, calls: int) -> dict:
    """``calls`` messages back to back (the driver blocks once the buffers are full): each
    host's CPU per message, and the period at which the relay takes them."""
    relay, sink, sends = pair.run(msg, calls)
    warm = int(calls * WARM_SHARE)
    return {
        "driver_send_ns": float(np.median(sends[warm:])),
        "relay_cpu_ns": float(np.mean(_steady(relay))),
        "sink_cpu_ns": float(np.mean(_steady(sink))),
        "relay_thread_ns": float(np.mean(_steady(relay, 2))),
        "sink_thread_ns": float(np.mean(_steady(sink, 2))),
        "relay_period_ns": float((relay[-1, 0] - relay[warm, 0]) / (calls - 1 - warm)),
        "work_ns": float(np.mean(_per_step(relay, 3))),
        "work_median_ns": float(np.median(_per_step(relay, 3))),
        "merge_ns": float(np.mean(_per_step(relay, 4))),
    }


def _idle(pair: _Pair, msg, calls: int, spread: dict[str, list] | None = None) -> dict:
    """``calls`` messages ``IDLE_GAPS_S`` apart (each gap in turn), so each host sleeps when a
    frame reaches it: each host's CPU per message at each gap (the median), the driver's CPU
    per send (asleep in the gaps, and again busy in them: a send to a host asleep, from a
    sender that did not sleep), and the one-way time from the relay's step to the sink's (the
    relay's write, the wait for the sink's process to wake, its read) at the longer gap.
    ``spread`` gains each step's join work over the median of this size's at each gap
    (``"step"``, for sizes within :data:`STEP_SPREAD_SIZES`) and each one-way time over
    their median at the longer gap (``"message"``)."""
    out: dict = {}
    warm = int(calls * WARM_SHARE)
    lo, hi = STEP_SPREAD_SIZES
    for gap in IDLE_GAPS_S:
        ms = f"{gap * 1e3:g}ms"
        relay, sink, sends = pair.run(msg, calls, gap)
        for name, stamps in (("relay", relay), ("sink", sink)):
            out[f"asleep_{name}_cpu_ns_{ms}"] = float(np.median(_steady(stamps)))
            out[f"asleep_{name}_thread_ns_{ms}"] = float(np.median(_steady(stamps, 2)))
        # the join work right after the wake: less ``work_median_ns`` (back to back), what a
        # core's step costs more after that gap in a process of its own (raw figures only)
        out[f"asleep_work_ns_{ms}"] = float(np.median(_per_step(relay, 3)))
        out[f"asleep_driver_send_ns_{ms}"] = float(np.median(sends[warm:]))
        # from the relay's step to the sink's, less the relay's work and merge in between
        # (each step's, from its stamps to the next step's; the last one's is not known)
        done = np.diff(relay[:, 3]) + np.diff(relay[:, 4])
        one_way = (sink[:-1, 0] - relay[:-1, 0] - done)[warm:]
        out["one_way_ns"] = median = float(np.median(one_way))
        if spread is not None:
            work = _per_step(relay, 3).astype(np.float64)
            if lo <= len(msg) <= hi and np.median(work) > 0:
                spread["step"].extend(work / np.median(work))
            if gap == IDLE_GAPS_S[-1] and median > 0:
                spread["message"].extend(one_way / median)
        out[f"busy_driver_send_ns_{ms}"] = float(
            np.median(pair.run(msg, calls, gap, True)[2][warm:])
        )
    return out


def _softirq_ns(since: np.ndarray | None) -> float:
    """The machine's softirq time (ns) since the :func:`~streamjoin.roofline.processor_ticks`
    ``since`` (0 where there is no ``/proc/stat``)."""
    now = processor_ticks()
    if since is None or now is None:
        return 0.0
    k = TICK_KINDS.index("softirq")
    return float(now[k] - since[k]) * 1e9 / os.sysconf("SC_CLK_TCK")


def _by_gap(figures: list[list[float]]) -> list[float]:
    """The median at each gap of ``figures`` (one ``[at the shorter gap, at the longer]`` per
    host or size), clipped at 0, the longer gap's no less than the shorter's."""
    out = [max(0.0, float(np.median([f[k] for f in figures]))) for k in (0, 1)]
    out[1] = max(out)  # (a longer sleep costs no less)
    return out


def _kernel_line(
    nbytes: np.ndarray, frames: np.ndarray, spent_ns: np.ndarray
) -> tuple[float, float]:
    """``(per frame, per byte)`` ns of the kernel's delivery of a frame: ``spent_ns[i]`` is
    its softirq time while ``frames[i]`` frames of ``nbytes[i]`` bytes went over loopback,
    fitted as ``a · frames + b · frames · bytes`` by least squares on the totals (a total is
    good to a clock tick whatever its size, so they weigh alike), each clipped at 0."""
    x = np.column_stack([frames, frames * nbytes]).astype(np.float64)
    if not frames.sum():
        return 0.0, 0.0
    (per_frame, per_byte), *_ = np.linalg.lstsq(x, spent_ns, rcond=None)
    if per_byte < 0:
        return max(0.0, float(spent_ns.sum() / x[:, 0].sum())), 0.0
    if per_frame < 0:
        return 0.0, max(0.0, float(spent_ns.sum() / x[:, 1].sum()))
    return float(per_frame), float(per_byte)


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
    sealed: bool | None = None,
    work: bool = True,
) -> tuple[MessageCosts, dict]:
    """Time the executor's messages through a relay host and turn them into
    :class:`MessageCosts` (module docstring).

    For each batch size in ``sizes`` (tuples), ``rounds`` times, the sizes interleaved (the
    host is shared: each figure is the median over rounds), each round on hosts of its own:
    where the kernel places a pair's processes sets what its messages cost. With ``work``
    (the default) each host joins as many tuples as a batch holds between its messages, as
    a join core does (:class:`_JoinWork`), and that work's CPU is left out of every figure:
    between steps that do nothing, the same receives and sends cost the hosts markedly less
    (their code and data stay in cache; ``experiments/results/calibrate_check.md``), which
    undercharged every core's messages.

    - *pipelined*: ``repeat`` batches driver → relay → sink back to back (fewer of a batch past
      :data:`PIPELINED_TUPLES` tuples, in proportion, at least :data:`MIN_PIPELINED`: the
      largest batch's figures feed only the per-byte lines beyond the middle sizes, and the
      host moves them between runs more than a hundred messages against three hundred
      does). The sink's CPU per
      message is the receive (the frame read, the batch built, the host's bookkeeping around
      a step); the relay's, which also writes each batch on, less the sink's is the send;
    - *idle*: ``idle_calls`` batches ``IDLE_GAPS_S[0]`` apart, then as many
      ``IDLE_GAPS_S[1]`` apart, so each host sleeps when a frame reaches it. What the
      stepping thread itself (which reads the frames) uses a message more than back to back
      is what waking after that gap costs it: ``wake_after`` holds, at each gap, the sink's
      median over the batch sizes (the sink's thread only receives; the relay's also writes
      to the sink, asleep too, and so pays the rouse as well; clipped at 0; it grows with the
      gap: the thread's caches and the processor it wakes on went cold), and ``wake_ns`` is
      0. The driver times each send, asleep in the gaps and again busy through them: a send
      to a host asleep from a sender that stayed busy, less a send back to back, is what
      waking the receiver costs its sender, ``rouse_after`` (at each gap, the median over the
      batch sizes, clipped at 0); the driver's own wake, asleep less busy, is
      ``driver_wake_after`` (the same median, what a paced stream's source pays after its
      rest). What the rest of the process (Ray's threads) uses a second is kept with the
      raw figures, and not charged. The time from the relay's step to the sink's at the
      longer gap, less the send, the kernel's delivery (*kernel*, below: it runs in the
      relay's write), the receive and the wake (the rouse is paid after the frame left, while
      the sink wakes), is what a message waits besides the two ends' work (the sink's process
      being scheduled):
      ``hop_ns``, the median over the batch sizes (clipped at 0), with no per-byte part;
    - *cyclic*: the pipelined run again through hosts of a cyclic graph: what each host uses
      more per message is ``cyclic_recv_ns`` (the median over hosts and sizes, clipped at 0);
    - *merge*: in the pipelined runs the relay also merges each batch with itself as a host
      merges two batches waiting for a core (``coalesce.merge``), and drops the copy; a line
      over the merged bytes is ``merge_ns`` and ``merge_per_byte_ns``;
    - *kernel*: the machine's softirq time (``/proc/stat``) over each round of a size's runs
      (the median round's, for each round: another job's interrupts in one round do not
      count), whose frames (the driver's to the relay, the relay's to the sink, on both
      pairs) are counted:
      the kernel's delivery of the frames (on loopback the receiving side of the TCP stack
      runs in the writer's system call), which no process's CPU time counts. A line over the
      frames and their bytes (:func:`_kernel_line`) is ``kernel_ns`` and
      ``kernel_per_byte_ns``, charged to the sender. On an otherwise idle host the softirq
      time is these frames' (an idle host, Ray's own processes included, spends next to
      none).

    The send and receive at each size are kept as measured (``MessageCosts.measured``,
    interpolated between the sizes), and ``send_*`` and ``recv_*`` are lines fitted to them
    over the payload bytes (clipped at 0): the summary, and the growth beyond the largest. All
    are CPU times of the hosts' processes, as the simulator charges them on the processors
    its cores share. The raw figures come back as the second value: ns per message by batch
    size (the hosts' CPU, pipelined and asleep at each gap, the relay's period pipelined,
    the driver's sends, the one-way time, the join work between messages back to back and
    after each gap (what a core's step costs more after idle time in a process of its own, as
    a Ray actor's; not charged: the profile's after-idle costs come from one process), and the
    merge), the
    machine's softirq time, the frames and the kernel's delivery per frame by size, the
    wake at each gap by host and size, the rouse and the driver's own wake at each gap by
    size, Ray's threads' CPU per second by host and size, the spread of steps and messages
    (``"spread"``: tables for :class:`~streamjoin.runtime.sim.variability.Variability`, from
    the idle runs: the relay's join work at sizes within :data:`STEP_SPREAD_SIZES` over the
    median of its size and gap, made mean 1, and the one-way times at the longer gap over
    their median, pooled over sizes and rounds; and how many samples each), whether the
    edges were sealed, and the load average at the start and the end.

    Starts Ray with this host's CPUs and no dashboard if it is not running, and stops it again
    then. When every Ray node is this machine, the hosts listen on loopback, else on their
    node's IP; the edges are sealed where ``sealed`` says, by default as the executor's are
    (on loopback not, else sealed). The connections are authenticated as the executor's are,
    with a secret of this call's.
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
        loopback = one_machine()
        sealed = not loopback if sealed is None else sealed
        runs: dict = {n: [] for n in sizes}
        # each size's softirq time (ns) and frames over loopback, each round
        kernel: dict[int, list] = {n: [] for n in sizes}
        spread: dict[str, list] = {"step": [], "message": []}
        for _ in range(rounds):
            # fresh hosts each round: where the kernel places a pair's two processes sets
            # what its messages cost (one pair's 1,024-tuple message took 149-258 us of CPU
            # from one pair to the next, started back to back), so the median over rounds
            # is one over placements too
            pair = _Pair(loopback, sealed, work=work)
            cyclic = _Pair(loopback, sealed, cyclic=True, work=work)
            try:
                for p in (pair, cyclic):
                    _pipelined(p, _batch(256), 200)  # warm the hosts and the connections
                for n in sizes:
                    msg = _batch(n)
                    calls = _pipelined_calls(repeat, n)
                    ticks, sent = processor_ticks(), pair.sent + cyclic.sent
                    in_cycle = _pipelined(cyclic, msg, calls)
                    runs[n].append(
                        {
                            **_pipelined(pair, msg, calls),
                            **_idle(pair, msg, idle_calls, spread),
                            **{f"cyclic_{k}": v for k, v in in_cycle.items()},
                        }
                    )
                    kernel[n].append((_softirq_ns(ticks), 2 * (pair.sent + cyclic.sent - sent)))
            finally:
                pair.close()
                cyclic.close()
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
    (g0, g1), woken, threads, roused, driver_woken = IDLE_GAPS_S, {}, {}, {}, {}
    for n in sizes:
        # a send to a host asleep from a driver that stayed busy, less back to back; and the
        # driver's own wake: its send after sleeping less after staying busy
        busy = [raw[n][f"busy_driver_send_ns_{g * 1e3:g}ms"] for g in (g0, g1)]
        roused[str(n)] = [b - raw[n]["driver_send_ns"] for b in busy]
        driver_woken[str(n)] = [
            raw[n][f"asleep_driver_send_ns_{g * 1e3:g}ms"] - b
            for g, b in zip((g0, g1), busy, strict=True)
        ]
        for host in ("relay", "sink"):
            # the receiving thread's own CPU a message after each gap, less back to back
            pipelined = raw[n][f"{host}_thread_ns"]
            woken[f"{host}:{n}"] = [
                raw[n][f"asleep_{host}_thread_ns_{g * 1e3:g}ms"] - pipelined for g in (g0, g1)
            ]
            # the process's CPU beyond its stepping thread's, a second: Ray's threads
            other = [
                raw[n][f"asleep_{host}_cpu_ns_{g * 1e3:g}ms"]
                - raw[n][f"asleep_{host}_thread_ns_{g * 1e3:g}ms"]
                for g in (g0, g1)
            ]
            threads[f"{host}:{n}"] = max(0.0, (other[1] - other[0]) / (g1 - g0))
    nbytes = np.array([raw[n]["bytes"] for n in sizes], dtype=np.float64)
    recv = np.array([raw[n]["sink_cpu_ns"] for n in sizes])
    send = np.maximum(0.0, np.array([raw[n]["relay_cpu_ns"] for n in sizes]) - recv)
    send_ns, send_per_byte = _fit(nbytes, send)
    recv_ns, recv_per_byte = _fit(nbytes, recv)
    # the relay merged each batch with itself: a merged message of twice the bytes
    merge_ns, merge_per_byte = _fit(2 * nbytes, np.array([raw[n]["merge_ns"] for n in sizes]))
    # the sink's thread only receives; the relay's also writes to the sink, asleep too, and
    # so pays the rouse besides its own wake
    after = _by_gap([w for k, w in woken.items() if k.startswith("sink:")])
    rouse = _by_gap(list(roused.values()))
    driver = _by_gap(list(driver_woken.values()))
    handed = {
        f"{host}:{n}": raw[n][f"cyclic_{host}_cpu_ns"] - raw[n][f"{host}_cpu_ns"]
        for n in sizes
        for host in ("relay", "sink")
    }
    # a size's rounds send as many frames each: the median round's softirq for every round
    # (another job's interrupts in one round do not count), summed over the rounds
    frames = np.array([sum(f for _, f in kernel[n]) for n in sizes])
    softirq = np.array([np.median([t for t, _ in kernel[n]]) * len(kernel[n]) for n in sizes])
    kernel_ns, kernel_per_byte = _kernel_line(nbytes, frames, softirq)
    # the one-way time is taken at the longer gap: the sink pays the wake of that gap (the
    # driver's rouse is paid after its frame left, while the sink wakes); the kernel's
    # delivery runs in the relay's write, before the sink can read
    delivered = kernel_ns + kernel_per_byte * nbytes
    waits = np.array([raw[n]["one_way_ns"] for n in sizes]) - (send + delivered + recv + after[1])
    costs = MessageCosts(
        kernel_ns=kernel_ns,
        kernel_per_byte_ns=kernel_per_byte,
        send_ns=send_ns,
        send_per_byte_ns=send_per_byte,
        hop_ns=max(0.0, float(np.median(waits))),
        recv_ns=recv_ns,
        recv_per_byte_ns=recv_per_byte,
        measured=np.column_stack([nbytes, send, recv]).tolist(),
        wake_after=((g0 * 1e9, after[0]), (g1 * 1e9, after[1])),
        rouse_after=((g0 * 1e9, rouse[0]), (g1 * 1e9, rouse[1])),
        driver_wake_after=((g0 * 1e9, driver[0]), (g1 * 1e9, driver[1])),
        cyclic_recv_ns=max(0.0, float(np.median(list(handed.values())))),
        merge_ns=merge_ns,
        merge_per_byte_ns=merge_per_byte,
    )
    loads = (round(load0, 2), round(os.getloadavg()[0], 2))
    return costs, {
        "by_batch_size": {str(n): {k: round(v, 1) for k, v in raw[n].items()} for n in sizes},
        "wake_after_ns": {k: [round(x, 1) for x in v] for k, v in woken.items()},
        "rouse_after_ns": {k: [round(x, 1) for x in v] for k, v in roused.items()},
        "driver_wake_after_ns": {k: [round(x, 1) for x in v] for k, v in driver_woken.items()},
        "cyclic_recv_ns": {k: round(v, 1) for k, v in handed.items()},
        "kernel": {  # the machine's softirq time and the frames over loopback, by size
            "frames": {str(n): int(f) for n, f in zip(sizes, frames, strict=True)},
            "softirq_ms_by_round": {
                str(n): [round(t / 1e6, 1) for t, _ in kernel[n]] for n in sizes
            },
            "softirq_ms": {
                str(n): round(float(t) / 1e6, 1) for n, t in zip(sizes, softirq, strict=True)
            },
            "ns_per_frame": {
                str(n): round(float(t / f), 1) if f else None
                for n, t, f in zip(sizes, softirq, frames, strict=True)
            },
        },
        "ray_threads_cpu_ns_per_s": {k: round(v, 1) for k, v in threads.items()},
        "spread": {
            "step": spread_table(spread["step"], mean_one=True),
            "message": spread_table(spread["message"], mean_one=False),
            "samples": {k: len(v) for k, v in spread.items()},
        },
        "sealed": pair.sealed,
        "load_1min": loads[1],
        "load_1min_start_end": loads,
    }
