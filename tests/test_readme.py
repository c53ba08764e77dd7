"""The README's Python example runs as written (and its oracle assertion holds)."""

import re
from pathlib import Path


def test_readme_example_runs(tmp_path, monkeypatch):
    text = (Path(__file__).parents[1] / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)[1]
    monkeypatch.chdir(tmp_path)  # it writes its pictures to the working directory
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "latency.png").exists()


def test_readme_inequality_example_runs(tmp_path, monkeypatch):
    """The README's SPO-Join example (its second Python block) runs, its assertion holds."""
    text = (Path(__file__).parents[1] / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[1]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})


def test_readme_shared_index_example_runs(tmp_path, monkeypatch):
    """The README's shared-index example runs, its oracle assertion holds."""
    text = (Path(__file__).parents[1] / "README.md").read_text()
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", text, re.S) if "shared_index(" in c]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
