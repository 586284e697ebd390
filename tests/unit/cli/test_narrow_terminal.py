"""Tables at 80 columns keep what tells rows apart: `dra devices` showed every UUID as the same
`GPU-…` prefix; now each is whole (or folded onto a second line), and no line is wider than 80."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def _kubegpu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubegpu", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "80"},
    )


def test_dra_devices_at_80_columns_shows_each_uuid_whole() -> None:
    devices = json.loads(_kubegpu("dra", "devices", "builtin:dgx-h100", "--json").stdout)
    uuids = [d["attributes"]["uuid"]["string"] for d in devices]
    result = _kubegpu("dra", "devices", "builtin:dgx-h100")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in result.stdout
    assert all(any(u in line for line in lines) for u in uuids), result.stdout


def test_dra_devices_at_80_columns_keeps_mig_uuids_complete_across_lines() -> None:
    result = _kubegpu("dra", "devices", "builtin:h100-mig-mixed")
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("device"))
    start, end = header.index("uuid"), header.index("domain")
    # the uuid column read down the table: a folded UUID continues on the next line
    folded = "".join(line[start:end].strip() for line in lines[lines.index(header) + 1 :])
    names = "".join(line[:start].strip() for line in lines[lines.index(header) + 1 :])
    devices = json.loads(_kubegpu("dra", "devices", "builtin:h100-mig-mixed", "--json").stdout)
    assert len(devices) == 5
    for d in devices:  # a folded cell continues on the next line: joined, each name and UUID is whole
        assert d["name"] in names
        assert d["attributes"]["uuid"]["string"] in folded


def test_agent_help_at_80_columns_shows_every_flag_name_whole() -> None:
    """typer's boxed help cut `--device-plugin-dir` to `--device-plugin-…` at 80 columns."""
    result = _kubegpu("agent", "--help")
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout.replace("hgx-16 …", "")  # the one ellipsis is in a help text
    for flag in ("--device-plugin-dir", "--config-file", "--kubelet-socket", "--health-address"):
        assert flag in result.stdout, flag
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert "/var/lib/kubelet/device-plugins" in result.stdout  # a default, whole
