"""YAML that refers to itself is bad input: one InputError naming the file, not a RecursionError."""

from __future__ import annotations

import pytest

from kubegpu.cli.app import main
from kubegpu.errors import SpecError
from kubegpu.sources.yamlfile import load_located


@pytest.mark.parametrize("text", ["&a [*a]\n", "gpus: &a [*a, *a]\n"], ids=["top-level", "under-a-key"])
def test_recursive_anchor_is_an_input_error_naming_the_file(text: str) -> None:
    with pytest.raises(SpecError, match=r"^node\.yaml: .*refers to itself"):
        load_located(text, "node.yaml", SpecError)


def test_recursive_anchor_through_the_cli_is_one_line_exit_2(tmp_path, capsys) -> None:
    spec = tmp_path / "node.yaml"
    spec.write_text("a: &a [*a, *a]\ngpus: 3\n")
    with pytest.raises(SystemExit) as exited:
        main(["topo", str(spec)])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"kubegpu: error: {spec}: the YAML refers to itself (a recursive anchor)"
    )
