"""How a DataFrame's partitions reach the driver as Arrow record batches.

``"arrow"`` uses the JVM's own Arrow conversion (``Dataset.toArrowBatchRdd``, the path of
``DataFrame.toArrow()``), served through ``PythonRDD.toLocalIteratorAndServe`` or
``PythonRDD.runJob``, with no Python workers; it relies on PySpark internals of classic
(non-Connect) Spark. ``"ipc"`` uses only public API: ``mapInArrow`` turns each partition into
Arrow IPC blobs that ``toLocalIterator(prefetchPartitions=True)`` (or
``SparkContext.runJob``) brings back; it costs a Python worker per task and a copy more.
``"auto"`` takes ``"arrow"`` where it is available.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa


def arrow_schema(df) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(df.schema, timezone="UTC")


def _java_arrow_rdd(df, transport: str):
    """``df``'s RDD of Arrow record batches in the JVM, or None for the ``"ipc"`` path."""
    if transport == "ipc":
        return None
    try:
        return df._jdf.toArrowBatchRdd()
    except Exception:  # Spark Connect, or internals changed: the public path
        if transport == "arrow":
            raise
        return None


def stream_batches(df, transport: str) -> Iterator[pa.RecordBatch]:
    """``df`` partition by partition, in partition order, one Spark job a partition with the
    next one prefetched."""
    jrdd = _java_arrow_rdd(df, transport)
    if jrdd is None:
        return _ipc_batches(df)
    return _arrow_batches(df, jrdd)


def _arrow_batches(df, jrdd) -> Iterator[pa.RecordBatch]:
    from pyspark.core.rdd import _local_iterator_from_socket
    from pyspark.serializers import NoOpSerializer

    schema = arrow_schema(df)
    sock_info = df.sparkSession.sparkContext._jvm.PythonRDD.toLocalIteratorAndServe(jrdd, True)
    for blob in _local_iterator_from_socket(sock_info, NoOpSerializer()):
        yield pa.ipc.read_record_batch(pa.py_buffer(blob), schema)


def _partition_to_ipc(batches):
    """``mapInArrow`` function: each record batch as one Arrow IPC stream in a binary cell."""
    import pyarrow as pa

    for batch in batches:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        yield pa.record_batch(
            [pa.array([sink.getvalue().to_pybytes()], pa.binary())], names=["ipc"]
        )


def _ipc_batches(df) -> Iterator[pa.RecordBatch]:
    for row in df.mapInArrow(_partition_to_ipc, "ipc binary").toLocalIterator(
        prefetchPartitions=True
    ):
        yield from pa.ipc.open_stream(row.ipc)


def _ipc_cells(rows):
    """``SparkContext.runJob`` function: the IPC blobs of a partition's rows."""
    return [row.ipc for row in rows]


class PartitionReader:
    """Spark jobs over chosen partitions of one RDD of ``df``'s rows as Arrow.

    Every job runs on the same RDD, so every job sees the same partitions and each partition
    is computed once, whatever the DataFrame (a local table, a shuffle, ``rand()``).
    """

    def __init__(self, df, transport: str) -> None:
        self.schema = arrow_schema(df)
        self.sc = df.sparkSession.sparkContext
        self.rdd = _java_arrow_rdd(df, transport)  #: the JVM RDD (``"arrow"``), else None
        #: the physical plan the JVM RDD executes (``"arrow"``), else None
        self.plan = None if self.rdd is None else df._jdf.queryExecution().executedPlan()
        if self.rdd is None:
            self._ipc = df.mapInArrow(_partition_to_ipc, "ipc binary").rdd
            self.num_partitions = self._ipc.getNumPartitions()
        else:
            self._java = self.rdd.toJavaRDD()
            self.num_partitions = self.rdd.getNumPartitions()

    def __call__(self, pids: list[int]) -> pa.Table:
        """One Spark job: the rows of partitions ``pids``."""
        if self.rdd is None:
            blobs = self.sc.runJob(self._ipc, _ipc_cells, pids)
            batches = [b for blob in blobs for b in pa.ipc.open_stream(blob)]
            return pa.Table.from_batches(batches) if batches else self.schema.empty_table()
        from pyspark.core.rdd import _load_from_socket
        from pyspark.serializers import NoOpSerializer

        sock_info = self.sc._jvm.PythonRDD.runJob(self.sc._jsc.sc(), self._java, pids)
        with _load_from_socket(sock_info, NoOpSerializer()) as blobs:
            batches = [pa.ipc.read_record_batch(pa.py_buffer(b), self.schema) for b in blobs]
        return pa.Table.from_batches(batches, schema=self.schema)
