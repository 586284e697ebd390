"""Read-only access to the Kubernetes API as raw JSON objects, live or recorded.

The cluster and pod checks read nodes, pods, events and logs as the API serves them (the JSON of
``kubectl get -o json``). ``LiveCluster`` asks the API server through the official ``kubernetes``
client without deserialising into model classes (``_preload_content=False``), so its objects are the
same dictionaries ``RecordedCluster`` loads from recorded JSON files: tests run the checks on exactly
the data shape a live cluster gives them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kubegpu.doctor.jsonkind import describe_json
from kubegpu.errors import ClusterUnreachable, InputError

__all__ = [
    "ApiObject",
    "ClusterApi",
    "LiveCluster",
    "RecordedCluster",
    "dig",
]

ApiObject = dict[str, Any]
REQUEST_TIMEOUT_S = (3.0, 10.0)  # connect, read


class ClusterApi(Protocol):
    """The few reads the doctor needs; every object is the API's JSON as a dict."""

    def list_nodes(self) -> list[ApiObject]: ...

    def get_pod(self, namespace: str, name: str) -> ApiObject | None: ...

    def list_pods(self, *, namespace: str | None = None, node_name: str | None = None) -> list[ApiObject]: ...

    def list_events(self, *, namespace: str, kind: str, name: str) -> list[ApiObject]: ...

    def read_log(
        self, namespace: str, pod: str, container: str, *, previous: bool = False, tail_lines: int = 200
    ) -> str | None: ...

    def list_dra(self, kind: str) -> list[ApiObject]:
        """Every object of a ``resource.k8s.io/v1`` kind in ``DRA_KINDS`` (claims: all namespaces)."""
        ...


DRA_KINDS = ("ResourceClaim", "DeviceClass", "ResourceSlice")


def dig(obj: Mapping[str, Any] | None, *keys: str, default: Any = None) -> Any:
    """``obj[k1][k2]…`` or ``default`` when any step is missing or not a mapping."""
    cur: Any = obj
    for key in keys:
        if not isinstance(cur, Mapping) or key not in cur:
            return default
        cur = cur[key]
    return cur


def _items(doc: Any) -> list[ApiObject]:
    """The objects of a List (``kubectl get -o json``) or a typed list (``NodeList``, the raw API), or
    of a single object; items of a typed list get its ``kind`` (the API leaves it out of each item)."""
    if isinstance(doc, list):
        return [d for d in doc if isinstance(d, dict)]
    if isinstance(doc, dict) and isinstance(doc.get("items"), list):
        list_kind = str(doc.get("kind", ""))
        item_kind = list_kind[:-4] if list_kind.endswith("List") and list_kind != "List" else None
        items = [d for d in doc["items"] if isinstance(d, dict)]
        return [d if "kind" in d or item_kind is None else {"kind": item_kind, **d} for d in items]
    if isinstance(doc, dict) and "kind" in doc:
        return [doc]
    return []


# No Kubernetes field holds an integer this long (Python refuses to convert more than 4300 digits).
_MAX_INT_DIGITS = 100


class _NumberTooLong(Exception):
    """Raised from inside the JSON decoder; ``from_dir`` turns it into an InputError naming the file."""

    def __init__(self, digits: int) -> None:
        super().__init__(digits)
        self.digits = digits


def _parse_int(text: str) -> int:
    if len(text) > _MAX_INT_DIGITS:
        raise _NumberTooLong(len(text))
    return int(text)


