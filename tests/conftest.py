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


@pytest.fixture(scope="session")
def ray_session():
    """Ray on this machine for the whole test run (2 CPUs, no dashboard); a test of the CLI,
    whose `run` defaults to Ray, may have started it already."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
