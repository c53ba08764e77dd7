"""A local Ray run that starts Ray itself, as ``sj.run(..., backend="ray")`` does on one machine,
and every listening socket of its processes while it runs.

Run by ``tests/test_ray_loopback.py`` in a process of its own (Ray must not be running in it
yet); prints one JSON line: the local address of every TCP socket listening in this process
or a process it started (Ray's GCS, raylet, agents and workers, the actors), read with
``ss -ltnp`` half-way through the run, and whether the answer was exact.
"""

import json
import os
import re
import subprocess
import sys
import time

import streamjoin as sj


def descendants(pid: int) -> set[int]:
    """``pid`` and every process it started, directly or not (from ``/proc``)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:  # gone meanwhile
                continue
    found, grown = {pid}, True
    while grown:
        more = {p for p, pp in parent.items() if pp in found} - found
        found |= more
        grown = bool(more)
    return found


def listeners() -> list[dict]:
    """``{"address", "process"}`` of every TCP listener of this process and its descendants."""
    ours = descendants(os.getpid())
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if pids & ours:
            name = re.findall(r'"([^"]+)"', line)
            found.append({"address": fields[3], "process": name[0] if name else "?"})
    return found


class Slow(sj.sources.Source):
    """The input in chunks with pauses; looks at the listeners half-way through."""

    def __init__(self, table, seen: list) -> None:
        self.table, self.seen, self.n_rows = table, seen, len(table)

    def __iter__(self):
        for start in range(0, len(self.table), 500):
            if start == 2000:
                self.seen.extend(listeners())
            time.sleep(0.05)
            yield self.table.slice(start, 500)


def main() -> None:
    import ray

    assert not ray.is_initialized()
    query = sj.Query(sj.band("x", 2), window=sj.CountWindow(300, 200))
    data = sj.sources.synthetic(4000, low=0, high=2000, seed=7)
    seen: list[dict] = []
    result = sj.run(query, Slow(data, seen), sj.topologies.split(2), backend="ray")
    out = {
        "exact": bool(result.same_pairs(sj.oracle.join(query, data))),
        "node_ip": ray.util.get_node_ip_address(),
        "listeners": seen,
        "pid": os.getpid(),
    }
    ray.shutdown()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
