"""The command on bad input: one line ``streamjoin: error: …`` naming the file or column, and
exit status 2 (argparse's status for a usage error: the user has to change the command or its
input; 1 stays "ran, but --check found a difference"). No traceback, no Java stack trace.

Spark cases run ``cli.main`` in this process on the session's Spark (the ``spark`` fixture:
``session()`` returns the active session); one runs the command as a subprocess, which starts
a JVM of its own.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from streamjoin.cli import main

BIG = str(2**70)


def one_error_line(capsys) -> str:
    """The one line on stderr, besides the notice that numba compiles (a cold kernel cache:
    the run may compile a kernel before it meets the error)."""
    err = [
        line
        for line in capsys.readouterr().err.strip().splitlines()
        if not line.startswith("compiling numba kernels")
    ]
    assert len(err) == 1, err
    assert err[0].startswith("streamjoin: error: "), err
    return err[0]


@pytest.mark.parametrize("kind", ["count", "time"])
def test_window_beyond_int64_is_one_line(kind, capsys, tmp_path):
    argv = ["run", "--backend", "local", "-n", "100", "-o", str(tmp_path / "out")]
    assert main([*argv, "--window-kind", kind, "--window", BIG]) == 2
    line = one_error_line(capsys)
    assert f"must be at most 2**63 - 1 (int64), got {BIG}" in line
    assert not (tmp_path / "out").exists()


def test_window_beyond_int64_as_a_command():
    cmd = [sys.executable, "-m", "streamjoin", "run", "--backend", "local", "--window", BIG]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"streamjoin: error: count window size must be at most 2**63 - 1 (int64), got {BIG}"
    ]


# --- Spark sources ------------------------------------------------------------------------


def _table(n: int = 100) -> pa.Table:
    return pa.table(
        {
            "seq": np.arange(n),
            "stream": np.tile([0, 1], n // 2).astype(np.int8),
            "ts": np.arange(n),
            "x": np.arange(n, dtype=np.float64),
        }
    )


def _corrupt(path: str) -> str:
    """A Parquet file whose footer is fine and whose ``ts`` pages are garbage."""
    pq.write_table(_table(), path)
    meta = pq.ParquetFile(path).metadata.row_group(0).column(2)
    start = meta.dictionary_page_offset or meta.data_page_offset
    data = bytearray(Path(path).read_bytes())
    for i in range(start, start + meta.total_compressed_size):
        data[i] ^= 0x5A
    Path(path).write_bytes(bytes(data))
    return path


def _written(path: str, table: pa.Table) -> str:
    pq.write_table(table, path)
    return path


def _parts(folder: str, *tables: pa.Table) -> str:
    os.makedirs(folder)
    for k, t in enumerate(tables):
        pq.write_table(t, os.path.join(folder, f"part-{k}.parquet"))
    return folder


def _truncated(path: str) -> str:
    pq.write_table(_table(), path)
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])
    return path


def _text(path: str) -> str:
    Path(path).write_text("stream,ts,x\n0,1,2.0\n")
    return path


t = _table()
CASES = {
    "missing": (lambda d: f"{d}/nope.parquet", [], "nope.parquet: no such file or directory"),
    "corrupt": (lambda d: _corrupt(f"{d}/bad.parquet"), [], "bad.parquet: cannot read it"),
    "truncated": (lambda d: _truncated(f"{d}/cut.parquet"), [], "cut.parquet: not a readable"),
    "not_parquet": (lambda d: _text(f"{d}/data.parquet"), [], "data.parquet: not a readable"),
    "empty_folder": (lambda d: _parts(f"{d}/none"), [], "none: no Parquet data to read"),
    "mixed_schemas": (
        lambda d: _parts(
            f"{d}/mixed", t.slice(0, 50), t.slice(50).rename_columns(["seq", "stream", "ts", "y"])
        ),
        [],
        "mixed: column 'x' has null values (files with different columns?)",
    ),
    "column_types": (
        lambda d: _parts(
            f"{d}/types", t.slice(0, 50), t.slice(50).set_column(3, "x", pa.array(np.arange(50)))
        ),
        ["--eps", "1"],
        "column 'x' is ",
    ),
    "no_stream_column": (
        lambda d: _written(f"{d}/one.parquet", t.drop_columns(["stream"])),
        [],
        "one.parquet has no column 'stream' (0 for R, 1 for S) for a two-way join",
    ),
    "empty_input_no_eps": (
        lambda d: _written(f"{d}/empty.parquet", t.slice(0, 0)),
        [],
        "empty.parquet: cannot choose eps for --match-rate: choosing eps needs join values of "
        "both streams, got 0 of R and 0 of S; pass --eps",
    ),
    "one_stream_no_eps": (
        lambda d: _written(f"{d}/r.parquet", t.filter(pc.equal(t["stream"], 0))),
        [],
        "r.parquet: cannot choose eps for --match-rate: choosing eps needs join values of "
        "both streams, got 50 of R and 0 of S; pass --eps",
    ),
    "self_join_of_two_streams": (
        lambda d: _written(f"{d}/two.parquet", t),
        ["--self-join"],
        # checked as the rows stream (spark-any-df): the first S row is named
        "a self-join reads one stream, but column 'stream' has 1 at row ",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_spark_source_is_one_line(spark, tmp_path, capsys, case):
    make, extra, expected = CASES[case]
    path = make(str(tmp_path))
    out = tmp_path / "out"
    argv = ["run", "--backend", "local", "--no-progress", "-o", str(out)]
    assert main([*argv, "--source", f"parquet:{path}", *extra]) == 2
    line = one_error_line(capsys)
    assert expected in line
    assert str(tmp_path) in line or "column 'stream'" in line  # names the file, or the column
    assert not out.exists()


def test_column_types_names_the_file_and_both_types(spark, tmp_path, capsys):
    folder = CASES["column_types"][0](str(tmp_path))
    assert main(["run", "--backend", "local", "--source", f"parquet:{folder}", "--eps", "1"]) == 2
    line = one_error_line(capsys)
    assert "/types/part-" in line and "files read together need the same column types" in line
    assert ("INT64 there but double" in line) or ("DOUBLE there but bigint" in line)


@pytest.mark.slow  # 8 s: a process of its own with its own JVM (the same error is checked in
# process by test_bad_spark_source_is_one_line)
def test_bad_spark_source_as_a_command(tmp_path):
    """The whole command: Spark's own start-up lines may precede it, but no trace follows."""
    folder = CASES["column_types"][0](str(tmp_path))
    cmd = [sys.executable, "-m", "streamjoin", "run", "--backend", "local", "--no-progress"]
    cmd += ["--source", f"parquet:{folder}", "--eps", "1", "-o", str(tmp_path / "out")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    ours = [line for line in lines if line.startswith("streamjoin: error:")]
    assert ours == [lines[-1]] and "/types/part-" in ours[0]
    assert "Traceback" not in out.stderr
    assert not [line for line in lines if line.lstrip().startswith("at ")]  # no Java frames


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "layout=packed",
            "--index-option for pim_tree: pim_tree layout must be 'wide' or 'compact'",
        ),
        ("bogus=1", "--index-option for pim_tree: index 'pim_tree' has no option 'bogus'; its"),
        ("fanout=nan", "--index-option for pim_tree: pim_tree fanout must be an integer in [3, "),
    ],
)
def test_a_bad_index_option_is_one_line(option, message, capsys, tmp_path):
    argv = ["run", "--backend", "local", "-n", "100", "-o", str(tmp_path / "out")]
    assert main([*argv, "--index", "pim_tree", "--index-option", option]) == 2
    assert message in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


