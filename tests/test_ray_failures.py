"""Failures on the Ray backend: never a hang, the failing actor named within seconds, a lost
join core rebuilt with the exact answer, ``timeout=`` for a stalled actor, Ctrl-C.

The failures come when the buffers are full (a large input in small batches, the failure
well into the run), which is when a run used to hang: a failed actor's full receive buffer
left its senders blocked. Every test has a timeout of its own, so a regression fails
instead of hanging CI.
"""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from faults import host_pids, inject

import streamjoin as sj
from streamjoin.actors import emitter

pytestmark = pytest.mark.timeout(180)

#: seconds from an actor's failure to the run's error, at most (the issue: "a few")
ERROR_WITHIN_S = 10.0

LAYOUTS = {
    "single": (lambda: sj.topologies.single(), "core"),
    "split2": (lambda: sj.topologies.split(2), "core1"),
    "split3": (lambda: sj.topologies.split(3), "core2"),
    "grid_chain": (lambda: sj.topologies.grid(2, 2), "core1_1"),
    "grid_chain_head": (lambda: sj.topologies.grid(2, 2), "core0_0"),
    "grid_direct": (lambda: sj.topologies.grid(2, 2, forward="direct"), "core1_0"),
    "handshake": (lambda: sj.topologies.handshake(2, segment=256), "core1"),
    "handshake_ll": (lambda: sj.topologies.handshake(2, low_latency=True), "core0"),
    "panjoin": (lambda: sj.topologies.panjoin(2, 4), "worker1"),
    # pipelined: the core's progress lags its input by the step whose pairs it holds
    "shared": (lambda: sj.topologies.shared_index(2, task_size=4, pipelined=True), "core"),
}
#: layouts whose join cores are rebuilt when their process is lost
RECOVERABLE = {
    "single",
    "split2",
    "split3",
    "grid_chain",
    "grid_chain_head",
    "grid_direct",
    "shared",
}

BIG = sj.Query(sj.band("x", 1), window=sj.CountWindow(4000))


def _big_input(n: int = 300_000):
    return sj.sources.synthetic(n, low=0, high=200_000, seed=7)


def _run_failing(layout: str, tmp_path, fault: str, at: str, after: int, n: int = 300_000):
    """Run ``layout`` with a fault in its core; ``(error, seconds from the fault to the
    error)``."""
    make, node = LAYOUTS[layout]
    marker = tmp_path / "fired"
    topo = inject(make(), node, fault=fault, at=at, after=after, once=str(marker))
    with pytest.raises(Exception) as caught:
        sj.run(BIG, _big_input(n), topo, backend="ray", batch_size=32, max_restarts=0)
    ended = time.time()
    assert marker.exists(), "the fault never fired"
    return caught.value, ended - marker.stat().st_mtime, node


#: one layout by default; the others (and every layout, under ``-m slow``, in
#: test_every_failure_ends_with_the_named_error_or_the_exact_answer) on request
_SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "layout",
    [
        "grid_chain",
        pytest.param("single", marks=_SLOW),
        pytest.param("handshake", marks=_SLOW),
        pytest.param("panjoin", marks=_SLOW),
    ],
)
def test_an_exception_mid_run_with_full_buffers_names_the_actor_within_seconds(
    ray_session, tmp_path, layout
):
    from streamjoin.runtime.ray.executor import ActorFailed

    error, took, node = _run_failing(layout, tmp_path, "raise", "probe", 30_000)
    assert isinstance(error, ActorFailed), error
    assert re.search(rf"actor '{node}' \(\w+\) failed: RuntimeError: injected fault", str(error))
    assert took < ERROR_WITHIN_S


@_SLOW  # 15-25 s; the default run keeps a rebuilt core's kill (grid_chain)
def test_a_killed_worker_that_cannot_be_rebuilt_is_named_within_seconds(ray_session, tmp_path):
    from streamjoin.runtime.ray.executor import ActorFailed

    error, took, node = _run_failing("panjoin", tmp_path, "kill", "probe", 30_000)
    assert isinstance(error, ActorFailed), error
    assert re.search(rf"actor '{node}' \(worker\) died: a worker is not rebuilt", str(error))
    assert took < ERROR_WITHIN_S


def _exact_after_kill(
    layout: str, tmp_path, at: str, after: int, n: int, batch: int, seed=1, how="inner"
):
    """An outer join sends progress markers every 256 rows: rows without a partner leave
    before, during and after the core's rebuild (the markers the dead core had passed on
    stay with the pairs the collector holds back until its progress covers them)."""
    make, node = LAYOUTS[layout]
    query = sj.Query(sj.band("x", 2), window=sj.CountWindow(300, 200), how=how)
    data = sj.sources.synthetic(n, low=0, high=3000, seed=seed)
    marker = tmp_path / f"fired-{layout}-{at}-{after}"
    topo = inject(make(), node, fault="kill", at=at, after=after, once=str(marker))
    # one chunk: the emitter writes every batch at once, so they wait and coalesce
    chunk_rows = n if at == "merged" else None
    default, emitter.MARKER_ROWS = emitter.MARKER_ROWS, 256
    try:
        result = sj.run(query, data, topo, backend="ray", batch_size=batch, chunk_rows=chunk_rows)
    finally:
        emitter.MARKER_ROWS = default
    assert marker.exists(), "the fault never fired"
    expected = sj.oracle.join(query, data)
    assert result.same_pairs(expected), (layout, at, after, len(result.pairs), len(expected))


