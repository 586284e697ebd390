"""The resource-name rule, one table from the protocol reference §5, for the double and the agent alike.

kubelet refuses a Register whose name fails ``IsExtendedResourceName``; the kubelet double transcribes
the reference, and the agent checks names from its config with its own copy. Both must give the
reference's answer for every case here, so a change to either one that drifts from kubelet fails.
"""

from __future__ import annotations

import pytest

from kubegpu.deviceplugin import inventory
from tests.integration import kubelet_double


def _prefix(length: int) -> str:
    """A valid DNS-1123 subdomain of exactly ``length`` characters (dot-separated labels of ``a``)."""
    text = ".".join(["a" * 60] * (length // 61 + 1))[:length]
    return text[:-1] + "b"  # never ends with a dot


# kubelet checks "requests." + name, so the qualified prefix is 9 characters longer than the name's:
# a name's own prefix may have at most 253 - 9 = 244 characters.
_LONGEST_PREFIX = 253 - len("requests.")

CASES: list[tuple[str, bool, str]] = [
    ("nvidia.com/gpu", True, "the reference's passing example"),
    ("nvidia.com/mig-1g.10gb", True, "a MIG resource"),
    ("nvidia.com/gpu.shared", True, "a renamed shared resource"),
    ("nvidia.com/Gpu_1.x-Y", True, "the name part allows upper case, '_', '.' and '-' inside"),
    ("gpu", False, "no '/': a native resource"),
    ("Example.com/gpu", False, "the prefix must be a lowercase DNS-1123 subdomain"),
    ("kubernetes.io/gpu", False, "kubernetes.io/: a prefixed native resource"),
    ("foo.kubernetes.io/x", False, "kubernetes.io/ anywhere, not only as the whole prefix"),
    ("example.com/kubernetes.io/x", False, "kubernetes.io/ after a first '/'"),
    ("requests.nvidia.com/gpu", False, "starts with requests."),
    ("requests.com/gpu", False, "starts with requests. even though requests.com is a domain"),
    ("a/b/c", False, "a qualified name has at most one '/'"),
    ("nvidia.com/", False, "empty name part"),
    ("/gpu", False, "empty prefix: 'requests.' is not a DNS-1123 subdomain"),
    ("nvidia.com/-gpu", False, "the name must start with an alphanumeric"),
    ("nvidia.com/gpu-", False, "the name must end with an alphanumeric"),
    ("nvidia.com/g pu", False, "no spaces in the name"),
    ("nvidia..com/gpu", False, "empty DNS label in the prefix"),
    ("-nvidia.com/gpu", False, "a DNS label must start with an alphanumeric"),
    ("nvidia.com/gpu\n", False, "a trailing newline: Go's $ ends at the end of the text"),
    ("nvidia.com\n/gpu", False, "a newline at the end of the prefix"),
    ("nvidia.com/gpü", False, "non-ASCII name"),
    ("nvidia.com/" + "a" * 63, True, "a name of 63 characters"),
    ("nvidia.com/" + "a" * 64, False, "a name of 64 characters"),
    (_prefix(_LONGEST_PREFIX) + "/gpu", True, "a qualified prefix requests.<244> of 253 characters"),
    (_prefix(_LONGEST_PREFIX + 1) + "/gpu", False, "a qualified prefix requests.<245> of 254 characters"),
    (_prefix(253) + "/gpu", False, "a 253-character prefix is too long once requests. is added"),
]


@pytest.mark.parametrize(("name", "valid", "why"), CASES, ids=[c[2] for c in CASES])
@pytest.mark.parametrize(
    "rule",
    [kubelet_double.is_extended_resource_name, inventory.is_extended_resource_name],
    ids=["kubelet-double", "agent"],
)
def test_resource_name_rule_gives_the_reference_answer(rule, name: str, valid: bool, why: str) -> None:
    assert rule(name) is valid, f"{name!r}: {why}"


def test_the_table_covers_both_answers_and_the_boundaries() -> None:
    # guards the table itself: the boundary cases are exactly one character apart
    assert {valid for _, valid, _ in CASES} == {True, False}
    assert len(_prefix(_LONGEST_PREFIX)) + len("requests.") == 253
    assert len(_prefix(_LONGEST_PREFIX + 1)) + len("requests.") == 254