# --- Spark's own failures, damaged pages, columns a join cannot take ------------------------

RUN = ["run", "--backend", "local", "--no-progress"]


def test_xml_without_its_row_tag_says_which_option(spark, tmp_path, capsys):
    path = tmp_path / "rows.xml"
    path.write_text(
        "<rows>"
        + "".join(f"<row><stream>{k % 2}</stream><ts>{k}</ts><x>{k}.0</x></row>" for k in range(20))
        + "</rows>"
    )
    argv = [*RUN, "-o", str(tmp_path / "out"), "--source", f"spark:xml:{path}", "--eps", "1"]
    assert main(argv) == 2
    assert one_error_line(capsys) == (
        f"streamjoin: error: {path}: Spark's XML reader needs the name of the element that "
        "holds a row: --read-option rowTag=NAME (in Python, read_files(..., rowTag=NAME))"
    )
    assert main([*argv, "--read-option", "rowTag=row"]) == 0


def test_a_string_join_column_is_named(spark, tmp_path, capsys):
    path = _written(
        str(tmp_path / "names.parquet"),
        _table().append_column("name", pa.array([f"n{k}" for k in range(100)])),
    )
    assert (
        main([*RUN, "-o", str(tmp_path / "out"), "--source", f"parquet:{path}", "--attr", "name"])
        == 2
    )
    assert one_error_line(capsys) == (
        f"streamjoin: error: parquet:{path}: column 'name' is string; a join column must be an "
        "integer or floating-point type (--attr names the join column)"
    )


