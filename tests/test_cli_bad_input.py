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
    err = capsys.readouterr().err.strip().splitlines()
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
        ("bogus=1", "--index-option for pim_tree: PIMTreeIndex.__init__() got an unexpected"),
    ],
)
def test_a_bad_index_option_is_one_line(option, message, capsys, tmp_path):
    argv = ["run", "--backend", "local", "-n", "100", "-o", str(tmp_path / "out")]
    assert main([*argv, "--index", "pim_tree", "--index-option", option]) == 2
    assert message in one_error_line(capsys)
    assert not (tmp_path / "out").exists()