@pytest.mark.parametrize(
    ("layout", "at", "after", "how"),
    [
        # by default a pipelined shared core (its progress lags its input by the step it
        # holds) in a full outer join (the collector's tuples without a partner stay exact
        # through the replay); a chain neighbour's replay with -m slow, and in the
        # every-layout test
        pytest.param("grid_chain", "probe", 2000, "inner", marks=_SLOW),
        ("shared", "probe", 3000, "full"),
        pytest.param("split2", "probe", 0, "left", marks=_SLOW),
        pytest.param("grid_direct", "eof", 0, "inner", marks=_SLOW),
    ],
)
def test_a_killed_join_core_is_rebuilt_and_the_answer_is_exact(
    ray_session, tmp_path, layout, at, after, how
):
    _exact_after_kill(layout, tmp_path, at, after, n=12_000, batch=16, how=how)


#: seconds: long enough for the actors to start and reach the stall on a loaded machine,
#: short enough not to dominate the default run
STALL_TIMEOUT_S = 15


@pytest.mark.parametrize(
    ("layout", "n"),
    [pytest.param("split2", 20_000, marks=_SLOW), ("handshake", 300_000)],  # 15 s each
)
def test_a_stalled_actor_ends_the_run_at_its_timeout_naming_it(ray_session, tmp_path, layout, n):
    """A ``RunTimeout``, on an acyclic and on a cyclic topology; with the handshake, more input
    than the buffers hold, so that the driver waits in a send to the stalled core when the
    time is up (a timeout there is no lost edge). Three actors, not a grid's five: under load
    five took the whole timeout to start (a CI run ended with three cores "not started",
    before any could stall)."""
    make, node = LAYOUTS[layout]
    topo = inject(make(), node, fault="stall", at="probe", after=1000)
    start = time.monotonic()
    with pytest.raises(sj.RunTimeout, match=rf"still busy: .*'{node}' \(\w+_core: in a step"):
        sj.run(BIG, _big_input(n), topo, backend="ray", batch_size=64, timeout=STALL_TIMEOUT_S)
    assert time.monotonic() - start < STALL_TIMEOUT_S + ERROR_WITHIN_S


def test_timeout_on_local_names_the_actors_with_work_left():
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(10))
    data = sj.sources.synthetic(200, low=0, high=10, seed=1)
    with pytest.raises(sj.RunTimeout, match="still busy: 'emitter' \\(emitter: about to step\\)"):
        sj.run(q, data, sj.topologies.single(), timeout=1e-9)
    with pytest.raises(ValueError, match="timeout must be a positive"):
        sj.run(q, data, timeout=0)
    assert sj.run(q, data, timeout=60).same_pairs(sj.oracle.join(q, data))


def test_actors_are_named_after_their_nodes(ray_session, monkeypatch):
    import ray

    from streamjoin.runtime.ray import executor as ray_executor

    names = []
    monkeypatch.setattr(
        ray_executor,
        "on_listen",
        lambda _: names.extend(
            a["name"]
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == "streamjoin"
        ),
    )
    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(10))
    data = sj.sources.synthetic(100, low=0, high=10, seed=1)
    sj.run(q, data, sj.topologies.grid(1, 2), backend="ray")
    nodes = {re.sub(r"^sj[0-9a-f]+-", "", n) for n in names}
    assert {"core0_0", "core0_1", "collector"} <= nodes


_INTERRUPTED = textwrap.dedent(
    """
    import os, sys, time
    import pyarrow as pa
    import streamjoin as sj
    from streamjoin.runtime.ray import executor as ray_executor

    ports = set()
    ray_executor.on_listen = lambda addresses: ports.update(p for _, p in addresses.values())


    def channel_sockets():
        # this process's TCP sockets to an actor's port
        mine = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                link = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                mine.add(link[8:-1])
        found = 0
        for path in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(path) as f:
                for line in list(f)[1:]:
                    fields = line.split()
                    port = int(fields[2].rsplit(":", 1)[1], 16)
                    found += port in ports and fields[9] in mine
        return found


    class Endless(sj.sources.Source):
        # the same chunk again and again, later each time: the run ends only when stopped
        def __iter__(self):
            chunk = sj.sources.synthetic(100_000, low=0, high=1_000_000, seed=1)
            ts = chunk.column("ts").to_numpy()
            for k in range(10**9):
                yield chunk.set_column(1, "ts", pa.array(ts + k * (int(ts[-1]) + 1)))

    q = sj.Query(sj.band("x", 1), window=sj.CountWindow(20_000))
    topo = sj.topologies.grid(1, 2)  # three actors: two cores, the collector
    small = sj.sources.synthetic(300, low=0, high=30, seed=2)
    sj.run(q, small, topo, backend="ray")  # Ray up, kernels warm
    fds = len(os.listdir("/proc/self/fd"))
    print("running", flush=True)
    try:
        sj.run(q, Endless(), topo, backend="ray", batch_size=64)
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", time.monotonic(), flush=True)
    print("fds", fds, len(os.listdir("/proc/self/fd")), channel_sockets(), flush=True)
    result = sj.run(q, small, topo, backend="ray")
    print("again", bool(result.same_pairs(sj.oracle.join(q, small))), flush=True)
    """
)