def test_a_spark_failure_is_summarised_in_one_line(spark, tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"stream": 0, "ts": 1, "x": 2.0}\n{"stream": 1, "ts": 2, "x":\n')
    argv = [*RUN, "-o", str(tmp_path / "out"), "--source", f"spark:json:{path}", "--eps", "1"]
    assert main([*argv, "--read-option", "mode=FAILFAST"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("streamjoin: error: Spark failed: SparkException: [MALFORMED_RECORD")
    assert "; caused by JsonEOFException: " in line and line.endswith("(--debug: Spark's trace)")


def _flip_a_byte(path: str, column: str) -> None:
    """One bit flipped in the middle of ``column``'s pages in the first row group: its
    footer stays readable, one value (or page) changes."""
    meta = pq.ParquetFile(path).metadata.row_group(0)
    chunk = next(
        meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column
    )
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(Path(path).read_bytes())
    data[start + chunk.total_compressed_size // 2] ^= 0x01
    Path(path).write_bytes(bytes(data))


def _plain_pages(path: str, checksums: bool) -> str:
    table = _table(2000)
    pq.write_table(
        table, path, compression="none", use_dictionary=False, write_page_checksum=checksums
    )
    _flip_a_byte(path, "x")
    return path


def test_a_damaged_page_with_a_checksum_is_an_error_naming_the_file(spark, tmp_path, capsys):
    path = _plain_pages(str(tmp_path / "damaged.parquet"), checksums=True)
    argv = [*RUN, "-o", str(tmp_path / "out"), "--source", f"parquet:{path}", "--eps", "3"]
    assert main(argv) == 2
    assert one_error_line(capsys) == (
        f"streamjoin: error: {path}: a page fails its checksum: the file is damaged"
    )


def test_a_damaged_page_without_a_checksum_is_not_detected(spark, tmp_path, capsys):
    """What the docs say: a file written without page checksums (pyarrow's default) reads
    its damaged value as it is."""
    path = _plain_pages(str(tmp_path / "damaged.parquet"), checksums=False)
    argv = [*RUN, "-o", str(tmp_path / "out"), "--source", f"parquet:{path}", "--eps", "3"]
    assert main([*argv, "--check"]) == 0  # the oracle reads the same damaged value
    x = pq.read_table(path).column("x").to_numpy()
    assert not np.array_equal(x, np.arange(2000, dtype=np.float64))


@pytest.mark.parametrize("sidecars", ["kept", "lost in a copy"])
def test_generate_writes_checksums_that_a_run_verifies(spark, tmp_path, capsys, sidecars):
    """Spark's local file system keeps a .crc file beside each file it writes, which catches
    the damage first; a copy without them still has the pages' own checksums."""
    folder = tmp_path / "data"
    assert main(["generate", "-n", "20000", "--parts", "2", "-o", str(folder)]) == 0
    if sidecars != "kept":
        for crc in folder.glob(".*.crc"):
            crc.unlink()
    damaged = sorted(str(p) for p in folder.glob("part-*.parquet"))[-1]
    _flip_a_byte(damaged, "x")
    capsys.readouterr()
    argv = [*RUN, "-o", str(tmp_path / "out"), "--source", f"parquet:{folder}", "--eps", "1"]
    assert main(argv) == 2
    said = (
        "the file does not match the checksum Hadoop keeps beside it (.crc): damaged, or "
        "changed since it was written"
        if sidecars == "kept"
        else "a page fails its checksum: the file is damaged"
    )
    assert one_error_line(capsys) == f"streamjoin: error: {damaged}: {said}"


def test_run_of_a_spark_dataframe_says_what_to_call(spark):
    import streamjoin as sj

    df = spark.createDataFrame(_table())
    query = sj.Query(sj.band("x", 1), window=sj.CountWindow(10))
    with pytest.raises(sj.InputError) as info:
        sj.run(query, df)
    assert str(info.value) == (
        "input is a Spark DataFrame: stream it with streamjoin.run(query, "
        "streamjoin.spark_bridge.from_dataframe(df), ...), or collect a small one with "
        "df.toArrow()"
    )


@pytest.mark.slow  # 8 s: a process with its own JVM (the same error is checked in process)
def test_xml_without_its_row_tag_as_a_command(tmp_path):
    (tmp_path / "rows.xml").write_text("<rows><row><x>1.0</x></row></rows>")
    cmd = [sys.executable, "-m", "streamjoin", *RUN, "--source", "spark:xml:rows.xml"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("streamjoin: error: rows.xml: Spark's XML reader needs")
    assert "Traceback" not in out.stderr
    assert not [line for line in lines if line.lstrip().startswith("at ")]  # no Java frames
