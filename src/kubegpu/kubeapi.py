"""The one small client every agent-side adapter uses to talk to the API server.

Why one module: timeouts, retries, credentials and field managers are decided once. Calls go through
the official ``kubernetes`` client's transport (kubeconfig, or the pod's service account) but send and
receive raw JSON (``dict``), so callers never see model classes and tests can compare against
``kubectl get -o json``. Every call has a connect/read timeout; reads and server-side applies (both
idempotent) are retried on connection errors, 5xx and 429 with a short backoff; other writes are tried
once and their caller decides (an eviction answered 429 by a PodDisruptionBudget is retried later by
the quarantine, never turned into a delete). Failures raise ``ApiServerError`` with the HTTP status.

Watches (``list_objects`` then ``watch`` from its resource version) stream one JSON event per line;
the caller relists when a watch ends with an error (410 Gone: the version is too old).

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
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from kubegpu.backoff import Backoff, describe
from kubegpu.echo import clip
from kubegpu.errors import ApiServerError

__all__ = [
    "DRA_FIELD_MANAGER",
    "EXTENDER_FIELD_MANAGER",
    "FIELD_MANAGER",
    "MIG_FIELD_MANAGER",
    "QUARANTINE_FIELD_MANAGER",
    "ApiObject",
    "KubeApi",
    "in_cluster",
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
_SA_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def in_cluster() -> bool:
    """Running in a pod with a service account token (and the API server's address in the env)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and _SA_TOKEN.exists()


class KubeApi:
    """A handful of typed-by-path calls; thread-safe (urllib3's pool)."""

    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        try:
            from kubernetes import client
            from kubernetes import config as untyped_config
            from kubernetes.config.config_exception import ConfigException
        except ImportError as exc:
            raise ApiServerError(f"the kubernetes client library is not installed: {exc}") from exc

        config: Any = untyped_config  # the client's loaders carry no annotations
        configuration = client.Configuration()
        try:
            if kubeconfig is None and in_cluster():
                config.load_incluster_config(client_configuration=configuration)
            else:
                config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        except (ConfigException, OSError, TypeError, ValueError) as exc:
            where = kubeconfig or "$KUBECONFIG or ~/.kube/config"
            raise ApiServerError(f"no usable kubeconfig ({where}) and not running in a pod: {exc}") from exc
        configuration.retries = 0  # retries are ours, below: bounded and logged by the caller
        self._client: Any = client.ApiClient(configuration)
        self.host = str(configuration.host)
        self._sleep = sleep

    # -- transport ---------------------------------------------------------------------------------

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
        from urllib3.exceptions import HTTPError

        url_path = path + ("?" + urlencode(dict(query)) if query else "")
        headers = {"Accept": "application/json", "Content-Type": content_type}
        backoff = Backoff(initial_s=0.2, max_s=1.0)
        attempts = 1 if quick else RETRIES
        timeout = QUICK_TIMEOUT_S if quick else REQUEST_TIMEOUT_S
        for attempt in range(1, attempts + 1):
            status, text = 0, ""
            try:
                ser = self._client.param_serialize(
                    method, url_path, header_params=dict(headers), body=body, auth_settings=["BearerToken"]
                )
                resp = self._client.call_api(*ser, _request_timeout=timeout)
                status = int(resp.status)
                text = bytes(resp.read() or b"").decode("utf-8", errors="replace")
            except (HTTPError, OSError) as exc:
                text = describe(exc)
            except Exception as exc:  # the client's ApiException (SSL, bad request preparation)
                text = describe(exc)
            if 200 <= status < 300:
                return json.loads(text) if text else {}
            if status == 404:
                return None
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

    def list_objects(self, path: str, *, field_selector: str | None = None) -> tuple[list[ApiObject], str]:
        """Every object of a collection (``/api/v1/pods``) and the list's resource version, to watch from."""
        query: dict[str, str] = {"limit": "500"}
        if field_selector:
            query["fieldSelector"] = field_selector
        items: list[ApiObject] = []
        version = ""
        while True:
            doc = self.request("GET", path, query=query, idempotent=True) or {}
            items.extend(i for i in doc.get("items", []) if isinstance(i, dict))
            meta = doc.get("metadata", {}) or {}
            version = str(meta.get("resourceVersion", version))
            token = meta.get("continue")
            if not token:
                return items, version
            query["continue"] = str(token)

    def watch(
        self, path: str, *, resource_version: str, timeout_s: int = 300, field_selector: str | None = None
    ) -> Iterator[ApiObject]:
        """The events (``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}``) of a
        collection after ``resource_version``, until the server ends the watch (``timeout_s``).
        Raises ``ApiServerError`` when the watch cannot start; an ``ERROR`` event (410: version too
        old) is yielded, and the caller relists."""
        from urllib3.exceptions import HTTPError

        query = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_s),
        }
        if field_selector:
            query["fieldSelector"] = field_selector
        url_path = path + "?" + urlencode(query)
        headers = {"Accept": "application/json"}
        try:
            ser = self._client.param_serialize(
                "GET", url_path, header_params=headers, auth_settings=["BearerToken"]
            )
            resp = self._client.call_api(*ser, _request_timeout=(REQUEST_TIMEOUT_S[0], timeout_s + 30.0))
        except Exception as exc:  # connection errors and the client's ApiException alike
            raise ApiServerError(self._message("GET", path, 0, describe(exc))) from exc
        raw = resp.response
        try:
            if int(resp.status) != 200:
                text = bytes(raw.read() or b"").decode("utf-8", errors="replace")
                raise ApiServerError(
                    self._message("GET", path, int(resp.status), text), status=int(resp.status)
                )
            pending = b""
            for chunk in raw.stream(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        except (HTTPError, OSError, ValueError) as exc:
            raise ApiServerError(self._message("GET", path, 0, f"watch broke: {describe(exc)}")) from exc
        finally:
            raw.release_conn()

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
        """Every ResourceClaim (all namespaces): the DRA driver reads which of its devices are allocated."""
        doc = self.request("GET", f"{self._RESOURCE}/resourceclaims", idempotent=True) or {}
        return [i for i in doc.get("items", []) if isinstance(i, dict)]

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