@_SLOW  # 25 s (two runs in a child process)
def test_ctrl_c_stops_the_run_at_once_and_the_next_run_works(tmp_path):
    """SIGINT to a driver blocked in a run (its sends wait on full sockets): the run ends
    with KeyboardInterrupt within seconds, its actors are gone, none of its connections is
    left open, and a second run in the same process gives the exact answer."""
    before = set(host_pids())
    child = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPTED],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout.readline().strip() == "running"
        deadline = time.monotonic() + 60
        while len(hosts := set(host_pids()) - before) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(hosts) == 3, "the run's actors did not start"
        time.sleep(3)  # the buffers fill
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        line = child.stdout.readline().split()
        assert line[0] == "interrupted", line
        assert float(line[1]) - sent < 5.0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in hosts):
            time.sleep(0.1)
        assert not [p for p in hosts if os.path.exists(f"/proc/{p}")], "actors left running"
        _, before, after, channel_sockets = child.stdout.readline().split()
        assert channel_sockets == "0"  # Ray's own connections may linger a while: not ours
        assert child.stdout.readline().split() == ["again", "True"]
        assert child.wait(60) == 0
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(("fault", "at"), [("raise", "probe"), ("raise", "eof"), ("kill", "probe")])
@pytest.mark.parametrize("after", [0, 30_000])
def test_every_failure_ends_with_the_named_error_or_the_exact_answer(
    ray_session, tmp_path, layout, fault, at, after
):
    """Every topology, an exception at the first batch, mid-run and at the end of stream,
    and a killed process: the named error within seconds (a recoverable core killed: the
    run goes on, checked for exactness in the tests below)."""
    from streamjoin.runtime.ray.executor import ActorFailed

    if at == "eof" and after:
        return
    if fault == "kill" and layout in RECOVERABLE:
        _exact_after_kill(layout, tmp_path, at, min(after, 3000), n=8000, batch=16)
        return
    error, took, node = _run_failing(layout, tmp_path, fault, at, after, n=100_000)
    assert isinstance(error, ActorFailed), error
    assert f"actor '{node}'" in str(error)
    assert took < ERROR_WITHIN_S


@pytest.mark.slow
@pytest.mark.parametrize("layout", sorted(RECOVERABLE))
def test_a_core_killed_at_random_points_is_rebuilt_exactly(ray_session, tmp_path, layout):
    """Before its first batch, in the middle of a batch (between its probes and inserts),
    after the last input, and on a batch coalesced from several where batches can merge: a
    single core, or a grid core fed by its chain neighbours (a core the emitter feeds gets
    its row and column batches in turn, and a split core stored and probe-only ones, which
    never merge)."""
    rng = np.random.default_rng(sum(map(ord, layout)))
    points = [("probe", 0), ("probe", int(rng.integers(100, 3000))), ("eof", 0)]
    if layout in ("single", "grid_chain"):
        points.append(("merged", 0))
    for k, (at, after) in enumerate(points):
        _exact_after_kill(layout, tmp_path, at, after, n=8000, batch=8, seed=k)


@pytest.mark.slow
def test_the_driver_reads_no_further_while_a_core_is_down(ray_session, tmp_path, caplog):
    """While the one core of ``single`` is restarted after a kill, nothing holds the driver
    back (its writes to the dead core are dropped for the replay): it must not read the rest
    of the source into the batches it keeps. The rebuilt core's replay holds about what was
    read before the kill, not the whole input."""
    n = 400_000
    make, node = LAYOUTS["single"]
    query = sj.Query(sj.band("x", 2), window=sj.CountWindow(300, 200))
    data = sj.sources.synthetic(n, low=0, high=30_000, seed=3)
    marker = tmp_path / "fired"
    topo = inject(make(), node, fault="kill", at="probe", after=20, once=str(marker))
    with caplog.at_level("WARNING", logger="streamjoin.runtime.ray.executor"):
        result = sj.run(query, data, topo, backend="ray", batch_size=1024, chunk_rows=1024)
    assert marker.exists(), "the fault never fired"
    assert result.same_pairs(sj.oracle.join(query, data))
    kept = [int(m.group(1)) for m in re.finditer(r"rebuilt from (\d+) kept tuples", caplog.text)]
    assert kept and max(kept) < n // 4, kept  # the code before kept all 400,000
