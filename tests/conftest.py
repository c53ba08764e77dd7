import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
# simulated runs charge the shipped profile whatever this host has calibrated: the same virtual
# times on every machine (tests of the host's profile set their own)
os.environ["STREAMJOIN_MACHINE_PROFILE"] = "shipped"

import budget  # noqa: E402
import pytest  # noqa: E402


def pytest_addoption(parser):
    parser.addoption(
        "--quick",
        action="store_true",
        help="draw a third of each hypothesis test's budget of examples (tests/budget.py)",
    )


def pytest_configure(config):
    budget.QUICK = config.getoption("--quick")


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


#: Files whose every test starts Ray or Spark, or times an exchange over sockets.
_SERVICE_FILES = {
    "test_ray_failures.py",
    "test_ray_coalescing.py",
    "test_channel_security.py",
    "test_spark_bridge.py",
    "test_spark_any_dataframe.py",
    "test_spark_docs_examples.py",
    "test_cli_bad_input.py",
    "test_cli_and_result.py",
    "test_ray_cluster.py",
    "test_peers.py",  # pyflink starts a JVM
}
#: A test file, test or parameter named after Ray runs on it.
_NAMES_RAY = re.compile(r"(^|[_\[\]/-])ray([_\[\]-]|$)")


def _starts_services(nodeid: str) -> bool:
    """Whether the test ``nodeid`` starts Ray or Spark (by its file or its name)."""
    path = nodeid.partition("::")[0]
    return os.path.basename(path) in _SERVICE_FILES or bool(_NAMES_RAY.search(nodeid))


#: The order of the services worker's files, by prefix: Spark's runs and the CLI's bad input
#: compile few kernels, the Ray tests of every topology come last, so that the other workers have
#: compiled the topologies' kernels into numba's disk cache by then (test_backends and the
#: index tests come first in the collection) and the Ray driver loads them instead of
#: compiling them a second time at once.
_SERVICES_ORDER = (
    "test_spark_",
    "test_cli_bad_input.py",
    "test_channel_security.py",
    "test_ray_",
    "test_cli_and_result.py",  # runs grid:2x2 on Ray through the CLI
)


def _services_rank(nodeid: str) -> int:
    """0 for a test that starts no service; a service test's place in :data:`_SERVICES_ORDER`
    (after it if none)."""
    if not _starts_services(nodeid):
        return 0
    file = os.path.basename(nodeid.partition("::")[0])
    ranks = [k for k, prefix in enumerate(_SERVICES_ORDER) if file.startswith(prefix)]
    return 1 + (ranks[0] if ranks else len(_SERVICES_ORDER))


def pytest_collection_modifyitems(config, items):
    """A test that takes the ``ray_session`` or ``spark`` fixture must be known by its file
    or name to start services (the scheduler below sees node ids only). The services run in
    :func:`_services_rank` order (a stable sort: the rest keep theirs)."""
    for item in items:
        if {"ray_session", "spark"} & set(item.fixturenames) and not _starts_services(item.nodeid):
            raise pytest.UsageError(
                f"{item.nodeid} starts Ray or Spark: name it after ray or add its file to "
                "tests/conftest.py's _SERVICE_FILES"
            )
    items.sort(key=lambda item: _services_rank(item.nodeid))


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: fine without it (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """The default run has a worker per core, up to four (``-n``, pytest-xdist): one takes
    every test that starts Ray or Spark, in order, so two Ray clusters or two JVMs never
    share the machine and the session-scoped ``ray_session`` and ``spark`` start once; the
    rest are spread over all. (xdist's own ``--dist loadgroup`` would do this from marks,
    but it does not group under pytest 9.2.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ServicesOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "services" if _starts_services(nodeid) else nodeid

    return ServicesOnOneWorker(config, log)
