"""Where the API server is and how to prove who we are: a kubeconfig's current context, or the pod's
service account.

Pure parsing: ``parse`` takes the kubeconfig's loaded YAML document and its path (for messages and to
resolve relative paths against its folder) and reads no file; ``kubegpu.kubeapi`` reads the files this
names (certificates, keys, the token file) when it builds its transport. What is understood: the
current context's cluster ``server``, ``certificate-authority``/``-data`` and
``insecure-skip-tls-verify``, and its user's ``client-certificate``/``-data``, ``client-key``/``-data``,
``token`` and ``tokenFile``. A user or cluster that needs more (``exec`` or ``auth-provider`` plugins,
as EKS and GKE write them, basic auth, a proxy) comes back as a ``Plugin`` naming the field, and the
caller decides (``kubeapi`` hands it to the official ``kubernetes`` client's loader when installed).

Which file (``kubeconfig_file``): ``--kubeconfig``, else the first file of ``$KUBECONFIG`` (a colon
list; the others are not merged), else ``~/.kube/config``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubegpu.errors import ApiServerError

__all__ = ["SERVICE_ACCOUNT", "Access", "Pem", "Plugin", "in_cluster_access", "kubeconfig_file", "parse"]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# fields the official client's loader understands and this module does not: (section, key)
_PLUGIN_FIELDS = (
    ("user", "exec"),
    ("user", "auth-provider"),
    ("user", "username"),
    ("user", "password"),
    ("cluster", "proxy-url"),
    ("cluster", "tls-server-name"),
)


@dataclass(frozen=True, kw_only=True)
class Pem:
    """A PEM certificate or key, inline (a ``…-data`` field, base64-decoded) or a file; ``key`` names
    the kubeconfig field it came from, for messages."""

    key: str
    data: bytes | None = None
    path: Path | None = None


@dataclass(frozen=True, kw_only=True)
class Access:
    """The API server's base URL and the credentials to present. ``token_file`` is re-read by the
    transport (bound service-account tokens rotate)."""

    server: str
    source: str  # "kubeconfig /home/u/.kube/config (context ci)" or "in-cluster service account"
    ca: Pem | None = None
    insecure: bool = False
    client_cert: Pem | None = None
    client_key: Pem | None = None
    token: str | None = None
    token_file: Path | None = None


@dataclass(frozen=True, kw_only=True)
class Plugin:
    """The kubeconfig's current context needs a field this module does not handle (``field``: e.g.
    ``users[eks].user.exec``)."""

    path: Path
    field: str


def kubeconfig_file(explicit: str | None, env: Mapping[str, str], home: Path) -> Path:
    """``--kubeconfig``, else the first entry of ``$KUBECONFIG``, else ``~/.kube/config``."""
    if explicit:
        return Path(explicit)
    for entry in env.get("KUBECONFIG", "").split(":"):
        if entry.strip():
            return Path(entry.strip())
    return home / ".kube" / "config"


def in_cluster_access(env: Mapping[str, str], secrets: Path = SERVICE_ACCOUNT) -> Access:
    """The pod's service account: ``KUBERNETES_SERVICE_HOST``/``_PORT``, ``ca.crt`` and ``token``."""
    host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
    if not host:
        raise ApiServerError("in-cluster service account: KUBERNETES_SERVICE_HOST is not set")
    port = env.get("KUBERNETES_SERVICE_PORT", "").strip() or "443"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    return Access(
        server=f"https://{host}:{port}",
        source="in-cluster service account",
        ca=Pem(key=str(secrets / "ca.crt"), path=secrets / "ca.crt"),
        token_file=secrets / "token",
    )


