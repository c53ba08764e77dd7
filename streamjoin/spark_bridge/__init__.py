"""PySpark sources and sinks (the only package that imports pyspark). Not built yet: see the
Spark-bridge issue."""
