"""The Python blocks of the README and of docs/, each named by its content (a slug of its first
comment or statement, and a hash), so that a test follows a block wherever it moves."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[1]
#: A block that needs a running Ray cluster (its address) is compiled, not run.
CLUSTER = "HEAD_IP"


@dataclass(frozen=True)
class Block:
    file: str
    code: str

    @property
    def id(self) -> str:
        lines = [ln.strip("# ").strip() for ln in self.code.splitlines() if ln.strip()]
        lead = next((ln for ln in lines if not ln.startswith(("import", "from"))), lines[0])
        slug = re.sub(r"[^a-z0-9]+", "-", lead.lower()).strip("-")[:40]
        digest = hashlib.sha1(self.code.encode()).hexdigest()[:6]
        ray = "ray-" if self.needs_ray else ""  # tests/conftest.py: Ray tests by their names
        return f"{Path(self.file).stem}-{ray}{slug}-{digest}"

    @property
    def needs_spark(self) -> bool:
        return "spark_bridge" in self.code

    @property
    def needs_ray(self) -> bool:
        return 'backend="ray"' in self.code and not self.needs_cluster

    @property
    def needs_cluster(self) -> bool:
        return CLUSTER in self.code


def blocks() -> list[Block]:
    """Every fenced ``python`` block of README.md and docs/*.md."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [
        Block(str(f.relative_to(ROOT)), code)
        for f in files
        for code in re.findall(r"^```python\n(.*?)^```", f.read_text(), re.S | re.M)
    ]


def run_block(block: Block) -> None:
    """Run ``block`` as a script (in the working directory: its pictures land there), or,
    for one that needs a cluster, compile it."""
    code = compile(block.code, block.file, "exec")
    if block.needs_cluster:
        return
    exec(code, {"__name__": "__main__"})
