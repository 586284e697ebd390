"""Kubernetes' DNS-1123 name rules, the one copy every check uses."""

from __future__ import annotations

import pytest

from kubegpu.model.names import MAX_LABEL, MAX_SUBDOMAIN, is_dns_label, is_dns_subdomain


@pytest.mark.parametrize("name", ["a", "gpu-node-1", "node-1.zone-a.example", "x" * MAX_SUBDOMAIN])
def test_subdomains_kubernetes_accepts(name: str) -> None:
    assert is_dns_subdomain(name)


@pytest.mark.parametrize(
    "name", ["", "Node", "-a", "a-", "a..b", "a.-b", "a_b", "a\n", "x" * (MAX_SUBDOMAIN + 1), "nöde"]
)
def test_subdomains_kubernetes_refuses(name: str) -> None:
    assert not is_dns_subdomain(name)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("team-a", True),
        ("a" * MAX_LABEL, True),
        ("a" * (MAX_LABEL + 1), False),
        ("team.a", False),
        ("BAD NS!", False),
        ("", False),
        ("-a", False),
    ],
)
def test_labels(name: str, ok: bool) -> None:
    assert is_dns_label(name) is ok
