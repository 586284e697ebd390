"""A clone of kubegpu stands alone: nothing in the product, its tests, benchmarks or Makefile reads
(or even names) a folder beside the clone, such as the team's ``../shared``.

A user's clone has no such folder, so a test or default path that reaches for it turns the suite red
(or silently skips) for everyone but this team. The data they need ships in the repository instead
(``src/kubegpu/sim/data/openb``, ``kubegpu.sim.openb``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("src", "tests", "bench", "Makefile")
# ``../shared`` anywhere, a path segment ``shared/`` (not ``--shared/``, ``nvidia.com/gpu.shared/``), or a
# pathlib join onto a ``"shared"`` segment.
OUTSIDE = re.compile(r"""\.\./shared|(?<![\w.\-])shared/|["']shared["']\s*/""")
SELF = Path(__file__).resolve()  # the one file that must spell the patterns out
TEXT_SUFFIXES = {".py", ".proto", ".sh", ".md", ".yaml", ".yml", ".toml", ".txt", ".c", ".h", ".env", ""}


def offenders(root: Path) -> list[str]:
    """Every ``path:line: text`` under the scanned folders of ``root`` that names a folder outside it."""
    found: list[str] = []
    for top in SCANNED:
        base = root / top
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for path in files:
            if path.suffix not in TEXT_SUFFIXES or "__pycache__" in path.parts or path.resolve() == SELF:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            for n, line in enumerate(text.splitlines(), 1):
                if OUTSIDE.search(line):
                    found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return found


def test_nothing_in_the_repository_names_the_folder_beside_the_clone() -> None:
    found = offenders(ROOT)
    assert not found, "these lines name a folder outside the repository:\n" + "\n".join(found)


def test_the_check_catches_a_path_to_the_shared_folder(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text('DATA = Path(__file__).parents[2] / "x"\nP = "../shared/data"\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "b.py").write_text('"see shared/reference/x.md"\nflag = "--shared/--multi-gpu"\n')
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "c.py").write_text('D = Path(__file__).parents[1].parent / "shared" / "data"\n')
    (tmp_path / "Makefile").write_text("gpu: nvidia.com/gpu.shared/x\n")
    assert offenders(tmp_path) == [
        'src/a.py:2: P = "../shared/data"',
        'tests/b.py:1: "see shared/reference/x.md"',
        'bench/c.py:1: D = Path(__file__).parents[1].parent / "shared" / "data"',
    ]
