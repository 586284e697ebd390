"""A clone of kubegpu stands alone: nothing that `make test` runs (the product, its tests, the
Makefile) reads or names the team's data folder beside the clone, which a user's clone lacks.

The benchmarks included: they read the openb trace (not redistributed) only from a folder the user
names (``--data`` or ``KUBEGPU_OPENB_DIR``), and without one print how to give it and exit 0.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("src", "tests", "bench", "Makefile")
ALLOWED: set[str] = set()
FOLDER = "sh" + "ared"  # spelled so that this file does not name the folder it looks for
# ``../<folder>`` anywhere, a path segment ``<folder>/`` (not ``--<folder>/``, ``nvidia.com/gpu.<folder>/``),
# or a pathlib join onto a ``"<folder>"`` segment
OUTSIDE = re.compile(rf"""\.\./{FOLDER}|(?<![\w.\-]){FOLDER}/|["']{FOLDER}["']\s*/""")
TEXT_SUFFIXES = {".py", ".proto", ".sh", ".md", ".yaml", ".yml", ".toml", ".txt", ".c", ".h", ".env", ""}


def offenders(root: Path) -> list[str]:
    """Every ``path:line: text`` under the scanned folders of ``root`` that names the folder outside it."""
    found: list[str] = []
    for top in SCANNED:
        base = root / top
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for path in files:
            rel = str(path.relative_to(root))
            if path.suffix not in TEXT_SUFFIXES or "__pycache__" in path.parts or rel in ALLOWED:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            found += [
                f"{rel}:{n}: {line.strip()}"
                for n, line in enumerate(text.splitlines(), 1)
                if OUTSIDE.search(line)
            ]
    return found


def test_nothing_make_test_runs_names_the_folder_beside_the_clone() -> None:
    found = offenders(ROOT)
    assert not found, "these lines name a folder outside the repository:\n" + "\n".join(found)


def test_the_check_catches_a_path_to_the_folder(tmp_path: Path) -> None:
    up, seg = f"../{FOLDER}/data", f"{FOLDER}/reference/x.md"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text(f'DATA = Path(__file__).parents[2] / "x"\nP = "{up}"\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "b.py").write_text(f'"see {seg}"\nflag = "--{FOLDER}/--multi-gpu"\n')
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "c.py").write_text(f'D = Path(__file__).parents[1].parent / "{FOLDER}" / "data"\n')
    (tmp_path / "Makefile").write_text(f"gpu: nvidia.com/gpu.{FOLDER}/x\n")
    assert offenders(tmp_path) == [
        f'src/a.py:2: P = "{up}"',
        f'tests/b.py:1: "see {seg}"',
        f'bench/c.py:1: D = Path(__file__).parents[1].parent / "{FOLDER}" / "data"',
    ]