def parse(doc: object, *, path: Path) -> Access | Plugin:
    """The current context of a loaded kubeconfig. Raises ``ApiServerError`` naming ``path`` and the
    key when the document is not a usable kubeconfig."""

    def bad(key: str, problem: str) -> ApiServerError:
        return ApiServerError(f"bad kubeconfig {path}: {key}: {problem}")

    if not isinstance(doc, Mapping):
        raise bad("(top level)", "not a YAML mapping")
    current = doc.get("current-context")
    if not isinstance(current, str) or not current:
        raise bad("current-context", "missing or empty")
    context = _named(doc, "contexts", current, bad)
    ctx = _section(context, "context", f"contexts[{current}].context", bad)
    cluster_name = ctx.get("cluster")
    if not isinstance(cluster_name, str) or not cluster_name:
        raise bad(f"contexts[{current}].context.cluster", "missing or empty")
    cluster_key = f"clusters[{cluster_name}].cluster"
    cluster = _section(_named(doc, "clusters", cluster_name, bad), "cluster", cluster_key, bad)
    user_name = ctx.get("user")
    user: Mapping[str, Any] = {}
    user_key = "users[].user"
    if user_name not in (None, ""):
        if not isinstance(user_name, str):
            raise bad(f"contexts[{current}].context.user", "not a string")
        user_key = f"users[{user_name}].user"
        user = _section(_named(doc, "users", user_name, bad), "user", user_key, bad)
    for section, key in _PLUGIN_FIELDS:
        found = user if section == "user" else cluster
        if found.get(key) not in (None, "", {}):
            return Plugin(path=path, field=f"{user_key if section == 'user' else cluster_key}.{key}")

    server = cluster.get("server")
    if not isinstance(server, str) or not server.strip():
        raise bad(f"{cluster_key}.server", "missing or empty")
    server = server.strip().rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise bad(f"{cluster_key}.server", f"{server!r} is not an http(s):// URL")
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):
        raise bad(f"{cluster_key}.insecure-skip-tls-verify", "not true or false")
    folder = path.parent
    token = user.get("token")
    if token is not None and not isinstance(token, str):
        raise bad(f"{user_key}.token", "not a string")
    token_file = _file(user, "tokenFile", user_key, folder, bad)
    cert = _pem(user, "client-certificate", user_key, folder, bad)
    client_key = _pem(user, "client-key", user_key, folder, bad)
    if (cert is None) != (client_key is None):
        missing = "client-key" if client_key is None else "client-certificate"
        raise bad(
            f"{user_key}.{missing}", "missing (a client certificate needs its key and a key its certificate)"
        )
    return Access(
        server=server,
        source=f"kubeconfig {path} (context {current})",
        ca=_pem(cluster, "certificate-authority", cluster_key, folder, bad),
        insecure=insecure,
        client_cert=cert,
        client_key=client_key,
        token=token.strip() if token and token.strip() else None,
        token_file=token_file,
    )


def _named(doc: Mapping[str, Any], list_key: str, name: str, bad: Any) -> Mapping[str, Any]:
    items = doc.get(list_key)
    if items is None:
        items = []
    if not isinstance(items, list):
        raise bad(list_key, "not a list")
    for item in items:
        if isinstance(item, Mapping) and item.get("name") == name:
            return item
    raise bad(list_key, f"no entry named {name!r}")


def _section(item: Mapping[str, Any], field: str, key: str, bad: Any) -> Mapping[str, Any]:
    found = item.get(field)
    if found is None:
        return {}
    if not isinstance(found, Mapping):
        raise bad(key, "not a mapping")
    return found


def _file(section: Mapping[str, Any], field: str, key: str, folder: Path, bad: Any) -> Path | None:
    value = section.get(field)
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise bad(f"{key}.{field}", "not a path")
    return folder / value  # an absolute value replaces the folder


def _pem(section: Mapping[str, Any], field: str, key: str, folder: Path, bad: Any) -> Pem | None:
    data = section.get(f"{field}-data")
    if data not in (None, ""):
        if not isinstance(data, str):
            raise bad(f"{key}.{field}-data", "not a base64 string")
        try:
            return Pem(key=f"{key}.{field}-data", data=base64.b64decode("".join(data.split()), validate=True))
        except (binascii.Error, ValueError) as exc:
            raise bad(f"{key}.{field}-data", f"not base64 ({exc})") from exc
    found = _file(section, field, key, folder, bad)
    return Pem(key=f"{key}.{field}", path=found) if found is not None else None
