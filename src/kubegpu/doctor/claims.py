"""``pod.claims``: why a pod that asks for devices through ResourceClaims (DRA) has none.

In the order a user would look: the claim exists; every request names a DeviceClass that exists; some
node publishes devices of the class's driver (no slices: the driver is not running, or kubelet wiped
its slices 30 s after it disconnected); some node has enough free devices; a ``matchAttribute``
constraint can be met on some node; and, once the claim is allocated, what kubelet's
``FailedPrepareDynamicResources`` event says the driver answered.

Devices are counted by driver and, for kubegpu's own classes, by the ``type`` attribute they select.
Other CEL selectors are not evaluated, and the evidence says so: a count here is an upper bound.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

from kubegpu.doctor.chain import Check
from kubegpu.doctor.clusterprobe import ApiObject, dig
from kubegpu.doctor.finding import CheckId, Layer, Outcome, fail, ok, warn
from kubegpu.doctor.pod import ID_FOUND, PodContext

__all__ = ["CLAIM_CHECKS", "ID_CLAIMS"]

ID_CLAIMS = CheckId("pod.claims")
KUBEGPU_DRIVER = "gpu.kubegpu.io"
_DRIVER_RE = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")
_TYPE_RE = re.compile(r"""\.type\s*==\s*["']([^"']+)["']""")
INSTALL_FIX = (
    "helm upgrade kubegpu deploy/helm/kubegpu --reuse-values --set dra.enabled=true  "
    "# or, for kubegpu's classes alone: kubegpu dra classes | kubectl apply -f -"
)


@dataclass(frozen=True, kw_only=True)
class _Request:
    name: str
    device_class: str
    count: int | None  # None: allocationMode All


def _requests(claim: ApiObject) -> list[_Request]:
    out = []
    for r in dig(claim, "spec", "devices", "requests", default=[]) or []:
        exact = r.get("exactly") or {}
        alternatives = r.get("firstAvailable") or []
        chosen = exact or (alternatives[0] if alternatives else {})
        mode = chosen.get("allocationMode", "ExactCount")
        count = None if mode == "All" else int(chosen.get("count", 1))
        out.append(
            _Request(
                name=str(r.get("name")), device_class=str(chosen.get("deviceClassName", "")), count=count
            )
        )
    return out


class _Dra:
    """The cluster's DRA objects, read once per report."""

    def __init__(self, ctx: PodContext) -> None:
        self._api = ctx.cluster.api

    @cached_property
    def claims(self) -> list[ApiObject]:
        return self._api.list_dra("ResourceClaim")

    @cached_property
    def classes(self) -> dict[str, ApiObject]:
        return {str(dig(c, "metadata", "name")): c for c in self._api.list_dra("DeviceClass")}

    @cached_property
    def slices(self) -> list[ApiObject]:
        return self._api.list_dra("ResourceSlice")

    def claim(self, namespace: str, name: str) -> ApiObject | None:
        return next(
            (
                c
                for c in self.claims
                if dig(c, "metadata", "namespace") == namespace and dig(c, "metadata", "name") == name
            ),
            None,
        )

    @cached_property
    def allocated(self) -> set[tuple[str, str, str]]:
        return {
            (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            for c in self.claims
            for r in dig(c, "status", "allocation", "devices", "results", default=[]) or []
        }


def _class_filter(device_class: ApiObject) -> tuple[str | None, str | None]:
    """The driver a class selects and, for kubegpu's classes, the device type (from its CEL text)."""
    text = " ".join(
        str(dig(s, "cel", "expression", default=""))
        for s in dig(device_class, "spec", "selectors", default=[]) or []
    )
    driver = m.group(1) if (m := _DRIVER_RE.search(text)) else None
    kind = m.group(1) if driver == KUBEGPU_DRIVER and (m := _TYPE_RE.search(text)) else None
    return driver, kind


def _free_by_node(dra: _Dra, driver: str, kind: str | None) -> dict[str, list[ApiObject]]:
    """Per node, the devices of ``driver`` (of ``kind``) that no claim holds, from the newest generation."""
    newest: dict[tuple[str, str], int] = {}
    for s in dra.slices:
        if dig(s, "spec", "driver") != driver:
            continue
        key = (driver, str(dig(s, "spec", "pool", "name")))
        newest[key] = max(newest.get(key, 0), int(dig(s, "spec", "pool", "generation", default=0)))
    free: dict[str, list[ApiObject]] = {}
    for s in dra.slices:
        pool = str(dig(s, "spec", "pool", "name"))
        if (
            dig(s, "spec", "driver") != driver
            or int(dig(s, "spec", "pool", "generation", default=0)) != newest[(driver, pool)]
        ):
            continue
        node = str(dig(s, "spec", "nodeName") or pool)
        for d in dig(s, "spec", "devices", default=[]) or []:
            if kind is not None and dig(d, "attributes", "type", "string") != kind:
                continue
            if (driver, pool, str(d.get("name"))) in dra.allocated:
                continue
            free.setdefault(node, []).append(d)
    return free


def _attribute(device: ApiObject, qualified: str, driver: str) -> object:
    domain, _, name = qualified.rpartition("/")
    attrs = device.get("attributes") or {}
    value = attrs.get(name if domain == driver else qualified) or attrs.get(qualified) or {}
    return next(iter(value.values()), None) if isinstance(value, dict) and value else None


def _claim_names(ctx: PodContext) -> list[tuple[str, str | None]]:
    """(pod claim name, ResourceClaim name) per entry of spec.resourceClaims; None: not created yet."""
    generated = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in dig(ctx.spec_pod, "status", "resourceClaimStatuses", default=[]) or []
    }
    out = []
    for ref in dig(ctx.spec_pod, "spec", "resourceClaims", default=[]) or []:
        name = str(ref.get("name"))
        out.append((name, ref.get("resourceClaimName") or generated.get(name)))
    return out


