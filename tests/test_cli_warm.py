"""``streamjoin warm``: every topology's default join run once, each spec with small sizes."""

import pytest

from streamjoin import cli, topologies
from streamjoin.cli_warm import small_spec


def test_every_spec_has_a_small_form_that_parses():
    for name, _ in topologies.SPECS:
        spec = small_spec(name)
        assert not any(p in spec for p in ("MxN", "WxS", ":N", ":W")), spec
        topologies.parse(spec)


def test_warm_runs_the_topologies_it_is_given(capsys):
    assert cli.main(["warm", "--topology", "single", "--topology", "spo:2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in out[:2]] == [["warmed", "single"], ["warmed", "spo:2"]]
    assert out[-1].startswith("every kernel in numba's cache:")


@pytest.mark.parametrize("spec", ["grid:0x2", "nope"])
def test_a_bad_spec_is_one_line_before_anything_runs(spec, capsys):
    assert cli.main(["warm", "--topology", spec]) == 2
    err = capsys.readouterr()
    assert err.out == "" and err.err.startswith("streamjoin: error: ")
