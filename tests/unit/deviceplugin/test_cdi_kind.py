"""``kubegpu.cdiKind`` is a CDI device kind ``vendor/class`` as the CDI spec's parser accepts it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.deviceplugin.config import load_config
from kubegpu.errors import ConfigError


@pytest.mark.parametrize(
    "kind", ["☃/../..", "nvidia.com", "nvidia.com/", "/gpu", "nvidia.com/g.pu", "1vendor/gpu", "a/b/c"]
)
def test_a_bad_cdi_kind_names_the_key(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f'version: v1\nkubegpu:\n  cdiKind: "{kind}"\n')
    with pytest.raises(ConfigError, match=r"kubegpu\.cdiKind: .* is not a CDI device kind VENDOR/CLASS"):
        load_config(path)


@pytest.mark.parametrize(
    "kind", ["nvidia.com/gpu", "k8s.device-plugin.nvidia.com/gpu", "kubegpu.io/test", "a/b"]
)
def test_real_cdi_kinds_are_accepted(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"version: v1\nkubegpu:\n  cdiKind: {kind}\n")
    assert load_config(path).cdi_kind == kind