def _unallocated(ctx: PodContext, dra: _Dra, claim: ApiObject, label: str) -> Outcome | None:
    """Why the scheduler cannot allocate ``claim``; None when the devices are there."""
    constraints = dig(claim, "spec", "devices", "constraints", default=[]) or []
    for req in _requests(claim):
        device_class = dra.classes[req.device_class]
        driver, kind = _class_filter(device_class)
        if driver is None:
            continue  # a class the doctor cannot read: leave it to the scheduler's message
        free = _free_by_node(dra, driver, kind)
        publishing = {
            str(dig(s, "spec", "nodeName")) for s in dra.slices if dig(s, "spec", "driver") == driver
        }
        if not publishing:
            return fail(
                f"{label}: no node publishes devices of driver {driver} (DeviceClass {req.device_class}): "
                "the DRA driver is not running, or not registered with kubelet (kubelet deletes a driver's "
                "ResourceSlices 30 s after it disconnects)",
                f"ResourceSlices of driver {driver}: none",
                fix="kubectl get pods -A -l app.kubernetes.io/component=dra-driver -o wide  "
                f"# running on the GPU nodes?\n{INSTALL_FIX}",
            )
        need = req.count if req.count is not None else 1
        counts = Counter({n: len(ds) for n, ds in free.items()})
        best_node, best = counts.most_common(1)[0] if counts else ("", 0)
        evidence = [
            f"free devices of DeviceClass {req.device_class}: "
            + (", ".join(f"{n}: {c}" for n, c in sorted(counts.items())) or "none"),
            "CEL selectors of the request are not evaluated here: the counts are upper bounds",
        ]
        if best < need:
            return fail(
                f"{label}: request {req.name} needs {need} device(s) of DeviceClass {req.device_class}, "
                f"but no node has that many free (most: {best}" + (f" on {best_node})" if best_node else ")"),
                *evidence,
                fix="wait for claims to be released, ask for fewer devices, or add nodes "
                "(kubectl get resourceclaims -A shows who holds the devices)",
            )
        for c in constraints:
            attribute = c.get("matchAttribute")
            if not attribute or (c.get("requests") and req.name not in c.get("requests")):
                continue
            groups = {
                n: Counter(str(_attribute(d, str(attribute), driver)) for d in ds).most_common(1)[0][1]
                for n, ds in free.items()
                if ds
            }
            top_node, top = max(groups.items(), key=lambda kv: kv[1]) if groups else ("", 0)
            if top < need:
                return fail(
                    f"{label}: the constraint matchAttribute {attribute} cannot be met on any node: request "
                    f"{req.name} needs {need} devices sharing one value, and the most free devices sharing "
                    f"one is {top}" + (f" (on {top_node})" if top_node else ""),
                    *evidence,
                    *(
                        f"node {n}: at most {g} free devices share one {attribute}"
                        for n, g in sorted(groups.items())
                    ),
                    fix=f"ask for at most {top} devices, relax the constraint (e.g. "
                    "gpu.kubegpu.io/nvlinkDomain instead of nvlinkClique), or wait for claims on one "
                    "NVLink group to be released",
                )
    return None


