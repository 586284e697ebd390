"""The one small client every agent-side adapter uses to talk to the API server.

Why one module: timeouts, retries, credentials and field managers are decided once. The transport is
its own, on urllib3 (one thread-safe pool manager): raw JSON (``dict``) in and out, so callers never
see model classes and tests can compare against ``kubectl get -o json``. Credentials
(``kubegpu.kubeconfig``): in a pod, the service account (``KUBERNETES_SERVICE_HOST``/``_PORT``,
``ca.crt``, and the token file, re-read every minute because bound tokens rotate); else the kubeconfig
(``--kubeconfig``, the first file of ``$KUBECONFIG``, ``~/.kube/config``): CA, client certificate and
key, token or token file. A kubeconfig that needs an ``exec`` or ``auth-provider`` plugin (EKS, GKE)
goes through the official ``kubernetes`` client's loader when it is installed (it is not in the
container image), else fails with one message naming the field.

Every call has a connect/read timeout; reads and server-side applies (both idempotent) are retried on
connection errors, 5xx and 429 with a short backoff; other writes are tried once and their caller
decides (an eviction answered 429 by a PodDisruptionBudget is retried later by
the quarantine, never turned into a delete). Failures raise ``ApiServerError`` with the HTTP status.

Lists are paginated (``limit``/``continue``, ``LIST_PAGE`` objects a page): ``list_pages`` hands
them over one page at a time, so a caller that keeps a compact record of each object holds one page
of raw objects at most (a 15,000-node cluster's pods are gigabytes as Python objects); ``list_objects``
collects them for the callers whose lists are small (one node's pods). Watches (a list, then
``watch`` from its resource version) stream one JSON event per line; the caller relists when a watch
ends with an error (410 Gone: the version is too old).

Field managers: everything kubegpu writes carries a manager name starting with ``kubegpu``:
``kubegpu`` for the node labels (server-side apply of the whole label set), ``kubegpu-quarantine`` for
the quarantine's condition and taint, ``kubegpu-mig-manager`` for the MIG manager's
``nvidia.com/mig.config.state`` label. Separate managers, because a server-side apply removes every field
its manager applied before and does not apply now: the label writer and the quarantine must not remove
each other's fields. The scheduler extender writes its GPU assignment on pods and their Binding as
``kubegpu-extender``.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
import yaml
from urllib3.exceptions import HTTPError

from kubegpu import __version__
from kubegpu.backoff import Backoff, describe
from kubegpu.echo import clip
from kubegpu.errors import ApiServerError
from kubegpu.kubeconfig import SERVICE_ACCOUNT, Access, Pem, Plugin, in_cluster_access, kubeconfig_file, parse

__all__ = [
    "DRA_FIELD_MANAGER",
    "EXTENDER_FIELD_MANAGER",
    "FIELD_MANAGER",
    "MIG_FIELD_MANAGER",
    "QUARANTINE_FIELD_MANAGER",
    "ApiObject",
    "KubeApi",
    "ListPages",
    "PageDecoder",
    "in_cluster",
    "json_page",
]

ApiObject = dict[str, Any]
FIELD_MANAGER = "kubegpu"
DRA_FIELD_MANAGER = "kubegpu-dra"
QUARANTINE_FIELD_MANAGER = "kubegpu-quarantine"
MIG_FIELD_MANAGER = "kubegpu-mig-manager"
EXTENDER_FIELD_MANAGER = "kubegpu-extender"
REQUEST_TIMEOUT_S = (3.0, 10.0)  # connect, read
QUICK_TIMEOUT_S = (1.0, 3.0)
RETRIES = 3  # attempts of an idempotent call
_RETRIABLE = {0, 429, 500, 502, 503, 504}
_SA_TOKEN = SERVICE_ACCOUNT / "token"
TOKEN_REREAD_S = 60.0  # bound service-account tokens rotate on disk
POOL_SIZE = 8  # connections kept per API server (watches hold one each)
USER_AGENT = f"kubegpu/{__version__}"
LIST_PAGE = 500  # objects a list page: a page of pods is a few MB of JSON
log = logging.getLogger(__name__)


def in_cluster() -> bool:
    """Running in a pod with a service account token (and the API server's address in the env)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and _SA_TOKEN.exists()


class _TokenFile:
    """A bearer token read from a file and re-read every ``period_s``: bound service-account tokens
    (and a kubeconfig's ``tokenFile``) are rotated on disk. A read that fails after one succeeded
    keeps the last token (logged); the API server answers 401 when it has expired."""

    def __init__(self, path: Path, *, clock: Callable[[], float], period_s: float = TOKEN_REREAD_S) -> None:
        self._path, self._clock, self._period_s = path, clock, period_s
        self._lock = threading.Lock()
        self._token = self._read()
        self._read_at = clock()

    def _read(self) -> str:
        token = self._path.read_text().strip()
        if not token:
            raise ValueError(f"{self._path} is empty")
        return token

    def __call__(self) -> str:
        with self._lock:
            if self._clock() - self._read_at >= self._period_s:
                self._read_at = self._clock()
                try:
                    self._token = self._read()
                except (OSError, ValueError) as exc:
                    log.warning("cannot re-read the API token %s (keeping the last one): %s", self._path, exc)
            return f"Bearer {self._token}"


def _ssl_context(access: Access) -> ssl.SSLContext:
    """The CA to trust (the system's when none is named) and the client certificate to present."""
    ca = access.ca
    try:
        ctx = ssl.create_default_context(
            cafile=str(ca.path) if ca is not None and ca.path is not None else None,
            cadata=ca.data.decode("ascii", errors="replace") if ca is not None and ca.data else None,
        )
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ApiServerError(f"{access.source}: {ca.key if ca else 'CA'}: {describe(exc)}") from exc
    if access.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    cert, key = access.client_cert, access.client_key
    if cert is None or key is None:
        return ctx
    with tempfile.TemporaryDirectory(prefix="kubegpu-tls.") as tmp:
        paths = []
        for pem, name in ((cert, "cert.pem"), (key, "key.pem")):
            if pem.path is not None:
                paths.append(str(pem.path))
                continue
            where = Path(tmp) / name
            fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(pem.data or b"")
            paths.append(str(where))
        try:
            ctx.load_cert_chain(paths[0], paths[1], password="")
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ApiServerError(f"{access.source}: {cert.key} / {key.key}: {describe(exc)}") from exc
    return ctx


def _official_client(path: Path, field: str) -> tuple[Access, Callable[[], str | None]]:
    """A kubeconfig field kubegpu.kubeconfig does not handle (exec and auth-provider plugins): the
    official client's loader reads it, and its ``Configuration`` gives the server, the files and the
    (refreshed) Authorization header."""
    try:
        from kubernetes import client
        from kubernetes import config as untyped_config
        from kubernetes.config.config_exception import ConfigException
    except ImportError as exc:
        raise ApiServerError(
            f"kubeconfig {path}: {field} is not supported without the kubernetes Python client "
            f"(pip install kubernetes), which is not installed"
        ) from exc
    loader: Any = untyped_config  # the client's loaders carry no annotations
    configuration: Any = client.Configuration()
    try:
        loader.load_kube_config(config_file=str(path), client_configuration=configuration)
    except (ConfigException, OSError, TypeError, ValueError) as exc:
        raise ApiServerError(f"bad kubeconfig {path}: {field}: {describe(exc)}") from exc
    lock = threading.Lock()

    def authorization() -> str | None:
        with lock:  # the refresh hook re-runs the exec plugin when its token expired
            for name in ("BearerToken", "authorization"):  # the key's name in newer and older clients
                value = configuration.get_api_key_with_prefix(name)
                if value:
                    return str(value)
            return None

    def pem(key: str, value: object) -> Pem | None:
        return Pem(key=f"{field} ({key})", path=Path(str(value))) if value else None

    access = Access(
        server=str(configuration.host).rstrip("/"),
        source=f"kubeconfig {path} (through the kubernetes client: {field})",
        ca=pem("ssl_ca_cert", configuration.ssl_ca_cert),
        insecure=not configuration.verify_ssl,
        client_cert=pem("cert_file", configuration.cert_file),
        client_key=pem("key_file", configuration.key_file),
    )
    return access, authorization


def _load(kubeconfig: str | None, clock: Callable[[], float]) -> tuple[Access, Callable[[], str | None]]:
    """Where the API server is and the Authorization header's value (``None``: none)."""
    if kubeconfig is None and in_cluster():
        access = in_cluster_access(os.environ, _SA_TOKEN.parent)
    else:
        path = kubeconfig_file(kubeconfig, os.environ, Path.home())
        where = kubeconfig or "$KUBECONFIG or ~/.kube/config"
        try:
            doc = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ApiServerError(
                f"no usable kubeconfig ({where}) and not running in a pod: {describe(exc)}"
            ) from exc
        except yaml.YAMLError as exc:
            raise ApiServerError(f"bad kubeconfig {path}: not YAML: {clip(str(exc), limit=200)}") from exc
        found = parse(doc, path=path)
        if isinstance(found, Plugin):
            return _official_client(found.path, found.field)
        access = found
    if access.token_file is not None:
        try:
            return access, _TokenFile(access.token_file, clock=clock)
        except (OSError, ValueError) as exc:
            raise ApiServerError(
                f"{access.source}: cannot read the token {access.token_file}: {exc}"
            ) from exc
    bearer = f"Bearer {access.token}" if access.token else None
    return access, lambda: bearer


PageDecoder = Callable[[bytes], tuple[list[Any], str, str]]


def json_page(raw: bytes) -> tuple[list[Any], str, str]:
    """A list answer's objects (JSON objects only), resource version and continue token."""
    doc = json.loads(raw)
    doc = doc if isinstance(doc, dict) else {}
    items, meta = doc.get("items"), doc.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    page = [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
    return page, str(meta.get("resourceVersion") or ""), str(meta.get("continue") or "")


class ListPages:
    """One paginated list, taken once, page by page (``for page in pages``): each page is a list of
    the objects (JSON objects only) of one answer, asked for when the previous one was taken.
    ``resource_version`` is the version of the last page, set when the last page has been taken; a
    continue token the API server no longer knows (410) raises ``ApiServerError`` and the caller
    lists again."""

    def __init__(
        self, api: KubeApi, path: str, query: dict[str, str], decode: PageDecoder = json_page
    ) -> None:
        self._api, self._path, self._query, self._decode = api, path, dict(query), decode
        self._version: str | None = None
        self._started = False
        self.pages = 0  # pages taken so far

    @property
    def resource_version(self) -> str:
        if self._version is None:
            raise RuntimeError(f"list of {self._path}: its version is known once every page is taken")
        return self._version

    def __iter__(self) -> Iterator[list[Any]]:
        if self._started:
            raise RuntimeError(f"list of {self._path}: its pages can be taken once")
        self._started = True
        query, version = self._query, ""
        while True:
            raw = self._api.request_bytes("GET", self._path, query=query, idempotent=True) or b"{}"
            try:
                page, listed, token = self._decode(raw)
            except ValueError as exc:
                raise ApiServerError(f"{self._api.host}: GET {self._path}: not a list: {exc}") from exc
            del raw  # the page's objects are the caller's from here
            version = listed or version
            self.pages += 1
            yield page
            del page
            if not token:
                self._version = version
                return
            query = {**query, "continue": str(token)}


class KubeApi:
    """A handful of typed-by-path calls; thread-safe (one urllib3 pool manager, a locked token)."""

    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        access, self._authorization = _load(kubeconfig, clock)
        self.host = access.server
        self.source = access.source
        tls: dict[str, Any] = {}
        if access.server.startswith("https://"):
            tls["ssl_context"] = _ssl_context(access)
            if access.insecure:
                tls.update(cert_reqs="CERT_NONE", assert_hostname=False)
        # retries are ours, below: bounded and logged by the caller; redirects are not followed
        self._pool = urllib3.PoolManager(num_pools=4, maxsize=POOL_SIZE, retries=False, **tls)
        self._sleep = sleep

    # -- transport ---------------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        url_path: str,
        *,
        headers: Mapping[str, str],
        timeout: tuple[float, float],
        body: bytes | None = None,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        sent = {**headers, "User-Agent": USER_AGENT}
        authorization = self._authorization()
        if authorization:
            sent["Authorization"] = authorization
        return self._pool.request(
            method,
            self.host + url_path,
            body=body,
            headers=sent,
            timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
            retries=False,
            redirect=False,
            preload_content=not stream,
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        idempotent: bool = False,
        quick: bool = False,
    ) -> ApiObject | None:
        """One call; the decoded JSON answer, ``None`` for 404. Raises ``ApiServerError``. ``quick``:
        one attempt with short timeouts (for a caller that must not wait long, e.g. the agent's start)."""
        raw = self.request_bytes(
            method,
            path,
            body=body,
            query=query,
            content_type=content_type,
            idempotent=idempotent,
            quick=quick,
        )
        if raw is None:
            return None
        return json.loads(raw) if raw else {}

    def request_bytes(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        idempotent: bool = False,
        quick: bool = False,
    ) -> bytes | None:
        """``request``'s answer undecoded (for a caller that decodes only what it keeps)."""
        url_path = path + ("?" + urlencode(dict(query)) if query else "")
        headers = {"Accept": "application/json", "Content-Type": content_type}
        data = None if body is None else json.dumps(body).encode()  # JSON is YAML too (apply patches)
        backoff = Backoff(initial_s=0.2, max_s=1.0)
        attempts = 1 if quick else RETRIES
        timeout = QUICK_TIMEOUT_S if quick else REQUEST_TIMEOUT_S
        for attempt in range(1, attempts + 1):
            status, raw, text = 0, b"", ""
            try:
                resp = self._send(method, url_path, headers=headers, timeout=timeout, body=data)
                status = int(resp.status)
                raw = bytes(resp.data or b"")
            except (HTTPError, OSError) as exc:
                text = describe(exc)
            if 200 <= status < 300:
                return raw
            if status == 404:
                return None
            text = text or raw.decode("utf-8", errors="replace")
            if not (idempotent and status in _RETRIABLE and attempt < attempts):
                raise ApiServerError(self._message(method, path, status, text), status=status)
            self._sleep(backoff.failed())
        raise AssertionError("unreachable")  # pragma: no cover

    def _message(self, method: str, path: str, status: int, text: str) -> str:
        detail = text
        try:
            doc = json.loads(text)
            if isinstance(doc, dict) and doc.get("message"):
                detail = str(doc["message"])
        except ValueError:
            pass
        what = f"HTTP {status}" if status else "not reachable"
        return f"{self.host}: {method} {path}: {what}: {clip(detail, limit=300)}"

    # -- nodes -------------------------------------------------------------------------------------

    @staticmethod
    def _node_path(name: str) -> str:
        return f"/api/v1/nodes/{quote(name, safe='')}"

    def get_node(self, name: str, *, quick: bool = False) -> ApiObject | None:
        return self.request("GET", self._node_path(name), idempotent=True, quick=quick)

    def list_nodes(self, *, label_selector: str | None = None) -> list[ApiObject]:
        query = {"labelSelector": label_selector} if label_selector else None
        doc = self.request("GET", "/api/v1/nodes", query=query, idempotent=True) or {}
        return [i for i in doc.get("items", []) if isinstance(i, dict)]

    def apply_node(
        self, name: str, patch: ApiObject, *, field_manager: str, status: bool = False, force: bool = False
    ) -> ApiObject | None:
        """Server-side apply of ``patch`` (a partial Node: apiVersion/kind/metadata.name are added) to the
        node or, with ``status``, to its status subresource; ``force`` takes over conflicting fields."""
        body = {"apiVersion": "v1", "kind": "Node", **patch}
        body["metadata"] = {**patch.get("metadata", {}), "name": name}
        query = {"fieldManager": field_manager, **({"force": "true"} if force else {})}
        path = self._node_path(name) + ("/status" if status else "")
        return self.request(
            "PATCH",
            path,
            body=body,
            query=query,
            content_type="application/apply-patch+yaml",
            idempotent=True,
        )

    def merge_patch_node(self, name: str, patch: ApiObject, *, field_manager: str) -> ApiObject | None:
        """A JSON merge patch; with ``metadata.resourceVersion`` in it, the API server answers 409 when
        the node changed since it was read (optimistic concurrency)."""
        return self.request(
            "PATCH",
            self._node_path(name),
            body=patch,
            query={"fieldManager": field_manager},
            content_type="application/merge-patch+json",
        )

    # -- pods --------------------------------------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> ApiObject | None:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        return self.request("GET", path, idempotent=True)

    def evict(self, namespace: str, name: str) -> None:
        """policy/v1 Eviction: 429 (a PodDisruptionBudget) raises ``ApiServerError(status=429)``; a pod
        already gone is done."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/eviction"
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        self.request("POST", path, body=body, query={"fieldManager": QUARANTINE_FIELD_MANAGER})

    # -- events ------------------------------------------------------------------------------------

    def create_event(self, namespace: str, event: ApiObject) -> ApiObject | None:
        """Create a core/v1 Event (tried once: an event is worth less than a retry loop)."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/events"
        return self.request("POST", path, body=event, query={"fieldManager": MIG_FIELD_MANAGER})

    def pod_path(self, namespace: str, name: str) -> str:
        return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"

    def merge_patch_pod(
        self, namespace: str, name: str, patch: ApiObject, *, field_manager: str
    ) -> ApiObject | None:
        """A JSON merge patch of a pod (e.g. its annotations); ``None`` when the pod is gone."""
        return self.request(
            "PATCH",
            self.pod_path(namespace, name),
            body=patch,
            query={"fieldManager": field_manager},
            content_type="application/merge-patch+json",
        )

    def bind_pod(
        self,
        namespace: str,
        name: str,
        *,
        uid: str,
        node: str,
        annotations: Mapping[str, str],
        field_manager: str,
    ) -> None:
        """Create the pod's Binding to ``node`` (what kube-scheduler's binder does). The API server
        copies the Binding's ``annotations`` onto the pod in the same write that sets
        ``spec.nodeName``, so both land or neither does. The ``uid`` precondition makes it fail (409)
        for a pod of the same name created since; a pod already bound answers 409 too."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": dict(annotations)},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        found = self.request(
            "POST",
            self.pod_path(namespace, name) + "/binding",
            body=body,
            query={"fieldManager": field_manager},
        )
        if found is None:
            raise ApiServerError(f"{self.host}: pod {namespace}/{name} is gone; not bound", status=404)

    # -- lists and watches ---------------------------------------------------------------------

    def list_pages(
        self,
        path: str,
        *,
        field_selector: str | None = None,
        limit: int = LIST_PAGE,
        decode: PageDecoder = json_page,
    ) -> ListPages:
        """The objects of a collection (``/api/v1/pods``) one page at a time; once every page is
        taken, ``resource_version`` is the list's version, to watch from. Each page is asked for when
        the caller takes it, never before. ``decode`` turns a page's bytes into its objects (what
        the caller keeps of them), version and continue token; ``json_page`` by default."""
        query: dict[str, str] = {"limit": str(limit)}
        if field_selector:
            query["fieldSelector"] = field_selector
        return ListPages(self, path, query, decode)

    def list_objects(self, path: str, *, field_selector: str | None = None) -> tuple[list[ApiObject], str]:
        """Every object of a collection and the list's resource version, to watch from (for small
        lists; a large one goes through ``list_pages``)."""
        pages = self.list_pages(path, field_selector=field_selector)
        items = [item for page in pages for item in page]
        return items, pages.resource_version

    def watch(
        self, path: str, *, resource_version: str, timeout_s: int = 300, field_selector: str | None = None
    ) -> Iterator[ApiObject]:
        """The events (``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}``) of a
        collection after ``resource_version``, until the server ends the watch (``timeout_s``).
        Raises ``ApiServerError`` when the watch cannot start; an ``ERROR`` event (410: version too
        old) is yielded, and the caller relists."""
        query = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_s),
        }
        if field_selector:
            query["fieldSelector"] = field_selector
        url_path = path + "?" + urlencode(query)
        try:
            resp = self._send(
                "GET",
                url_path,
                headers={"Accept": "application/json"},
                timeout=(REQUEST_TIMEOUT_S[0], timeout_s + 30.0),
                stream=True,
            )
        except (HTTPError, OSError) as exc:
            raise ApiServerError(self._message("GET", path, 0, describe(exc))) from exc
        done = False
        try:
            if int(resp.status) != 200:
                text = bytes(resp.read() or b"").decode("utf-8", errors="replace")
                raise ApiServerError(
                    self._message("GET", path, int(resp.status), text), status=int(resp.status)
                )
            pending = b""
            for chunk in resp.stream(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
            done = True
        except (HTTPError, OSError, ValueError) as exc:
            raise ApiServerError(self._message("GET", path, 0, f"watch broke: {describe(exc)}")) from exc
        finally:
            if not done:
                resp.close()  # a stream left half-read never goes back to the pool for reuse
            resp.release_conn()

    # -- leases ------------------------------------------------------------------------------------

    @staticmethod
    def _lease_path(namespace: str, name: str = "") -> str:
        base = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
        return base + (f"/{quote(name, safe='')}" if name else "")

    def get_lease(self, namespace: str, name: str) -> ApiObject | None:
        return self.request("GET", self._lease_path(namespace, name), idempotent=True)

    def create_lease(self, namespace: str, lease: ApiObject) -> ApiObject | None:
        """Create; 409 (someone else created it first) raises ``ApiServerError(status=409)``."""
        return self.request(
            "POST", self._lease_path(namespace), body=lease, query={"fieldManager": QUARANTINE_FIELD_MANAGER}
        )

    def replace_lease(self, namespace: str, lease: ApiObject) -> ApiObject | None:
        """Replace; the lease's ``metadata.resourceVersion`` makes it answer 409 when it changed."""
        name = str(lease["metadata"]["name"])
        return self.request(
            "PUT",
            self._lease_path(namespace, name),
            body=lease,
            query={"fieldManager": QUARANTINE_FIELD_MANAGER},
        )

    # -- DRA (resource.k8s.io/v1) --------------------------------------------------------------------

    _RESOURCE = "/apis/resource.k8s.io/v1"

    def get_resource_claim(self, namespace: str, name: str) -> ApiObject | None:
        path = (
            f"{self._RESOURCE}/namespaces/{quote(namespace, safe='')}/resourceclaims/{quote(name, safe='')}"
        )
        return self.request("GET", path, idempotent=True)

    def list_resource_claims(self) -> list[ApiObject]:
        """Every ResourceClaim (all namespaces), paginated, for tools: the DRA driver lists them once
        and then watches (``kubegpu.dra.claimwatch``), never on a timer."""
        return self.list_objects(f"{self._RESOURCE}/resourceclaims")[0]

    def list_resource_slices(self, *, node_name: str, driver: str) -> list[ApiObject]:
        """This node's slices of ``driver`` (the field selectors the node authorizer also allows)."""
        query = {"fieldSelector": f"spec.nodeName={node_name},spec.driver={driver}"}
        doc = self.request("GET", f"{self._RESOURCE}/resourceslices", query=query, idempotent=True) or {}
        return [i for i in doc.get("items", []) if isinstance(i, dict)]

    def create_resource_slice(self, body: ApiObject) -> ApiObject | None:
        return self.request(
            "POST", f"{self._RESOURCE}/resourceslices", body=body, query={"fieldManager": DRA_FIELD_MANAGER}
        )

    def replace_resource_slice(self, body: ApiObject) -> ApiObject | None:
        """PUT; with ``metadata.resourceVersion`` set it answers 409 when the slice changed meanwhile."""
        name = quote(str(body["metadata"]["name"]), safe="")
        return self.request(
            "PUT",
            f"{self._RESOURCE}/resourceslices/{name}",
            body=body,
            query={"fieldManager": DRA_FIELD_MANAGER},
        )

    def delete_resource_slice(self, name: str) -> None:
        self.request("DELETE", f"{self._RESOURCE}/resourceslices/{quote(name, safe='')}", idempotent=True)

    def apply_device_class(self, body: ApiObject) -> ApiObject | None:
        name = quote(str(body["metadata"]["name"]), safe="")
        return self.request(
            "PATCH",
            f"{self._RESOURCE}/deviceclasses/{name}",
            body=body,
            query={"fieldManager": DRA_FIELD_MANAGER, "force": "true"},
            content_type="application/apply-patch+yaml",
            idempotent=True,
        )
