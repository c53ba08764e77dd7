"""A Ray that ``sj.run`` starts itself on one machine listens on loopback only: Ray's own
servers, its agents and workers, the actors and the run's edges (``tests/ray_loopback_check.py``
reads them with ``ss`` during a run). A cluster (``address=``) is left as its operator
configured it: ``tests/test_ray_cluster.py`` checks that its edges listen on the node's
address."""

import ipaddress
import json
import os
import shutil
import subprocess
import sys

import pytest


def _host(address: str) -> str:
    """The host of an ``ss`` local address: ``127.0.0.1:80``, ``[::ffff:127.0.0.1]:80``,
    ``*:80``."""
    host = address.rsplit(":", 1)[0].strip("[]")
    return host.removeprefix("::ffff:")


@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_a_local_ray_run_listens_on_loopback_only():
    script = os.path.join(os.path.dirname(__file__), "ray_loopback_check.py")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, script], capture_output=True, text=True, timeout=240, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["exact"]
    assert found["node_ip"] == "127.0.0.1"
    processes = {entry["process"] for entry in found["listeners"]}
    assert {"gcs_server", "raylet"} <= processes, processes  # Ray's servers were seen
    assert sum(p.startswith("ray::") for p in processes) >= 1, processes  # and actors
    for entry in found["listeners"]:
        host = _host(entry["address"])
        assert host != "*" and ipaddress.ip_address(host).is_loopback, entry
