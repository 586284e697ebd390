"""The chart's defences of the extender (issue 55, finding 7): a NetworkPolicy, on by default, that
admits only kube-scheduler to the extender's port; and, with extender.tls.enabled, HTTPS with client
certificates that the chart mints, wired into both the extender and the scheduler config. The minted
certificates are then used for real: the extender serves with the chart's Secret, and only a client
holding the scheduler's Secret reaches the verbs."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest

from kubegpu.extender.handlers import Extender
from kubegpu.extender.server import ExtenderServer, TlsSettings
from tests.integration.chart import CHART, by_kind, helm, render
from tests.integration.test_chart_extender import NAME, ON, container, scheduler_config
from tests.integration.test_extender_hostile_http import FILTER, EchoExtender
from tests.unit.plan.k8s_schema import problems

__all__ = ["helm"]  # the fixture, re-used

pytestmark = pytest.mark.integration

TLS = "extender.tls.enabled=true"
FQDN = f"{NAME}.kubegpu.svc.cluster.local"


def test_a_network_policy_admits_only_kube_scheduler_to_the_extender_port(helm: Path) -> None:
    docs = render(helm, ON)
    policy = by_kind(docs, "NetworkPolicy")[NAME]
    assert problems(policy, "V1NetworkPolicy") == []
    spec = policy["spec"]
    pod = by_kind(docs, "Deployment")[NAME]["spec"]["template"]
    assert spec["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert spec["policyTypes"] == ["Ingress"]  # egress (the API server) is not restricted
    [rule] = spec["ingress"]
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"component": "kube-scheduler"}},
        }
    ]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert [p["name"] for p in container(docs)["ports"]] == ["http"]


def test_the_network_policy_can_be_turned_off_but_never_opened_to_everyone(helm: Path) -> None:
    assert "NetworkPolicy" not in {
        d["kind"] for d in render(helm, ON, "extender.networkPolicy.enabled=false")
    }
    argv = [str(helm), "template", "kubegpu", str(CHART), "--namespace", "kubegpu"]
    argv += ["--set", ON, "--set", "extender.networkPolicy.from=null"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode != 0, "an empty peer list admits every source"
    assert "extender.networkPolicy.from" in proc.stderr


def test_plain_http_and_no_certificates_unless_tls_is_enabled(helm: Path) -> None:
    docs = render(helm, ON)
    assert "Secret" not in {d["kind"] for d in docs if "extender" in d["metadata"]["name"]}
    [ext] = scheduler_config(docs)["extenders"]
    assert ext["urlPrefix"].startswith("http://") and ext["enableHTTPS"] is False
    assert "tlsConfig" not in ext


def test_tls_wires_the_minted_certificates_into_the_extender_and_the_scheduler_config(helm: Path) -> None:
    docs = render(helm, ON, TLS)
    secrets = by_kind(docs, "Secret")
    for name in (f"{NAME}-tls", f"{NAME}-scheduler-client"):
        assert secrets[name]["metadata"]["namespace"] == "kubegpu"
        assert secrets[name]["type"] == "kubernetes.io/tls"
        assert set(secrets[name]["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    deploy = by_kind(docs, "Deployment")[NAME]
    assert problems(deploy, "V1Deployment") == []
    pod = deploy["spec"]["template"]["spec"]
    [vol] = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert vol["secret"]["secretName"] == f"{NAME}-tls"
    assert pod["securityContext"]["fsGroup"] == 65532  # the non-root extender can read its key
    c = container(docs)
    assert {"name": "tls", "mountPath": "/etc/kubegpu/tls", "readOnly": True} in c["volumeMounts"]
    assert c["args"][-3:] == [
        "--tls-cert-file=/etc/kubegpu/tls/tls.crt",
        "--tls-private-key-file=/etc/kubegpu/tls/tls.key",
        "--client-ca-file=/etc/kubegpu/tls/ca.crt",
    ]
    assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    [ext] = scheduler_config(docs)["extenders"]
    assert ext["urlPrefix"] == f"https://{FQDN}:8888/kubegpu"
    assert ext["enableHTTPS"] is True
    assert ext["tlsConfig"] == {
        "serverName": FQDN,
        "certFile": "/etc/kubernetes/kubegpu-extender/tls.crt",
        "keyFile": "/etc/kubernetes/kubegpu-extender/tls.key",
        "caFile": "/etc/kubernetes/kubegpu-extender/ca.crt",
    }


def test_with_host_network_the_scheduler_still_checks_the_service_name(helm: Path) -> None:
    docs = render(
        helm,
        ON,
        TLS,
        "extender.hostNetwork=true",
        "extender.nodeAddress=10.1.2.3",
        "extender.nodeSelector.kubernetes\\.io/hostname=cp-1",
        "extender.tls.schedulerCertDir=/srv/kubegpu",
    )
    [ext] = scheduler_config(docs)["extenders"]
    assert ext["urlPrefix"] == "https://10.1.2.3:8888/kubegpu"
    assert ext["tlsConfig"]["serverName"] == FQDN
    assert ext["tlsConfig"]["caFile"] == "/srv/kubegpu/ca.crt"


def _secret_files(secret: dict[str, Any], d: Path) -> Path:
    d.mkdir()
    for key, value in secret["data"].items():
        (d / key).write_bytes(base64.b64decode(value))
    return d


def _call(port: int, ctx: ssl.SSLContext) -> tuple[int, bytes]:
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with ctx.wrap_socket(raw, server_hostname=FQDN) as sock:  # what the scheduler checks: serverName
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.sock = sock
        conn.request("POST", "/kubegpu/filter", body=FILTER)
        resp = conn.getresponse()
        return resp.status, resp.read()


def test_the_minted_certificates_let_the_scheduler_in_and_no_one_else(helm: Path, tmp_path: Path) -> None:
    secrets = by_kind(render(helm, ON, TLS), "Secret")
    server_dir = _secret_files(secrets[f"{NAME}-tls"], tmp_path / "extender")
    client_dir = _secret_files(secrets[f"{NAME}-scheduler-client"], tmp_path / "scheduler")
    tls = TlsSettings(
        cert_file=server_dir / "tls.crt",
        key_file=server_dir / "tls.key",
        client_ca_file=server_dir / "ca.crt",
    )
    fake = EchoExtender()
    server = ExtenderServer(cast(Extender, fake), "127.0.0.1:0", tls=tls)
    server.start()
    try:
        scheduler = ssl.create_default_context(cafile=str(client_dir / "ca.crt"))
        scheduler.load_cert_chain(client_dir / "tls.crt", client_dir / "tls.key")
        status, body = _call(server.port, scheduler)
        assert status == 200 and json.loads(body)["NodeNames"] == ["a", "b"]
        anyone = ssl.create_default_context(cafile=str(client_dir / "ca.crt"))
        assert _call(server.port, anyone)[0] == 403
        assert len(fake.calls) == 1
    finally:
        server.stop()


def test_the_chart_lints_clean_with_tls(helm: Path) -> None:
    proc = subprocess.run(
        [str(helm), "lint", "--strict", str(CHART), "--set", ON, "--set", TLS],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
