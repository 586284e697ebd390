"""Bad input to topo/labels/alloc/mig/dra/agent/extender: one line on stderr, exit 2 (or the
command's documented exit 1 for a request that cannot be met), never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cli.conftest import Result, Runner

INF_COST = """\
gpus: [{model: H100-80GB, count: 3}]
topology: {tiers: [{link: NV18, groups: ["0-1"], cost: .inf}, {link: SYS}]}
"""


def _one_line(res: Result, code: int, message: str) -> None:
    assert res.code == code, res.err
    assert "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) == 1, res.err
    assert message in res.err


@pytest.mark.parametrize(
    "command",
    [("topo",), ("labels",), ("alloc", "--count", "1"), ("mig", "current"), ("dra", "devices")],
)
def test_an_infinite_tier_cost_is_one_line_and_exit_2(
    cli: Runner, tmp_path: Path, command: tuple[str, ...]
) -> None:
    spec = tmp_path / "node.yaml"
    spec.write_text(INF_COST)
    _one_line(cli(*command, str(spec)), 2, f"{spec}:2: topology.tiers[0].cost: cost inf is out of range")


@pytest.mark.parametrize(
    "command",
    [
        ("dra", "serve", "--node-spec", "builtin:seed-8gpu", "--node-name", "n1"),
        ("agent", "--node-spec", "builtin:seed-8gpu"),
        ("extender", "--kubeconfig", "/nonexistent"),
    ],
)
def test_an_unknown_log_level_lists_the_valid_ones(cli: Runner, command: tuple[str, ...]) -> None:
    res = cli(*command, "--log-level", "bogus")
    _one_line(res, 2, "--log-level: 'bogus' is not a log level; allowed: debug, info, warning, error")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--available", "0,0,1"), "--available: GPU 0 is named twice in '0,0,1'"),
        (("--available", "0-3,2"), "--available: GPU 2 is named twice"),
        (("--available", "1,,2"), "--available: an empty item in '1,,2'"),
        (("--available", "٣,٤"), "--available: '٣' is not a GPU index or range like 2-7"),
        (("--must-include", ""), "--must-include: empty; give GPU indices or ranges"),
        (("--available", "-1"), "--available: '-1' is not a GPU index or range like 2-7"),
    ],
)
def test_bad_gpu_lists_are_exit_2(cli: Runner, flags: tuple[str, ...], message: str) -> None:
    _one_line(cli("alloc", "builtin:seed-8gpu", "--count", "2", *flags), 2, message)


@pytest.mark.parametrize("count", ["0", "-1"])
def test_a_count_below_one_is_bad_input(cli: Runner, count: str) -> None:
    _one_line(
        cli("alloc", "builtin:seed-8gpu", "--count", count), 2, f"--count: {count} GPUs; ask for at least one"
    )


def test_a_count_the_node_cannot_meet_stays_exit_1(cli: Runner) -> None:
    _one_line(
        cli("alloc", "builtin:seed-8gpu", "--count", "9"), 1, "asked for 9 GPUs but only 8 are available"
    )


def test_mig_validate_says_an_unknown_profile_applies_to_no_gpu_it_knows(cli: Runner, tmp_path: Path) -> None:
    """A well-formed profile no catalogue model has is a GPU kubegpu does not describe (issue 56: NVIDIA's
    default file names RTX PRO 6000 Blackwell profiles): not applicable, exit 0, and never "valid"."""
    config = tmp_path / "mig.yaml"
    config.write_text(
        "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n"
        '      mig-devices:\n        "9g.99gb": 1\n'
    )
    res = cli("mig", "validate", str(config), "--model", "H100-80GB")
    assert res.code == 0
    assert "not applicable" in res.out and "9g.99gb" in res.out and "H100-80GB" in res.out
    assert "no profiles for" in res.out
    assert "nothing in the file applies" in res.out
    assert "every applicable layout is valid" not in res.out
