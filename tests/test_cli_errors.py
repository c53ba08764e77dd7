"""The command as a user types it, with a mistake: one line ``streamjoin: error: …`` on stderr
that names the option, file or count to fix, exit status 2, no traceback (the whole one with
``--debug``). The cases call the command's ``main`` in this process (a process each cost a second,
most of it importing); one case, and ``--debug``'s, run ``python -m streamjoin`` in a
process of its own. None starts Spark or Ray (the Spark cases are in test_cli_bad_input.py).
"""

import os
import subprocess
import sys

import pytest

from streamjoin.cli import main


def streamjoin(*argv: str, cwd) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "streamjoin", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.fixture
def command(capsys, monkeypatch):
    """``command(*argv, cwd=...)``: the command's ``main`` run here, in ``cwd``, as a process's
    exit status and output (argparse's mistakes exit through ``SystemExit``)."""

    def call(*argv: str, cwd) -> subprocess.CompletedProcess:
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        try:
            code = main(list(argv))
        except SystemExit as stop:
            code = stop.code
        out = capsys.readouterr()
        return subprocess.CompletedProcess(argv, code, out.out, out.err)

    return call


def one_error_line(out: subprocess.CompletedProcess) -> str:
    """The one line the command printed on stderr, after checking it exited 2 with no trace."""
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamjoin: error: "), out.stderr
    return lines[0].removeprefix("streamjoin: error: ")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["run", "--max-delay", "inf"],
            "argument --max-delay: must be a number of seconds in [0, 1000000000], got inf "
            "(see: streamjoin run -h)",
        ),
        (
            ["run", "--match-rate", "nan"],
            "argument --match-rate: must be a finite number > 0, got nan (see: streamjoin run -h)",
        ),
        (
            ["run", "-n", "0"],
            "argument -n/--tuples: must be an integer >= 1, got 0 (see: streamjoin run -h)",
        ),
        (
            ["compare", "--batch-size", "1e3"],
            "argument --batch-size: must be an integer, got '1e3' (see: streamjoin compare -h)",
        ),
        (
            ["run", "--backend", "sim", "--machine", "MISSING.json"],
            "--machine MISSING.json: no such file (write one with `streamjoin calibrate -o "
            "MISSING.json`, or leave --machine out for this host's profile)",
        ),
        (
            ["run", "--topology", "grid:2x1000000"],
            "grid(2, 1000000) would have 2,000,002 actors; a topology has at most 10,000 "
            "(streamjoin.topologies.MAX_ACTORS, the scale Ray is tested at)",
        ),
        (
            ["run", "--index", "pim_tree", "--index-option", "fanout=x"],
            "--index-option for pim_tree: pim_tree fanout must be an integer in [3, 65536], "
            "got 'x'",
        ),
        (
            ["run", "--index", "pim_tree", "--index-option", "bogus=1"],
            "--index-option for pim_tree: index 'pim_tree' has no option 'bogus'; its options: "
            "css_fanout, css_leaf_size, fanout, insertion_depth, layout, leaf_size, merge_ratio, "
            "window",
        ),
        (
            ["run", "--source", "parquet:data.parquet", "--spark-master", "local[-1]"],
            "Spark master 'local[-1]' is not one Spark takes: local, local[N] (N >= 1 threads), "
            "local[*], spark://HOST:PORT, yarn or k8s://…",
        ),
        (
            ["draw", "grid:2x2", "-o", "MISSING_DIR/x.png"],
            "-o MISSING_DIR/x.png: no folder MISSING_DIR",
        ),
        (
            ["generate", "-n", "-5", "-o", "data"],
            "argument -n/--tuples: must be an integer >= 0, got -5 (see: streamjoin generate -h)",
        ),
    ],
)
def test_a_mistake_is_one_line_and_exit_2(argv, line, tmp_path, command):
    assert one_error_line(command(*argv, cwd=tmp_path)) == line
    assert os.listdir(tmp_path) == []  # nothing written, no streamjoin-out/


def test_the_command_in_a_process_of_its_own_prints_one_line_and_exits_2(tmp_path):
    line = one_error_line(streamjoin("run", "-n", "0", cwd=tmp_path))
    assert line == "argument -n/--tuples: must be an integer >= 1, got 0 (see: streamjoin run -h)"
    assert os.listdir(tmp_path) == []


def test_run_refuses_an_output_folder_that_is_a_file(tmp_path, command):
    (tmp_path / "results").write_text("mine")
    line = one_error_line(command("run", "-n", "100", "-o", "results", cwd=tmp_path))
    assert line == "-o results: exists and is not a folder; -o names the output folder"
    assert (tmp_path / "results").read_text() == "mine"


def test_run_refuses_an_output_folder_it_cannot_make(tmp_path, command):
    (tmp_path / "results").write_text("mine")
    line = one_error_line(command("run", "-n", "100", "-o", "results/run1", cwd=tmp_path))
    assert line == f"-o results/run1: {tmp_path / 'results'} is a file, not a folder"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_run_refuses_an_output_folder_it_cannot_write(tmp_path, command):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    line = one_error_line(command("run", "-n", "100", "-o", "locked/out", cwd=tmp_path))
    assert line == f"-o locked/out: cannot write in {locked} (permission denied)"


def test_draw_replaces_an_existing_file_only_with_force(tmp_path, command):
    (tmp_path / "graph.png").write_text("mine")
    line = one_error_line(command("draw", "grid:2x2", cwd=tmp_path))
    assert line == "-o graph.png exists; pass --force to replace it"
    assert (tmp_path / "graph.png").read_text() == "mine"
    out = command("draw", "grid:2x2", "--force", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "graph.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("where", ["before the command", "after it"])
def test_debug_shows_the_whole_traceback(where, tmp_path):
    argv = ["run", "--backend", "sim", "--machine", "MISSING.json"]
    argv = ["--debug", *argv] if where == "before the command" else [*argv, "--debug"]
    out = streamjoin(*argv, cwd=tmp_path)
    assert out.returncode == 1
    assert "Traceback (most recent call last)" in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("ValueError: --machine MISSING.json")
