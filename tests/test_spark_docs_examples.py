"""The Python blocks of the README and docs/ that feed a join from Spark run as written."""

import pytest
from docs_blocks import blocks, run_block

SPARK = [b for b in blocks() if b.needs_spark]


def test_spark_has_examples():
    assert {b.file for b in SPARK} >= {"README.md", "docs/spark.md"}


@pytest.mark.parametrize("block", SPARK, ids=[b.id for b in SPARK])
def test_spark_docs_example_runs(block, spark, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_block(block)
