"""A SparkSession set up for the bridge, after checking the Java that Spark will start.

PySpark 4 starts a JVM and needs Java 17 or newer. Without this check a missing or old Java
surfaces as a ``PySparkRuntimeError`` about the Java gateway, or a ``UnsupportedClassVersionError``
deep in a Java stack trace; :func:`check_java` says what is wrong and how to fix it before
anything starts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

#: PySpark 4 runs on Java 17 or newer.
MIN_JAVA = 17


class SparkSetupError(RuntimeError):
    """Spark cannot start here (no Java, too old a Java); the message says how to fix it."""


def find_java() -> str:
    """Path of the ``java`` Spark will start: ``$JAVA_HOME/bin/java`` if ``JAVA_HOME`` is set,
    else the first ``java`` on ``PATH`` (the same order as Spark's launch scripts)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise SparkSetupError(
                f"JAVA_HOME is {home!r} but {java} is not an executable; point JAVA_HOME at a "
                f"Java {MIN_JAVA}+ installation or unset it"
            )
        return java
    on_path = shutil.which("java")
    if on_path is None:
        raise SparkSetupError(
            f"Java not found (no JAVA_HOME, no java on PATH); PySpark 4 needs Java {MIN_JAVA} or "
            "newer, e.g. `apt install openjdk-17-jre-headless`"
        )
    return on_path


def java_major(version_text: str) -> int:
    """The major version in ``java -version`` output: ``"1.8.0_392"`` is 8, ``"17.0.15"`` 17."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if m is None:
        raise SparkSetupError(f"cannot read a Java version from: {version_text.strip()[:200]!r}")
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def check_java(java: str | None = None) -> int:
    """Check that ``java`` (default: :func:`find_java`) is Java 17+; return its major version.

    Raises
    ------
    SparkSetupError
        No Java, a Java that does not run, or one older than 17; the message names the path.
    """
    java = find_java() if java is None else java
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise SparkSetupError(f"cannot run {java}: {e}") from e
    major = java_major(out.stderr + out.stdout)
    if major < MIN_JAVA:
        raise SparkSetupError(
            f"{java} is Java {major}; PySpark 4 needs Java {MIN_JAVA} or newer (install "
            "OpenJDK 17 and set JAVA_HOME to it)"
        )
    return major


#: A master URL Spark takes: ``local``, ``local[N]``, ``local[*]``, ``local[N, F]`` (N >= 1
#: threads, F retries), ``local-cluster[N, C, M]``, or a cluster's ``scheme://…`` or ``yarn``.
_MASTER = re.compile(
    r"local(\[(\*|[1-9]\d*)(,\s*[1-9]\d*)?\])?|local-cluster\[\d+,\s*\d+,\s*\d+\]|yarn"
    r"|[a-z][a-z0-9+.-]*://\S+"
)

#: Parquet page checksums, written and checked (parquet-mr's settings): a damaged page is an
#: error naming the file instead of wrong rows. Spark writes CRCs by default; reading checks
#: them only when asked.
CHECKSUMS = {
    "parquet.page.write-checksum.enabled": "true",
    "parquet.page.verify-checksum.enabled": "true",
}


def check_master(master: str) -> str:
    """``master`` if it is a Spark master URL (``local[4]``, ``spark://host:7077``, …), else
    a ``ValueError`` saying which forms there are, before a JVM starts to fail on it."""
    if not isinstance(master, str) or not _MASTER.fullmatch(master.strip()):
        raise ValueError(
            f"Spark master {master!r} is not one Spark takes: local, local[N] (N >= 1 "
            "threads), local[*], spark://HOST:PORT, yarn or k8s://…"
        )
    return master.strip()


def session(master: str = "local[*]", app_name: str = "streamjoin", **conf):
    """A SparkSession for the bridge (created, or the active one reconfigured where possible).

    Checks the master URL and Java first. Defaults: the web UI and console progress bars off,
    4 shuffle partitions (local mode), Arrow record batches of up to 100,000 rows, Parquet page
    checksums written and verified (:data:`CHECKSUMS`). ``conf`` entries (``"spark.x.y":
    value``, or ``spark_x_y=value``) override them.
    """
    master = check_master(master)
    check_java()
    from pyspark.sql import SparkSession

    # Python workers run this interpreter (with streamjoin and pyarrow), not whatever
    # `python3` is first on PATH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
        "spark.sql.session.timeZone": "UTC",
        **{f"spark.hadoop.{k}": v for k, v in CHECKSUMS.items()},
    }
    settings.update({k if "." in k else k.replace("_", "."): str(v) for k, v in conf.items()})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
