"""kubegpu.kubeconfig: which file, which context, inline data or files, and one clear message per mistake."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from kubegpu.errors import ApiServerError
from kubegpu.kubeconfig import Access, Plugin, in_cluster_access, kubeconfig_file, parse

CFG = Path("/home/u/.kube/config")


def doc(
    *, cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None, current: str = "b"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "clusters": [
            {"name": "ca", "cluster": {"server": "https://a.example:6443"}},
            {
                "name": "cb",
                "cluster": cluster if cluster is not None else {"server": "https://b.example:6443/"},
            },
        ],
        "users": [{"name": "ua", "user": {"token": "a-token"}}, {"name": "ub", "user": user or {}}],
        "contexts": [
            {"name": "a", "context": {"cluster": "ca", "user": "ua"}},
            {"name": "b", "context": {"cluster": "cb", "user": "ub"}},
        ],
    }


def access(d: object) -> Access:
    found = parse(d, path=CFG)
    assert isinstance(found, Access)
    return found


def test_the_current_context_picks_cluster_and_user() -> None:
    a = access(doc(current="a"))
    assert (a.server, a.token) == ("https://a.example:6443", "a-token")
    b = access(doc(user={"token": "b-token"}))
    assert (b.server, b.token) == ("https://b.example:6443", "b-token"), "trailing slash dropped"
    assert "context b" in b.source and str(CFG) in b.source


def test_inline_data_is_decoded_and_files_resolve_against_the_kubeconfig_folder() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    a = access(
        doc(
            cluster={
                "server": "https://b:6443",
                "certificate-authority-data": base64.b64encode(pem).decode(),
            },
            user={"client-certificate": "certs/me.crt", "client-key": "/abs/me.key"},
        )
    )
    assert a.ca is not None and a.ca.data == pem and a.ca.path is None
    assert a.client_cert is not None and a.client_cert.path == Path("/home/u/.kube/certs/me.crt")
    assert a.client_key is not None and a.client_key.path == Path("/abs/me.key")
    b = access(
        doc(
            cluster={"server": "https://b:6443", "certificate-authority": "ca.crt"},
            user={"client-certificate-data": base64.b64encode(b"C").decode(), "client-key-data": "Sw=="},
        )
    )
    assert b.ca is not None and b.ca.path == Path("/home/u/.kube/ca.crt")
    assert b.client_cert is not None and b.client_cert.data == b"C"
    assert b.client_key is not None and b.client_key.data == b"K"


def test_data_wins_over_a_file_like_kubectl() -> None:
    a = access(
        doc(
            cluster={
                "server": "https://b",
                "certificate-authority": "x",
                "certificate-authority-data": "QQ==",
            }
        )
    )
    assert a.ca is not None and (a.ca.data, a.ca.path) == (b"A", None)


def test_token_file_and_insecure() -> None:
    a = access(
        doc(cluster={"server": "https://b", "insecure-skip-tls-verify": True}, user={"tokenFile": "tok"})
    )
    assert a.insecure and a.token is None and a.token_file == Path("/home/u/.kube/tok")


@pytest.mark.parametrize(
    ("d", "key"),
    [
        ("just text", "(top level)"),
        ({**doc(), "current-context": ""}, "current-context"),
        ({**doc(), "current-context": "nope"}, "contexts: no entry named 'nope'"),
        (doc(cluster={"certificate-authority": "ca.crt"}), "clusters[cb].cluster.server: missing"),
        (doc(cluster={"server": "b.example:6443"}), "clusters[cb].cluster.server"),
        (doc(cluster={"server": "https://b", "insecure-skip-tls-verify": "yes"}), "insecure-skip-tls-verify"),
        (doc(user={"client-certificate": "me.crt"}), "users[ub].user.client-key: missing"),
        (doc(user={"client-key-data": "not base64!"}), "users[ub].user.client-key-data: not base64"),
        ({**doc(), "users": {"ub": {}}}, "users: not a list"),
    ],
)
def test_a_bad_kubeconfig_names_file_and_key(d: object, key: str) -> None:
    with pytest.raises(ApiServerError) as err:
        parse(d, path=CFG)
    assert str(err.value).startswith(f"bad kubeconfig {CFG}: ")
    assert key in str(err.value)


@pytest.mark.parametrize(
    ("user", "cluster", "field"),
    [
        ({"exec": {"command": "aws"}}, {}, "users[ub].user.exec"),
        ({"auth-provider": {"name": "gcp"}}, {}, "users[ub].user.auth-provider"),
        ({}, {"proxy-url": "http://proxy:3128"}, "clusters[cb].cluster.proxy-url"),
    ],
)
def test_plugins_are_handed_back_naming_the_field(
    user: dict[str, Any], cluster: dict[str, Any], field: str
) -> None:
    found = parse(doc(user=user, cluster={"server": "https://b", **cluster}), path=CFG)
    assert found == Plugin(path=CFG, field=field)


def test_which_file() -> None:
    home = Path("/home/u")
    assert kubeconfig_file("/x/cfg", {"KUBECONFIG": "/y"}, home) == Path("/x/cfg")
    assert kubeconfig_file(None, {"KUBECONFIG": ":/y:/z"}, home) == Path("/y"), "first file of the list"
    assert kubeconfig_file(None, {}, home) == Path("/home/u/.kube/config")


def test_in_cluster_uses_the_service_account_files() -> None:
    sa = Path("/sa")
    a = in_cluster_access({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, sa)
    assert a.server == "https://10.96.0.1:443"
    assert a.ca is not None and a.ca.path == sa / "ca.crt" and a.token_file == sa / "token"
    assert in_cluster_access({"KUBERNETES_SERVICE_HOST": "fd00::1"}, sa).server == "https://[fd00::1]:443"
    with pytest.raises(ApiServerError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster_access({}, sa)
