"""Long runs: memory stays flat on ``local``, and consecutive Ray runs leak nothing.

    python experiments/long_runs.py memory [--tuples 50000000] [--indexes all]
    python experiments/long_runs.py leaks [--runs 20]
    python experiments/long_runs.py failures

``memory``: one ``local`` run per window kind (count, time) and index over ``--tuples``
generated input tuples (made part by part, never held whole: ``sources.synthetic_part``),
counting pairs only; the process's RSS is sampled every 0.2 s and reported at the start,
its peak, at the half and at the end. A leak shows as growth over the second half.

``leaks`` (start Ray under the machine's Ray lock): ``--runs`` consecutive ``ray`` runs in
this process — good ones, one whose core raises, one whose core is killed and rebuilt,
one that times out — counting after each the driver's open file descriptors and threads,
and the live actor processes (``ray::Host``) and listening TCP sockets of this user's
processes. The counts after the first run are the baseline; any growth is a leak.

``failures`` (under the Ray lock too): seconds from an injected fault (an exception or a
killed process, with full socket buffers) to the run's error or to the lost core's rebuild,
and from Ctrl-C to the driver's prompt.

Each prints a markdown table and writes it to ``experiments/results/long_runs_<what>.md`` with
the machine and commit.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import streamjoin as sj

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class _Sampler:
    """RSS every ``every`` seconds in a thread, with the input position at each sample."""

    def __init__(self, every: float = 0.2) -> None:
        self.samples: list[tuple[int, float]] = []
        self.rows = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(every,), daemon=True)
        self.thread.start()

    def _run(self, every: float) -> None:
        while not self.stop.wait(every):
            self.samples.append((self.rows, _rss_mib()))

    def close(self) -> list[tuple[int, float]]:
        self.stop.set()
        self.thread.join()
        return self.samples


class _Generated(sj.sources.Source):
    """``n`` uniform tuples made ``parts`` at a time (never held whole)."""

    def __init__(self, n: int, sampler: _Sampler, parts: int) -> None:
        self.n_rows = None
        self.n, self.sampler, self.parts = n, sampler, parts

    def __iter__(self):
        for part in range(self.parts):
            table = sj.sources.synthetic_part(
                self.n, part, self.parts, low=0, high=self.n, rate=100_000, seed=1
            ).drop_columns(["seq"])
            self.sampler.rows += len(table)
            yield table


def memory(tuples: int, names: list[str]) -> list[str]:
    rows = [
        "| window | index | tuples | pairs | s | RSS start | peak | at half | end "
        "| growth 2nd half |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    windows = {"count": sj.CountWindow(2**16), "time": sj.TimeWindow(600)}  # ms: ~2^16 tuples
    for kind, window in windows.items():
        for name in names:
            predicate = sj.equal("x") if name == "hash" else sj.band("x", 1)
            query = sj.Query(predicate, window=window)
            try:
                sj.indexes.check_supports(name, query.predicate)
            except ValueError:
                continue
            if name == "nested_loop" and tuples > 2_000_000:
                continue  # quadratic: not a long-run index
            sampler = _Sampler()
            start = _rss_mib()
            t0 = time.perf_counter()
            source = _Generated(tuples, sampler, max(1, tuples // 500_000))
            result = sj.run(
                query,
                source,
                sj.topologies.single(name),
                batch_size=16_384,
                collect="count",
                progress=False,
            )
            took = time.perf_counter() - t0
            samples = sampler.close()
            end = _rss_mib()
            rss = [m for _, m in samples] or [end]
            half = [m for r, m in samples if r >= tuples // 2] or [end]
            line = (
                f"| {kind} | {name} | {tuples:,} | {result.metrics['output_pairs']:,} | {took:.0f} "
                f"| {start:.0f} | {max(rss):.0f} | {half[0]:.0f} | {end:.0f} "
                f"| {max(half) - half[0]:+.0f} |"
            )
            print(line, flush=True)
            rows.append(line)
    return rows


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _host_processes() -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    count += f.read().startswith(b"ray::Host")
            except OSError:
                continue
    return count


def _listening() -> int:
    """Listening TCP sockets on this machine (``/proc/net/tcp``, state 0A)."""
    count = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(path) as f:
            count += sum(1 for line in list(f)[1:] if line.split()[3] == "0A")
    return count


def leaks(runs: int) -> list[str]:
    import ray

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from faults import inject

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    query = sj.Query(sj.band("x", 2), window=sj.CountWindow(500))
    data = sj.sources.synthetic(20_000, low=0, high=5000, seed=1)
    expected = sj.oracle.join(query, data)
    tmp = tempfile.mkdtemp()
    rows = [
        "| run | kind | outcome | s | driver fds | threads | _Host processes "
        "(2 s after) | listening TCP |",
        "|---|---|---|---|---|---|---|---|",
    ]
    kinds = ["good", "raises", "killed", "timeout"]
    for k in range(runs):
        kind = kinds[k % len(kinds)] if k else "good"
        topo = sj.topologies.grid(2, 2)
        options = {}
        if kind == "raises":
            topo = inject(topo, "core1_1", fault="raise", after=5000)
        elif kind == "killed":
            topo = inject(topo, "core0_1", fault="kill", after=5000, once=f"{tmp}/k{k}")
        elif kind == "timeout":
            topo = inject(topo, "core1_0", fault="stall", after=5000)
            options["timeout"] = 5
        t0 = time.perf_counter()
        try:
            result = sj.run(query, data, topo, backend="ray", batch_size=64, **options)
            outcome = "exact" if result.same_pairs(expected) else "WRONG"
        except Exception as e:
            outcome = type(e).__name__
        took = time.perf_counter() - t0
        time.sleep(2)
        line = (
            f"| {k + 1} | {kind} | {outcome} | {took:.1f} | {_fds()} | "
            f"{threading.active_count()} | {_host_processes()} | {_listening()} |"
        )
        print(line, flush=True)
        rows.append(line)
    ray.shutdown()
    return rows


def failures() -> list[str]:
    """Seconds from a fault to the run's error (or to the rebuilt core's first step), and
    from Ctrl-C to the prompt, with full socket buffers (300 K tuples in batches of 32)."""
    import logging

    import ray

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from faults import inject

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    query = sj.Query(sj.band("x", 1), window=sj.CountWindow(4000))
    data = sj.sources.synthetic(300_000, low=0, high=200_000, seed=7)
    rebuilt: list[float] = []

    class _Rebuilt(logging.Handler):
        def emit(self, record):
            rebuilt.append(time.time())

    logging.getLogger("streamjoin.runtime.ray.executor").addHandler(_Rebuilt())
    rows = ["| layout | fault | outcome | s from the fault |", "|---|---|---|---|"]
    cases = [
        ("single", "core", "raise"),
        ("grid(2, 2)", "core1_1", "raise"),
        ("handshake(2)", "core1", "raise"),
        ("panjoin(2, 4)", "worker1", "raise"),
        ("panjoin(2, 4)", "worker1", "kill"),
        ("grid(2, 2)", "core1_1", "kill"),
        ("split(2)", "core1", "kill"),
    ]
    layouts = {
        "single": lambda: sj.topologies.single(),
        "grid(2, 2)": lambda: sj.topologies.grid(2, 2),
        "handshake(2)": lambda: sj.topologies.handshake(2, segment=256),
        "panjoin(2, 4)": lambda: sj.topologies.panjoin(2, 4),
        "split(2)": lambda: sj.topologies.split(2),
    }
    tmp = tempfile.mkdtemp()
    for k, (layout, node, fault) in enumerate(cases):
        marker = f"{tmp}/fired{k}"
        topo = inject(layouts[layout](), node, fault=fault, after=30_000, once=marker)
        rebuilt.clear()
        try:
            sj.run(query, data, topo, backend="ray", batch_size=32, collect="count")
            outcome = "rebuilt, run completed"
            ended = rebuilt[0] if rebuilt else float("nan")
        except Exception as e:
            outcome = f"{type(e).__name__}: {str(e)[:70]}"
            ended = time.time()
        line = f"| {layout} | {fault} {node} | {outcome} | {ended - os.path.getmtime(marker):.2f} |"
        print(line, flush=True)
        rows.append(line)
    ray.shutdown()
    child = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPTED], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "running"
    time.sleep(8)
    sent = time.monotonic()
    child.send_signal(2)
    got = child.stdout.readline().split()
    child.wait(60)
    line = f"| grid(2, 2) | Ctrl-C in the driver | {got[0]} | {float(got[1]) - sent:.2f} |"
    print(line, flush=True)
    rows.append(line)
    return rows


_INTERRUPTED = """
import time
import streamjoin as sj
q = sj.Query(sj.band("x", 1), window=sj.CountWindow(20_000))
data = sj.sources.synthetic(3_000_000, low=0, high=1_000_000, seed=1)
print("running", flush=True)
try:
    sj.run(q, data, sj.topologies.grid(2, 2), backend="ray", batch_size=64, progress=False)
    print("finished", time.monotonic(), flush=True)
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
"""


def _commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["memory", "leaks", "failures"])
    parser.add_argument("--tuples", type=int, default=50_000_000)
    parser.add_argument("--indexes", default="all")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    if args.what == "memory":
        names = sj.indexes.names() if args.indexes == "all" else args.indexes.split(",")
        rows = memory(args.tuples, names)
    elif args.what == "leaks":
        rows = leaks(args.runs)
    else:
        rows = failures()
    head = [
        f"# long runs: {args.what}",
        "",
        f"`python experiments/long_runs.py {' '.join(sys.argv[1:])}` on {platform.node()} "
        f"({os.cpu_count()} CPUs), commit {_commit()}, numpy {np.__version__}.",
        "",
    ]
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"long_runs_{args.what}.md"), "w") as f:
        f.write("\n".join(head + rows) + "\n")


if __name__ == "__main__":
    main()
