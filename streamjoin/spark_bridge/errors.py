"""Spark's errors about unreadable input files, as one-line :class:`~streamjoin.InputError` s.

PySpark reports a missing path, an empty folder, a file that is not Parquet (or is truncated
or corrupt) and files whose column types differ as an ``AnalysisException`` or a
``Py4JJavaError`` whose text is a Java stack trace of a hundred lines or more, raised where
Spark happens to read the file: at ``spark.read``, in the source's input check, or mid-stream.
:func:`input_file_errors` turns the error classes below into an InputError that names the file
(and the column), keeping Spark's exception as ``__cause__``; every other error passes
unchanged, so a real failure keeps its trace.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from streamjoin.validation import InputError

_FILE = r"(?P<file>\S+?)\.?\s"
_READING = r"Encountered error while reading file " + _FILE
#: parquet-mr's words for a page whose CRC does not match (``parquet.page.verify-checksum``).
_CHECKSUM = r"CRC checksum verification failed"

#: ``(Spark's message, ours)``: the first pattern found in the exception's text decides;
#: ``{path}`` is what the caller read, ``{cause}`` the first Java ``Caused by`` line.
KNOWN: tuple[tuple[re.Pattern, str], ...] = (
    (
        re.compile(r"\[PATH_NOT_FOUND\] Path does not exist: " + _FILE),
        "{file}: no such file or directory",
    ),
    (
        re.compile(r"\[UNABLE_TO_INFER_SCHEMA\] Unable to infer schema for (?P<format>\w+)"),
        "{path}: no {format} data to read (an empty folder, or only empty files)",
    ),
    (
        re.compile(r"\[FAILED_READ_FILE\.CANNOT_READ_FILE_FOOTER\] " + _READING),
        "{file}: not a readable file of this format (no footer: truncated, corrupt, or "
        "another format)",
    ),
    (
        re.compile(
            r"\[FAILED_READ_FILE\.PARQUET_COLUMN_DATA_TYPE_MISMATCH\] "
            + _READING
            + r"Data type mismatches when reading Parquet column \[(?P<column>[^\]]+)\]\. "
            r"Expected Spark type (?P<expected>\w+), actual Parquet type (?P<actual>\w+)"
        ),
        "{file}: column '{column}' is {actual} there but {expected} in other files; "
        "files read together need the same column types",
    ),
    (
        re.compile(r"\[FAILED_READ_FILE\.\w+\] " + _READING + r"(?s:.*)" + _CHECKSUM),
        "{file}: a page fails its checksum: the file is damaged",
    ),
    (
        re.compile(r"\[FAILED_READ_FILE\.\w+\] " + _READING + r"(?s:.*)ChecksumException"),
        "{file}: the file does not match the checksum Hadoop keeps beside it (.crc): damaged, "
        "or changed since it was written",
    ),
    (
        re.compile(r"\[FAILED_READ_FILE\.\w+\] " + _READING),
        "{file}: cannot read it (corrupt?): {cause}",
    ),
    (
        re.compile(r"\[XML_ROW_TAG_MISSING\]"),
        "{path}: Spark's XML reader needs the name of the element that holds a row: "
        "--read-option rowTag=NAME (in Python, read_files(..., rowTag=NAME))",
    ),
    (
        re.compile(r"\[DATA_SOURCE_NOT_FOUND\] Failed to find the data source: (?P<format>\S+?)\."),
        "Spark has no reader for format '{format}' (csv, json, orc, parquet, …)",
    ),
)

_CAUSE = re.compile(r"^Caused by: (?:[\w.$]+\.)?(?P<cause>\w+: .*)$", re.MULTILINE)


def _local(path: str) -> str:
    """``file:/x`` and ``file:///x`` as ``/x``; other URLs as they are."""
    return re.sub(r"^file:(?://)?(?=/)", "", path)


def as_input_error(error: BaseException, path: str | None = None) -> InputError | None:
    """The InputError that says what :data:`KNOWN` recognises in a Spark ``error``, or None.

    ``path``: what the caller asked Spark to read (named when Spark's message names no file).
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    if not isinstance(error, PySparkException | Py4JJavaError):
        return None
    text = str(error)
    for pattern, message in KNOWN:
        m = pattern.search(text)
        if m is None:
            continue
        fields = m.groupdict()
        if "file" in fields:
            fields["file"] = _local(fields["file"])
        cause = _CAUSE.search(text)
        fields["cause"] = cause["cause"].strip() if cause else "no detail"
        fields["path"] = path or "the input"
        return InputError(message.format(**fields))
    return None


@contextmanager
def input_file_errors(path: str | None = None) -> Iterator[None]:
    """Raise a recognised Spark file error in the block as an InputError (see module doc)."""
    try:
        yield
    except Exception as e:
        err = as_input_error(e, path)
        if err is None:
            raise
        raise err from e


#: A Java exception's line in a trace: ``org.apache.spark.SparkException: message``.
_JAVA = re.compile(
    r"^(?:: |Caused by: )?(?:[a-z_$][\w$]*\.)+(?P<cls>[A-Z][\w$]*(?:Exception|Error)): (?P<msg>.+)$",
    re.MULTILINE,
)


def summary(error: BaseException) -> str | None:
    """One line for a Spark or Java failure, or None for any other error.

    A file error :data:`KNOWN` recognises says what it says; any other is Java's exception and
    its innermost cause, class and message each (``SparkException: [MALFORMED_RECORD_IN_PARSING]
    Malformed records are detected …; caused by JsonEOFException: …``), else the first line
    of PySpark's message (``[ERROR_CLASS] message``), without the JVM stack trace. The whole trace stays on ``error`` (the command prints it with
    ``--debug``).
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    if not isinstance(error, PySparkException | Py4JJavaError):
        return None
    known = as_input_error(error)
    if known is not None:
        return str(known)
    text = str(error)
    java = list(_JAVA.finditer(text))
    if java:
        top, root = java[0], java[-1]
        said = f"Spark failed: {top['cls']}: {_bare(top['msg'])}"
        if root is not top and root[0].startswith("Caused by"):
            said += f"; caused by {root['cls']}: {_bare(root['msg'])}"
        return said
    first = next((line for line in text.splitlines() if line.strip()), "")
    return f"Spark failed: {_bare(first) or type(error).__name__}"


def _bare(message: str) -> str:
    """A Spark message without its ``SQLSTATE: …`` tail."""
    return re.sub(r"\s*SQLSTATE: \w+\.?\s*$", "", message.strip())


def reading(batches: Iterator, path: str | None = None) -> Iterator:
    """``batches``, with recognised Spark file errors raised as InputErrors as they come."""
    with input_file_errors(path):
        yield from batches
