import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    """A local[2] SparkSession for the whole test run: UI off, few shuffle partitions."""
    from streamjoin import spark_bridge

    session = spark_bridge.session("local[2]", spark_sql_shuffle_partitions=3)
    yield session
    session.stop()