def check_claims(ctx: PodContext) -> Outcome:
    refs = _claim_names(ctx)
    if not refs:
        return ok("the pod uses no ResourceClaim (its devices, if any, come from device plugins)")
    dra = _Dra(ctx)
    evidence: list[str] = []
    pending = dig(ctx.spec_pod, "status", "phase") == "Pending"
    for pod_claim, claim_name in refs:
        if claim_name is None:
            return warn(
                f"pod claim {pod_claim}: its ResourceClaim (from a template) is not created yet",
                fix=f"kubectl -n {ctx.namespace} get resourceclaimtemplates  # does the template exist?",
            )
        label = f"ResourceClaim {ctx.namespace}/{claim_name}"
        claim = dra.claim(ctx.namespace, claim_name)
        if claim is None:
            return fail(
                f"{label} (pod claim {pod_claim}) does not exist: the pod cannot be scheduled until it does",
                fix=f"kubectl -n {ctx.namespace} get resourceclaims  # create it, or fix resourceClaimName",
            )
        for req in _requests(claim):
            if req.device_class not in dra.classes:
                return fail(
                    f"{label}: request {req.name} names DeviceClass {req.device_class!r}, which does not "
                    "exist",
                    "DeviceClasses: " + (", ".join(sorted(dra.classes)) or "none"),
                    fix=INSTALL_FIX if "kubegpu" in req.device_class else "kubectl get deviceclasses",
                )
        results = dig(claim, "status", "allocation", "devices", "results", default=[]) or []
        if not results:
            if not pending:
                continue
            why = _unallocated(ctx, dra, claim, label)
            if why is not None:
                return why
            evidence.append(
                f"{label}: not allocated yet; devices are there (see pod.pending for the scheduler)"
            )
            continue
        devices = ", ".join(f"{r.get('pool')}/{r.get('device')}" for r in results)
        evidence.append(f"{label}: allocated {devices}")
        prepare = [
            str(e.get("message", ""))
            for e in ctx.events
            if e.get("reason") == "FailedPrepareDynamicResources"
        ]
        if pending and prepare:
            return fail(
                f"{label} is allocated ({devices}) but the node's DRA driver could not prepare it: "
                f"{prepare[-1]}",
                *evidence,
                fix="kubectl -n <driver namespace> logs <the DRA driver pod on the node>  # e.g. a GPU that "
                "failed its health check since: delete the pod so the scheduler allocates again",
            )
    if any("not allocated yet" in e for e in evidence):
        return warn("the pod's claims are not allocated yet, but matching devices exist", *evidence)
    return ok("the pod's ResourceClaims are allocated", *evidence)


CLAIM_CHECKS: tuple[Check[PodContext], ...] = (
    Check(id=ID_CLAIMS, layer=Layer.POD, needs=(ID_FOUND,), run=check_claims),
)
