"""``experiments/peers.py`` in its quick mode, when its extra is installed
(``pip install -e ".[peers]"``): every peer runs and finds exactly the reference's pairs."""

import csv
import importlib.util
import pathlib
import subprocess
import sys

import pytest

PEERS = ("pyflink", "pathway", "bytewax")
SCRIPT = pathlib.Path(__file__).parents[1] / "experiments" / "peers.py"

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in PEERS),
    reason='the peers extra is not installed (pip install -e ".[peers]")',
)


def test_peers_quick_run_is_exact(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "peers.csv") as f:
        rows = list(csv.DictReader(f))
    # Spark runs where pyarrow suits PySpark's Arrow paths (PyFlink pins an older one)
    ran = {r["system"] for r in rows}
    assert ran >= {"streamjoin", "flink_bucket", "flink_nokey", "pathway", "bytewax"}
    failed = [(r["system"], r["error"]) for r in rows if r.get("error")]
    assert not failed
    for r in rows:
        assert (int(r["missing"]), int(r["extra"]), int(r["duplicates"])) == (0, 0, 0), r
    assert (tmp_path / "peers.png").stat().st_size > 0
    assert "What each can express" in (tmp_path / "peers.md").read_text()
