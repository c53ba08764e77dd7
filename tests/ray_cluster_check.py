"""A two-node Ray cluster on this machine, as an operator would have it, and three runs on it.

Run by ``tests/test_ray_cluster.py`` in a process of its own (it must not share the test
session's local Ray); prints one JSON line of what it found. The nodes are two
``ray.cluster_utils.Cluster`` nodes (a head and a worker, each a raylet of its own with one
CPU and a resource naming it), which is what ``ray start --head`` and ``ray start
--address=...`` make; the runs connect with ``address=`` like any client of a cluster.

1. A 2×2 grid spread over both nodes: the answer is the oracle's, the cores are on both
   nodes, the edges listen on the node's address (not loopback), and intruders at every
   actor's port are turned away during the run.
2. The same with a core killed mid-run: rebuilt, still the oracle's answer.
"""

import json
import os
import socket
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

import ray  # noqa: E402
from faults import inject  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import streamjoin as sj  # noqa: E402
from streamjoin.runtime.ray import executor as ray_executor  # noqa: E402


def _intrude(address) -> bytes:
    """A connection that sends a pickle where a handshake belongs; what the actor answers
    before it closes the connection."""
    with socket.create_connection(address, timeout=20) as sock:
        sock.sendall(b"\x80\x05" + os.urandom(200))
        got = b""
        try:
            while chunk := sock.recv(4096):
                got += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return got


def main() -> None:
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"head": 1}, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=1, resources={"second": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        out = {"nodes": len([n for n in ray.nodes() if n["Alive"]])}
        query = sj.Query(sj.band("x", 2), window=sj.CountWindow(300, 200))
        data = sj.sources.synthetic(8000, low=0, high=3000, seed=3)
        expected = sj.oracle.join(query, data)
        placed, listening, answers = {}, {}, []

        def on_listen(addresses):
            listening.update(addresses)
            answers.extend(_intrude(a) for a in addresses.values())

        ray_executor.on_placed = placed.update
        ray_executor.on_listen = on_listen
        backend = ray_executor.Ray(address=cluster.address, placement="spread")
        result = sj.run(query, data, sj.topologies.grid(2, 2), backend=backend, batch_size=16)
        out["exact"] = bool(result.same_pairs(expected))
        cores = [n for n in placed if n.startswith("core")]
        out["core_nodes"] = len({placed[n] for n in cores})
        out["hosts"] = sorted({h for h, _ in listening.values()})
        out["intruders_turned_away"] = all(len(a) <= 64 for a in answers) and len(answers) == 5
        ray_executor.on_listen = None

        with tempfile.TemporaryDirectory() as tmp:
            marker = os.path.join(tmp, "fired")
            topo = inject(
                sj.topologies.grid(2, 2), "core1_1", fault="kill", after=2000, once=marker
            )
            result = sj.run(query, data, topo, backend=backend, batch_size=16)
            out["killed"] = os.path.exists(marker)
            out["exact_after_kill"] = bool(result.same_pairs(expected))
        print(json.dumps(out), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
