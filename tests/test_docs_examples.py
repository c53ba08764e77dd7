"""Every Python block of the README and docs/ runs as written, its assertions holding (the
blocks that use Spark: ``test_spark_docs_examples.py``)."""

import pytest
from docs_blocks import blocks, run_block

PLAIN = [b for b in blocks() if not b.needs_spark]


def test_the_docs_have_examples():
    """The collection finds the blocks at all (a changed fence would silently skip them)."""
    files = {b.file for b in blocks()}
    assert {"README.md", "docs/topologies.md", "docs/data.md", "docs/simulator.md"} <= files
    assert len(blocks()) >= 10
    assert len({b.id for b in blocks()}) == len(blocks())


@pytest.mark.parametrize("block", PLAIN, ids=[b.id for b in PLAIN])
def test_docs_example_runs(block, tmp_path, monkeypatch, request):
    if block.needs_ray:
        request.getfixturevalue("ray_session")
    monkeypatch.chdir(tmp_path)
    run_block(block)
    if "plot_latency(" in block.code:
        assert (tmp_path / "latency.png").exists()


def test_the_docs_list_every_topology():
    """The README's and docs/topologies.md's tables name every spec the CLI parses."""
    from docs_blocks import ROOT

    from streamjoin.topologies import SPECS

    for page in ("README.md", "docs/topologies.md"):
        text = (ROOT / page).read_text()
        missing = [spec for spec, _ in SPECS if f"`{spec}`" not in text]
        assert not missing, f"{page} does not list {missing}"
