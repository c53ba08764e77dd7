"""PySpark sources and sinks: the only package that imports pyspark.

- :func:`from_dataframe`: any DataFrame (or R and S DataFrames) as a source for
  :func:`streamjoin.run`: Spark reads it once, as Arrow record batches, checked as they
  stream; Spark's reading overlaps the join where Parquet footers bound each partition's
  ``ts`` (:func:`read_files` reads files one partition each; :mod:`.file_stats`);
- :class:`JoinSink`: a Structured Streaming ``foreachBatch`` sink feeding one long-lived join;
- :meth:`SparkSource.pairs_with_columns` and :meth:`streamjoin.Result.to_spark`: results back
  as DataFrames;
- :func:`generate`, :func:`flights`, :func:`weather`: workloads and a real dataset on Spark;
- :func:`session` and :func:`check_java`: a SparkSession, after checking Java 17+.
"""

from streamjoin.spark_bridge.session import SparkSetupError, check_java, session
from streamjoin.spark_bridge.source import SparkSource, from_dataframe, read_files
from streamjoin.spark_bridge.stream import JoinSink
from streamjoin.spark_bridge.workloads import AIRPORTS, flights, generate, weather

__all__ = [
    "AIRPORTS",
    "JoinSink",
    "SparkSetupError",
    "SparkSource",
    "check_java",
    "flights",
    "from_dataframe",
    "generate",
    "read_files",
    "session",
    "weather",
]
