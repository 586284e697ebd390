"""The import contracts catch what they promise to catch.

Why: a contract that cannot fail is no contract (the old ones let `accounts.py` import the planner and
`allocate/simple.py` import `subprocess`). Each case copies the package, breaks one rule of
docs/architecture.md with one added import, runs the real `lint-imports` on the copy, and checks that
exactly the contracts for that rule report BROKEN.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

pytestmark = pytest.mark.integration

CASES = [
    # (file to change, import added, contracts that must break)
    ("accounts.py", "import kubegpu.plan.comm", {"R1", "R3"}),
    ("allocate/simple.py", "import subprocess, socket", {"R2"}),
    ("errors.py", "import logging", {"R2"}),
    ("echo.py", "import kubegpu.sources.spec", {"R1", "R2", "R3"}),  # R2: spec reaches pathlib
    ("backoff.py", "import threading", {"R2"}),
    ("model/topology.py", "from pathlib import Path", {"R2"}),
    ("sources/spec.py", "import kubegpu.deviceplugin.config", {"R3"}),
    ("sim/run.py", "import kubegpu.plan.comm", {"R3"}),
    ("doctor/finding.py", "import rich", {"R4"}),
    ("doctor/host.py", "import pynvml", {"R5"}),
    ("agent.py", "import grpc", {"R6"}),
    ("sim/run.py", "import kubernetes", {"R7"}),
    ("agent.py", "import prometheus_client", {"R8"}),
    ("metrics/dcgm.py", "import kubegpu.deviceplugin.config", {"R3"}),
    ("node/labels.py", "import kubegpu.deviceplugin.config", {"R3"}),  # tools are siblings
    ("kubeapi.py", "import kubegpu.node.labels", {"R3"}),  # the API client sits below the tools
    ("kubeconfig.py", "import kubegpu.kubeapi", {"R3"}),  # the parser sits below the transport
    ("node/hygiene.py", "import kubernetes", {"R7"}),  # only kubeapi talks to the API server
    ("node/lease.py", "import rich", {"R4"}),
    ("dra/driver.py", "import kubegpu.agent", {"R3"}),  # the two node daemons are siblings
    ("model/dra.py", "import kubegpu.dra.checkpoint", {"R1", "R2", "R3"}),
    ("sources/nvmlmig.py", "import pynvml", {"R5"}),  # the MIG backend goes through NvmlSource's module
    ("node/migmanager.py", "import kubegpu.agent", {"R3"}),  # the agent composes; the manager calls back
    ("extender/ledger.py", "import kubegpu.agent", {"R3"}),  # the agent and the extender are siblings
    ("sim/policy.py", "import kubegpu.extender.ledger", {"R3"}),  # the sim never knows its second engine
    ("extender/cluster.py", "import kubernetes", {"R7"}),  # the extender talks through kubeapi
    ("extender/server.py", "import typer", {"R4"}),
]


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree / "src")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def broken(output: str) -> set[str]:
    """The rules whose contract lint-imports reports BROKEN in its summary (names may wrap lines)."""
    summary = output.split("Contracts:", 1)[0].rsplit(
        "\n-------------------------------------\n", maxsplit=1
    )[-1]
    return {
        rule
        for rule, verdict in re.findall(r"\b(R\d+) .*?(KEPT|BROKEN)", summary, re.S)
        if verdict == "BROKEN"
    }


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("layers")
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_tree_as_it_is_keeps_every_contract(pristine: Path) -> None:
    result = lint(pristine)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("path", "line", "rules"), CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_one_forbidden_import_breaks_exactly_its_rule(
    pristine: Path, tmp_path: Path, path: str, line: str, rules: set[str]
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(pristine, tree)
    target = tree / "src" / "kubegpu" / path
    text = target.read_text()
    anchor = "from __future__ import annotations\n"
    assert anchor in text, f"{path} has no `from __future__` line to add the import after"
    target.write_text(text.replace(anchor, anchor + line + "\n", 1))
    result = lint(tree)
    assert result.returncode != 0, result.stdout
    assert broken(result.stdout) == rules, result.stdout
