"""`kubegpu agent`'s command-line contract: NVIDIA's flag names, one-line errors, exit 2 on bad input."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import typer

from kubegpu.cli.app import app
from kubegpu.deviceplugin.config import SETTINGS


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubegpu", "agent", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_help_lists_the_contract_and_nvidias_flags(cli) -> None:
    res = cli("agent", "--help")
    assert res.code == 0
    for flag in (
        "--node-spec",
        "--device-plugin-dir",
        "--config",
        "--fault-file",
        "--mig-strategy",
        "--device-list-strategy",
        "--device-id-strategy",
        "--pass-device-specs",
        "--kubelet-socket",
    ):
        assert flag in res.out


def test_real_and_simulated_gpus_are_mutually_exclusive(tmp_path) -> None:
    res = run("--nvml", "--node-spec", "builtin:seed-8gpu", "--device-plugin-dir", str(tmp_path))
    assert res.returncode == 2
    assert "mutually exclusive" in res.stderr
    assert "Traceback" not in res.stderr


def test_bad_flag_value_names_the_flag_and_starts_nothing(tmp_path) -> None:
    res = run(
        "--node-spec", "builtin:seed-8gpu", "--device-plugin-dir", str(tmp_path), "--mig-strategy", "most"
    )
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        .splitlines()[-1]
        .startswith("kubegpu: error: --mig-strategy: 'most' is not allowed")
    )
    assert list(tmp_path.iterdir()) == []


# The agent's options are the settings table's flags plus options that are not settings.
CLI_ONLY = {
    "--node-spec",
    "--nvml",
    "--device-plugin-dir",
    "--config",
    "--fault-file",
    "--kubelet-socket",
    "--log-level",
    "--health-address",
    "--node-name",
    "--kubeconfig",
    "--init-retry-interval",
    "--simulated-nvidia-smi",
}


def _agent_options() -> dict[str, Any]:
    """The agent command's options as click builds them from the typer command (flag -> option)."""
    agent = typer.main.get_command(app).commands["agent"]  # type: ignore[attr-defined]
    return {p.opts[0]: p for p in agent.params if p.param_type_name == "option"}


def test_agent_options_are_the_settings_flags_and_the_cli_only_options() -> None:
    flags = {s.flag for s in SETTINGS if s.flag}
    assert not flags & CLI_ONLY
    assert set(_agent_options()) == flags | CLI_ONLY


def test_every_setting_with_a_flag_is_an_agent_option_with_the_tables_help() -> None:
    options = _agent_options()
    for s in SETTINGS:
        if not s.flag:
            continue
        option = options[s.flag]
        assert option.help is not None and option.help.startswith(s.help), s.flag
        for value in s.allowed:
            assert value in option.help, (s.flag, value)
        for env in s.env:
            assert env.name in option.help, (s.flag, env.name)
        if isinstance(s.default, bool):
            assert option.is_bool_flag
            assert option.secondary_opts == ["--no-" + s.flag[2:]]
        assert option.default is None  # not given: the environment, the file or the default decide
        assert option.envvar is None  # environment variables are read by load_config, as "env NAME"


def test_help_shows_each_settings_flag_and_allowed_values(cli) -> None:
    res = cli("agent", "--help")
    assert res.code == 0
    text = " ".join(res.out.replace("│", " ").split())
    for s in SETTINGS:
        if s.flag:
            assert s.flag in text
            for value in s.allowed:
                assert value in text


def test_each_setting_flag_reaches_the_agent_under_its_setting_name(cli, monkeypatch, tmp_path) -> None:
    seen: list[object] = []

    class FakeAgent:
        def __init__(self, options: object) -> None:
            seen.append(options)

        def run_until_signalled(self) -> None:
            pass

    monkeypatch.setattr("kubegpu.agent.Agent", FakeAgent)
    monkeypatch.setattr("kubegpu.cli.agent._setup_logging", lambda level: None)
    res = cli(
        "agent",
        "--node-spec",
        "builtin:seed-8gpu",
        "--device-plugin-dir",
        str(tmp_path),
        "--mig-strategy",
        "mixed",
        "--no-fail-on-init-error",
        "--shared-devices-allocation-policy",
        "packed",
    )
    assert res.code == 0, res.err
    [options] = seen
    overrides = options.cli_overrides  # type: ignore[attr-defined]
    assert set(overrides) == {s.name for s in SETTINGS if s.flag}
    given = {k: v for k, v in overrides.items() if v is not None}
    assert given == {"mig_strategy": "mixed", "fail_on_init_error": False, "replica_policy": "packed"}
    assert options.node_spec == "builtin:seed-8gpu"  # type: ignore[attr-defined]


def test_boolean_settings_take_nvidias_equals_spelling(cli, monkeypatch, tmp_path) -> None:
    seen: list[object] = []

    class FakeAgent:
        def __init__(self, options: object) -> None:
            seen.append(options)

        def run_until_signalled(self) -> None:
            pass

    monkeypatch.setattr("kubegpu.agent.Agent", FakeAgent)
    monkeypatch.setattr("kubegpu.cli.agent._setup_logging", lambda level: None)
    base = ("agent", "--node-spec", "builtin:seed-8gpu", "--device-plugin-dir", str(tmp_path))
    for spelling, want in (("--fail-on-init-error=false", False), ("--fail-on-init-error=true", True)):
        res = cli(*base, spelling, "--health-address", ":8080")
        assert res.code == 0, res.err
        assert seen[-1].cli_overrides["fail_on_init_error"] is want  # type: ignore[attr-defined]
        assert seen[-1].health_address == ":8080"  # type: ignore[attr-defined]
    res = cli(*base, "--fail-on-init-error=maybe")
    assert res.code == 2 and "not a boolean" in res.err


def test_nvidia_bool_flags_leaves_other_arguments_alone() -> None:
    from kubegpu.cli.agent import nvidia_bool_flags

    assert nvidia_bool_flags(["--fail-on-init-error=0", "--mig-strategy=mixed", "--", "--x=false"]) == [
        "--no-fail-on-init-error",
        "--mig-strategy=mixed",
        "--",
        "--x=false",
    ]


def test_simulated_nvidia_smi_needs_a_node_spec(cli, tmp_path) -> None:
    res = cli("agent", "--nvml", "--simulated-nvidia-smi", "--device-plugin-dir", str(tmp_path))
    assert res.code != 0 and "--simulated-nvidia-smi needs --node-spec" in res.err
