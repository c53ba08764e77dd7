"""A real Ray cluster of two nodes on this machine (``tests/ray_cluster_check.py``): a grid
spread over both, exact, authenticated, and rebuilt after a core is killed; with Ray's TLS
off and on."""

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "ray_tls"])
def test_a_grid_over_a_two_node_cluster_is_exact_authenticated_and_recovers(tls):
    script = os.path.join(os.path.dirname(__file__), "ray_cluster_check.py")
    done = subprocess.run(
        [sys.executable, script, *(["--tls"] if tls else [])],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["nodes"] == 2 and found["tls"] == tls
    assert found["exact"]
    assert found["core_nodes"] == 2, found  # cores on both nodes
    assert "127.0.0.1" not in found["hosts"], found  # a cluster listens on the node's address
    assert found["intruders_turned_away"]
    assert found["killed"] and found["exact_after_kill"]