def _load_json(path: Path) -> Any:
    """One recorded file: a JSON object (a List or a single API object) or an array of objects."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"), parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (kubectl get -o json expected)") from exc
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except RecursionError as exc:
        raise InputError(f"{path}: nested too deeply to read (kubectl get -o json expected)") from exc
    except _NumberTooLong as exc:
        raise InputError(
            f"{path}: holds a number of {exc.digits} digits, longer than any Kubernetes field"
            " (kubectl get -o json expected)"
        ) from exc
    if isinstance(doc, list):
        return doc
    if not isinstance(doc, dict):
        raise InputError(
            f"{path}: {describe_json(doc)}, not a Kubernetes object or list (kubectl get -o json expected)"
        )
    if "items" in doc and not isinstance(doc["items"], list):
        raise InputError(f"{path}: items is {describe_json(doc['items'])}, not a list of objects")
    if "kind" not in doc and "items" not in doc:
        raise InputError(f"{path}: an object without kind or items (kubectl get -o json expected)")
    return doc


@dataclass(kw_only=True)
class RecordedCluster:
    """API objects recorded earlier (``kubectl get … -o json``) and container logs keyed by pod."""

    nodes: list[ApiObject] = field(default_factory=list)
    pods: list[ApiObject] = field(default_factory=list)
    events: list[ApiObject] = field(default_factory=list)
    dra: list[ApiObject] = field(default_factory=list)  # ResourceClaims, DeviceClasses, ResourceSlices
    logs: dict[str, str] = field(default_factory=dict)  # "ns/pod/container" or "ns/pod/container/previous"

    @classmethod
    def from_objects(
        cls, objects: Iterable[ApiObject], logs: Mapping[str, str] | None = None
    ) -> RecordedCluster:
        rec = cls(logs=dict(logs or {}))
        for obj in objects:
            for item in _items(obj):
                kind = item.get("kind")
                if kind == "Node":
                    rec.nodes.append(item)
                elif kind == "Pod":
                    rec.pods.append(item)
                elif kind == "Event":
                    rec.events.append(item)
                elif kind in DRA_KINDS:
                    rec.dra.append(item)
        return rec

    @classmethod
    def from_dir(cls, directory: Path) -> RecordedCluster:
        """Every ``*.json`` in ``directory`` (Lists or single objects) plus ``logs/<ns>/<pod>/<c>.log``.

        The recording must hold the nodes and the pods (``nodes.json``, ``pods.json``, or files with
        Node and Pod objects): without them every check would look at an empty cluster and pass."""
        objects = [_load_json(path) for path in sorted(directory.glob("*.json"))]
        logs = {}
        for log in sorted(directory.glob("logs/*/*/*.log")):
            ns, pod = log.parent.parent.name, log.parent.name
            key = f"{ns}/{pod}/{log.stem.removesuffix('.previous')}"
            try:  # logs are whatever the container wrote: undecodable bytes are kept as U+FFFD
                text = log.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise InputError(f"{log}: cannot read: {exc.strerror or exc}") from exc
            logs[key + ("/previous" if log.stem.endswith(".previous") else "")] = text
        rec = cls.from_objects(objects, logs)
        for what, found, kubectl in (
            ("nodes", rec.nodes, "kubectl get nodes -o json"),
            ("pods", rec.pods, "kubectl get pods -A -o json"),
        ):
            path = directory / f"{what}.json"
            if not found and not path.is_file():
                raise InputError(
                    f"{path}: missing, and no other file holds {what}: the recording is incomplete"
                    f" ({kubectl} > {path})"
                )
        return rec

    def list_nodes(self) -> list[ApiObject]:
        return list(self.nodes)

    def get_pod(self, namespace: str, name: str) -> ApiObject | None:
        return next(
            (
                p
                for p in self.pods
                if dig(p, "metadata", "namespace") == namespace and dig(p, "metadata", "name") == name
            ),
            None,
        )

    def list_pods(self, *, namespace: str | None = None, node_name: str | None = None) -> list[ApiObject]:
        return [
            p
            for p in self.pods
            if (namespace is None or dig(p, "metadata", "namespace") == namespace)
            and (node_name is None or dig(p, "spec", "nodeName") == node_name)
        ]

    def list_events(self, *, namespace: str, kind: str, name: str) -> list[ApiObject]:
        return [
            e
            for e in self.events
            if dig(e, "involvedObject", "kind") == kind
            and dig(e, "involvedObject", "name") == name
            and (kind == "Node" or dig(e, "metadata", "namespace", default=namespace) == namespace)
        ]

    def list_dra(self, kind: str) -> list[ApiObject]:
        return [o for o in self.dra if o.get("kind") == kind]

    def read_log(
        self, namespace: str, pod: str, container: str, *, previous: bool = False, tail_lines: int = 200
    ) -> str | None:
        key = f"{namespace}/{pod}/{container}" + ("/previous" if previous else "")
        text = self.logs.get(key)
        if text is None:
            return None
        return "\n".join(text.splitlines()[-tail_lines:])


class LiveCluster:
    """The API server, through the official client (kubeconfig, or in-cluster service account)."""

    def __init__(self, *, kubeconfig: str | None = None, context: str | None = None) -> None:
        from kubernetes import client
        from kubernetes import config as untyped_config
        from kubernetes.config.config_exception import ConfigException

        config: Any = untyped_config  # the client's loaders carry no annotations
        configuration = client.Configuration()
        try:
            if kubeconfig is None and _in_cluster():
                config.load_incluster_config(client_configuration=configuration)
            else:
                config.load_kube_config(
                    config_file=kubeconfig, context=context, client_configuration=configuration
                )
        except (ConfigException, OSError, TypeError, ValueError) as exc:
            where = kubeconfig or "$KUBECONFIG or ~/.kube/config"
            raise ClusterUnreachable(
                f"no usable kubeconfig ({where}) and not running in a pod: {exc}"
            ) from exc
        configuration.retries = 0  # one try per call: the doctor must finish in bounded time
        api_client = client.ApiClient(configuration)
        self._core = client.CoreV1Api(api_client)
        self._resource = client.ResourceV1Api(api_client)
        self._host = configuration.host

    def list_dra(self, kind: str) -> list[ApiObject]:
        method = {
            "ResourceClaim": "list_resource_claim_for_all_namespaces",
            "DeviceClass": "list_device_class",
            "ResourceSlice": "list_resource_slice",
        }[kind]
        data = self._get(method, api=self._resource)
        return [] if data is None else [{"kind": kind, **o} for o in _items(json.loads(data))]

    def _get(self, method: str, *args: Any, api: Any = None, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            resp = getattr(api if api is not None else self._core, method)(
                *args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S, **kwargs
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status in (401, 403):
                raise ClusterUnreachable(f"{self._host}: {exc.status} {exc.reason} ({method})") from exc
            raise ClusterUnreachable(f"{self._host}: HTTP {exc.status} {exc.reason} ({method})") from exc
        except (HTTPError, OSError) as exc:
            raise ClusterUnreachable(f"{self._host}: {type(exc).__name__}: {exc}") from exc
        return resp.data

    def _json(self, method: str, *args: Any, **kwargs: Any) -> Any:
        data = self._get(method, *args, **kwargs)
        return None if data is None else json.loads(data)

    def list_nodes(self) -> list[ApiObject]:
        return _items(self._json("list_node"))

    def get_pod(self, namespace: str, name: str) -> ApiObject | None:
        doc = self._json("read_namespaced_pod", name, namespace)
        return doc if isinstance(doc, dict) else None

    def list_pods(self, *, namespace: str | None = None, node_name: str | None = None) -> list[ApiObject]:
        selector = {"field_selector": f"spec.nodeName={node_name}"} if node_name else {}
        if namespace is None:
            return _items(self._json("list_pod_for_all_namespaces", **selector))
        return _items(self._json("list_namespaced_pod", namespace, **selector))

    def list_events(self, *, namespace: str, kind: str, name: str) -> list[ApiObject]:
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        ns = "default" if kind == "Node" else namespace
        return _items(self._json("list_namespaced_event", ns, field_selector=selector))

    def read_log(
        self, namespace: str, pod: str, container: str, *, previous: bool = False, tail_lines: int = 200
    ) -> str | None:
        try:
            data = self._get(
                "read_namespaced_pod_log",
                pod,
                namespace,
                container=container,
                previous=previous,
                tail_lines=tail_lines,
            )
        except ClusterUnreachable:
            return None  # no such container instance (never started, no previous run)
        return None if data is None else bytes(data).decode("utf-8", errors="replace")


def _in_cluster() -> bool:
    import os

    return (
        bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        and Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists()
    )
