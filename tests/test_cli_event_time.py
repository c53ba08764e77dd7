"""The command on out-of-order input: ``--disorder`` makes it, ``--lateness`` joins it exactly
(``--check`` against the oracle), ``--on-late drop`` counts what it leaves out, and a late row
under the default ``--on-late error`` is one error line."""

from streamjoin.cli import main


def test_lateness_covering_the_disorder_checks_against_the_oracle(capsys, tmp_path):
    argv = ["run", "-n", "6000", "--window-kind", "time", "--window", "50", "--no-progress"]
    argv += ["--disorder", "20", "--lateness", "20", "--check", "-o", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "lateness 20" in out and "up to 20 ms out of order" in out
    assert "oracle: same pairs" in out and "late " in out


def test_late_rows_dropped_are_counted(capsys, tmp_path):
    argv = ["run", "-n", "20000", "--disorder", "20", "--lateness", "3", "--on-late", "drop"]
    argv += ["--check", "--no-progress", "-o", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    late = [line for line in out.splitlines() if line.startswith("late ")]
    assert late and "tuples left out" in late[0] and not late[0].startswith("late       0 ")


def test_a_late_row_is_one_error_line(capsys, tmp_path):
    argv = ["run", "-n", "5000", "--disorder", "20", "--lateness", "3", "--no-progress"]
    assert main([*argv, "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("streamjoin: error: row ")
    assert "is late" in err[0]
    assert not (tmp_path / "out").exists()


def test_on_late_needs_lateness(capsys, tmp_path):
    assert main(["run", "--on-late", "drop", "-o", str(tmp_path / "out")]) == 2
    assert "--on-late needs --lateness" in capsys.readouterr().err
